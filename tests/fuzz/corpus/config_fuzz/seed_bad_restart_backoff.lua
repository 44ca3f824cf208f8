-- The largest respawn delay cannot be below the first one.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  restart = { backoff_seconds = 5, backoff_cap_seconds = 2 },
}
