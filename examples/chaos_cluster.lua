-- examples/chaos_cluster.lua — failures of a cluster of processes: run it with
--   dd-node launch examples/chaos_cluster.lua --via-proxy
-- The launcher starts `dd-chaos run` with this chaos section after the nodes: process and
-- network events fire at their time (seconds after the nodes start), and whole-cluster random
-- faults arrive with a mean time between failures (seeded, printed, on the tape
-- runs/chaos_cluster/chaos.jsonl). In-process kinds (nan, corrupt_push, ...) are applied by the
-- nodes themselves. `dd-node run` refuses this file: a single process cannot pause itself.

experiment {
  name = "chaos_cluster",
  data = { file = "datasets/tinyshakespeare/input.txt" },
  learners = { count = 4 },
  budget = { seconds = 300 },
  inner = { decay_steps = 3000 },         -- a seconds budget needs the schedule's length
  checkpoint = { every_versions = 1 },
  restart = { max_restarts = 20 },

  chaos = {
    events = {
      { at_time = 20, action = "pause", target = "learner:1", duration = 10 },
      { at_time = 60, action = "partition", target = "learner:2", duration = 20 },
      { at_time = 90, action = "latency", target = "learners", ms = 200, jitter = 50, duration = 30 },
      { at_time = 120, action = "corrupt_push", target = 3, count = 2 },   -- CRC refuses, resent
      { at_time = 150, action = "nan_step", target = 0 },                  -- push refused, reload
      { at_time = 200, action = "kill_process", target = "node:syncer", duration = 5 },
    },
    random = {
      cluster_mtbf_seconds = 30,        -- one fault every 30 s on average, whole cluster
      kinds = { "kill_process", "pause" },
      target = "learners",
      recovery = { dist = "lognormal", mean = 5, sigma = 0.5 },
      min_gap_seconds = 5,
      max_concurrent = 1,
      seed = 11,
    },
  },
}
