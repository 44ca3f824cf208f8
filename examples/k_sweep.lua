-- examples/k_sweep.lua — sweep the min quorum K over 1, 2, 4 (and a fraction) with 4 learners.
--
-- A sweep is a loop: each experiment{} call adds one experiment. Pick one with
--   dd-node resolve examples/k_sweep.lua --name k_sweep-k2
-- `extend(base, changes)` (built into the DSL) copies `base` and merges `changes` into it.

local base = {
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4 },
  budget = { tokens = 4 * 16 * 128 * 600 },   -- the same token budget for every K
}

for _, k in ipairs { 1, 2, 4 } do
  experiment(extend(base, {
    name = "k_sweep-k" .. k,
    sync = { min_quorum = k },                  -- K = 4 = M: synchronous (Streaming DiLoCo)
  }))
end

-- K can also be a fraction of the live learners: fraction(0.5) means ceil(0.5 * live).
experiment(extend(base, { name = "k_sweep-half", sync = { min_quorum = fraction(0.5) } }))
