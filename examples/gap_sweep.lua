-- examples/gap_sweep.lua — the gap to data-parallel at the main job's full budget.
--
-- Every experiment spends the main job's 4,915,200 tokens (4 learners x 16 sequences x 128 bytes x
-- 600 steps) and is scored on the whole validation split (eval.windows = 0, the default), so every
-- row is comparable with every other. Each experiment changes one setting of the main job
-- (examples/shakespeare.lua) unless its name says otherwise. Run one with
--   dd-node run examples/gap_sweep.lua --name gap-h12 --run-dir runs/gap-h12
-- or all of them (hours on 2 cores) with
--   dd-node run examples/gap_sweep.lua --table runs/gap_sweep.json
-- docs/results.md, "The gap at full budget", has the measured table.

local tokens = 4 * 16 * 128 * 600
local main_job = {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  model = { kind = "gpt", vocab = 256, context = 128, layers = 4, heads = 4, width = 128 },
  learners = { count = 4, batch = 16 },
  sync = { fragments = 4, interval = 24, min_quorum = 1 },
  outer = { lr = 0.7, momentum = 0.5 },
  budget = { tokens = tokens },
  -- Periodic evaluations only every 5 minutes: the sweep is about the final score.
  eval = { every_seconds = 300 },
}

local function add(name, changes) experiment(extend(main_job, extend({ name = name }, changes))) end

