// actors/services/run_report.cpp — see run_report.hpp.
#include "actors/services/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace dd::actors {

nlohmann::json make_summary(int learners, int fragments, const run_counters& c,
                            double final_val_loss, double wall_s, double training_s) {
  uint64_t tokens = 0;
  double compute = 0;
  for (const auto& [id, l] : c.learners) {
    tokens += l.tokens;
    compute += l.compute_s;
  }
  const int M = learners;
  const int P = fragments;
  const double goodput =
      training_s > 0 ? std::min(1.0, compute / (static_cast<double>(M) * training_s)) : 0.0;
  const double effective =
      tokens > 0 ? std::min(1.0, static_cast<double>(c.tokens_merged) /
                                     (static_cast<double>(P) * static_cast<double>(tokens)))
                 : 0.0;
  const double uptime = c.observed_s > 0 ? c.uptime_s / c.observed_s : 0.0;
  // No evaluation at all (a run stopped before one could run): null, not a sentinel number.
  return {
      {"final_val_loss",
       final_val_loss >= 0 ? nlohmann::json(final_val_loss) : nlohmann::json(nullptr)},
      {"tokens", tokens},
      {"wall_seconds", wall_s},
      {"goodput", goodput},
      {"effective_goodput", effective},
      {"uptime", uptime},
      {"merges", c.merges},
      {"mean_contributors_per_merge",
       c.merges > 0 ? static_cast<double>(c.contributors) / static_cast<double>(c.merges) : 0.0},
      {"learner_restarts", c.learner_restarts},
      {"bytes_pushed", c.bytes_pushed},
      {"bytes_broadcast", c.bytes_broadcast},
      {"chunks_refused", c.chunks_refused},
      {"envelopes_refused", c.envelopes_refused},
      {"pushes_implausible", c.pushes_implausible},
      {"frames_refused", c.frames_refused},
      {"auth_refused", c.auth_refused},
      {"divergences", c.divergences}};
}

run_counters whole_run(const run_counters& c, const earlier_parts& b) {
  run_counters all = c;
  all.merges += b.merges;
  all.contributors += b.contributors;
  all.tokens_merged += b.tokens_merged;
  all.pushes += b.pushes;
  all.pushes_rejected += b.pushes_rejected;
  all.bytes_pushed += b.bytes_pushed;
  all.bytes_broadcast += b.bytes_broadcast;
  all.chunks_refused += b.chunks_refused;
  all.envelopes_refused += b.envelopes_refused;
  all.pushes_implausible += b.pushes_implausible;
  all.frames_refused += b.frames_refused;
  all.auth_refused += b.auth_refused;
  all.divergences += b.divergences;
  all.learner_restarts += b.learner_restarts;
  all.owner_restarts += b.owner_restarts;
  return all;
}

