// tests/config/config_sandbox_test.cpp — experiment scripts get no file, process or network
// access, no bytecode, and are stopped by the instruction and memory limits and by the
// wall-clock limit (a child process killed at --script-timeout).
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/config/loader.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

/// Runs `body` followed by a valid experiment; returns the single error (fails if not exactly one).
config_error refusal(const std::string& body, load_options o = test::repo_options()) {
  const std::string script = body + "\nexperiment { " + test::k_data + " }\n";
  const load_result r = load_string(script, "sandbox.lua", o);
  EXPECT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_TRUE(r.experiments.empty());
  return r.errors.empty() ? config_error{} : r.errors[0];
}

const std::string k_no_access =
    "is not available in experiment files: the sandbox allows no file, process or network access "
    "(name data files with data.file)";

TEST(ConfigSandbox, NoFileAccess) {
  EXPECT_EQ(refusal("local f = io.open('/etc/passwd')").message, "'io' " + k_no_access);
  EXPECT_EQ(refusal("io.write('x')").line, 1);
  EXPECT_EQ(refusal("dofile('/etc/passwd')").message, "'dofile' " + k_no_access);
  EXPECT_EQ(refusal("loadfile('/etc/passwd')").message, "'loadfile' " + k_no_access);
}

TEST(ConfigSandbox, NoProcessAccess) {
  const std::string marker = "/tmp/dd_config_sandbox_marker";
  std::filesystem::remove(marker);
  EXPECT_EQ(refusal("os.execute('touch " + marker + "')").message, "'os' " + k_no_access);
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_EQ(refusal("local x = os.getenv('HOME')").message, "'os' " + k_no_access);
}

TEST(ConfigSandbox, NoModulesOrDebug) {
  EXPECT_EQ(refusal("local s = require('socket')").message, "'require' " + k_no_access);
  EXPECT_EQ(refusal("local p = package.loadlib").message, "'package' " + k_no_access);
  EXPECT_EQ(refusal("debug.sethook()").message, "'debug' " + k_no_access);
  EXPECT_EQ(refusal("collectgarbage()").message, "'collectgarbage' " + k_no_access);
}

TEST(ConfigSandbox, NoBytecode) {
  EXPECT_EQ(refusal("local f = load('\\27Lua\\84\\0')").message,
            "load: binary (precompiled) chunks are refused in experiment files");
  EXPECT_EQ(refusal("local d = string.dump(function() end)").message,
            "attempt to call a nil value (field 'dump')");
  const load_result r = load_string("\x1bLua\x54", "bin.lua");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message,
            "binary (precompiled) chunks are refused; experiment files are Lua source text");
}

TEST(ConfigSandbox, TextLoadStillWorksInsideTheSandbox) {
  const std::string script = std::string("local n = load('return 2 + 1')()\n") + "experiment { " +
                             test::k_data + ", learners = { count = n } }\n";
  const load_result r = load_string(script, "load.lua", test::repo_options());
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.experiments[0].learners.count, 3);
  // A loaded chunk sees the same sandbox: no io there either.
  const config_error e = refusal("load('return io')()");
  EXPECT_EQ(e.line, 1);
  EXPECT_EQ(e.message, "load:1: 'io' " + k_no_access);
}

TEST(ConfigSandbox, EndlessLoopIsStopped) {
  load_options o = test::repo_options();
  o.instruction_limit = 2'000'000;
  const config_error e = refusal("local i = 0\nwhile true do\n  i = i + 1\nend", o);
  EXPECT_EQ(e.file, "sandbox.lua");
  EXPECT_GE(e.line, 2);
  EXPECT_LE(e.line, 4);
  EXPECT_EQ(e.message,
            "the script ran past its limit of 2000000 Lua instructions (an endless loop?)");
}

TEST(ConfigSandbox, PcallCannotSwallowTheInstructionLimit) {
  load_options o = test::repo_options();
  o.instruction_limit = 1'000'000;
  const config_error e = refusal("while true do pcall(function() while true do end end) end", o);
  EXPECT_EQ(e.message,
            "the script ran past its limit of 1000000 Lua instructions (an endless loop?)");
}

