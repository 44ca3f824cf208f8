-- A credit window of zero chunks (nothing could ever be sent).
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = { window_chunks = 0 },
}
