-- min_gap_seconds shapes the whole-cluster schedule only.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  chaos = {
    random = { mtbf_seconds = 30, min_gap_seconds = 5 },
  },
}
