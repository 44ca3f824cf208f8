-- A fixed grace window needs its length.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  sync = { grace = { mode = "fixed" } },
}
