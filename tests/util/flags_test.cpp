// tests/util/flags_test.cpp — the flag table (util/flags.hpp): each kind takes its value or
// refuses it with exit 2 and a line naming the flag and the value; --help prints every flag.
#include "util/flags.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace {

/// Runs `t.parse` on `args` (argv[0] is the program) and returns its result and stderr.
struct outcome {
  std::optional<int> rc;
  std::string err;
};

outcome parse(dd::util::flag_table& t, std::vector<std::string> args) {
  std::vector<char*> argv;
  std::string prog = "prog";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  outcome o;
  o.rc = t.parse(static_cast<int>(argv.size()), argv.data());
  o.err = ::testing::internal::GetCapturedStderr();
  (void)::testing::internal::GetCapturedStdout();
  return o;
}

struct values {
  bool resume = false;
  std::string dir;
  std::vector<std::string> sets, files;
  int threads = 1;
  long long steps = 10;
  double lr = 0.1, progress = 5;
  std::string endpoint;
};

dd::util::flag_table table(values& v) {
  dd::util::flag_table t("dd-test", "EXP [flags]", "A test command.");
  t.toggle("--resume", &v.resume, "continue")
      .text("--run-dir", &v.dir, "DIR", "run directory")
      .texts("--set", &v.sets, "K=V", "override (repeatable)")
      .count("--threads", &v.threads, 0, 4096, "N", "threads")
      .count("--steps", &v.steps, 1LL, std::numeric_limits<long long>::max(), "N", "steps")
      .number("--lr", &v.lr, 0, 10, "X", "learning rate")
      .seconds("--progress", &v.progress, "progress period")
      .custom("--listen", "H:P", "endpoint",
              [&](const std::string& s) -> std::string {
                if (s.find(':') == std::string::npos) return "needs HOST:PORT, got '" + s + "'";
                v.endpoint = s;
                return {};
              })
      .positionals(&v.files, 1, 1, "EXP", "the experiment file")
      .epilog("Exit status: 0 ok; 2 bad flags.");
  return t;
}

TEST(flag_table, each_kind_takes_its_value) {
  values v;
  auto t = table(v);
  const auto o =
      parse(t, {"e.lua", "--resume", "--run-dir", "d", "--set", "a=1", "--set", "b=2", "--threads",
                "0", "--steps", "7", "--lr", "0.5", "--progress", "2.5", "--listen", "h:1"});
  EXPECT_FALSE(o.rc.has_value()) << o.err;
  EXPECT_TRUE(v.resume);
  EXPECT_EQ(v.dir, "d");
  EXPECT_EQ(v.sets, (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_EQ(v.files, (std::vector<std::string>{"e.lua"}));
  EXPECT_EQ(v.threads, 0);
  EXPECT_EQ(v.steps, 7);
  EXPECT_DOUBLE_EQ(v.lr, 0.5);
  EXPECT_DOUBLE_EQ(v.progress, 2.5);
  EXPECT_EQ(v.endpoint, "h:1");
}

// A seconds flag takes a bare number of seconds or the units dd-chaos takes.
TEST(flag_table, a_seconds_flag_takes_a_unit) {
  const std::vector<std::pair<std::string, double>> cases = {
      {"7", 7.0},    {"2.5", 2.5},    {"250ms", 0.25},  {"10s", 10.0},
      {"2m", 120.0}, {"3min", 180.0}, {"1.5h", 5400.0}, {"0s", 0.0}};
  for (const auto& [text, want] : cases) {
    values v;
    auto t = table(v);
    const auto o = parse(t, {"e.lua", "--progress", text});
    EXPECT_FALSE(o.rc.has_value()) << text << ": " << o.err;
    EXPECT_DOUBLE_EQ(v.progress, want) << text;
  }
}

TEST(flag_table, a_bad_value_is_refused_with_exit_2_naming_the_flag_and_the_value) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"e", "--threads", "12x"}, "dd-test: --threads needs a whole number in 0..4096, got '12x'"},
      {{"e", "--threads", "4097"},
       "dd-test: --threads needs a whole number in 0..4096, got '4097'"},
      {{"e", "--steps", "0"}, "dd-test: --steps needs a whole number >= 1, got '0'"},
      {{"e", "--lr", "inf"}, "dd-test: --lr needs a finite number in 0..10, got 'inf'"},
      {{"e", "--progress", "-1"},
       "dd-test: --progress needs a number of seconds >= 0 (or with a unit: 250ms, 10s, 2m, 1h), "
       "got '-1'"},
      {{"e", "--progress", "5x"},
       "dd-test: --progress needs a number of seconds >= 0 (or with a unit: 250ms, 10s, 2m, 1h), "
       "got '5x'"},
      {{"e", "--progress", "s"},
       "dd-test: --progress needs a number of seconds >= 0 (or with a unit: 250ms, 10s, 2m, 1h), "
       "got 's'"},
      {{"e", "--listen", "x"}, "dd-test: --listen needs HOST:PORT, got 'x'"},
      {{"e", "--run-dir"}, "dd-test: --run-dir needs a value (DIR)"},
      {{"e", "--bogus"}, "dd-test: unknown flag '--bogus'"},
      // A misspelled flag names the one it likely meant (one or two edits away).
      {{"e", "--progres", "1"}, "dd-test: unknown flag '--progres'; did you mean '--progress'?"},
      {{"e", "--thraeds=2"}, "dd-test: unknown flag '--thraeds=2'; did you mean '--threads'?"},
      {{"e", "--hlep"}, "dd-test: unknown flag '--hlep'; did you mean '--help'?"},
      {{"e", "f"}, "dd-test: unexpected argument 'f' (it takes at most 1: EXP)"},
      {{}, "dd-test: missing EXP"},
  };
  for (const auto& [args, message] : cases) {
    values v;
    auto t = table(v);
    const auto o = parse(t, args);
    ASSERT_TRUE(o.rc.has_value()) << message;
    EXPECT_EQ(*o.rc, 2) << message;
    EXPECT_EQ(o.err.substr(0, o.err.find('\n')), message);
  }
}

