// tests/config/config_bad_files_test.cpp — each file in tests/config/bad/ and tests/config/hang/
// is refused with exactly one error: its line, key path and message are fixed here; the resolve
// command exits with 2.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/config/loader.hpp"
#include "runtime/config/resolve_command.hpp"
#include "tests/config/config_test_util.hpp"

namespace dd::config {
namespace {

struct bad_case {
  const char* file;  // under tests/config/: bad/*.lua, or hang/*.lua (kept out of config_fuzz)
  int line;
  const char* key;
  const char* message;
};

const bad_case k_bad[] = {
    {"bad/unknown_key.lua", 6, "sync.min_quorm", "unknown key; did you mean 'min_quorum'?"},
    {"bad/misplaced_key.lua", 4, "learners.min_quorum",
     "unknown key; did you mean 'sync.min_quorum'?"},
    {"bad/wrong_type.lua", 5, "sync.interval", "expected an integer, got string \"24\""},
    {"bad/out_of_range.lua", 6, "learners.jitter", "1.5 is out of range: must be in [0, 1)"},
    {"bad/fragments_exceed_interval.lua", 6, "sync.fragments",
     "32 fragments exceed sync.interval (24); P <= H is required"},
    {"bad/quorum_exceeds_learners.lua", 6, "sync.min_quorum", "5 exceeds learners.count (4)"},
    {"bad/quorum_fraction.lua", 4, "sync.min_quorum", "fraction 1.5 is outside (0, 1]"},
    // A relative path names the absolute paths it was looked for at (@TRIED@: next to the file,
    // the current directory, the search directories); an absolute one is only itself.
    {"bad/missing_data_file.lua", 4, "data.file",
     "file 'no_such_file.txt' not found (tried @TRIED@)"},
    {"bad/missing_data_file_absolute.lua", 4, "data.file",
     "file '/nonexistent/no_such_file.txt' not found"},
    // Regression: two swapped letters got no suggestion in a file ('learners.bacth: unknown
    // key') while --set learners.cout=3 did.
    {"bad/transposed_key.lua", 6, "learners.bacth", "unknown key; did you mean 'batch'?"},
    {"bad/missing_data.lua", 2, "data.file",
     "required key is missing: name the training text file"},
    {"bad/idx_missing_labels.lua", 5, "data.labels",
     "required key is missing: name the IDX label file (n)"},
    {"bad/idx_with_text_file.lua", 7, "data.file",
     "is for data.kind = \"text\"; data.kind = \"idx\" reads data.images and data.labels"},
    {"bad/text_with_images.lua", 5, "data.images", "is for data.kind = \"idx\" (IDX image files)"},
    {"bad/vit_on_text.lua", 4, "model.kind",
     "\"vit\" does not read data.kind = \"text\" (model.kind = \"vit\" goes with data.kind = "
     "\"idx\", the others with \"text\" or \"tokens\")"},
    {"bad/vit_bad_patch.lua", 4, "model.patch",
     "5 does not divide model.rows (28) and model.cols (28)"},
    {"bad/vit_key_on_gpt.lua", 4, "model.pooling",
     "applies to model.kind = \"vit\" only (kind is \"gpt\")"},
    {"bad/zero_learners.lua", 4, "learners.count", "0 is out of range: must be in [1, 4096]"},
    {"bad/zero_window.lua", 4, "sync.window_chunks", "0 is out of range: must be in [1, 1024]"},
    {"bad/norm_ratio_below_one.lua", 4, "sync.max_norm_ratio",
     "0.5 would refuse pushes below the median norm: use 0 (off) or a number >= 1"},
    {"bad/two_budgets.lua", 4, "budget",
     "give exactly one of tokens, steps or seconds (got steps and seconds)"},
    {"bad/speed_count.lua", 6, "learners.speed", "has 3 entries but learners.count is 4"},
    {"bad/speed_below_one.lua", 4, "learners.speed[2]", "0.5 is out of range: must be at least 1"},
    {"bad/bad_enum.lua", 5, "outer.merge",
     "unknown value 'rdaa'; expected one of rda, average; did you mean 'rda'?"},
    {"bad/chaos_target.lua", 8, "chaos.events[2].target",
     "learner 4 does not exist (learners.count is 4; ids start at 0)"},
    {"bad/chaos_process_at_step.lua", 6, "chaos.events[1].at_step",
     "action 'pause' is fired by dd-chaos from outside the nodes, which does not see learner "
     "steps: give at_time (or at_fraction of a seconds budget)"},
    {"bad/chaos_knob_wrong_action.lua", 6, "chaos.events[1].ms",
     "applies only to action 'latency' (action is 'pause')"},
    {"bad/chaos_latency_no_ms.lua", 6, "chaos.events[1].action",
     "action 'latency' needs ms = the milliseconds added to each chunk"},
    {"bad/chaos_target_spec.lua", 7, "chaos.events[1].target",
     "'learner:7' does not exist (learners.count is 2; ids start at 0)"},
    {"bad/chaos_random_kinds.lua", 5, "chaos.random.kinds[2]",
     "'kill' is not a process or network action with a recovery time (kill_process, term, pause, "
     "slow_process, latency, bandwidth, reset, blackhole, partition, corrupt, slice, close_after)"},
    {"bad/chaos_random_gap_without_cluster.lua", 5, "chaos.random.min_gap_seconds",
     "applies only with chaos.random.cluster_mtbf_seconds > 0"},
    {"bad/chaos_broadcast_at_step.lua", 6, "chaos.events[1].at_step",
     "action 'drop_broadcast' acts in the syncer node, which does not see learner steps: give "
     "at_time"},
    {"bad/data_file_directory.lua", 3, "data.file",
     "'.' is a directory; name the training text file"},
    {"bad/restart_backoff.lua", 4, "restart.backoff_cap_seconds",
     "2 is smaller than restart.backoff_seconds (5)"},
    {"bad/grace_fixed.lua", 4, "sync.grace.fixed_seconds",
     "must be greater than 0 when sync.grace.mode is 'fixed'"},
    {"bad/duplicate_name.lua", 4, "name",
     "duplicate experiment name 'same' (first defined at "
     "@FILE@:3)"},
    {"bad/syntax_error.lua", 5, "", "'}' expected (to close '{' at line 2) near 'sync'"},
    {"bad/sandbox_io.lua", 2, "",
     "'io' is not available in experiment files: the sandbox allows no file, process or network "
     "access (name data files with data.file)"},
    {"bad/sandbox_os.lua", 2, "",
     "'os' is not available in experiment files: the sandbox allows no file, process or network "
     "access (name data files with data.file)"},
    {"bad/undefined_helper.lua", 4, "", "undefined variable 'fracton'; did you mean 'fraction'?"},
    {"bad/learners_devices.lua", 7, "learners.devices",
     "is not implemented: every learner runs on its backend's default device; remove the key "
     "(leave it {})"},
    {"bad/embedding_merge.lua", 4, "outer.embedding_merge",
     "'rda' is not implemented: embedding tensors are always merged by the token-weighted "
     "average; remove the key or set \"average\""},
    // JSON output (resolve, experiment.json) cannot hold it.
    {"bad/invalid_utf8.lua", 4, "description",
     "is not valid UTF-8 text: string \"caf\xEF\xBF\xBD au lait\""},
    // Scripts that the instruction limit cannot stop: the wall-clock limit does (1 s here).
    {"hang/hang_pattern.lua", 4, "", "the script did not finish within 1 s (--script-timeout)"},
    {"bad/hang_gsub.lua", 4, "", "the script did not finish within 1 s (--script-timeout)"},
    {"hang/hang_sort.lua", 4, "", "the script did not finish within 1 s (--script-timeout)"},
    {"hang/hang_finalizer.lua", 4, "", "the script did not finish within 1 s (--script-timeout)"},
    {"hang/hang_error_handler.lua", 3, "",
     "the script did not finish within 1 s (--script-timeout)"},
    {"bad/memory_bomb.lua", 3, "", "the script ran past its memory limit of 64 MiB"},
    {"bad/memory_rep.lua", 2, "", "the script ran past its memory limit of 64 MiB"},
};

/// The scripts that hang end after one second; the others get the default (a memory bomb under
/// ASan needs more than a second to reach 64 MiB).
bool is_hang(const std::string& file) {
  return std::filesystem::path(file).filename().string().rfind("hang_", 0) == 0;
}

/// The case's message with @FILE@ = `path` and @TRIED@ = where a relative data file is looked
/// for: next to `path`, the current directory, then `search_dirs` (each once, absolute).
std::string expected_message(const bad_case& c, const std::string& path,
                             const std::vector<std::string>& search_dirs = {}) {
  namespace fs = std::filesystem;
  std::string m = c.message;
  if (const auto at = m.find("@FILE@"); at != std::string::npos) m.replace(at, 6, path);
  if (const auto at = m.find("@TRIED@"); at != std::string::npos) {
    std::vector<fs::path> dirs = {fs::path(path).parent_path(), fs::current_path()};
    for (const auto& d : search_dirs) dirs.emplace_back(d);
    std::vector<std::string> tried;
    for (const auto& d : dirs) {
      const std::string p = fs::absolute(d / "no_such_file.txt").lexically_normal().string();
      if (std::find(tried.begin(), tried.end(), p) == tried.end()) tried.push_back(p);
    }
    std::string list;
    for (const auto& p : tried) list += (list.empty() ? "" : ", ") + p;
    m.replace(at, 7, list);
  }
  return m;
}

class ConfigBadFile : public ::testing::TestWithParam<bad_case> {};

TEST_P(ConfigBadFile, FailsWithItsExactError) {
  const bad_case& c = GetParam();
  const std::string path = test::repo_path(std::string("tests/config/") + c.file);
  load_options o = test::repo_options();
  // The hang_*.lua cases end after one second; the others get the default (a memory bomb
  // under ASan needs more than a second to reach 64 MiB).
  o.script_timeout = is_hang(c.file) ? 1.0 : 10.0;
  const load_result r = load_file(path, o);
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  EXPECT_TRUE(r.experiments.empty());
  const config_error& e = r.errors[0];
  EXPECT_EQ(e.file, path);
  EXPECT_EQ(e.line, c.line);
  EXPECT_EQ(e.key_path, c.key);
  EXPECT_EQ(e.message, expected_message(c, path, o.search_dirs));
}

TEST_P(ConfigBadFile, ResolveCommandExitsWithTwoAndNamesFileLineKey) {
  const bad_case& c = GetParam();
  const std::string path = test::repo_path(std::string("tests/config/") + c.file);
  std::ostringstream out, err;
  // --no-check-files keeps the data path out of the way except for the data-file case itself.
  std::vector<std::string> args{path, "--script-timeout", is_hang(c.file) ? "1" : "10"};
  if (std::string(c.key) != "data.file") args.push_back("--no-check-files");
  EXPECT_EQ(resolve_command(args, out, err), 2);
  EXPECT_TRUE(out.str().empty());
  std::string where = path + ":" + std::to_string(c.line) + ": ";
  if (*c.key != '\0') where += std::string(c.key) + ": ";
  EXPECT_EQ(err.str(), where + expected_message(c, path) + "\n");
}

std::string case_name(const ::testing::TestParamInfo<bad_case>& p) {
  const std::string f = std::filesystem::path(p.param.file).filename().string();
  return f.substr(0, f.find('.'));
}

INSTANTIATE_TEST_SUITE_P(Table, ConfigBadFile, ::testing::ValuesIn(k_bad), case_name);

TEST(ConfigBadFiles, TableCoversEveryBadFile) {
  std::size_t files = 0;
  for (const char* dir : {"tests/config/bad", "tests/config/hang"})
    for (const auto& e : std::filesystem::directory_iterator(test::repo_path(dir)))
      if (e.path().extension() == ".lua") ++files;
  EXPECT_EQ(files, std::size(k_bad));
}

TEST(ConfigBadFiles, FileWithoutExperimentIsRefused) {
  const load_result r = load_string("local x = 1\n", "empty.lua");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(),
            "empty.lua: the file defines no experiment: call experiment { data = { file = "
            "\"...\" }, ... }");
}

TEST(ConfigBadFiles, MissingFileIsRefused) {
  std::ostringstream out, err;
  EXPECT_EQ(resolve_command({"/nonexistent/exp.lua"}, out, err), 2);
  EXPECT_EQ(err.str(),
            "/nonexistent/exp.lua: cannot open the experiment file: No such file or "
            "directory\n");
}

TEST(ConfigBadFiles, ADirectoryIsNoExperimentFile) {
  std::ostringstream out, err;
  const std::string dir = test::repo_path("tests/config/bad");
  EXPECT_EQ(resolve_command({dir}, out, err), 2);
  EXPECT_EQ(err.str(), dir + ": is a directory, not an experiment file\n");
}

TEST(ConfigBadFiles, AFifoOrADeviceGetsItsOwnMessageAndIsNeverOpened) {
  const std::string fifo = ::testing::TempDir() + "dd_config_fifo_" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::ostringstream out, err;
  EXPECT_EQ(resolve_command({fifo}, out, err), 2);  // returns: no blocking read of the FIFO
  EXPECT_EQ(err.str(), fifo + ": is a FIFO, not an experiment file (a regular file)\n");
  ::unlink(fifo.c_str());
  std::ostringstream out2, err2;
  EXPECT_EQ(resolve_command({"/dev/null"}, out2, err2), 2);
  EXPECT_EQ(err2.str(),
            "/dev/null: is a character device, not an experiment file (a regular "
            "file)\n");
}

TEST(ConfigBadFiles, NonFiniteNumbersGivenWithSetAreNamedAsSuch) {
  for (const char* v : {"1e309", "-1e999", "nan", "inf", "0/0", "1/0"}) {
    load_options o;
    o.overrides = {std::string("inner.lr=") + v};
    const load_result r = load_string("experiment { data = { file = 'x.txt' } }", "e.lua", o);
    ASSERT_FALSE(r.errors.empty()) << v;
    EXPECT_EQ(r.errors[0].to_string(),
              std::string("--set inner.lr=") + v + ": inner.lr: '" + v + "' is not a finite number")
        << v;
  }
}

// An override whose text is not UTF-8 was described with
// json::dump(), which threw (dd-node resolve --set outer.lr=$'\xe9' aborted).
TEST(ConfigBadFiles, OverridesThatAreNotUtf8AreRefusedNotThrown) {
  load_options o;
  o.check_files = false;
  o.overrides = {"outer.lr=fractio\xe9(1/2)", "description=caf\xe9"};
  const load_result r = load_string("experiment { data = { file = 'x.txt' } }", "e.lua", o);
  test::expect_errors(r,
                      {"--set description=caf\xe9: description: is not valid UTF-8 text: string "
                       "\"caf\xEF\xBF\xBD\"",
                       "--set outer.lr=fractio\xe9(1/2): outer.lr: expected a number, got string "
                       "\"fractio\xEF\xBF\xBD(1/2)\""});
  std::ostringstream out, err;
  EXPECT_EQ(
      resolve_command(
          {test::repo_path("examples/shakespeare.lua"), "--set", "outer.lr=fractio\xe9"}, out, err),
      2);
}

TEST(ConfigBadFiles, UsageErrorsExitWithTwo) {
  std::ostringstream out, err;
  EXPECT_EQ(resolve_command({}, out, err), 2);
  EXPECT_EQ(resolve_command({"bad/a.lua", "--bogus"}, out, err), 2);
  EXPECT_EQ(resolve_command({"bad/a.lua", "b.lua"}, out, err), 2);
  std::ostringstream help;
  EXPECT_EQ(resolve_command({"--help"}, help, err), 0);
  EXPECT_NE(help.str().find("--set"), std::string::npos);
}

TEST(ConfigBadFiles, SeveralProblemsAreAllReported) {
  const std::string script = std::string("experiment {\n") + test::k_data +
                             ",\n learners = { count = 2 },\n sync = { min_quorum = 3,\n"
                             " wire = \"int3\" },\n}\n";
  const load_result r = load_string(script, "many.lua", test::repo_options());
  test::expect_errors(
      r, {"many.lua:4: sync.min_quorum: 3 exceeds learners.count (2)",
          "many.lua:5: sync.wire: unknown value 'int3'; expected one of fp32, bf16, int8, int4; "
          "did you mean 'int8'?"});
}

}  // namespace
}  // namespace dd::config
