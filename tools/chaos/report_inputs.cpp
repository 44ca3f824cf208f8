// tools/chaos/report_inputs.cpp — see report_inputs.hpp.
#include "tools/chaos/report_inputs.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tools/chaos/common.hpp"

namespace dd::chaos::report_detail {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Reads JSON lines; a line that does not parse (e.g. cut by a kill) is counted, not fatal.
std::vector<json> read_jsonl(const fs::path& p, size_t* bad) {
  std::vector<json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      auto j = json::parse(line);
      if (j.is_object()) {
        out.push_back(std::move(j));
        continue;
      }
    } catch (const json::exception&) {}
    ++*bad;
  }
  return out;
}

std::string input_note(size_t n, size_t bad, const char* what) {
  std::string s = fmt::format("read ({} {})", n, what);
  if (bad) s += fmt::format(", {} malformed line{} skipped", bad, bad == 1 ? "" : "s");
  return s;
}

std::optional<json> read_json_file(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  try {
    return json::parse(read_file(p.string()));
  } catch (const json::exception& e) {
    throw chaos_error(fmt::format("{}: not JSON: {}", p.string(), e.what()));
  }
}

int learner_of_actor(const std::string& a) {
  if (a.rfind("learner:", 0) != 0) return -1;
  try {
    return std::stoi(a.substr(8));
  } catch (const std::exception&) {
    return -1;
  }
}

/// Empty when `dir` is a directory holding at least one of the files every run writes; else why
/// it is not a run directory.
std::string not_a_run_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "is not a directory";
  for (const char* f : {"events.jsonl", "nodes.json", "summary.json", "learner_loss.csv",
                        "chaos.jsonl", "monitor.json", "experiment.json"})
    if (fs::exists(dir / f, ec)) return {};
  return "holds none of a run's files (events.jsonl, nodes.json, summary.json, learner_loss.csv, "
         "chaos.jsonl, monitor.json, experiment.json)";
}

}  // namespace

