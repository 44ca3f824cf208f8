-- A quorum fraction must be in (0, 1].
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = { min_quorum = fraction(1.5) },
}
