// runtime/run_dir_rules.cpp — see run_dir_rules.hpp.
#include "runtime/run_dir_rules.hpp"

#include "runtime/run_dir.hpp"

namespace dd {

std::string resume_refusal(const std::string& run_dir, const nlohmann::json& experiment) {
  if (auto why = state_refusal(run_dir, experiment); !why.empty())
    return "--resume: run directory '" + run_dir + "' holds " + why;
  return {};
}

std::string run_dir_refusal(const std::string& run_dir, run_dir_mode mode,
                            const nlohmann::json& experiment) {
  switch (mode) {
    case run_dir_mode::fresh:
      if (inspect_run_dir(run_dir) == run_dir_state::unfinished)
        return "run directory '" + run_dir +
               "' holds an unfinished run (no summary.json): continue it with --resume, or "
               "replace it with --overwrite";
      // An interrupted run (Ctrl-C, SIGTERM) is as resumable as a crashed one: not replaced
      // by re-running the same command.
      if (inspect_run_dir(run_dir) == run_dir_state::finished && why_not_resumable(run_dir).empty())
        return "run directory '" + run_dir +
               "' holds an interrupted run (summary.json with \"interrupted\"): continue it "
               "with --resume, or replace it with --overwrite";
      return {};
    case run_dir_mode::overwrite: return {};
    case run_dir_mode::resume:
      if (auto why = why_not_resumable(run_dir); !why.empty()) {
        std::string line = "--resume: run directory '" + run_dir + "' holds " + why;
        if (inspect_run_dir(run_dir) == run_dir_state::finished)
          line +=
              ": it ran to its end, nothing is left to continue; start a new run there without "
              "--resume (it replaces this one), or in another run directory (--run-dir DIR) "
              "to keep it";
        return line;
      }
      return resume_refusal(run_dir, experiment);
  }
  return {};
}

}  // namespace dd
