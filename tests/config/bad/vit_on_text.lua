-- A vision transformer on a text.
experiment {
  name = "vit_text",
  model = { kind = "vit" },
  data = { file = "datasets/tinyshakespeare/input.txt" },
}
