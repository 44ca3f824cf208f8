// runtime/run_dir.cpp — see run_dir.hpp.
#include "runtime/run_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "util/files.hpp"

namespace dd {

namespace fs = std::filesystem;

run_dir_state inspect_run_dir(const std::string& run_dir) {
  std::error_code ec;
  const fs::path d(run_dir);
  if (fs::exists(d / "summary.json", ec)) return run_dir_state::finished;
  if (fs::exists(d / "events.jsonl", ec) || fs::exists(d / "monitor.json", ec))
    return run_dir_state::unfinished;
  return run_dir_state::empty;
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

std::string checkpoint_dir_of(const std::string& run_dir, const std::string& configured) {
  return configured.empty() ? (fs::path(run_dir) / "checkpoints").string() : configured;
}

std::vector<std::string> clear_earlier_run(const std::string& run_dir,
                                           const std::string& checkpoint_dir, int fragments) {
  std::vector<std::string> replaced;
  std::error_code ec;
  fs::remove(fs::path(run_dir) / "monitor.json", ec);
  fs::remove(fs::path(run_dir) / "monitor.json.tmp", ec);
  for (const char* name :
       {"summary.json", "run_info.json", "events.jsonl", "experiment.json", "model.safetensors"})
    if (fs::exists(fs::path(run_dir) / name, ec)) replaced.emplace_back(name);
  fs::remove(fs::path(run_dir) / "learner_loss.csv", ec);
  fs::remove(fs::path(run_dir) / "model.safetensors", ec);  // runtime/model_file.hpp
  for (const char* name :
       {"summary.json", "run_info.json", "summary.json.tmp", "run_info.json.tmp"})
    fs::remove(fs::path(run_dir) / name, ec);
  int removed = 0;
  for (int p = 0; p < fragments; ++p)
    if (fs::remove(fs::path(checkpoint_dir) / fmt::format("owner_{}.ddck", p), ec)) ++removed;
  if (removed > 0)
    replaced.push_back(fmt::format("{} owner checkpoint{}", removed, removed == 1 ? "" : "s"));
  return replaced;
}

std::vector<std::string> clear_cluster_files(const std::string& run_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const char* name : {"nodes.json", "chaos.jsonl", "chaos_report.json", "proxy-ports.json"})
    if (fs::remove(fs::path(run_dir) / name, ec)) removed.emplace_back(name);
  fs::remove(fs::path(run_dir) / "nodes.json.tmp", ec);
  for (const char* name : {"nodes", "logs"})
    if (fs::is_directory(fs::path(run_dir) / name, ec) &&
        fs::remove_all(fs::path(run_dir) / name, ec) > 0)
      removed.push_back(std::string(name) + "/");
  return removed;
}

resume_record read_resume_record(const std::string& run_dir, const std::string& run_id) {
  resume_record r;
  std::ifstream in(fs::path(run_dir) / "run_id");
  std::string id;
  if (!(in >> id) || id.empty())
    throw std::runtime_error("--resume: run directory '" + run_dir +
                             "' holds no run_id file (nothing to resume)");
  if (!run_id.empty() && run_id != id)
    throw std::runtime_error("--resume: run directory '" + run_dir + "' holds run " + id +
                             ", not " + run_id);
  r.run_id = id;
  // The highest version of each fragment the earlier part logged.
  {
    std::ifstream ev(fs::path(run_dir) / "events.jsonl");
    std::string line;
    while (std::getline(ev, line)) {
      if (line.find("\"version\"") == std::string::npos ||
          line.find("\"fragment\"") == std::string::npos)
        continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("fragment") || !j.contains("version") ||
          !j["fragment"].is_number_integer() || !j["version"].is_number_unsigned())
        continue;
      auto& v = r.versions[j["fragment"].get<int32_t>()];
      v = std::max(v, j["version"].get<uint64_t>());
    }
  }
  const auto record = fs::path(run_dir) / "monitor.json";
  if (fs::exists(record)) {
    std::ifstream rin(record);
    try {
      r.monitor_record = nlohmann::json::parse(rin);
      if (r.monitor_record.is_object())
        r.seconds_before = r.monitor_record.value("training_seconds", 0.0);
    } catch (const std::exception& e) {
      throw std::runtime_error("--resume: " + record.string() + " does not parse: " + e.what());
    }
  }
  return r;
}

void write_run_id(const std::string& run_dir, const std::string& run_id) {
  std::ofstream(fs::path(run_dir) / "run_id") << run_id << '\n';
}

void write_file_or_throw(const std::string& path, const std::string& text) {
  if (auto st = util::write_file_atomic(path, text); !st) throw std::runtime_error(st.message);
}

void write_result_files(const std::string& run_dir, const nlohmann::json& summary,
                        const nlohmann::json& info) {
  write_file_or_throw((fs::path(run_dir) / "summary.json").string(), summary.dump(2) + "\n");
  write_file_or_throw((fs::path(run_dir) / "run_info.json").string(), info.dump(2) + "\n");
}

}  // namespace dd