run_result make_run_result(const run_facts& f, const run_counters& counters, double final_val_loss,
                           uint64_t digest, double wall_s, double training_s) {
  const double loss = final_val_loss;
  run_result r;
  r.finished = true;
  r.final_val_loss = loss;
  r.digest = digest;
  // A resumed run reports the whole run (whole_run): the learners' tokens and compute seconds
  // carry over the resume, and so do the training seconds goodput divides them by; the earlier
  // parts' counts come from their events.jsonl lines, their wall time is the sum of their spans.
  const run_counters all = f.resumed ? whole_run(counters, f.before) : counters;
  const double wall_before = f.resumed ? wall_seconds_before(f.before, f.seconds_before) : 0.0;
  r.summary = make_summary(f.learners, f.fragments, all, loss, wall_s + wall_before,
                           training_s + (f.resumed ? f.seconds_before : 0.0));
  // A classifier's (data.kind = "idx") last evaluation also scored accuracy.
  if (loss >= 0 && counters.last_val_accuracy >= 0)
    r.summary["final_val_accuracy"] = counters.last_val_accuracy;
  if (f.resumed) {
    r.summary["resumed"] = true;
    r.summary["seconds_before_resume"] = f.seconds_before;
    r.summary["wall_seconds_before_resume"] = wall_before;
    r.summary["parts"] = f.before.parts + 1;
  }
  if (!f.interrupted.empty()) {
    r.interrupted = true;
    r.interrupt_reason = f.interrupted;
    r.summary["interrupted"] = true;
    r.summary["interrupt_reason"] = f.interrupted;
  }
  // A run that trained nothing, or lost a learner for good, is a failure (dd-node run: exit 1).
  std::string why;
  if (r.summary.value("tokens", uint64_t{0}) == 0) why = "no learner trained a single token";
  // "learner 1 of 4 exhausted its restart budget and stayed down<consequence> (last crash: …)"
  auto given_up = [&why](const std::map<int32_t, std::string>& lost, const char* one,
                         const char* many, int of, const char* consequence) {
    if (lost.empty()) return;
    std::string ids, last;
    for (const auto& [id, crash] : lost) {
      ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      last = crash;
    }
    why += fmt::format(
        "{}{} {} of {} exhausted {} restart budget and stayed down{} (last "
        "crash: {}; see events.jsonl)",
        why.empty() ? "" : "; ", lost.size() == 1 ? one : many, ids, of,
        lost.size() == 1 ? "its" : "their", consequence, last);
  };
  given_up(counters.learners_given_up, "learner", "learners", f.learners, "");
  given_up(counters.owners_given_up, "fragment owner", "fragment owners", f.fragments,
           ", so training stopped and final_val_loss is the last periodic evaluation (null "
           "when none ran)");
  if (!counters.degraded.empty()) {
    nlohmann::json d = nlohmann::json::array();
    std::string what;
    for (const auto& [k, reason] : counters.degraded) {
      d.push_back({{"what", k}, {"reason", reason}});
      // A lost fragment value fails the run (unless allowed); a file that failed for a while
      // and recovered is reported only.
      if (k.rfind("fragment ", 0) == 0) what += (what.empty() ? "" : "; ") + k + ": " + reason;
    }
    r.summary["degraded"] = d;
    if (!what.empty() && !f.allow_degraded)
      why += (why.empty() ? "" : "; ") +
             ("degraded (" + what + "); set checkpoint.allow_degraded = true to accept it");
  }
  if (!f.write_failure.empty())
    why += (why.empty() ? "" : "; ") + ("a write failed, so the run stopped: " + f.write_failure);
  if (!why.empty()) {
    r.failed = true;
    r.failure_reason = why;
    r.summary["failed"] = true;
    r.summary["failure_reason"] = why;
  }
  r.info = {{"experiment", f.experiment},
            {"learners", f.learners},
            {"fragments", f.fragments},
            {"sync_interval", f.sync_interval},
            {"synchronous", f.synchronous},
            {"digest", fmt::format("{:016x}", digest)},
            {"owner_restarts", all.owner_restarts},
            {"pushes", all.pushes},
            {"pushes_rejected", all.pushes_rejected},
            {"pushes_dropped", counters.pushes_dropped},
            {"training_seconds", training_s},
            {"faults_fired", f.faults_fired}};
  if (r.interrupted) r.info["interrupted"] = f.interrupted;
  if (r.failed) r.info["failure_reason"] = r.failure_reason;
  return r;
}

double budget_done(const config::experiment& exp, uint64_t steps_per_learner,
                   const run_counters& now, double t_s) {
  double f = 0.0;
  switch (exp.budget.kind) {
    case config::budget_kind::seconds:
      f = exp.budget.seconds > 0 ? t_s / exp.budget.seconds : 0.0;
      break;
    case config::budget_kind::tokens: {
      uint64_t tokens = 0;
      for (const auto& [id, l] : now.learners) tokens += l.tokens;
      f = exp.budget.tokens > 0
              ? static_cast<double>(tokens) / static_cast<double>(exp.budget.tokens)
              : 0.0;
      break;
    }
    case config::budget_kind::steps: {
      double steps = 0;
      for (const auto& [id, l] : now.learners) steps += static_cast<double>(l.step);
      const double M = static_cast<double>(std::max(1, exp.learners.count));
      f = steps_per_learner > 0 ? steps / M / static_cast<double>(steps_per_learner) : 0.0;
      break;
    }
  }
  return std::clamp(f, 0.0, 1.0);
}

namespace {

/// "[  12.3s] L0 3.74st/s 3.773 L1 left ...": the run time and each learner's part. The step
/// rate is the one observed since `prev` (`dt_s` seconds earlier) when the learner stepped in
/// one window since: `prev` knows it with the same incarnation, it was live then and is now,
/// and its step did not go back (a paused learner shows 0, not the rate of its last steps).
/// Otherwise — the first line that knows it, or it (re)joined since `prev` — the window
/// restarts and the line shows the learner's own step-time EMA: a rejoin brings the steps it
/// took while away (a syncer outage, a lost link) all at once, which over `dt_s` read as
/// 900 st/s against a pace of 100–250. A learner that is down shows no rate ("L1 ✗ down 2.316",
/// its last loss): the rate of its last steps would read as if it still trained. A loss not
/// known (NaN: a resumed syncer's learner whose record holds none, before its first heartbeat)
/// shows "—", not a number.
std::string learners_part(const run_counters& now, double t_s, const run_counters* prev = nullptr,
                          double dt_s = 0.0) {
  std::string line = fmt::format("[{:7.1f}s]", t_s);
  for (const auto& [id, l] : now.learners) {
    const std::string loss = std::isfinite(l.loss) ? fmt::format("{:.3f}", l.loss) : "—";
    double rate = l.steps_per_s;
    if (prev != nullptr && dt_s > 0) {
      auto it = prev->learners.find(id);
      if (it != prev->learners.end() && it->second.step > 0 && l.step >= it->second.step &&
          it->second.incarnation == l.incarnation && it->second.alive && l.alive)
        rate = static_cast<double>(l.step - it->second.step) / dt_s;
    }
    if (l.finished)
      line += fmt::format(" L{} left", id);
    else if (!l.alive)
      line += fmt::format(" L{} ✗ down {}", id, loss);
    else
      line += fmt::format(" L{} {:.2f}st/s {}", id, rate, loss);
  }
  return line;
}

}  // namespace

