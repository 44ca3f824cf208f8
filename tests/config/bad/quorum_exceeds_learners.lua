-- K > M: the quorum could never be reached.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4 },
  sync = {
    min_quorum = 5,
  },
}
