-- A dd-chaos target names actors that exist.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 2 },
  chaos = {
    events = {
      { at_time = 10, action = "kill_process", target = "learner:0,learner:7" },
    },
  },
}
