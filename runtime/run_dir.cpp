// runtime/run_dir.cpp — see run_dir.hpp.
#include "runtime/run_dir.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "messages/checkpoint_file.hpp"
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

namespace {

// What the run's state depends on: the model and its fragment plan (the checkpoints' shapes
// and meaning), the outer optimizer (its momentum), the data and its split, the seed, the
// learner count (ids, shards, cursors) and where the checkpoints are.
const char* const kept_fields[] = {"/model", "/sync",           "/outer",         "/data",
                                   "/seed",  "/learners/count", "/checkpoint/dir"};

bool is_kept(const std::string& at) {
  return std::any_of(std::begin(kept_fields), std::end(kept_fields), [&](const char* k) {
    const size_t n = std::strlen(k);
    return at.compare(0, n, k) == 0 && (at.size() == n || at[n] == '/');
  });
}

std::string run_id_in(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "run_id");
  std::string id;
  in >> id;
  return id;
}

/// The JSON file `name` in `run_dir`: null when absent; throws std::runtime_error naming it
/// when it cannot be read or does not parse.
nlohmann::json read_json_or_null(const std::string& run_dir, const char* name) {
  const std::string path = (fs::path(run_dir) / name).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  std::string text;
  if (auto st = util::read_file(path, text, size_t{256} << 20); !st)
    throw std::runtime_error("its " + std::string(name) + " cannot be read (" + st.message + ")");
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error("its " + std::string(name) + " does not parse (" + e.what() + ")");
  }
}

/// "" or why `file`'s "run_id" (when it has one) is not `id`; `name` with its article.
std::string other_run(const nlohmann::json& file, const char* name, const std::string& id) {
  if (!file.is_object() || !file.contains("run_id") || !file["run_id"].is_string()) return "";
  const std::string theirs = file["run_id"].get<std::string>();
  if (theirs == id) return "";
  return fmt::format(
      "{} of run {}, not of this run {} (its run_id file): a file copied from "
      "another run directory",
      name, theirs, id);
}

/// Whether events.jsonl names a join, rejoin or merge (learners trained, owners merged).
bool events_show_training(const std::string& run_dir) {
  std::ifstream ev(fs::path(run_dir) / "events.jsonl");
  std::string line;
  while (std::getline(ev, line))
    for (const char* k : {"\"event\":\"join\"", "\"event\":\"rejoin\"", "\"event\":\"merge\""})
      if (line.find(k) != std::string::npos) return true;
  return false;
}

/// The owner checkpoints owner_<p>.ddck in `dir`, by fragment p.
std::map<int, fs::path> owner_checkpoints(const std::string& dir) {
  std::map<int, fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.size() <= 11 || name.compare(0, 6, "owner_") != 0 ||
        name.compare(name.size() - 5, 5, ".ddck") != 0)
      continue;
    const std::string digits = name.substr(6, name.size() - 11);
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out[std::stoi(digits)] = f.path();
  }
  return out;
}

}  // namespace

