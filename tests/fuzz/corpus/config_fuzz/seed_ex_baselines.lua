-- examples/baselines.lua — the baselines of ALGORITHM.md as configurations of the same runtime,
-- all at the same token budget (4 learners x 16 sequences x 128 tokens x 600 steps).
--
--   data_parallel  one learner with 4x the batch: the same math as synchronous data-parallel
--   diloco         P = 1 fragment, K = M (wait for every learner), no grace
--   streaming      P = 4 fragments, K = M
--   decoupled      P = 4, K = 1, adaptive grace, token weighting, RDA (the defaults)

local tokens = 4 * 16 * 128 * 600
local data = { file = "../shared/data/tinyshakespeare/input.txt" }
-- One outer optimizer for every DiLoCo-family run: the best of the sweep in docs/results.md
-- (Nesterov, lr 0.7, momentum 0.5; at H = 24 momentum 0.9 overshoots).
local outer = { lr = 0.7, momentum = 0.5 }

experiment {
  name = "data_parallel",
  data = data,
  learners = { count = 1, batch = 64 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  -- lr 1, momentum 0: the owner's value becomes the learner's parameters (plain training).
  outer = { lr = 1.0, momentum = 0.0 },
  budget = { tokens = tokens },
}

experiment {
  name = "diloco",
  data = data,
  outer = outer,
  learners = { count = 4 },
  sync = { fragments = 1, interval = 24, min_quorum = 4, grace = "off" },
  budget = { tokens = tokens },
}

experiment {
  name = "streaming",
  data = data,
  outer = outer,
  learners = { count = 4 },
  sync = { fragments = 4, interval = 24, min_quorum = 4 },
  budget = { tokens = tokens },
}

experiment {
  name = "decoupled",
  data = data,
  outer = outer,
  learners = { count = 4 },
  budget = { tokens = tokens },
}
