-- tools/hf/subword_vs_bytes.lua — a 2048-piece SentencePiece vocabulary against the byte-level
-- default on Tiny Shakespeare, in bits per byte (docs/data-and-models.md, "Measured").
--
-- The same transformer (4 layers, width 128, 4 heads, context 128 tokens: the same non-embedding
-- parameters), the same number of inner steps (600 per learner, 2 learners, batch 16) and the
-- same validation text; only the vocabulary differs (the embedding grows from 256×128 to
-- 2048×128). The text is split at byte 1003854 (the byte run's train_fraction 0.9) and the
-- tokenizer is trained on the training part only. From the repository root:
--   mkdir -p data/ts-split
--   head -c 1003854 datasets/tinyshakespeare/input.txt > data/ts-split/train.txt
--   tail -c +1003855 datasets/tinyshakespeare/input.txt > data/ts-split/val.txt
--   build/bin/dd-node tokenize --train-tokenizer --vocab 2048 --val-fraction 0 \
--     data/ts-split/train.txt --out data/ts-sp2k
--   build/bin/dd-node tokenize --tokenizer data/ts-sp2k --val-fraction 0 \
--     data/ts-split/val.txt --out data/ts-sp2k-val
-- then: build/bin/dd-node run tools/hf/subword_vs_bytes.lua
-- Both evaluate every window of their validation split every 100 global steps.

local common = {
  learners = { count = 2, batch = 16 },
  sync = { fragments = 4, interval = 24, min_quorum = 1 },
  outer = { lr = 0.7, momentum = 0.5 },
  budget = { steps = 600 },  -- inner steps per learner; the cosine decays over them
}

experiment {
  name = "bytes",
  data = { file = "datasets/tinyshakespeare/input.txt", train_fraction = 0.9 },
  model = { vocab = 256, context = 128, layers = 4, heads = 4, width = 128 },
  learners = common.learners, sync = common.sync, outer = common.outer,
  budget = common.budget,
  eval = { every_seconds = 0, every_steps = 100, batches = 55 },  -- 871 windows: all of them
}

experiment {
  name = "sp2k",
  data = {
    kind = "tokens",
    files = "data/ts-sp2k/train_train.bin",
    validation_files = { "data/ts-sp2k-val/val_train.bin" },
    tokenizer = "data/ts-sp2k",
  },
  model = { vocab = 2048, context = 128, layers = 4, heads = 4, width = 128 },
  learners = common.learners, sync = common.sync, outer = common.outer,
  budget = common.budget,
  eval = { every_seconds = 0, every_steps = 100, batches = 22 },  -- all 342 windows
}
