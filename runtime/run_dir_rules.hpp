// runtime/run_dir_rules.hpp — the one rule for opening a run directory (runtime/run_dir.hpp has
// what a run directory holds): which runs `dd-node run`, `syncer` and `launch` may start in it
// (apps/dd_node/run_lock.hpp run_dir_opener applies it after taking the locks), and the resume
// check the job repeats for callers of its C++ API. Any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dd {

/// How a command opens a run directory: a new run (`fresh`: refused over an unfinished or
/// interrupted run), `--resume` (continue the run there), or `--overwrite` (replace an
/// unfinished or interrupted run).
enum class run_dir_mode { fresh, resume, overwrite };

/// What a resumed run may not find in `run_dir` — the check the job repeats for callers of its
/// C++ API: "" when `experiment` may continue the run's state there (runtime/run_dir.hpp
/// state_refusal: whose files these are, its records present, the experiment unchanged), else
/// the refusal, beginning "--resume: run directory 'DIR' holds ...".
std::string resume_refusal(const std::string& run_dir, const nlohmann::json& experiment);

/// The one rule of `dd-node run`, `syncer` and `launch` for a locked run directory: "" when
/// `run_dir` may be opened in `mode` for `experiment`, else one line saying why and what to do —
/// a fresh run over an unfinished one ("... holds an unfinished run (no summary.json): continue
/// it with --resume, or replace it with --overwrite") or over an interrupted one (summary.json
/// with "interrupted": the same two choices) — a fresh run replaces only a run that finished —,
/// a resume of nothing resumable (why_not_resumable; for a finished run also what to do
/// instead), or resume_refusal's.
std::string run_dir_refusal(const std::string& run_dir, run_dir_mode mode,
                            const nlohmann::json& experiment);

}  // namespace dd
