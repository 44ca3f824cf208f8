// util/flags.hpp — one declarative flag table per command: each row names a flag, its kind, where
// its value goes and its help line; the same table parses argv and prints --help, so a command's
// help lists every flag it takes. Used by every `dd-node` command, `dd-chaos`, `dd-goodput` and the
// benchmarks.
// A refused argument gets one line on stderr, "<who>: <flag> needs ..., got '<value>'", and the
// caller exits 2. Numbers are parsed strictly (util/parse.hpp). main() thread only.
#pragma once

#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "util/parse.hpp"

namespace dd::util {

/// A command's flags. Build it with the adders (each returns *this), then call parse().
///
///   flag_table t("dd-node eval", "RUN_DIR|FILE [flags]", "Validation loss of a model.");
///   t.count("--batches", &batches, 1, 100000, "N", "validation batches (default 20)");
///   if (auto rc = t.parse(argc, argv)) return *rc;   // 0 after --help, 2 after an error
class flag_table {
 public:
  /// `who` prefixes every message ("dd-node eval"); `usage` follows it on the usage line;
  /// `about` (may be several lines) stands under it.
  flag_table(std::string who, std::string usage, std::string about = {});

  /// A switch: present = true.
  flag_table& toggle(const std::string& name, bool* out, const std::string& help);
  /// Any text.
  flag_table& text(const std::string& name, std::string* out, const std::string& value,
                   const std::string& help);
  /// Any text, repeatable: each occurrence appends.
  flag_table& texts(const std::string& name, std::vector<std::string>* out,
                    const std::string& value, const std::string& help);
  /// A whole number in [lo, hi] (int, unsigned, long, unsigned long, long long, ...).
  template <class T>
  flag_table& count(const std::string& name, T* out, T lo, T hi, const std::string& value,
                    const std::string& help) {
    return add({name, value, help, true, [out, lo, hi](const std::string& v) -> std::string {
                  if (parse_number_in(v, *out, lo, hi)) return {};
                  return "needs a whole number " +
                         (hi == std::numeric_limits<T>::max()
                              ? ">= " + std::to_string(lo)
                              : "in " + std::to_string(lo) + ".." + std::to_string(hi)) +
                         ", got '" + v + "'";
                }});
  }
  /// A finite number in [lo, hi].
  flag_table& number(const std::string& name, double* out, double lo, double hi,
                     const std::string& value, const std::string& help);
  /// A number of seconds >= 0.
  flag_table& seconds(const std::string& name, double* out, const std::string& help);
  /// A value checked by `take`, which returns an empty string when it accepts the value, else
  /// what is wrong ("needs HOST:PORT, got 'x'"), printed after "<who>: <flag> " (after "<who>: "
  /// alone when it starts with the flag's name).
  flag_table& custom(const std::string& name, const std::string& value, const std::string& help,
                     std::function<std::string(const std::string&)> take);
  /// A switch with an action (e.g. one that sets several fields).
  flag_table& action(const std::string& name, const std::string& help, std::function<void()> act);
  /// The positional arguments: `names` as shown in the help ("EXP"); at most `max` of them
  /// (0 = none allowed) and at least `min`, collected in order into `out`.
  flag_table& positionals(std::vector<std::string>* out, size_t min, size_t max,
                          const std::string& names, const std::string& help);
  /// A heading line in the help above the flags added after it ("Run control"); parses nothing.
  flag_table& heading(const std::string& title);
  /// Text after the flag list (exit status, notes).
  flag_table& epilog(const std::string& text);

  /// Parses argv[first..argc) (`--flag value` or `--flag=value`): nullopt when every argument was
  /// taken; 0 after printing the help for -h/--help (stdout); 2 after one line on stderr (an
  /// unknown flag — then the help too —, a missing or bad value, a wrong number of positionals).
  std::optional<int> parse(int argc, char** argv, int first = 1);
  /// As above over `args`, appending what it would print to `out` (the help) and `err`.
  std::optional<int> parse(const std::vector<std::string>& args, std::string& out,
                           std::string& err);
  /// The help: usage line, about, one line (or more) per flag, the epilog.
  std::string help() const;
  void print_help(FILE* f) const;
  /// Every flag name, in table order (tests check that each appears in the help).
  std::vector<std::string> names() const;
  const std::string& who() const { return who_; }

 private:
  struct row {
    std::string name, value, help;
    bool takes_value = true;
    std::function<std::string(const std::string&)> take;  ///< "" = accepted, else the reason
    bool is_heading = false;  ///< a heading(): `name` is its title, never matched by parse()
  };
  flag_table& add(row r);

  std::string who_, usage_, about_, epilog_;
  std::vector<row> rows_;
  std::vector<std::string>* positionals_ = nullptr;
  size_t pos_min_ = 0, pos_max_ = 0;
  std::string pos_names_, pos_help_;
};

}  // namespace dd::util
