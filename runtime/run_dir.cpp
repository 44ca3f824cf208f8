// runtime/run_dir.cpp — see run_dir.hpp.
#include "runtime/run_dir.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

std::string why_not_resumable(const std::string& run_dir) {
  switch (inspect_run_dir(run_dir)) {
    case run_dir_state::unfinished: return "";
    case run_dir_state::empty: return "no run to resume";
    case run_dir_state::finished: break;
  }
  const std::string path = (fs::path(run_dir) / "summary.json").string();
  std::string text;
  if (auto st = util::read_file(path, text, size_t{64} << 20); !st)
    return "an unreadable summary.json (" + st.message + ")";
  try {
    if (nlohmann::json::parse(text).value("interrupted", false)) return "";
  } catch (const std::exception& e) {
    return "an unreadable summary.json (" + std::string(e.what()) + ")";
  }
  return "a finished run (summary.json without \"interrupted\")";
}

std::string experiment_change_on_resume(const std::string& run_dir,
                                        const nlohmann::json& experiment) {
  const std::string path = (fs::path(run_dir) / "experiment.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  std::string text;
  if (auto st = util::read_file(path, text, size_t{64} << 20); !st)
    return fmt::format("its experiment.json cannot be read ({})", st.message);
  nlohmann::json was;
  try {
    was = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return fmt::format("its experiment.json does not parse ({})", e.what());
  }
  // A checkpoint directory inside the run directory is compared relative to it: a run directory
  // copied or moved elsewhere (its experiment.json names the old place) resumes.
  const auto relative_checkpoints = [](nlohmann::json j) {
    if (!j.is_object() || !j.contains("checkpoint") || !j["checkpoint"].is_object()) return j;
    auto& ck = j["checkpoint"]["dir"];
    if (!ck.is_string() || !j.contains("run_dir") || !j["run_dir"].is_string()) return j;
    const auto rel =
        fs::path(ck.get<std::string>())
            .lexically_normal()
            .lexically_relative(fs::path(j["run_dir"].get<std::string>()).lexically_normal());
    if (!rel.empty() && *rel.begin() != "..") ck = "<run_dir>/" + rel.generic_string();
    return j;
  };
  was = relative_checkpoints(std::move(was));
  const nlohmann::json now_json = relative_checkpoints(experiment);
  std::vector<std::string> changed;
  size_t more = 0;
  for (const auto& op : nlohmann::json::diff(was, now_json)) {
    const std::string at = op.value("path", "");
    // What the run's state depends on: the model and its fragment plan (the checkpoints' shapes
    // and meaning), the outer optimizer (its momentum), the data and its split, the seed, the
    // learner count (ids, shards, cursors) and where the checkpoints are.
    static const char* const kept[] = {"/model", "/sync",           "/outer",         "/data",
                                       "/seed",  "/learners/count", "/checkpoint/dir"};
    const bool matters = std::any_of(std::begin(kept), std::end(kept), [&](const char* k) {
      const size_t n = std::strlen(k);
      return at.compare(0, n, k) == 0 && (at.size() == n || at[n] == '/');
    });
    if (!matters) continue;
    if (changed.size() == 6) {
      ++more;
      continue;
    }
    const nlohmann::json::json_pointer ptr(at);
    const std::string before = was.contains(ptr) ? was.at(ptr).dump() : "(none)";
    const std::string now = now_json.contains(ptr) ? now_json.at(ptr).dump() : "(none)";
    changed.push_back(fmt::format("{}: {} in the run, {} now", at, before, now));
  }
  if (changed.empty()) return "";
  std::string out = "an experiment that differs from this one: ";
  for (size_t i = 0; i < changed.size(); ++i) out += (i == 0 ? "" : "; ") + changed[i];
  if (more > 0) out += fmt::format("; and {} more", more);
  return out +
         ". Resume with the same experiment file and --set flags as the run's first part (its "
         "resolved experiment is in " +
         path + "); model, sync, outer, data, seed, learners.count and checkpoint.dir must stay";
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

earlier_parts count_earlier_parts(const std::string& events_path) {
  earlier_parts b;
  std::ifstream ev(events_path);
  std::string line;
  double part_start = 0.0, part_last = 0.0;
  bool in_part = false, listening = false;
  uint64_t respawned = 0, rejoined = 0;  // learner restarts of the current part, both ways
  auto end_part = [&] {
    if (in_part) b.wall_s += std::max(0.0, part_last - part_start);
    b.learner_restarts += listening ? rejoined : respawned;
    respawned = rejoined = 0;
    listening = false;
  };
  auto u64 = [](const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t{0};
  };
  while (std::getline(ev, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event") || !j["event"].is_string())
      continue;
    const std::string kind = j["event"].get<std::string>();
    const double t = j.contains("t") && j["t"].is_number() ? j["t"].get<double>() : part_last;
    if (kind == "start" || kind == "resume") {
      end_part();
      b.parts += 1;
      in_part = true;
      part_start = part_last = t;
      continue;
    }
    part_last = std::max(part_last, t);
    if (kind == "listening") listening = true;  // a syncer node: its learners are processes
    if (kind == "merge") {
      b.merges += 1;
      if (j.contains("contributors") && j["contributors"].is_array())
        for (const auto& c : j["contributors"]) {
          b.contributors += 1;
          b.tokens_merged += u64(c, "tokens");
        }
    } else if (kind == "push") {
      b.pushes += 1;
      b.bytes_pushed += u64(j, "bytes");
      if (j.value("accepted", true) == false) b.pushes_rejected += 1;
      if (j.value("reason", std::string()) == "implausible") b.pushes_implausible += 1;
    } else if (kind == "broadcast") {
      b.bytes_broadcast += u64(j, "bytes");
    } else if (kind == "chunk_refused") {
      b.chunks_refused += 1;
    } else if (kind == "envelope_refused") {
      b.envelopes_refused += 1;
    } else if (kind == "frame_refused") {
      b.frames_refused += 1;
    } else if (kind == "respawn") {
      if (j.value("kind", std::string()) == "owner")
        b.owner_restarts += 1;
      else
        respawned += 1;
    } else if (kind == "rejoin" && j.value("live", true) == false) {
      rejoined += 1;
    }
  }
  end_part();
  return b;
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
  r.before = count_earlier_parts((fs::path(run_dir) / "events.jsonl").string());
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
