-- A credit window of zero chunks (nothing could ever be sent).
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  sync = { window_chunks = 0 },
}
