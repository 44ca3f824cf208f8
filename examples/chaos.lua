-- examples/chaos.lua — training through failures.
--
-- One-shot events fire at an inner step, a time in seconds, or a fraction of the budget;
-- learner and fragment ids start at 0. Random faults strike every actor of the chosen kind with
-- a mean time between failures, and each stays down for a time drawn from `recovery`.
--
-- A step-keyed event must fall inside the budget: to shorten the run keep budget.steps >= 100
-- (the slowdown below fires at step 100), e.g. --set budget.steps=130.

experiment {
  name = "chaos",
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4 },
  budget = { steps = 600 },
  checkpoint = { every_versions = 10 },   -- owners restart from these

  chaos = {
    events = {
      { at_fraction = 0.4, action = "kill_learner", target = 2 },                 -- learner 2 at 40%
      { at_step = 100, action = "slow_learner", target = 1, factor = 3, duration = 20 },
      { at_time = 30, action = "delay_push", target = 0, delay = 0.5, duration = 10 },
      { at_fraction = 0.6, action = "kill_owner", target = 1 },            -- fragment 1's owner
    },
    random = {
      mtbf_seconds = 120,              -- per learner
      target = "learners",
      recovery = { dist = "lognormal", mean = 5, sigma = 0.5 },
      seed = 7,
    },
  },
}
