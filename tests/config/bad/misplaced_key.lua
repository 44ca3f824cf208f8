-- A key written in the wrong section.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4, min_quorum = 2 },
}
