// apps/dd_node/plot.cpp — `dd-node plot INPUT [--out DIR] [--python PATH]`: PNG figures of a run
// directory, of a comparison table of several experiments, or of dd-goodput's output
// (docs/plots.md). The figures are drawn by tools/plot/dd_plot.py with matplotlib; this command
// checks its flags, finds the script the build put beside the binary (or the source tree's copy)
// and replaces itself with the interpreter, so the script's output and exit status are the
// command's. The interpreter is named, not looked up on PATH: Debian's python3-matplotlib installs
// for /usr/bin/python3, which need not be the first python3 on PATH.
// Exit codes: 0 ok; 1 an input missing, unreadable or corrupt, matplotlib missing, no interpreter
// or no script; 2 bad flags.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "util/flags.hpp"

namespace dd::app {

namespace {

constexpr const char* default_python = "/usr/bin/python3";

/// dd_plot.py: beside this binary (the build copies it there), else in the source tree.
std::string find_script(std::vector<std::string>& tried) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(self.parent_path() / "dd_plot.py");
#ifdef DD_PLOT_SCRIPT_SOURCE
  candidates.emplace_back(DD_PLOT_SCRIPT_SOURCE);
#endif
  for (const auto& c : candidates) {
    tried.push_back(c.string());
    if (fs::is_regular_file(c, ec)) return c.string();
  }
  return {};
}

}  // namespace

/// Entry point of `dd-node plot`; argv[0] is "plot".
int plot_main(int argc, char** argv) {
  std::string out, python = default_python;
  std::vector<std::string> inputs;
  util::flag_table table(
      "dd-node plot", "INPUT [flags]",
      "Writes PNG figures (matplotlib) of INPUT, one line per figure on stdout.");
  table
      .positionals(
          &inputs, 1, 1, "INPUT",
          "a run directory: loss_tokens.png, loss_time.png (validation loss and each "
          "learner's training loss against tokens and time), merges.png (contributors per "
          "merge, grace window), timeline.png (learners stepping / away / restarted, faults "
          "from chaos.jsonl shaded), bytes.png (bytes pushed and broadcast); a comparison "
          "table: comparison.png, every experiment's validation loss on one figure (dd-node "
          "run --table FILE, default runs/comparison.json); dd-goodput output: goodput.png, "
          "goodput and uptime against chips (DIR or goodput.json)")
      .text("--out", &out, "DIR",
            "where the figures go (default RUN_DIR/figures, or figures/ beside the file)")
      .text("--python", &python, "PATH",
            std::string("the interpreter with matplotlib (default ") + default_python +
                "; Debian's python3-matplotlib installs for it)")
      .epilog(
          "Exit status: 0 ok; 1 an input missing, unreadable or corrupt, or matplotlib missing;\n"
          "2 bad flags.\n");
  if (auto rc = table.parse(argc, argv)) return *rc;
  const std::string& input = inputs.front();
  if (::access(python.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "dd-node plot: no Python interpreter at %s (%s); on Debian: apt-get install "
                 "python3 python3-matplotlib, or name one with --python PATH\n",
                 python.c_str(), std::strerror(errno));
    return 1;
  }
  std::vector<std::string> tried;
  const std::string script = find_script(tried);
  if (script.empty()) {
    std::string where;
    for (const auto& path : tried) where += (where.empty() ? "" : ", ") + path;
    std::fprintf(stderr,
                 "dd-node plot: the plotting script dd_plot.py is not installed (tried %s)\n",
                 where.c_str());
    return 1;
  }
  std::vector<std::string> args = {python, script, input};
  if (!out.empty()) {
    args.emplace_back("--out");
    args.push_back(out);
  }
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(python.c_str(), cargs.data());
  std::fprintf(stderr, "dd-node plot: cannot run %s: %s\n", python.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace dd::app
