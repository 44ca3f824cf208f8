-- Broadcast faults act in the syncer node, which does not see learner steps.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  chaos = {
    events = {
      { at_step = 10, action = "drop_broadcast", target = 0, duration = 5 },
    },
  },
}
