-- A plausibility gate below the median norm (would refuse most honest pushes).
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = { max_norm_ratio = 0.5 },
}
