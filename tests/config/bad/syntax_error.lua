-- A missing comma.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4 }
  sync = { fragments = 2 },
}
