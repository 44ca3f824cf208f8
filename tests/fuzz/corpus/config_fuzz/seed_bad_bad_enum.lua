-- A merge rule that does not exist.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  outer = {
    merge = "rdaa",
  },
}
