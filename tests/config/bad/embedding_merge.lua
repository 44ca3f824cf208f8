-- outer.embedding_merge = "rda" was accepted and never applied (embeddings always average).
experiment {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  outer = { embedding_merge = "rda" },
}
