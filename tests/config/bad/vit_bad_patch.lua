-- A patch size that does not tile the image.
experiment {
  name = "vit_patch",
  model = { kind = "vit", patch = 5 },
  data = { kind = "idx", images = "../../../datasets/mnist-t10k/t10k-images-idx3-ubyte.gz",
           labels = "../../../datasets/mnist-t10k/t10k-labels-idx1-ubyte.gz" },
}
