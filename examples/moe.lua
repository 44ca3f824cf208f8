-- examples/moe.lua — a mixture-of-experts GPT (model.kind = "moe_gpt", runtime/moe_gpt.hpp) on
-- Tiny Shakespeare, with the baselines of examples/baselines.lua at equal tokens
-- (4 learners x 16 sequences x 128 tokens x 150 steps = 1.23M tokens, as docs/results.md's
-- baseline table):
--
--   moe_data_parallel  one learner with 4x the batch: synchronous data-parallel's math
--   moe_streaming      P = 4 fragments, K = M (wait for every learner)
--   moe_decoupled      P = 4, K = 1, adaptive grace, token weighting, RDA (the defaults)
--   dense_decoupled    the dense GPT with the same ACTIVE parameters per token (k = 1 expert of
--                      the dense MLP's size), for tokens/s and loss beside the MoE
--
-- The model: the default 4-layer, width-128 GPT with each MLP replaced by E = 4 experts (each of
-- the dense MLP's size) and top-1 routing; capacity factor 1.25, auxiliary load-balancing loss
-- 0.01. Each expert's weights are their own tensors, so P = 4 balanced fragments spread them.
-- Every learner logs an `expert_load` event (per-expert share of the routed tokens, dropped
-- tokens) once per sync interval: a collapsed expert shows as a share near 0.
--
--   build/bin/dd-node run examples/moe.lua --set inner.warmup=30 --set eval.every_seconds=600

-- What every run shares; each experiment below says only how it differs.
local base = {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  outer = { lr = 0.7, momentum = 0.5 },
  learners = { count = 4 },
  budget = { tokens = 4 * 16 * 128 * 150 },
}
local moe = { kind = "moe_gpt", experts = 4, top_k = 1, capacity_factor = 1.25, aux_loss = 0.01 }

experiment(extend(base, {
  name = "moe_data_parallel",
  model = moe,
  learners = { count = 1, batch = 64 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  -- lr 1, momentum 0: the owner's value becomes the learner's parameters (plain training).
  outer = { lr = 1.0, momentum = 0.0 },
}))

experiment(extend(base, {
  name = "moe_streaming",
  model = moe,
  sync = { fragments = 4, interval = 24, min_quorum = 4 },
}))

experiment(extend(base, { name = "moe_decoupled", model = moe }))

experiment(extend(base, { name = "dense_decoupled" }))