TEST(ConfigSandbox, MemoryBombIsStopped) {
  load_options o = test::repo_options();
  o.memory_limit = std::size_t{8} << 20;
  const config_error e =
      refusal("local t = {}\nfor i = 1, 1e9 do t[i] = string.rep('x', 64) .. i end", o);
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.message, "the script ran past its memory limit of 8 MiB");
  const config_error big = refusal("local s = string.rep('x', 1 << 30)", o);
  EXPECT_EQ(big.message, "the script ran past its memory limit of 8 MiB");
}

TEST(ConfigSandbox, NonConfigValuesAreRefused) {
  const std::string script = std::string("experiment {\n  ") + test::k_data +
                             ",\n  learners = { count = function() return 4 end },\n}\n";
  const load_result r = load_string(script, "fn.lua", test::repo_options());
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(),
            "fn.lua:3: learners.count: a function is not a configuration value");
}

TEST(ConfigSandbox, ScriptErrorsKeepTheirLine) {
  const config_error e = refusal("local x = 1\nerror('my own check failed')");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.message, "my own check failed");
}

}  // namespace
}  // namespace dd::config

namespace dd::config {
namespace {

TEST(ConfigSandbox, SnapshotsAreCappedToo) {
  // Each call copies its table out of the interpreter; the copies share the memory cap.
  load_options o = test::repo_options();
  o.memory_limit = std::size_t{8} << 20;
  const std::string script = std::string("local s = string.rep('x', 1 << 20)\n") +
                             "for i = 1, 20 do experiment { name = 'e' .. i, description = s, " +
                             test::k_data + " } end\n";
  const load_result r = load_string(script, "cap.lua", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0].key_path, "description");
  EXPECT_EQ(r.errors[0].line, 2);
  EXPECT_EQ(r.errors[0].message,
            "the experiments hold too much data (at most 100000 values and 8 MiB)");
}

}  // namespace
}  // namespace dd::config

