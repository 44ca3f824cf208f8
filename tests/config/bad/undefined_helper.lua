-- A misspelt helper.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = { min_quorum = fracton(0.5) },
}
