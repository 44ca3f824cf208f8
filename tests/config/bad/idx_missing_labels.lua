-- IDX data without its label file.
experiment {
  name = "idx_nolabels",
  model = { kind = "vit" },
  data = { kind = "idx", images = "../../../datasets/mnist-t10k/t10k-images-idx3-ubyte.gz" },
}
