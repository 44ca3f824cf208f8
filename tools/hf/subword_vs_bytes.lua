-- tools/hf/subword_vs_bytes.lua — a 2048-piece SentencePiece vocabulary against the byte-level
-- default on Tiny Shakespeare, in bits per byte (docs/data-and-models.md, "Measured").
--
-- The same transformer (4 layers, width 128, 4 heads, context 128 tokens: the same non-embedding
-- parameters) and the same wall-clock budget; only the vocabulary differs (the embedding grows
-- from 256×128 to 2048×128). Make the shards first, from the repository root:
--   build/bin/dd-node tokenize --train-tokenizer --vocab 2048 \
--     ../shared/data/tinyshakespeare/input.txt --out data/shakespeare-sp2k
-- then: build/bin/dd-node run tools/hf/subword_vs_bytes.lua
-- Both evaluate every window of their validation split (the last ~10 % of the text).

local seconds = 150
local common = {
  learners = { count = 2, batch = 16 },
  sync = { fragments = 4, interval = 24, min_quorum = 1 },
  outer = { lr = 0.7, momentum = 0.5 },
  inner = { warmup = 50, decay_steps = 400 },  -- a seconds budget needs the cosine's length
  budget = { seconds = seconds },
}

experiment {
  name = "bytes",
  data = { file = "../shared/data/tinyshakespeare/input.txt" },
  model = { vocab = 256, context = 128, layers = 4, heads = 4, width = 128 },
  learners = common.learners, sync = common.sync, outer = common.outer, inner = common.inner,
  budget = common.budget,
  eval = { every_seconds = 30, batches = 55 },     -- 871 windows of 128 bytes: all of them
}

experiment {
  name = "sp2k",
  data = {
    kind = "tokens",
    files = "data/shakespeare-sp2k/input_train.bin",
    validation_files = { "data/shakespeare-sp2k/input_val.bin" },
    tokenizer = "data/shakespeare-sp2k",
  },
  model = { vocab = 2048, context = 128, layers = 4, heads = 4, width = 128 },
  learners = common.learners, sync = common.sync, outer = common.outer, inner = common.inner,
  budget = common.budget,
  eval = { every_seconds = 30, batches = 21 },     -- all 326 windows of the 41.7k-token split
}
