-- One speed factor per learner.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = {
    count = 4,
    speed = { 1.0, 1.0, 1.5 },
  },
}
