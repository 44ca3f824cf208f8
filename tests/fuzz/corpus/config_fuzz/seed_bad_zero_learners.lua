-- Zero learners.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  learners = { count = 0 },
}