// Item: the wall-clock limit (--script-timeout) stops what the instruction limit cannot see:
// time inside library functions, __gc finalizers, error handlers, --set values. (Coroutines
// are not in the sandbox: `coroutine` is an undefined variable there.)
namespace dd::config {
namespace {

using wall_clock = std::chrono::steady_clock;

/// Loads `script` with a 1-second wall-clock limit; returns its errors and checks that the load
/// ended well within twice the limit (it is the parent that stops the child).
std::vector<config_error> timed_refusal(const std::string& script,
                                        std::vector<std::string> sets = {}) {
  load_options o = test::repo_options();
  o.script_timeout = 1.0;
  o.overrides = std::move(sets);
  const auto t0 = wall_clock::now();
  const load_result r = load_string(script, "slow.lua", o);
  const double took = std::chrono::duration<double>(wall_clock::now() - t0).count();
  EXPECT_LT(took, 2.0) << "the load took " << took << " s";
  EXPECT_GE(took, 0.9) << "the load took " << took << " s";
  EXPECT_TRUE(r.experiments.empty());
  return r.errors;
}

const std::string k_slow_find =
    "local s = string.rep('a', 5000)\nlocal x = s:find(string.rep('a-', 12) .. 'b')\n";

TEST(ConfigSandboxWallClock, TimeInsideALibraryFunctionIsStopped) {
  const auto errors = timed_refusal(k_slow_find + "experiment { " + test::k_data + " }\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(),
            "slow.lua:2: the script did not finish within 1 s (--script-timeout)");
}

TEST(ConfigSandboxWallClock, AFinalizerThatNeverReturnsIsStopped) {
  const auto errors =
      timed_refusal("setmetatable({}, { __gc = function() while true do end end })\nexperiment { " +
                    std::string(test::k_data) + " }\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(),
            "slow.lua:2: the script did not finish within 1 s (--script-timeout)");
}

TEST(ConfigSandboxWallClock, AnErrorHandlerAndLongLibraryCallsAreStopped) {
  auto errors = timed_refusal(
      "local s = string.rep('a', 5000)\n"
      "xpcall(error, function() return s:find(string.rep('a-', 12) .. 'b') end)\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].message, "the script did not finish within 1 s (--script-timeout)");
  // A loop of few Lua instructions, each a long library call.
  errors = timed_refusal(
      "local s = string.rep('y', 1 << 20)\n"
      "while true do s = s:gsub('y', 'y') end\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(),
            "slow.lua:2: the script did not finish within 1 s (--script-timeout)");
}

// In-process evaluation (only the fuzz target uses it): the Lua hook checks the wall clock
// between instructions, so a loop of long library calls stops at the limit with the same
// error as the child's; the other hang cases need the child (see config_fuzz.cpp).
TEST(ConfigSandboxWallClock, InProcessTheHookStopsLuaLoopsAtTheLimit) {
  load_options o = test::repo_options();
  o.evaluate_in_process = true;
  o.script_timeout = 1.0;
  o.instruction_limit = 1'000'000'000;  // only the wall clock can stop it
  const auto t0 = wall_clock::now();
  const load_result r =
      load_string("local s = string.rep('y', 1 << 20)\nwhile true do s = s:gsub('y', 'y') end\n",
                  "slow.lua", o);
  const double took = std::chrono::duration<double>(wall_clock::now() - t0).count();
  EXPECT_GE(took, 0.9) << "the load took " << took << " s";
  EXPECT_LT(took, 5.0) << "the load took " << took << " s (one gsub over 1 MiB past the limit)";
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_TRUE(r.experiments.empty());
  EXPECT_EQ(r.errors[0].to_string(),
            "slow.lua:2: the script did not finish within 1 s (--script-timeout)");
  // A script that ends in time is not affected.
  const load_result ok =
      load_string("experiment { " + std::string(test::k_data) + " }\n", "ok.lua", o);
  EXPECT_TRUE(ok.ok()) << ok.error_text();
}

TEST(ConfigSandboxWallClock, ASlowSetValueIsStopped) {
  const auto errors = timed_refusal("experiment { " + std::string(test::k_data) + " }\n",
                                    {"name=('a'):rep(5000):find(('a-'):rep(12) .. 'b')"});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(),
            "--set name=('a'):rep(5000):find(('a-'):rep(12) .. 'b'): name: "
            "'('a'):rep(5000):find(('a-'):rep(12) .. 'b')' did not finish within 1 s "
            "(--script-timeout)");
}

TEST(ConfigSandboxWallClock, ResultsCrossTheProcessBoundaryIntact) {
  // Non-finite numbers and bytes that are not UTF-8 come back as the script made them; each
  // problem is reported once, on its line. Text that is not UTF-8 is refused (JSON output —
  // resolve, experiment.json — cannot hold it); UTF-8 text
  // beyond ASCII crosses intact.
  const std::string script = std::string("experiment {\n  ") + test::k_data +
                             ",\n  description = '\\xff\\xfe',\n  inner = { lr = 0/0 },\n}\n";
  const load_result r = load_string(script, "cross.lua", test::repo_options());
  test::expect_errors(r, {"cross.lua:4: inner.lr: is not a finite number",
                          "cross.lua:3: description: is not valid UTF-8 text: string "
                          "\"\xEF\xBF\xBD\xEF\xBF\xBD\""});
  const load_result ok = load_string(std::string("experiment {\n  ") + test::k_data +
                                         ",\n  description = 'caf\\xc3\\xa9 \\u{1F600}',\n}\n",
                                     "cross.lua", test::repo_options());
  ASSERT_TRUE(ok.ok()) << ok.error_text();
  EXPECT_EQ(ok.experiments.at(0).description, "caf\xc3\xa9 \xF0\x9F\x98\x80");
}

TEST(ConfigSandboxWallClock, TheLimitIsCheckedAndParsed) {
  load_options o = test::repo_options();
  o.script_timeout = 0.0;
  const load_result r = load_string("experiment { " + std::string(test::k_data) + " }", "t.lua", o);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), "--script-timeout: 0 is not a positive number of seconds");
  double s = 0;
  std::string why;
  EXPECT_TRUE(parse_script_timeout("2.5", s, why));
  EXPECT_EQ(s, 2.5);
  for (const char* bad : {"", "0", "-1", "x", "1s", "nan", "inf", "1e999", "86401"}) {
    EXPECT_FALSE(parse_script_timeout(bad, s, why)) << bad;
    EXPECT_EQ(why, std::string("--script-timeout: expected seconds, a number > 0 and at most "
                               "86400, got '") +
                       bad + "'");
  }
}

}  // namespace
}  // namespace dd::config

