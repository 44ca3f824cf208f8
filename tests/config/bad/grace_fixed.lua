-- A fixed grace window needs its length.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = { grace = { mode = "fixed" } },
}
