-- A budget names exactly one unit.
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  budget = { steps = 100, seconds = 60 },
}
