// runtime/config/run_dir_default.hpp — where a run writes when nothing says otherwise: the one
// default path, runs/<name>, of the loader, the dd-node commands and the job. Any thread.
#pragma once

#include <string>

#include "runtime/config/experiment.hpp"

namespace dd::config {

/// The default run directory of experiment `name`: runs/<name> (the loader's default for
/// `run_dir`; dd-node train's is default_run_dir("train")).
std::string default_run_dir(const std::string& name);

/// The run directory of `e`: its `run_dir`, or default_run_dir(name) for an experiment built in
/// code without one.
std::string run_dir_of(const experiment& e);

}  // namespace dd::config