TEST(flag_table, help_lists_every_flag_and_exits_0) {
  values v;
  auto t = table(v);
  const auto o = parse(t, {"--help"});
  ASSERT_TRUE(o.rc.has_value());
  EXPECT_EQ(*o.rc, 0);
  const std::string help = t.help();
  EXPECT_EQ(help.rfind("usage: dd-test EXP [flags]\nA test command.\n", 0), 0u) << help;
  ASSERT_EQ(t.names().size(), 8u);
  for (const auto& n : t.names()) EXPECT_NE(help.find("  " + n), std::string::npos) << n;
  EXPECT_NE(help.find("  --run-dir DIR"), std::string::npos) << help;
  EXPECT_NE(help.find("Exit status: 0 ok; 2 bad flags."), std::string::npos);
  for (size_t at = 0, nl; at < help.size(); at = nl + 1) {
    nl = help.find('\n', at);
    EXPECT_LE(nl - at, 100u) << help.substr(at, nl - at);
  }
}

TEST(flag_table, a_value_may_follow_an_equals_sign) {
  values v;
  auto t = table(v);
  std::string out, err;
  EXPECT_FALSE(t.parse({"e", "--run-dir=a=b", "--threads=3"}, out, err).has_value()) << err;
  EXPECT_EQ(v.dir, "a=b");
  EXPECT_EQ(v.threads, 3);
  EXPECT_EQ(t.parse({"e", "--resume=1"}, out, err), 2);  // a switch takes no value
  EXPECT_EQ(err.substr(0, err.find('\n')),
            "dd-test: unknown flag '--resume=1'; did you mean '--resume'?");
}

// A heading groups the flags after it in the help; it is no flag: names() leaves it out and
// parse() takes neither its title nor an empty argument for it.
TEST(flag_table, a_heading_titles_the_flags_after_it_and_parses_nothing) {
  bool quick = false, slow = false;
  std::vector<std::string> rest;
  dd::util::flag_table t("dd-test", "[flags]");
  t.heading("Speed").toggle("--quick", &quick, "fast").heading("").toggle("--slow", &slow, "slow");
  t.positionals(&rest, 0, 2, "ARGS", "");
  EXPECT_EQ(t.names(), (std::vector<std::string>{"--quick", "--slow"}));
  const std::string help = t.help();
  EXPECT_NE(help.find("\nSpeed\n  --quick"), std::string::npos) << help;
  std::string out, err;
  EXPECT_FALSE(t.parse({"Speed", "", "--slow"}, out, err).has_value()) << err;
  EXPECT_EQ(rest, (std::vector<std::string>{"Speed", ""}));
  EXPECT_FALSE(quick);
  EXPECT_TRUE(slow);
}

}  // namespace
