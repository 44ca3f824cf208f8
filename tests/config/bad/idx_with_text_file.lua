-- IDX data that also names a text file.
experiment {
  name = "idx_file",
  model = { kind = "vit" },
  data = { kind = "idx", images = "../../../datasets/mnist-t10k/t10k-images-idx3-ubyte.gz",
           labels = "../../../datasets/mnist-t10k/t10k-labels-idx1-ubyte.gz",
           file = "datasets/tinyshakespeare/input.txt" },
}
