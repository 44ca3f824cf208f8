-- Learner ids are 0..M-1.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4 },
  chaos = {
    events = {
      { at_step = 10, action = "kill", target = 1 },
      { at_step = 20, action = "kill", target = 4 },
    },
  },
}
