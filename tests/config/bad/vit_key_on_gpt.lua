-- A vit key on a GPT.
experiment {
  name = "gpt_pool",
  model = { pooling = "mean" },
  data = { file = "datasets/tinyshakespeare/input.txt" },
}
