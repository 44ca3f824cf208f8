-- latency needs its delay.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  chaos = {
    events = {
      { at_time = 10, action = "latency", target = "learner:0", duration = 5 },
    },
  },
}