std::string state_digest(const nlohmann::json& experiment) {
  nlohmann::json kept = nlohmann::json::object();
  for (const char* k : kept_fields) {
    const nlohmann::json::json_pointer ptr(k);
    kept[k] = experiment.contains(ptr) ? experiment.at(ptr) : nlohmann::json(nullptr);
  }
  const std::string text = kept.dump();
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

std::string state_refusal(const std::string& run_dir, const nlohmann::json& experiment) {
  const std::string id = run_id_in(run_dir);
  if (id.empty()) return "no run_id file (nothing to resume)";
  std::string configured;
  if (experiment.contains("checkpoint") && experiment["checkpoint"].is_object())
    configured = experiment["checkpoint"].value("dir", "");
  const auto checkpoints = owner_checkpoints(checkpoint_dir_of(run_dir, configured));
  const bool trained = !checkpoints.empty() || events_show_training(run_dir);
  nlohmann::json exp_file, record;
  try {
    exp_file = read_json_or_null(run_dir, "experiment.json");
    record = read_json_or_null(run_dir, "monitor.json");
  } catch (const std::exception& e) {
    return e.what();
  }
  const char* remedy =
      ": resuming would restart every learner at step 0 and the budget from zero. Restore the "
      "file from a copy of this run, or start the run again with --overwrite";
  if (trained && exp_file.is_null())
    return std::string(
               "a run that trained (events.jsonl or owner checkpoints) but no "
               "experiment.json: what it was trained with cannot be checked") +
           remedy;
  if (trained && record.is_null())
    return std::string(
               "a run that trained (events.jsonl or owner checkpoints) but no "
               "monitor.json, the learners' steps, tokens and data positions") +
           remedy;
  if (auto why = other_run(exp_file, "an experiment.json", id); !why.empty()) return why;
  if (auto why = other_run(record, "a monitor.json", id); !why.empty()) return why;
  // The experiment's own differences first: they name each field with both values.
  if (auto why = experiment_change_on_resume(run_dir, experiment); !why.empty()) return why;
  const std::string digest = state_digest(experiment);
  for (const auto& [p, path] : checkpoints) {
    auto ck = load_checkpoint(path.string());
    if (!ck) continue;  // damaged: its owner refuses it or rebuilds (fragment_owner.hpp)
    if (!ck->run_id.empty() && ck->run_id != id)
      return fmt::format(
          "an owner checkpoint of run {}, not of this run {} (its run_id file): "
          "'{}', a file copied from another run directory (or a checkpoint.dir "
          "shared by two runs)",
          ck->run_id, id, path.string());
    if (ck->fragment_id != p)
      return fmt::format("an owner checkpoint '{}' of fragment {}, not {}", path.string(),
                         ck->fragment_id, p);
    if (!ck->experiment_digest.empty() && ck->experiment_digest != digest)
      return fmt::format(
          "an owner checkpoint '{}' written for another experiment (state digest "
          "{}, this experiment's {}: its model, sync, outer, data, seed, "
          "learners.count or checkpoint.dir differ)",
          path.string(), ck->experiment_digest, digest);
  }
  return "";
}

namespace {

/// The differences between <run_dir>/experiment.json and `experiment` at the JSON pointers
/// `wanted` accepts ("PATH: OLD in the run, NEW now", up to 6; `more` counts the rest), or an
/// error line in `error` when the file cannot be read or parsed. None when there is no file.
std::vector<std::string> experiment_differences(
    const std::string& run_dir, const nlohmann::json& experiment,
    const std::function<bool(const std::string&)>& wanted, size_t& more, std::string& error) {
  const std::string path = (fs::path(run_dir) / "experiment.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  std::string text;
  if (auto st = util::read_file(path, text, size_t{64} << 20); !st) {
    error = fmt::format("its experiment.json cannot be read ({})", st.message);
    return {};
  }
  nlohmann::json was;
  try {
    was = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    error = fmt::format("its experiment.json does not parse ({})", e.what());
    return {};
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
  more = 0;
  for (const auto& op : nlohmann::json::diff(was, now_json)) {
    const std::string at = op.value("path", "");
    if (!wanted(at)) continue;
    if (changed.size() == 6) {
      ++more;
      continue;
    }
    const nlohmann::json::json_pointer ptr(at);
    const std::string before = was.contains(ptr) ? was.at(ptr).dump() : "(none)";
    const std::string now = now_json.contains(ptr) ? now_json.at(ptr).dump() : "(none)";
    changed.push_back(fmt::format("{}: {} in the run, {} now", at, before, now));
  }
  return changed;
}

std::string joined(const std::vector<std::string>& changed, size_t more) {
  std::string out;
  for (size_t i = 0; i < changed.size(); ++i) out += (i == 0 ? "" : "; ") + changed[i];
  if (more > 0) out += fmt::format("; and {} more", more);
  return out;
}

}  // namespace

std::string experiment_change_on_resume(const std::string& run_dir,
                                        const nlohmann::json& experiment) {
  size_t more = 0;
  std::string error;
  const auto changed = experiment_differences(run_dir, experiment, is_kept, more, error);
  if (!error.empty()) return error;
  if (changed.empty()) return "";
  const std::string path = (fs::path(run_dir) / "experiment.json").string();
  return "an experiment that differs from this one: " + joined(changed, more) +
         ". Resume with the same experiment file and --set flags as the run's first part (its "
         "resolved experiment is in " +
         path + "); model, sync, outer, data, seed, learners.count and checkpoint.dir must stay";
}

std::string experiment_drift_on_resume(const std::string& run_dir,
                                       const nlohmann::json& experiment) {
  size_t more = 0;
  std::string error;
  const auto changed = experiment_differences(
      run_dir, experiment,
      // run_id is the run's identity, written beside the resolved experiment (and checked by
      // state_refusal), not a setting: the experiment given to a resume never has it.
      [](const std::string& at) { return !is_kept(at) && at != "/run_dir" && at != "/run_id"; },
      more, error);
  if (!error.empty() || changed.empty()) return "";
  return "resuming with settings that differ from the run's: " + joined(changed, more) +
         " (allowed on a resume; the run's first part used " +
         (fs::path(run_dir) / "experiment.json").string() + ")";
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

std::string resuming_line(const resume_record& rec) {
  return fmt::format(
      "resuming run {} from part {} (after {:.0f} s of training, {} merges, {} tokens)", rec.run_id,
      rec.before.parts + 1, rec.seconds_before, rec.before.merges, rec.tokens_before);
}

void start_resumed_part(const std::string& run_dir) {
  std::error_code ec;
  for (const char* name :
       {"summary.json", "run_info.json", "summary.json.tmp", "run_info.json.tmp"})
    fs::remove(fs::path(run_dir) / name, ec);
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
    } else if (kind == "auth_refused") {
      b.auth_refused += 1;
    } else if (kind == "divergence") {
      b.divergences += 1;
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
      if (r.monitor_record.is_object()) {
        r.seconds_before = r.monitor_record.value("training_seconds", 0.0);
        auto ls = r.monitor_record.find("learners");
        if (ls != r.monitor_record.end() && ls->is_array())
          for (const auto& l : *ls)
            if (l.is_object())
              for (const char* key : {"tokens_before", "tokens_this_incarnation"}) {
                auto t = l.find(key);
                if (t != l.end() && t->is_number_unsigned()) r.tokens_before += t->get<uint64_t>();
              }
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("--resume: " + record.string() + " does not parse: " + e.what());
    }
    if (auto why = other_run(r.monitor_record, "a monitor.json", id); !why.empty())
      throw std::runtime_error("--resume: run directory '" + run_dir + "' holds " + why);
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