// ---- bounded end to end ----
namespace dd::config {
namespace {

double seconds_since(wall_clock::time_point t0) {
  return std::chrono::duration<double>(wall_clock::now() - t0).count();
}

// 500k unknown keys kept the parent busy for over 5 minutes after the script had
// finished (every new error was compared with every earlier one, and each got a suggestion).
// The first max_errors_shown are reported, the rest counted, within the script's limit. (100k
// keys here, to leave the script time on a loaded machine; the parent's work is linear.)
TEST(ConfigBounded, ManyUnknownKeysAreCountedWithinTheLimit) {
  const std::string script = std::string("for e = 1, 5 do\n  local t = { ") + test::k_data +
                             " }\n  for i = 1, 20000 do t['k' .. i] = i end\n"
                             "  experiment(t)\nend\n";
  load_options o = test::repo_options();
  o.script_timeout = 30.0;
  const auto t0 = wall_clock::now();
  const load_result r = load_string(script, "keys.lua", o);
  const double took = seconds_since(t0);
  EXPECT_LT(took, 2 * o.script_timeout) << "the load took " << took << " s";
  EXPECT_TRUE(r.experiments.empty());
  ASSERT_EQ(r.errors.size(), max_errors_shown) << r.error_text();
  // The same key at the same line is one problem: the other experiments' first 100 repeat the
  // first one's and are dropped; the errors past the cap are counted, not compared.
  EXPECT_EQ(r.more_errors, 5u * 20000u - 5 * max_errors_shown);
  EXPECT_EQ(r.errors[0].message.rfind("unknown key", 0), 0u) << r.errors[0].to_string();
  const std::string text = r.error_text();
  EXPECT_NE(text.find("\u2026 and 99500 more errors\n"), std::string::npos)
      << text.substr(text.size() - 200);
}

// 300,000 experiments took the parent 92 s and 4.6 GB; a file may define 10,000.
TEST(ConfigBounded, ThreeHundredThousandExperimentsAreRefusedWithinTheLimit) {
  const std::string script =
      std::string("for i = 1, 300000 do experiment { ") + test::k_data + " } end\n";
  load_options o = test::repo_options();
  o.script_timeout = 30.0;
  const auto t0 = wall_clock::now();
  const load_result r = load_string(script, "sweep.lua", o);
  EXPECT_LT(seconds_since(t0), 2 * o.script_timeout);
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_EQ(r.errors[0].to_string(),
            "sweep.lua:1: more than 10000 experiments in one file (split the sweep into files)");
}

// A print loop wrote 25 GB to stderr in 10 s. An evaluation prints at most 1 MiB,
// then says how much it did not show.
TEST(ConfigBounded, PrintOutputIsCappedPerEvaluation) {
  const std::string script = std::string("for i = 1, 50000 do print(string.rep('x', 99)) end\n") +
                             "experiment { " + test::k_data + " }\n";
  ::testing::internal::CaptureStderr();
  const load_result r = load_string(script, "loud.lua", test::repo_options());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(r.ok()) << r.error_text();
  EXPECT_LE(err.size(), (std::size_t{1} << 20) + 200);
  EXPECT_GE(err.size(), (std::size_t{1} << 20) - 200);
  // Lines of 112 bytes ("experiment: " + 99 + "\n"): 9362 fit in 1 MiB.
  EXPECT_NE(err.find("experiment: print: 40638 more lines (4551456 bytes) not shown: an "
                     "evaluation prints at most 1048576 bytes\n"),
            std::string::npos)
      << err.substr(err.size() > 300 ? err.size() - 300 : 0);
}

// An unknown key of a megabyte was printed whole in its error.
TEST(ConfigBounded, AnOverLongKeyIsShownCut) {
  const std::string script =
      std::string("experiment { ") + test::k_data + ", [string.rep('k', 1000000)] = 1 }\n";
  const load_result r = load_string(script, "long.lua", test::repo_options());
  ASSERT_EQ(r.errors.size(), 1u);
  const std::string line = r.errors[0].to_string();
  EXPECT_LT(line.size(), 300u);
  EXPECT_EQ(line, "long.lua:1: " + std::string(120, 'k') + "\u2026 (1000000 bytes): unknown key");
}

}  // namespace
}  // namespace dd::config
