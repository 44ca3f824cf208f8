-- P > H: a fragment could not have its turn in every sync interval.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  sync = {
    interval = 24,
    fragments = 32,
  },
}
