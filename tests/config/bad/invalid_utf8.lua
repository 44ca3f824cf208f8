-- A string that is not UTF-8 text (JSON output cannot hold it).
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  description = "caf\xe9 au lait",
}
