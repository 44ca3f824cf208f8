-- Whole-cluster random faults draw process or network kinds with a recovery time.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  chaos = {
    random = { cluster_mtbf_seconds = 30, kinds = { "pause", "kill" } },
  },
}
