-- A string where an integer belongs.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = {
    interval = "24",
  },
}