-- The references: data-parallel-equivalent (one learner, 4x the batch, plain training) and
-- synchronous Streaming DiLoCo (K = M) with the main job's settings.
add("gap-dp", {
  learners = { count = 1, batch = 64 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  outer = { lr = 1.0, momentum = 0.0 },
})
add("gap-streaming", { sync = { min_quorum = 4 } })

-- The main job itself (Decoupled DiLoCo, the defaults).
add("gap-anchor", {})

-- H: inner steps between two pushes of one fragment.
add("gap-h12", { sync = { interval = 12 } })
add("gap-h6", { sync = { interval = 6 } })

-- The outer optimizer.
add("gap-outer-lr1-m0", { outer = { lr = 1.0, momentum = 0.0 } })
add("gap-outer-lr0.5-m0.9", { outer = { lr = 0.5, momentum = 0.9 } })

-- The inner optimizer: peak learning rate and warmup.
add("gap-inner-lr4e-3", { inner = { lr = 4e-3 } })
add("gap-warmup30", { inner = { warmup = 30 } })

-- The per-learner batch at equal tokens (batch 8 takes twice the steps).
add("gap-batch8", { learners = { batch = 8 } })

-- Fragments P (pushed in turn; P = 1 pushes the whole model every H steps).
add("gap-p1", { sync = { fragments = 1 } })
add("gap-p8", { sync = { fragments = 8 } })

-- M = 2 learners at the same token budget (each takes twice the steps).
add("gap-m2", { learners = { count = 2 } })

-- Batch 8 per learner, the leader: its own references (data-parallel-equivalent with 4 x 8 = 32
-- sequences per step, 1200 steps; Streaming DiLoCo at batch 8) and H = 12 with it.
add("gap-dp-b32", {
  learners = { count = 1, batch = 32 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  outer = { lr = 1.0, momentum = 0.0 },
})
add("gap-b8-streaming", { learners = { batch = 8 }, sync = { min_quorum = 4 } })
add("gap-b8-h12", { learners = { batch = 8 }, sync = { interval = 12 } })
add("gap-b8-h48", { learners = { batch = 8 }, sync = { interval = 48 } })

-- The main job's other settings at batch 8 (the main job now): outer optimizer, inner learning
-- rate and warmup, and fragments.
add("gap-b8-outer-lr0.5-m0.9", { learners = { batch = 8 }, outer = { lr = 0.5, momentum = 0.9 } })
add("gap-b8-inner-lr1e-3", { learners = { batch = 8 }, inner = { lr = 1e-3 } })
add("gap-b8-inner-lr4e-3", { learners = { batch = 8 }, inner = { lr = 4e-3 } })
add("gap-b8-warmup30", { learners = { batch = 8 }, inner = { warmup = 30 } })
add("gap-b8-p1", { learners = { batch = 8 }, sync = { fragments = 1 } })
add("gap-b8-p8", { learners = { batch = 8 }, sync = { fragments = 8 } })
add("gap-b8-outer-lr0.7-m0.9", { learners = { batch = 8 }, outer = { lr = 0.7, momentum = 0.9 } })
-- Streaming DiLoCo with the outer optimizer that led at batch 8.
add("gap-b8-streaming-outer-lr0.5-m0.9",
    { learners = { batch = 8 }, sync = { min_quorum = 4 }, outer = { lr = 0.5, momentum = 0.9 } })
-- The inner learning rate that led at batch 8, for the references too.
local dp_b32_lr4e3 = {
  learners = { count = 1, batch = 32 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  outer = { lr = 1.0, momentum = 0.0 },
  inner = { lr = 4e-3 },
}
add("gap-dp-b32-inner-lr4e-3", dp_b32_lr4e3)
add("gap-b8-streaming-inner-lr4e-3",
    { learners = { batch = 8 }, sync = { min_quorum = 4 }, inner = { lr = 4e-3 } })

-- The main job now (batch 8, inner lr 4e-3) with the outer optimizer that led at inner lr 2e-3,
-- its Streaming DiLoCo twin, H = 12, and a higher inner learning rate for it and for
-- data-parallel.
local now = { learners = { batch = 8 }, inner = { lr = 4e-3 } }
add("gap-now-outer-lr0.5-m0.9", extend(now, { outer = { lr = 0.5, momentum = 0.9 } }))
add("gap-now-streaming-outer-lr0.5-m0.9",
    extend(now, { sync = { min_quorum = 4 }, outer = { lr = 0.5, momentum = 0.9 } }))
add("gap-now-h12", extend(now, { sync = { interval = 12 } }))
add("gap-now-inner-lr8e-3", extend(now, { inner = { lr = 8e-3 } }))
add("gap-dp-b32-inner-lr8e-3", {
  learners = { count = 1, batch = 32 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  outer = { lr = 1.0, momentum = 0.0 },
  inner = { lr = 8e-3 },
})

-- The main job now, one setting at a time, for the settings not yet swept with it: fragments P,
-- the outer optimizer (a larger outer step, lr / (1 - momentum) = 2 and 7, against the main job's
-- 1.4), the warmup, and a cosine that decays to 0 (with its data-parallel twin: a schedule change
-- helps data-parallel too).
add("gap-now-p1", extend(now, { sync = { fragments = 1 } }))
add("gap-now-p8", extend(now, { sync = { fragments = 8 } }))
add("gap-now-outer-lr1-m0.5", extend(now, { outer = { lr = 1.0, momentum = 0.5 } }))
add("gap-now-outer-lr0.7-m0.9", extend(now, { outer = { lr = 0.7, momentum = 0.9 } }))
add("gap-now-warmup30", extend(now, { inner = { warmup = 30 } }))
add("gap-now-min-lr0", extend(now, { inner = { min_lr_ratio = 0 } }))
add("gap-dp-b32-inner-lr4e-3-min-lr0", {
  learners = { count = 1, batch = 32 },
  sync = { fragments = 1, min_quorum = 1, grace = "off" },
  outer = { lr = 1.0, momentum = 0.0 },
  inner = { lr = 4e-3, min_lr_ratio = 0 },
})
-- The main job now with its learners' final pushes (sync.final_push): the steps since each
-- fragment's last push reach the final model.
add("gap-now-final-push", extend(now, { sync = { final_push = true } }))
-- More fragments, each pushed every H steps as before, in smaller and more frequent pieces.
add("gap-now-p16", extend(now, { sync = { fragments = 16 } }))
-- M = 2 learners with the main job's settings, at equal tokens (each takes twice the steps): at
-- batch 8 (global batch 16) and at batch 16 (global batch 32, data-parallel's batch).
add("gap-now-m2", extend(now, { learners = { count = 2 } }))
add("gap-now-m2-b16", extend(now, { learners = { count = 2, batch = 16 } }))
-- Batch 4 per learner at equal tokens (2,400 steps each; batch 8 beat 16 by 6.6%), with its
-- data-parallel-equivalent reference (one learner, batch 16).
add("gap-now-b4", extend(now, { learners = { batch = 4 } }))
add("gap-dp-b16-inner-lr4e-3", extend(dp_b32_lr4e3, { learners = { batch = 16 } }))
-- Streaming DiLoCo (K = M = 2) at M = 2, batch 16: the twin of gap-now-m2-b16.
add("gap-now-m2-b16-streaming",
    extend(now, { learners = { count = 2, batch = 16 }, sync = { min_quorum = 2 } }))