std::string node_progress_line(const run_counters& now, double t_s) {
  return learners_part(now, t_s) + fmt::format(" | restarts {}", now.learner_restarts);
}

std::string progress_line(const run_counters& now, const run_counters& prev, double dt_s,
                          double t_s, double done, double since_t, double since_done,
                          int expected_learners, bool stopping) {
  std::string line = learners_part(now, t_s, &prev, dt_s);
  if (expected_learners > 0 && now.learners.size() < static_cast<size_t>(expected_learners))
    line += fmt::format(" {} of {} joined", now.learners.size(), expected_learners);
  if (now.last_val_loss >= 0)
    line += fmt::format(" | val {:.4f}", now.last_val_loss);
  else
    line += " | val -";
  const double rate = dt_s > 0 ? static_cast<double>(now.merges - prev.merges) / dt_s : 0.0;
  const double contrib =
      now.merges > 0 ? static_cast<double>(now.contributors) / static_cast<double>(now.merges)
                     : 0.0;
  double grace = 0;
  for (const auto& [p, g] : now.grace_s) grace = std::max(grace, g);
  line += fmt::format(" | merges {:.2f}/s | contrib {:.2f} | grace {:.3f}s | restarts {}", rate,
                      contrib, grace, now.learner_restarts + now.owner_restarts);
  // Every learner that is not down has left: what is left of the budget waits for the down ones
  // to come back, and an ETA from the pace so far would only grow.
  std::string down;
  bool stepping = false;
  for (const auto& [id, l] : now.learners) {
    if (l.finished) continue;
    if (l.alive)
      stepping = true;
    else
      down += fmt::format("{}{}", down.empty() ? "" : ", ", id);
  }
  if (done >= 0) {
    line += fmt::format(" | {:.0f}%", 100.0 * done);
    const double gained = done - since_done, took_s = t_s - since_t;
    if (stopping)
      line += " stopping";
    else if (!stepping && !down.empty() && done < 1.0)
      line += fmt::format(" waiting for learner {} (down) to rejoin", down);
    else if (gained > 0.005 && took_s > 0 && done < 1.0) {
      const auto left = static_cast<int64_t>(took_s * (1.0 - done) / gained + 0.5);
      line += left >= 60 ? fmt::format(" ETA {}m{:02d}s", left / 60, left % 60)
                         : fmt::format(" ETA {}s", left);
    }
  }
  return line;
}

namespace {

// 717184 → "717,184".
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string duration_text(double s) {
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min {:.0f} s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f} h {:.0f} min", std::floor(s / 3600), std::fmod(s, 3600) / 60);
}

}  // namespace

