-- A misspelt helper.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  sync = { min_quorum = fracton(0.5) },
}
