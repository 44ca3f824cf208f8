-- A string where an integer belongs.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  sync = {
    interval = "24",
  },
}
