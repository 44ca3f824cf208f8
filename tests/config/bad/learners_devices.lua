-- learners.devices was read and then ignored (no learner is placed on a chosen device): refused.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = {
    count = 2,
    backend = "cuda",
    devices = { 0, 1 },
  },
}
