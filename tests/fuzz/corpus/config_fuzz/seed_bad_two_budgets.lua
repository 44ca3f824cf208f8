-- A budget names exactly one unit.
experiment {
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  budget = { steps = 100, seconds = 60 },
}
