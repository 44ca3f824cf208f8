-- A process fault is fired by dd-chaos from outside the nodes: it cannot be keyed on a step.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  chaos = {
    events = {
      { at_step = 10, action = "pause", target = 1, duration = 5 },
    },
  },
}
