-- A text experiment that names IDX images.
experiment {
  name = "text_images",
  data = { file = "datasets/tinyshakespeare/input.txt",
           images = "../../../datasets/mnist-t10k/t10k-images-idx3-ubyte.gz" },
}
