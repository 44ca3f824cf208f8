// runtime/config/resolve_command.cpp — see resolve_command.hpp.
#include "runtime/config/resolve_command.hpp"

#include "runtime/config/loader.hpp"

namespace dd::config {

const char* const resolve_usage =
    "usage: dd-node resolve <experiment.lua> [--name NAME]... [--set key.path=value]...\n"
    "                       [--no-check-files] [--script-timeout SECONDS]\n"
    "Prints every experiment in the file (or the named ones) with every default filled in, as a\n"
    "JSON array. --set overrides a key in every selected experiment (--name selects first);\n"
    "the value is a Lua literal "
    "(2, 0.5, true, \"text\", fraction(0.5), {1, 1.5}) or else taken as text.\n"
    "--script-timeout S bounds the evaluation in wall-clock seconds (default 10): the script\n"
    "runs in a child process that is killed at the limit, whatever it is doing.\n"
    "On stderr, per experiment: its memory estimate (per learner, per fragment owner, the\n"
    "evaluator; what dd-node run, a syncer node and a learner node need) and whether this\n"
    "machine's available memory and address-space limit allow it (dd-node run, syncer, launch\n"
    "and learner refuse a run that does not fit unless given --force-memory).\n"
    "Exit status: 0 resolved, 2 invalid file, override or usage, or a fragment plan the model\n"
    "cannot have (more fragments than tensors). Keys: docs/config.md.\n";

int resolve_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                    const resolve_check& check) {
  load_options options;
  std::string file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag, std::string& into) {
      const std::string eq = std::string(flag) + "=";
      if (a.compare(0, eq.size(), eq) == 0) {
        into = a.substr(eq.size());
        return true;
      }
      if (a == flag && i + 1 < args.size()) {
        into = args[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      out << resolve_usage;
      return 0;
    } else if (value("--name", v)) {
      options.names.push_back(v);
    } else if (value("--set", v)) {
      options.overrides.push_back(v);
    } else if (value("--script-timeout", v)) {
      std::string why;
      if (!parse_script_timeout(v, options.script_timeout, why)) {
        err << "dd-node resolve: " << why << "\n";
        return 2;
      }
    } else if (a == "--no-check-files") {
      options.check_files = false;
    } else if (!a.empty() && a[0] == '-') {
      err << "dd-node resolve: unknown or incomplete flag '" << a << "'\n" << resolve_usage;
      return 2;
    } else if (file.empty()) {
      file = a;
    } else {
      err << "dd-node resolve: more than one experiment file ('" << file << "', '" << a << "')\n";
      return 2;
    }
  }
  if (file.empty()) {
    err << "dd-node resolve: no experiment file given\n" << resolve_usage;
    return 2;
  }
  const load_result r = load_file(file, options);
  if (!r.ok()) {
    err << r.error_text();
    return 2;
  }
  if (check) {
    bool refused = false;
    for (const auto& e : r.experiments)
      for (const auto& why : check(e, err)) {
        err << file << ": experiment '" << e.name << "': " << why << "\n";
        refused = true;
      }
    if (refused) return 2;
  }
  nlohmann::json all = nlohmann::json::array();
  for (const auto& e : r.experiments) all.push_back(to_json(e));
  out << all.dump(2) << "\n";
  return 0;
}

}  // namespace dd::config
