// runtime/config/resolve_command.cpp — see resolve_command.hpp.
#include "runtime/config/resolve_command.hpp"

#include "runtime/config/loader.hpp"
#include "util/flags.hpp"

namespace dd::config {

namespace {

util::flag_table resolve_table(load_options& options, std::vector<std::string>& files) {
  util::flag_table t("dd-node resolve", "EXP [flags]",
                     "Prints every experiment in the file (or the named ones) with every default "
                     "filled in, as a\nJSON array. Keys: docs/config.md.");
  t.positionals(&files, 1, 1, "EXP", "the experiment file")
      .texts("--name", &options.names, "NAME", "print only experiment NAME (repeatable)")
      .texts("--set", &options.overrides, "KEY.PATH=VALUE",
             "override a key in every selected experiment (--name selects first); the value is "
             "a Lua literal (2, 0.5, true, \"text\", fraction(0.5), {1, 1.5}) or else taken as "
             "text")
      .custom("--script-timeout", "S",
              "bounds the evaluation in wall-clock seconds (default 10): the script runs in a "
              "child process that is killed at the limit, whatever it is doing",
              [&options](const std::string& v) {
                std::string why;
                return parse_script_timeout(v, options.script_timeout, why) ? std::string() : why;
              })
      .action("--no-check-files", "do not check that data.file exists",
              [&options] { options.check_files = false; })
      .epilog(
          "On stderr, per experiment: its memory estimate (per learner, per fragment owner, the\n"
          "evaluator; what dd-node run, a syncer node and a learner node need) and whether this\n"
          "machine's available memory and address-space limit allow it (dd-node run, syncer, "
          "launch\nand learner refuse a run that does not fit unless given --force-memory).\n"
          "Exit status: 0 resolved, 2 invalid file, override or usage, or a fragment plan the "
          "model\ncannot have (more fragments than tensors).\n");
  return t;
}

}  // namespace

std::string resolve_usage() {
  load_options options;
  std::vector<std::string> files;
  return resolve_table(options, files).help();
}

int resolve_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                    const resolve_check& check) {
  load_options options;
  std::vector<std::string> files;
  auto t = resolve_table(options, files);
  std::string out_text, err_text;
  const auto rc = t.parse(args, out_text, err_text);
  out << out_text;
  err << err_text;
  if (rc) return *rc;
  const std::string& file = files.front();
  const load_result r = load_file(file, options);
  if (!r.ok()) {
    err << r.error_text();
    return 2;
  }
  err << r.warning_text();
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
