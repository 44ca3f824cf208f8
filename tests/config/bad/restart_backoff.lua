-- The largest respawn delay cannot be below the first one.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  restart = { backoff_seconds = 5, backoff_cap_seconds = 2 },
}
