-- examples/heterogeneous.lua — learners on uneven hardware, with and without the grace window.
--
-- learners.speed slows each learner's steps by a factor (1.0 = full speed), emulating slower
-- chips; jitter adds random spread. The paper reports that K = 1 without grace loses quality
-- under heterogeneous speeds and that the grace window restores it.
--
-- With K = 1 the learners push on the global mean step (sync.push_clock = "global", the default
-- when K < M), so the four pushes of a fragment arrive together and the grace window gathers
-- them; add --set sync.push_clock=learner to see merges split when each learner pushes on its
-- own step counter (docs/results.md, "Heterogeneous speeds").

local speeds = { 1.0, 1.0, 1.2, 1.5 }

for _, grace in ipairs { "adaptive", "off" } do
  experiment {
    name = "heterogeneous-grace-" .. grace,
    data = { file = "datasets/tinyshakespeare/input.txt" },
    learners = { count = #speeds, speed = speeds, jitter = 0.05 },
    sync = {
      min_quorum = 1,
      grace = { mode = grace, gamma = 0.8, max_factor = 2 },  -- γ and the cap (× ξ_step)
    },
    outer = { lr = 0.7, momentum = 0.5 },
    budget = { tokens = 4 * 16 * 128 * 600 },  -- equal tokens: faster learners do more steps
  }
end

-- The synchronous reference: K = M waits for every learner, so the slowest sets the pace
-- (pushes on the learner's own step: lockstep Streaming DiLoCo).
experiment {
  name = "heterogeneous-sync",
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = #speeds, speed = speeds, jitter = 0.05 },
  sync = { min_quorum = #speeds, grace = "off" },
  outer = { lr = 0.7, momentum = 0.5 },
  budget = { tokens = 4 * 16 * 128 * 600 },
}
