-- A text experiment that names IDX images.
experiment {
  name = "text_images",
  data = { file = "../shared/data/tinyshakespeare/input.txt",
           images = "../../../../shared/data/mnist-t10k/t10k-images-idx3-ubyte.gz" },
}
