// tools/bench/bench_flags.hpp — strict flag checking shared by the benchmark binaries: every
// argument must be a known flag (with its value), and a number flag's value a whole number
// (util/parse.hpp), or the binary exits 2 with one line naming the flag, before any work.
// main() thread only.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "util/parse.hpp"

namespace dd::bench {

/// A flag a benchmark accepts: `number` flags take a whole number, `text` flags any value,
/// `boolean` flags none.
struct flag_spec {
  const char* name;
  enum kind_t { number, text, boolean } kind;
};

/// Checks argv[1..] against `specs`; on the first unknown flag, missing value or value that is
/// not a whole number prints "`who`: ..." on stderr and exits 2.
inline void check_flags(const char* who, int argc, char** argv,
                        std::initializer_list<flag_spec> specs) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const flag_spec* spec = nullptr;
    for (const auto& s : specs)
      if (a == s.name) spec = &s;
    if (spec == nullptr) {
      std::fprintf(stderr, "%s: unknown flag '%s' (see --help)\n", who, a.c_str());
      std::exit(2);
    }
    if (spec->kind == flag_spec::boolean) continue;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value (see --help)\n", who, a.c_str());
      std::exit(2);
    }
    long long v = 0;
    if (spec->kind == flag_spec::number && !util::parse_number(argv[i + 1], v)) {
      std::fprintf(stderr, "%s: %s expects a whole number, got '%s'\n", who, a.c_str(),
                   argv[i + 1]);
      std::exit(2);
    }
    if (spec->kind == flag_spec::number && (v < -1000000000LL || v > 1000000000LL)) {
      std::fprintf(stderr, "%s: %s: %s is out of range\n", who, a.c_str(), argv[i + 1]);
      std::exit(2);
    }
    ++i;
  }
}

/// The value of number flag `name` (already checked by check_flags), or `def`.
inline int arg_int(int argc, char** argv, const char* name, int def) {
  int v = def;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name && util::parse_number(argv[i + 1], v)) return v;
  return def;
}

}  // namespace dd::bench
