-- A missing comma.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  learners = { count = 4 }
  sync = { fragments = 2 },
}
