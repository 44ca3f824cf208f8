-- A merge rule that does not exist.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  outer = {
    merge = "rdaa",
  },
}
