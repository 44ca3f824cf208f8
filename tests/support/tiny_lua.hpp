// tests/support/tiny_lua.hpp — the experiment file of the tests that run real processes
// (dd-node run / launch / syncer, dd-chaos): a tiny GPT on Tiny Shakespeare (1 layer, 2 heads,
// batch 4, one thread a learner, 2 fragments, lr 3e-3 with warmup 5, 2 evaluation batches at the
// end only), its few varying keys as fields. The text goes to a .lua file the test passes on.
#pragma once

#include <string>

namespace dd::test {

struct tiny_lua {
  std::string name = "tiny";
  int learners = 3;
  int width = 32;  ///< the model's width and context
  int interval = 4;
  std::string sync_extra;  ///< more keys of the sync table, each ", key = value"
  int decay_steps = 2000;
  std::string budget = "{ seconds = 12 }";
  int checkpoint_every = 1;  ///< versions; 0 leaves the checkpoint table out
  std::string extra;         ///< more tables (e.g. a chaos table), each line ending in ",\n"

  std::string text() const {
    const std::string w = std::to_string(width);
    std::string s =
        "experiment {\n  name = '" + name + "',\n  data = { file = '" + std::string(DD_DATA_DIR) +
        "/tinyshakespeare/input.txt' },\n" + "  model = { layers = 1, width = " + w +
        ", heads = 2, context = " + w + " },\n" +
        "  learners = { count = " + std::to_string(learners) + ", batch = 4, threads = 1 },\n" +
        "  sync = { fragments = 2, interval = " + std::to_string(interval) + sync_extra + " },\n" +
        "  inner = { lr = 3e-3, warmup = 5, decay_steps = " + std::to_string(decay_steps) +
        " },\n" + "  eval = { every_seconds = 0, batches = 2 },\n" + "  budget = " + budget + ",\n";
    if (checkpoint_every > 0)
      s += "  checkpoint = { every_versions = " + std::to_string(checkpoint_every) + " },\n";
    return s + extra + "}\n";
  }
};

}  // namespace dd::test
