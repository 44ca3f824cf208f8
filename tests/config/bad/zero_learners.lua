-- Zero learners.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 0 },
}
