-- Speed factors are slowdowns (>= 1).
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 2, speed = { 1.0, 0.5 } },
}
