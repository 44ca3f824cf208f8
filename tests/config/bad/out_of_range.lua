-- jitter is a fraction in [0, 1).
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = {
    count = 4,
    jitter = 1.5,
  },
}
