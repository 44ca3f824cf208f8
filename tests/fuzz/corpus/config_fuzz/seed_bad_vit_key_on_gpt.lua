-- A vit key on a GPT.
experiment {
  name = "gpt_pool",
  model = { pooling = "mean" },
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
}
