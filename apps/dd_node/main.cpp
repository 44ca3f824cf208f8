// dd-node — the node bootstrap binary. One binary, several modes:
//   dd-node train   <flags>                 single learner, no syncer (foundation baseline)
//   dd-node run     <experiment.lua> [...]  the whole cluster in one process (the main job)
//   dd-node resolve <experiment.lua> [...]  print the fully resolved experiment configuration
// Each mode lives in its own file; this file only dispatches.
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/dd_node/commands.hpp"
#include "kernels/all_backends.hpp"
#include "util/build_info.hpp"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: dd-node <command> [args]\n"
               "commands:\n");
  for (const auto& c : dd::app::commands()) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "run 'dd-node <command> --help' for a command's flags\n");
  std::fprintf(out, "dd-node --version prints the version, the commit and the backends built in\n");
}

// "dd-node 0.1.0 (commit 1a2b3c4d5e6f)" and the backends this build has: reference and cpu
// always, cuda when the CUDA module was built (whether it loads here is known at first use).
void print_version() {
  std::printf("dd-node %s (commit %s)\n", dd::util::build_version(), dd::util::build_commit());
  std::printf("backends: reference cpu%s\n",
              dd::kernels::cuda_backend_compiled() ? " cuda (loaded on first use)" : "");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    print_version();
    return 0;
  }
  for (const auto& c : dd::app::commands())
    if (std::strcmp(argv[1], c.name) == 0) return c.main(argc - 1, argv + 1);
  std::fprintf(stderr, "dd-node: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