report_inputs read_report_inputs(const report_options& o) {
  const fs::path dir(o.run_dir);
  std::error_code ec;
  if (const auto why = not_a_run_dir(dir); !why.empty())
    throw chaos_error(fmt::format("report: '{}' is not a run directory: it {}", o.run_dir, why));
  report_inputs in;
  json& inputs = in.notes;
  auto& evs = in.events;
  bool& have_syncer_events = in.have_syncer_events;
  auto& hosted = in.hosted;
  auto& faults = in.faults;

  // ---- events: the syncer's and every learner node's forwarded file, ordered by wall time.
  {
    size_t bad = 0;
    const auto p = dir / "events.jsonl";
    if (fs::exists(p, ec)) {
      auto lines = read_jsonl(p, &bad);
      have_syncer_events = true;
      inputs["events.jsonl"] = input_note(lines.size(), bad, "events");
      for (auto& j : lines) evs.push_back({j.value("time", 0.0), "syncer", std::move(j)});
    } else {
      inputs["events.jsonl"] = "missing";
    }
    const auto nodes_dir = dir / "nodes";
    if (fs::is_directory(nodes_dir, ec)) {
      std::vector<fs::path> files;
      for (const auto& f : fs::directory_iterator(nodes_dir, ec)) {
        const std::string name = f.path().filename().string();
        const std::string suffix = ".events.jsonl";
        if (name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          files.push_back(f.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        size_t fbad = 0;
        std::string node = f.filename().string();
        node = node.substr(0, node.size() - std::string(".events.jsonl").size());
        auto lines = read_jsonl(f, &fbad);
        inputs["nodes/" + f.filename().string()] = input_note(lines.size(), fbad, "events");
        for (auto& j : lines) evs.push_back({j.value("time", 0.0), node, std::move(j)});
      }
    }
  }
  std::stable_sort(evs.begin(), evs.end(),
                   [](const event& a, const event& b) { return a.time < b.time; });
  in.run_start = evs.empty() ? 0.0 : evs.front().time;

  // ---- which learners each node process hosts: nodes.json, else node_join / node_start events.
  if (auto nf = read_json_file(dir / "nodes.json")) {
    inputs["nodes.json"] = "read";
    for (const auto& n : nf->value("nodes", json::array())) {
      const std::string name = n.value("name", "");
      for (const auto& a : n.value("actors", json::array()))
        if (a.is_string() && learner_of_actor(a.get<std::string>()) >= 0)
          hosted[name].insert(learner_of_actor(a.get<std::string>()));
    }
  } else {
    inputs["nodes.json"] = "missing";
  }
  for (const auto& e : evs)
    if ((e.kind() == "node_join" || e.kind() == "node_start") && e.j.contains("learners") &&
        e.j["learners"].is_array()) {
      const std::string name = e.j.value("node", e.node);
      for (const auto& id : e.j["learners"])
        if (id.is_number_integer()) hosted[name].insert(id.get<int>());
    }

  // ---- faults: the tape, plus faults the runtime injected itself ("fault" events).
  const fs::path tape = o.tape.empty() ? dir / "chaos.jsonl" : fs::path(o.tape);
  if (fs::exists(tape, ec)) {
    size_t bad = 0;
    auto lines = read_jsonl(tape, &bad);
    inputs["chaos.jsonl"] = input_note(lines.size(), bad, "records");
    for (const auto& r : lines) {
      const std::string kind = r.value("kind", "");
      if (kind.empty() || kind == "session" || kind == "heal" || kind == "revert") continue;
      fault f;
      f.source = r.value("source", "cli");
      f.kind = kind;
      f.target = r.value("target", "");
      f.at = r.value("t", 0.0);
      if (r.contains("duration") && r["duration"].is_number()) f.duration = r["duration"];
      f.result = r.value("result", "ok");
      for (const auto& n : r.value("targets", json::array()))
        if (n.is_string()) f.nodes.push_back(n.get<std::string>());
      // A fault refused on some of its targets acted only on the others: judged over those
      // ("partial"); one refused or failed everywhere was never injected (no times).
      if (f.result == "refused") {
        std::vector<std::string> applied;
        for (const auto& h : r.value("hits", json::array()))
          if (h.value("result", "") == "ok") {
            for (const char* key : {"target", "node", "link"})
              if (h.contains(key) && h[key].is_string()) {
                applied.push_back(h[key].get<std::string>());
                break;
              }
          }
        if (!applied.empty()) {
          f.result = "partial";
          f.nodes = applied;
        }
      }
      for (const auto& n : f.nodes) {
        if (n == "syncer") f.syncer = true;
        if (hosted.count(n)) f.learners.insert(hosted[n].begin(), hosted[n].end());
      }
      // A damaged owner checkpoint (disk corrupt/truncate owner:N) is judged on that fragment:
      // noticed when an owner reads the file, repaired when the owner serves again.
      if ((kind == "disk_corrupt" || kind == "disk_truncate") && f.target.rfind("owner:", 0) == 0 &&
          f.target.find(',') == std::string::npos) {
        try {
          f.fragment = std::stoi(f.target.substr(6));
          f.syncer = false;
        } catch (const std::exception&) {
          f.fragment = -1;
        }
      }
      faults.push_back(f);
    }
  } else {
    inputs["chaos.jsonl"] = "missing";
  }
  for (const auto& e : evs) {
    if (e.kind() != "fault" || e.node != "syncer") continue;
    // A `fault` event with a `source` is one hit of a live message fault (a broadcast dropped,
    // delayed, ...; one event per message), not a fault: the fault itself is the tape's record
    // (source "endpoint") or the schedule's own `fault` event with its `target`.
    if (e.j.contains("source")) continue;
    fault f;
    f.source = "in-process";
    f.kind = e.j.value("fault", "");
    const int target = e.j.value("target", -1);
    f.at = e.time;
    if (f.kind == "kill_owner") {
      f.fragment = target;
      f.target = fmt::format("owner:{}", target);
    } else {
      f.learners.insert(target);
      f.target = fmt::format("learner:{}", target);
    }
    faults.push_back(f);
  }
  std::stable_sort(faults.begin(), faults.end(),
                   [](const fault& a, const fault& b) { return a.at < b.at; });

  in.experiment = read_json_file(dir / "experiment.json");
  inputs["experiment.json"] = in.experiment ? "read" : "missing";

  // ---- heartbeat rows: time,learner,incarnation,step,...
  {
    std::ifstream csv(dir / "learner_loss.csv");
    in.have_heartbeats = static_cast<bool>(csv);
    if (!in.have_heartbeats) {
      inputs["learner_loss.csv"] = "missing";
    } else {
      std::string line;
      size_t rows = 0, bad = 0;
      std::getline(csv, line);  // header
      while (std::getline(csv, line)) {
        if (line.empty()) continue;
        const auto f = split(line, ',');
        try {
          if (f.size() < 4) throw std::invalid_argument(line);
          heartbeat_row r{std::stod(f[0]), std::stoll(f[2]), std::stoll(f[3])};
          if (f.size() > 5 && !f[5].empty()) r.loss = std::stod(f[5]);
          in.heartbeats[std::stoll(f[1])].push_back(r);
          ++rows;
        } catch (const std::exception&) {
          ++bad;
        }
      }
      in.heartbeat_rows = rows;
      inputs["learner_loss.csv"] = input_note(rows, bad, "heartbeats");
    }
  }

  // ---- summary, baseline.
  in.monitor_record = read_json_file(dir / "monitor.json");
  in.notes["monitor.json"] = in.monitor_record ? "read" : "missing";
  in.summary = read_json_file(dir / "summary.json");
  inputs["summary.json"] = in.summary ? "read" : "missing";
  if (!o.baseline_dir.empty()) {
    if (const auto why = not_a_run_dir(o.baseline_dir); !why.empty())
      throw chaos_error(
          fmt::format("--baseline: '{}' is not a run directory: it {}", o.baseline_dir, why));
    in.baseline_summary = read_json_file(fs::path(o.baseline_dir) / "summary.json");
    inputs["baseline summary.json"] = in.baseline_summary ? "read" : "missing";
    in.baseline_experiment = read_json_file(fs::path(o.baseline_dir) / "experiment.json");
    inputs["baseline experiment.json"] = in.baseline_experiment ? "read" : "missing";
  }
  return in;
}

}  // namespace dd::chaos::report_detail
