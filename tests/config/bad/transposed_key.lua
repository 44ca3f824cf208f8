-- Two letters of a key swapped: suggested like any other typo.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = {
    count = 2,
    bacth = 8,
  },
}
