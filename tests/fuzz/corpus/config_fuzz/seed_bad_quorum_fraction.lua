-- A quorum fraction must be in (0, 1].
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  sync = { min_quorum = fraction(1.5) },
}