std::string summary_text(const std::string& experiment, const run_result& r,
                         const std::string& run_dir, const std::string& logs_dir) {
  const auto& s = r.summary;
  const auto num = [&](const char* k) {
    auto it = s.find(k);
    return it != s.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  const auto count = [&](const char* k) {
    auto it = s.find(k);
    return it != s.end() && it->is_number() ? it->get<uint64_t>() : uint64_t{0};
  };
  const double wall = num("wall_seconds");
  std::string out = "== " + experiment + " ";
  if (r.interrupted)
    out += "interrupted by " + r.interrupt_reason + " after " + duration_text(wall);
  else if (r.failed)
    out += "FAILED: " + r.failure_reason;
  else
    out += "done in " + duration_text(wall);
  out += '\n';
  const auto line = [&](const char* what, const std::string& text) {
    out += fmt::format("  {:<16}{}\n", what, text);
  };
  const auto loss = s.find("final_val_loss");
  std::string scored;          // which evaluation gave the loss, on how many windows or images
  std::string unit = "token";  // an image classifier (data.kind = "idx") scores images
  if (auto fe = s.find("final_eval"); fe != s.end() && fe->is_object()) {
    const bool images = fe->value("data_kind", std::string()) == "idx";
    if (images) unit = "image";
    if (fe->value("evaluation", std::string()) == "last periodic")
      scored = " (the last periodic evaluation: the final one did not run)";
    const char* counted = images ? "validation_samples" : "windows";
    if (auto w = fe->find(counted); w != fe->end() && w->is_number_integer())
      scored += fmt::format(" on {} {}{}", w->get<int64_t>(), images ? "images" : "windows",
                            fe->value("covers_split", false) ? ", the whole validation split" : "");
  }
  if (auto acc = s.find("final_val_accuracy"); acc != s.end() && acc->is_number())
    scored += fmt::format("; accuracy {:.4f}", acc->get<double>());
  line("final val loss", loss != s.end() && loss->is_number()
                             ? fmt::format("{:.4f} nats/{}{}", loss->get<double>(), unit, scored)
                             : std::string("none (no evaluation ran)"));
  const uint64_t tokens = count("tokens");
  line("tokens",
       grouped(tokens) + (wall > 0 ? fmt::format(" ({:.0f} per second)", tokens / wall) : ""));
  line("wall time", duration_text(wall));
  line("goodput", fmt::format("{:.3f} (effective {:.3f}), uptime {:.3f}", num("goodput"),
                              num("effective_goodput"), num("uptime")));
  line("merges", fmt::format("{} ({:.2f} contributors per merge)", grouped(count("merges")),
                             num("mean_contributors_per_merge")));
  const uint64_t owner_restarts = r.info.is_object() && r.info.contains("owner_restarts") &&
                                          r.info["owner_restarts"].is_number()
                                      ? r.info["owner_restarts"].get<uint64_t>()
                                      : 0;
  line("restarts", fmt::format("{} learner, {} owner", count("learner_restarts"), owner_restarts));
  std::string refused = fmt::format("{} chunks, {} envelopes, {} frames", count("chunks_refused"),
                                    count("envelopes_refused"), count("frames_refused"));
  if (count("pushes_implausible") > 0)
    refused += fmt::format(", {} implausible pushes", count("pushes_implausible"));
  if (count("auth_refused") > 0)
    refused +=
        fmt::format(", {} peers without the join token or certificate", count("auth_refused"));
  if (count("divergences") > 0)
    refused += fmt::format(", {} divergences (held values refetched)", count("divergences"));
  line("refused", refused);
  if (auto d = s.find("degraded"); d != s.end() && d->is_object() && !d->empty()) {
    std::string what;
    for (const auto& [k, v] : d->items()) what += (what.empty() ? "" : ", ") + k;
    line("degraded", what);
  }
  const std::string dir = run_dir.empty() ? std::string(".") : run_dir;
  if (auto m = s.find("model_file"); m != s.end() && m->is_string())
    line("model", dir + "/" + m->get<std::string>());
  line("summary", dir + "/summary.json, events " + dir + "/events.jsonl");
  line("figures", "dd-node plot " + dir + "  (writes " + dir + "/figures/)");
  if (!logs_dir.empty()) line("logs", logs_dir);
  return out;
}

run_result make_run_result(const run_facts& f, const run_log& log, double final_val_loss,
                           uint64_t digest, double wall_s, double training_s) {
  return make_run_result(f, log.snapshot(), final_val_loss, digest, wall_s, training_s);
}

run_progress::run_progress(const run_log& log, progress_facts facts, double t_s)
    : f_(std::move(facts)), prev_(log.snapshot()), prev_t_(t_s) {}

std::string run_progress::line(const run_log& log, double t_s, bool stopping) {
  auto snap = log.snapshot();
  const double spent = budget_done(*f_.exp, f_.steps_per_learner, snap, t_s + f_.seconds_before);
  // A resumed run's ETA is of this part's pace: from its first line on (its share spent then
  // counted out), not this part's seconds set against the whole run's share.
  if (f_.resumed && eta_from_t_ < 0) {
    eta_from_t_ = t_s;
    eta_from_done_ = spent;
  }
  // Restarts count the earlier parts too, as summary.json does.
  run_counters shown = snap;
  shown.learner_restarts += f_.before.learner_restarts;
  shown.owner_restarts += f_.before.owner_restarts;
  std::string out =
      progress_line(shown, prev_, t_s - prev_t_, t_s, spent, std::max(0.0, eta_from_t_),
                    eta_from_done_, f_.expected_learners, stopping);
  prev_ = std::move(snap);
  prev_t_ = t_s;
  return out;
}

std::string node_progress(const run_log& log, double t_s, const std::string& suffix,
                          const std::string& suffix_if_finished) {
  const auto snap = log.snapshot();
  bool any_finished = false;
  for (const auto& [id, l] : snap.learners) any_finished = any_finished || l.finished;
  return node_progress_line(snap, t_s) + (any_finished ? suffix_if_finished : suffix);
}

nlohmann::json learner_steps(const run_log& log) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [id, l] : log.snapshot().learners) out[std::to_string(id)] = l.step;
  return out;
}

run_counters reported_counters(const run_log& log) { return log.snapshot(); }

}  // namespace dd::actors
