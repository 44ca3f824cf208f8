-- examples/mnist.lua — a vision transformer (model.kind = "vit", runtime/vit.hpp) on MNIST's
-- t10k images (data.kind = "idx": images 0..7,999 train, 8,000..9,999 validation; docs/vision.md)
-- with the baselines of examples/baselines.lua at equal samples
-- (4 learners x 32 images x 1,500 steps = 192,000 images, 24 epochs of the train split; for image
-- data a "token" of budget.tokens is one image):
--
--   mnist_data_parallel  one learner with 4x the batch: synchronous data-parallel's math
--   mnist_streaming      P = 4 fragments, K = M (wait for every learner)
--   mnist_decoupled      P = 4, K = 1, adaptive grace, token weighting, RDA (the defaults)
--
-- The model: 2 pre-LN blocks of width 64 with 4 heads, 7x7 patches (16 patch tokens + a class
-- token), 105,098 parameters. Every evaluation scores the whole validation split (2,000 images)
-- and reports loss and accuracy (summary.json final_val_accuracy).
--
--   build/bin/dd-node run examples/mnist.lua

-- What every run shares; each experiment below says only how it differs.
local base = {
  data = {
    kind = "idx",
    images = "datasets/mnist-t10k/t10k-images-idx3-ubyte.gz",
    labels = "datasets/mnist-t10k/t10k-labels-idx1-ubyte.gz",
    train_fraction = 0.8,
  },
  model = { kind = "vit", layers = 2, width = 64, heads = 4, pooling = "cls" },
  inner = { lr = 3e-3, warmup = 25 },
  outer = { lr = 0.7, momentum = 0.5 },
  eval = { every_seconds = 30 },
  learners = { count = 4, batch = 32 },
  budget = { tokens = 4 * 32 * 1500 },
}

experiment(extend(base, {
  name = "mnist_data_parallel",
  learners = { count = 1, batch = 128 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  -- lr 1, momentum 0: the owner's value becomes the learner's parameters (plain training).
  outer = { lr = 1.0, momentum = 0.0 },
}))

experiment(extend(base, {
  name = "mnist_streaming",
  sync = { fragments = 4, interval = 24, min_quorum = 4 },
}))

experiment(extend(base, { name = "mnist_decoupled" }))
