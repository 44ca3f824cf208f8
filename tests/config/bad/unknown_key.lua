-- A typo in a key name.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = {
    fragments = 4,
    min_quorm = 2,
  },
}
