-- Each knob belongs to the actions that take it.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  chaos = {
    events = {
      { at_time = 10, action = "pause", target = "learner:1", duration = 5, ms = 200 },
    },
  },
}
