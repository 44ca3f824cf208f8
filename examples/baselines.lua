-- examples/baselines.lua — the baselines of ALGORITHM.md as configurations of the same runtime,
-- all at the main job's token budget (4,915,200 tokens: 4 learners x 8 sequences x 128 tokens x
-- 1,200 steps).
--
--   data_parallel  one learner with 4x the batch (32): the same math as synchronous data-parallel
--   diloco         P = 1 fragment, K = M (wait for every learner), no grace
--   streaming      P = 4 fragments, K = M
--   decoupled      P = 4, K = 1, adaptive grace, token weighting, RDA (the defaults)

-- What every run shares; each experiment below says only how it differs. One outer optimizer
-- for every DiLoCo-family run: the best of the sweep in docs/results.md (Nesterov, lr 0.7,
-- momentum 0.5; at H = 24 momentum 0.9 overshoots).
local base = {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  outer = { lr = 0.7, momentum = 0.5 },
  learners = { count = 4, batch = 8 },
  budget = { tokens = 4 * 16 * 128 * 600 },
}

experiment(extend(base, {
  name = "data_parallel",
  learners = { count = 1, batch = 32 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  -- lr 1, momentum 0: the owner's value becomes the learner's parameters (plain training).
  outer = { lr = 1.0, momentum = 0.0 },
}))

experiment(extend(base, {
  name = "diloco",
  sync = { fragments = 1, interval = 24, min_quorum = 4, grace = "off" },
}))

experiment(extend(base, {
  name = "streaming",
  sync = { fragments = 4, interval = 24, min_quorum = 4 },
}))

experiment(extend(base, { name = "decoupled" }))
