-- Two experiments may not share a name (it names the run directory).
for i = 1, 2 do
  experiment {
    name = "same",
    data = { file = "datasets/tinyshakespeare/input.txt" },
  }
end
