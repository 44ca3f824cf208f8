// actors/services/node_metrics.cpp — see node_metrics.hpp.
#include "actors/services/node_metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "actors/services/http_listener.hpp"
#include "actors/services/run_report.hpp"
#include "runtime/config/fault_kind.hpp"

namespace dd::actors {

namespace {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

constexpr size_t k_history = 2000;  // points kept per curve
constexpr size_t k_timeline = 500;  // timeline entries kept
constexpr double k_sample_s = 1.0;  // loss-curve sampling period
constexpr double k_rate_window_s = 10.0;

// Events that go on the /status timeline (restarts, faults, membership changes).
bool timeline_kind(const std::string& k) {
  static const char* kinds[] = {"failure",      "crash",     "respawn",         "give_up",
                                "join",         "rejoin",    "leave",           "fault",
                                "chaos_fault",  "drain",     "syncer_lost",     "syncer_back",
                                "degraded",     "node_join", "node_refused",    "join_refused",
                                "budget_spent", "stop",      "fragment_rebuilt"};
  for (const char* x : kinds)
    if (k == x) return true;
  return false;
}

template <class T>
T field(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

std::string id_text(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  if (it->is_string()) return it->get<std::string>();
  return "";
}

template <class V>
nlohmann::json contributors_json(const V& contributors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : contributors)
    out.push_back({{"learner", c.learner},
                   {"incarnation", c.incarnation},
                   {"tokens", c.tokens},
                   {"steps", c.steps},
                   {"weight", c.weight},
                   {"staleness", c.staleness}});
  return out;
}

template <class D>
void cap(D& d, size_t n) {
  while (d.size() > n) d.pop_front();
}

}  // namespace

node_metrics::node_metrics(node_metrics_options o) : o_(std::move(o)), started_unix_(unix_now()) {
  const std::vector<std::string> R = {"run"};
  const std::vector<std::string> RL = {"run", "learner"};
  const std::vector<std::string> RF = {"run", "fragment"};
  std::vector<double> contrib;
  for (int i = 1; i <= std::max(1, o_.learners); ++i) contrib.push_back(i);
  if (o_.learners <= 0) contrib = {1, 2, 4, 8, 16, 32, 64};
  // Fed by the node's events and steps.
  step_seconds_ = &reg_.histogram("dd_learner_step_seconds",
                                  "Wall time of one inner step of a learner hosted by this node.",
                                  RL, exponential_buckets(0.001, 2, 16));
  pushes_ = &reg_.counter("dd_learner_pushes_total",
                          "Pushes of a learner received by this node's fragment owners, by result.",
                          {"run", "learner", "result"});
  merges_ = &reg_.counter("dd_fragment_merges_total", "Merges of a fragment (outer steps).", RF);
  merge_contributors_ =
      &reg_.histogram("dd_fragment_merge_contributors",
                      "Contributors (learner pushes) per merge of a fragment.", RF, contrib);
  quorum_seconds_ = &reg_.histogram(
      "dd_fragment_quorum_wait_seconds",
      "Time from a round's first pending push to its merge (time to quorum plus grace).", RF,
      exponential_buckets(0.01, 2, 14));
  merge_seconds_ =
      &reg_.histogram("dd_fragment_merge_seconds",
                      "Merge, outer step and broadcast encoding time of one merge of a fragment.",
                      RF, exponential_buckets(0.0005, 2, 16));
  staleness_ = &reg_.histogram(
      "dd_fragment_contribution_staleness_versions",
      "Versions between a merged contribution's base and the fragment's version it merged into.",
      RF, {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32});
  refusals_ =
      &reg_.counter("dd_fragment_refusals_total", "Pushes a fragment owner refused, by reason.",
                    {"run", "fragment", "reason"});
  broadcast_bytes_ = &reg_.counter("dd_fragment_broadcast_bytes_total",
                                   "Bytes of merged values a fragment owner sent to learners.", RF);
  push_bytes_ = &reg_.counter("dd_fragment_push_bytes_total",
                              "Bytes of pushes a fragment owner received.", RF);
  evaluations_ =
      &reg_.counter("dd_run_evaluations_total", "Validation evaluations of the global model.", R);
  restarts_ =
      &reg_.counter("dd_node_restarts_total",
                    "Respawns of a role by this node's supervisors, by kind.", {"run", "kind"});
  faults_ = &reg_.counter("dd_node_faults_total",
                          "Injected faults (chaos schedule or dd-chaos) that acted in this node.",
                          {"run", "fault"});
  reconnects_ = &reg_.counter("dd_node_reconnects_total",
                              "Links to the syncer re-established after a loss (learner node) or "
                              "learners rejoining (syncer).",
                              R);
  divergences_ = &reg_.counter(
      "dd_divergences_total",
      "Learners found holding a global value that differs from the owner's for its version.", R);
  if (o_.kind == "syncer" || o_.kind == "run") divergences_->inc({o_.run_id}, 0);
  // A node's own event counters are there from its start, at 0 (a series that appears only with
  // its first event cannot be told from a node that does not export it): reconnects; respawns
  // of the roles its supervisors run; the in-process faults, the ones that act inside a node.
  if (o_.kind != "launch") {
    reconnects_->inc({o_.run_id}, 0);
    if (o_.kind == "syncer" || o_.kind == "run") restarts_->inc({o_.run_id, "owner"}, 0);
    if (o_.kind == "learner" || o_.kind == "run") restarts_->inc({o_.run_id, "learner"}, 0);
    for (const auto k : config::all_fault_kinds())
      if (config::fault_layer_of(k) == config::fault_layer::in_process)
        faults_->inc({o_.run_id, config::to_string(k)}, 0);
  }
  node_refusals_ = &reg_.counter(
      "dd_node_refused_total",
      "Messages and connections refused: damaged chunks, foreign envelopes, oversized frames, "
      "join token proofs.",
      {"run", "what"});
  // From the snapshot at each scrape.
  learner_pushes_sent_ = &reg_.counter(
      "dd_learner_pushes_sent_total",
      "Pushes (resends included) a learner hosted by this node sent to its owners.", RL);
  learner_steps_ = &reg_.counter("dd_learner_steps_total", "Inner steps a learner completed.", RL);
  learner_tokens_ = &reg_.counter("dd_learner_tokens_total",
                                  "Tokens a learner trained on, all incarnations.", RL);
  learner_loss_ =
      &reg_.gauge("dd_learner_loss", "Last training loss of a learner, nats/token.", RL);
  learner_up_ =
      &reg_.gauge("dd_learner_up", "1 while the learner is alive in the run, else 0.", RL);
  learner_stepping_ =
      &reg_.gauge("dd_learner_stepping", "1 while the learner is inside its step loop.", RL);
  learner_incarnation_ = &reg_.gauge("dd_learner_incarnation",
                                     "The learner's incarnation (grows at each restart).", RL);
  learner_restarts_ =
      &reg_.counter("dd_learner_restarts_total", "Restarts of a learner seen by the monitor.", RL);
  learner_lease_age_ = &reg_.gauge(
      "dd_learner_lease_age_seconds",
      "Seconds since the learner's last heartbeat (syncer) or step (learner node).", RL);
  learner_applied_ = &reg_.gauge(
      "dd_learner_applied_version",
      "Version of the global value of a fragment the learner holds (learner node: applied; "
      "syncer: its last push's base).",
      {"run", "learner", "fragment"});
  learner_applied_age_ = &reg_.gauge("dd_learner_applied_age_seconds",
                                     "Seconds since dd_learner_applied_version last changed.",
                                     {"run", "learner", "fragment"});
  monitor_learners_ = &reg_.gauge("dd_monitor_learners",
                                  "Learners by state: live, away (down, not finished), finished.",
                                  {"run", "state"});
  fragment_version_ = &reg_.gauge("dd_fragment_version", "Current version of a fragment.", RF);
  fragment_grace_ = &reg_.gauge("dd_fragment_grace_window_seconds",
                                "Grace window of a fragment's last merge round.", RF);
  fragment_quorum_ = &reg_.gauge(
      "dd_fragment_quorum_needed",
      "Contributors a fragment's last merge round needed (the quorum K resolved against the live "
      "learners).",
      RF);
  last_merge_contributors_ = &reg_.gauge("dd_fragment_last_merge_contributors",
                                         "Contributors of a fragment's last merge.", RF);
  last_merge_tokens_ = &reg_.gauge("dd_fragment_last_merge_tokens",
                                   "Token weight (Σ contributors' tokens) of the last merge.", RF);
  last_merge_weight_ = &reg_.gauge("dd_fragment_last_merge_weight",
                                   "A learner's merge weight in a fragment's last merge.",
                                   {"run", "fragment", "learner"});
  val_loss_ = &reg_.gauge("dd_run_validation_loss",
                          "Validation loss of the last evaluation, nats/token.", R);
  run_tokens_ = &reg_.counter(
      "dd_run_tokens_total",
      "Tokens trained by all learners over the whole run (every part of a resumed run), as "
      "summary.json.",
      R);
  run_merges_ = &reg_.counter(
      "dd_run_merges_total",
      "Merges of all fragments over the whole run (every part of a resumed run), as summary.json.",
      R);
  goodput_ = &reg_.gauge("dd_run_goodput_ratio",
                         "Learner time in inner steps / (M × training time up to the stop), over "
                         "the whole run, as summary.json.",
                         R);
  uptime_ratio_ = &reg_.gauge("dd_run_uptime_ratio",
                              "Time with a quorum of learners stepping / time observed.", R);
  uptime_seconds_ =
      &reg_.gauge("dd_run_uptime_seconds", "Seconds with a quorum of learners stepping.", R);
  link_bytes_ = &reg_.counter("dd_link_bytes_total",
                              "Bytes of pushes received and broadcasts sent by this node's owners.",
                              {"run", "direction"});
  degraded_ =
      &reg_.gauge("dd_node_degraded_items",
                  "Files or fragments the run lost or could not write and went on without.", R);
  writes_failing_ = &reg_.gauge(
      "dd_node_write_failing_seconds",
      "Seconds the longest-failing write of this node has been failing (0: writes are fine).", R);
  node_uptime_ = &reg_.gauge("dd_node_uptime_seconds", "Seconds since this node started.",
                             {"run", "node", "kind"});
  if (o_.tls_not_after_unix > 0)
    tls_expiry_ = &reg_.gauge("dd_tls_cert_expiry_seconds",
                              "Seconds until this node's TLS certificate expires (negative: "
                              "expired; replacing it is a node restart).",
                              {"run", "node"});
  node_start_ = &reg_.gauge("dd_node_start_time_seconds", "Unix time this node started.",
                            {"run", "node", "kind"});
  build_info_ = &reg_.gauge("dd_build_info", "1, labelled with the build's version and commit.",
                            {"run", "version", "commit"});
  build_info_->set({o_.run_id, o_.version, o_.commit}, 1);
  node_start_->set({o_.run_id, o_.node, o_.kind}, started_unix_);
}

node_metrics::~node_metrics() { attach(nullptr); }

std::string node_metrics::run() const {
  std::lock_guard<std::mutex> g(label_mutex_);
  return o_.run_id;
}

void node_metrics::set_run_id(const std::string& id) {
  {
    std::lock_guard<std::mutex> g(label_mutex_);
    if (o_.run_id == id) return;
    o_.run_id = id;
  }
  // The series set once at the start, relabelled (the others take the id at their next set).
  for (auto* f : {node_start_, build_info_, node_uptime_, writes_failing_}) f->clear();
  node_start_->set({id, o_.node, o_.kind}, started_unix_);
  build_info_->set({id, o_.version, o_.commit}, 1);
}

void node_metrics::attach(run_log* log) {
  if (auto* old = log_.exchange(log)) old->set_observer(nullptr);
  if (log != nullptr) log->set_observer(this);
}

void node_metrics::set_status_extra(std::function<nlohmann::json()> f) {
  std::lock_guard<std::mutex> g(mutex_);
  status_extra_ = std::move(f);
}

bool node_metrics::ready() const {
  if (ending_) return false;
  if (o_.kind == "syncer" || o_.kind == "launch") return serving_;
  run_log* log = log_.load();
  if (log == nullptr) return serving_;
  auto c = reported_counters(*log);
  for (const auto& [id, l] : c.learners)
    if (l.stepping) return true;
  return false;
}

const label_values& node_metrics::run_and(int32_t id) {
  std::lock_guard<std::mutex> g(label_mutex_);
  auto it = run_and_.find(id);
  if (it == run_and_.end()) it = run_and_.emplace(id, label_values{o_.run_id, L(id)}).first;
  return it->second;  // map nodes stay put; entries are never erased
}

void node_metrics::on_step(int32_t learner, double step_s) {
  step_seconds_->observe(run_and(learner), step_s);
}

void node_metrics::on_event(const nlohmann::json& line) {
  const std::string kind = field<std::string>(line, "event", "");
  const std::string run = this->run();
  const double t = field<double>(line, "t", 0.0);
  if (kind == "merge") {
    const int32_t f = field<int32_t>(line, "fragment", -1);
    const uint64_t version = field<uint64_t>(line, "version", 0);
    const label_values& RF = run_and(f);
    merges_->inc(RF);
    static const nlohmann::json none;
    auto ci = line.find("contributors");
    const auto& cs = ci != line.end() ? *ci : none;
    merge_contributors_->observe(RF, cs.is_array() ? static_cast<double>(cs.size()) : 0);
    quorum_seconds_->observe(RF, field<double>(line, "round_s", 0.0));
    merge_seconds_->observe(RF, field<double>(line, "sync_s", 0.0));
    merge_record m;
    m.t = t;
    m.version = version;
    m.grace_s = field<double>(line, "grace_s", 0.0);
    m.round_s = field<double>(line, "round_s", 0.0);
    m.sync_s = field<double>(line, "sync_s", 0.0);
    m.live = field<int>(line, "live", 0);
    m.needed = field<int>(line, "needed", 0);
    m.reason = field<std::string>(line, "reason", "");
    if (cs.is_array())
      for (const auto& c : cs) {
        const uint64_t base = field<uint64_t>(c, "base_version", 0);
        // The merged value is `version`; a contribution based on version-1 is fresh (0).
        const double stale = version > base + 1 ? static_cast<double>(version - base - 1) : 0.0;
        staleness_->observe(RF, stale);
        contribution k;
        k.learner = field<int32_t>(c, "learner", -1);
        k.incarnation = field<uint64_t>(c, "incarnation", 0);
        k.tokens = field<uint64_t>(c, "tokens", 0);
        k.steps = field<uint64_t>(c, "steps", 0);
        k.weight = field<double>(c, "weight", 0.0);
        k.staleness = stale;
        m.tokens += k.tokens;
        m.contributors.push_back(k);
      }
    std::lock_guard<std::mutex> g(mutex_);
    last_merge_[f] = std::move(m);
  } else if (kind == "broadcast") {
    broadcast_bytes_->inc({run, id_text(line, "fragment")}, field<double>(line, "bytes", 0.0));
  } else if (kind == "push") {
    const std::string learner = id_text(line, "learner");
    const std::string F = id_text(line, "fragment");
    const bool ok = field<bool>(line, "accepted", false);
    pushes_->inc({run, learner, ok ? "accepted" : "refused"});
    push_bytes_->inc(run_and(field<int32_t>(line, "fragment", -1)),
                     field<double>(line, "bytes", 0.0));
    if (!ok) refusals_->inc({run, F, field<std::string>(line, "reason", "unknown")});
    const int32_t id = field<int32_t>(line, "learner", -1);
    std::lock_guard<std::mutex> g(mutex_);
    // The syncer's view of what a learner holds: its last push's base version.
    auto& b = pushed_base_[id][field<int32_t>(line, "fragment", -1)];
    const uint64_t base = field<uint64_t>(line, "base_version", 0);
    if (b.second <= 0 || b.first != base) b = {base, t};
    last_push_[id] = {{"t", t},
                      {"fragment", field<int32_t>(line, "fragment", -1)},
                      {"base_version", field<uint64_t>(line, "base_version", 0)},
                      {"accepted", ok},
                      {"reason", field<std::string>(line, "reason", "")}};
  } else if (kind == "eval") {
    evaluations_->inc({run});
    nlohmann::json p = {{"t", t},
                        {"val_loss", field<double>(line, "val_loss", 0.0)},
                        {"tokens", field<uint64_t>(line, "tokens", 0)}};
    if (line.contains("val_accuracy")) p["val_accuracy"] = line["val_accuracy"];
    std::lock_guard<std::mutex> g(mutex_);
    val_history_.push_back(std::move(p));
    cap(val_history_, k_history);
  } else if (kind == "respawn") {
    restarts_->inc({run, field<std::string>(line, "kind", "?")});
  } else if (kind == "fault" || kind == "chaos_fault") {
    std::string what = field<std::string>(line, "fault", "");
    if (what.empty()) what = field<std::string>(line, "kind", "");
    if (!what.empty()) faults_->inc({run, what});
  } else if (kind == "syncer_back" || kind == "rejoin") {
    reconnects_->inc({run});
  } else if (kind == "divergence") {
    divergences_->inc({run});
  } else if (kind == "start" || kind == "resume") {
    std::lock_guard<std::mutex> g(mutex_);
    start_t_ = t;
    stop_t_ = -1.0;
  } else if (kind == "stop") {
    std::lock_guard<std::mutex> g(mutex_);
    if (stop_t_ < 0) stop_t_ = t;
  }
  if (timeline_kind(kind)) {
    nlohmann::json e = line;
    e.erase("time");
    std::lock_guard<std::mutex> g(mutex_);
    timeline_.push_back(std::move(e));
    cap(timeline_, k_timeline);
  }
}

void node_metrics::sample() {
  run_log* log = log_.load();
  if (log == nullptr) return;
  const double now = log->now();
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (last_sample_t_ >= 0 && now - last_sample_t_ < k_sample_s) return;
    last_sample_t_ = now;
  }
  auto c = reported_counters(*log);
  std::lock_guard<std::mutex> g(mutex_);
  for (const auto& [id, l] : c.learners) {
    auto& h = loss_history_[id];
    if (!h.empty() && h.back().tokens == l.tokens) continue;  // nothing new
    if (!std::isfinite(l.loss)) continue;  // a restored learner's unknown loss is no point
    h.push_back({now, l.tokens, l.loss});
    cap(h, k_history);
  }
}

nlohmann::json node_metrics::run_figures(const run_counters& c, double now) {
  double start = 0, stop = -1;
  {
    std::lock_guard<std::mutex> g(mutex_);
    start = start_t_;
    stop = stop_t_;
  }
  // As the job's finalize computes summary.json: wall seconds from the part's start, training
  // seconds up to the stop, each plus the earlier parts'.
  const bool resumed = o_.resumed;
  const double wall = std::max(0.0, now - start) +
                      (resumed ? wall_seconds_before(o_.before, o_.seconds_before) : 0.0);
  const double training =
      std::max(0.0, (stop >= 0 ? stop : now) - start) + (resumed ? o_.seconds_before : 0.0);
  return make_summary(std::max(1, o_.learners), std::max(1, o_.fragments),
                      resumed ? whole_run(c, o_.before) : c, c.last_val_loss, wall, training);
}

void node_metrics::refresh(const run_counters& c, double now) {
  const std::string run = this->run();
  for (auto* f : {learner_loss_, learner_up_, learner_stepping_, learner_incarnation_,
                  learner_lease_age_, learner_applied_, learner_applied_age_, monitor_learners_,
                  fragment_version_, fragment_grace_, fragment_quorum_, last_merge_contributors_,
                  last_merge_tokens_, last_merge_weight_})
    f->clear();
  int live = 0, away = 0, finished = 0;
  std::map<int32_t, std::map<int32_t, std::pair<uint64_t, double>>> pushed_base;
  {
    std::lock_guard<std::mutex> g(mutex_);
    pushed_base = pushed_base_;
  }
  for (const auto& [id, l] : c.learners) {
    const std::string I = L(id);
    learner_steps_->set({run, I}, static_cast<double>(l.step));
    learner_tokens_->set({run, I}, static_cast<double>(l.tokens));
    learner_loss_->set({run, I}, l.loss);
    learner_up_->set({run, I}, l.alive ? 1 : 0);
    learner_stepping_->set({run, I}, l.stepping ? 1 : 0);
    learner_incarnation_->set({run, I}, static_cast<double>(l.incarnation));
    learner_restarts_->set({run, I}, static_cast<double>(l.restarts));
    if (l.last_report_s >= 0)
      learner_lease_age_->set({run, I}, std::max(0.0, now - l.last_report_s));
    for (const auto& [p, v] : l.applied) {
      learner_applied_->set({run, I, L(p)}, static_cast<double>(v));
      auto at = l.applied_at_s.find(p);
      if (at != l.applied_at_s.end())
        learner_applied_age_->set({run, I, L(p)}, std::max(0.0, now - at->second));
    }
    if (auto pb = pushed_base.find(id); l.applied.empty() && pb != pushed_base.end())
      for (const auto& [p, vt] : pb->second) {
        learner_applied_->set({run, I, L(p)}, static_cast<double>(vt.first));
        learner_applied_age_->set({run, I, L(p)}, std::max(0.0, now - vt.second));
      }
    if (l.finished)
      ++finished;
    else if (l.alive)
      ++live;
    else
      ++away;
  }
  if (o_.kind != "learner") {
    monitor_learners_->set({run, "live"}, live);
    monitor_learners_->set({run, "away"}, away);
    monitor_learners_->set({run, "finished"}, finished);
  }
  for (const auto& [p, v] : c.versions) fragment_version_->set({run, L(p)}, static_cast<double>(v));
  for (const auto& [p, g] : c.grace_s) fragment_grace_->set({run, L(p)}, g);
  {
    std::lock_guard<std::mutex> g(mutex_);
    for (const auto& [p, m] : last_merge_) {
      last_merge_contributors_->set({run, L(p)}, static_cast<double>(m.contributors.size()));
      fragment_quorum_->set({run, L(p)}, m.needed);
      last_merge_tokens_->set({run, L(p)}, static_cast<double>(m.tokens));
      for (const auto& ct : m.contributors)
        last_merge_weight_->set({run, L(p), L(ct.learner)}, ct.weight);
    }
  }
  if (o_.kind == "learner" || o_.kind == "run") {
    uint64_t sent = 0;
    for (const auto& [id, l] : c.learners) {
      learner_pushes_sent_->set(run_and(id), static_cast<double>(l.pushes_sent));
      sent += l.push_bytes_sent;
    }
    link_bytes_->set({run, "push_out"}, static_cast<double>(sent));
  }
  if (o_.kind == "learner") {
    // A learner node hosts no owner: the run's merges, bytes in and uptime are the syncer's.
    degraded_->set({run}, static_cast<double>(c.degraded.size()));
    node_refusals_->set({run, "chunk"}, static_cast<double>(c.chunks_refused));
    return;
  }
  if (c.last_val_loss >= 0) val_loss_->set({run}, c.last_val_loss);
  {
    const auto s = run_figures(c, now);
    run_tokens_->set({run}, static_cast<double>(s.value("tokens", uint64_t{0})));
    run_merges_->set({run}, static_cast<double>(s.value("merges", uint64_t{0})));
    goodput_->set({run}, s.value("goodput", 0.0));
    uptime_ratio_->set({run}, s.value("uptime", 0.0));
    uptime_seconds_->set({run}, c.uptime_s);
  }
  link_bytes_->set({run, "push_in"}, static_cast<double>(c.bytes_pushed));
  link_bytes_->set({run, "broadcast_out"}, static_cast<double>(c.bytes_broadcast));
  node_refusals_->set({run, "chunk"}, static_cast<double>(c.chunks_refused));
  node_refusals_->set({run, "envelope"}, static_cast<double>(c.envelopes_refused));
  node_refusals_->set({run, "frame"}, static_cast<double>(c.frames_refused));
  node_refusals_->set({run, "auth"}, static_cast<double>(c.auth_refused));
  degraded_->set({run}, static_cast<double>(c.degraded.size()));
}

std::string node_metrics::scrape() {
  const std::string run = this->run();
  if (run_log* log = log_.load()) {
    const double now = log->now();
    refresh(reported_counters(*log), now);
    writes_failing_->set({run}, log->failing_for_s());
  }
  node_uptime_->set({run, o_.node, o_.kind}, unix_now() - started_unix_);
  if (tls_expiry_ != nullptr) tls_expiry_->set({run, o_.node}, o_.tls_not_after_unix - unix_now());
  return reg_.expose();
}

nlohmann::json node_metrics::status() {
  nlohmann::json s = {{"run_id", run()},     {"node", o_.node},
                      {"kind", o_.kind},     {"version", o_.version},
                      {"commit", o_.commit}, {"started_unix", started_unix_},
                      {"time", unix_now()},  {"ready", ready()}};
  run_log* log = log_.load();
  std::function<nlohmann::json()> extra;
  {
    std::lock_guard<std::mutex> g(mutex_);
    extra = status_extra_;
  }
  if (extra) s["extra"] = extra();
  if (log == nullptr) return s;
  sample();
  const double now = log->now();
  const auto c = reported_counters(*log);
  s["t"] = now;
  // The whole run, as summary.json counts it (earlier parts of a resumed run included).
  const auto sum = run_figures(c, now);
  const run_counters all = o_.resumed ? whole_run(c, o_.before) : c;
  s["run"] = {{"learners", o_.learners},
              {"fragments", o_.fragments},
              {"parts", o_.resumed ? o_.before.parts + 1 : 1},
              {"tokens", sum.value("tokens", uint64_t{0})},
              {"wall_seconds", sum.value("wall_seconds", 0.0)},
              {"merges", all.merges},
              {"goodput", sum.value("goodput", 0.0)},
              {"uptime", sum.value("uptime", 0.0)},
              {"learner_restarts", all.learner_restarts},
              {"owner_restarts", all.owner_restarts},
              {"pushes", all.pushes},
              {"pushes_refused", all.pushes_rejected},
              {"val_loss",
               c.last_val_loss >= 0 ? nlohmann::json(c.last_val_loss) : nlohmann::json(nullptr)},
              {"degraded", c.degraded},
              {"divergences", divergences_->value({run()})}};
  std::lock_guard<std::mutex> g(mutex_);
  nlohmann::json learners = nlohmann::json::array();
  for (const auto& [id, l] : c.learners) {
    const std::string state = l.finished   ? "finished"
                              : !l.alive   ? "down"
                              : l.stepping ? "stepping"
                                           : "live";
    double rate = 0.0;
    if (auto h = loss_history_.find(id); h != loss_history_.end() && h->second.size() >= 2) {
      const auto& pts = h->second;
      const auto& last = pts.back();
      auto first = std::find_if(pts.begin(), pts.end(), [&](const loss_point& p) {
        return p.t >= last.t - k_rate_window_s;
      });
      if (first != pts.end() && last.t > first->t)
        rate = static_cast<double>(last.tokens - std::min(last.tokens, first->tokens)) /
               (last.t - first->t);
    }
    nlohmann::json applied = nlohmann::json::object();
    for (const auto& [p, v] : l.applied) applied[std::to_string(p)] = v;
    if (auto pb = pushed_base_.find(id); l.applied.empty() && pb != pushed_base_.end())
      for (const auto& [p, vt] : pb->second) applied[std::to_string(p)] = vt.first;
    nlohmann::json e = {
        {"id", id},
        {"incarnation", l.incarnation},
        {"state", state},
        {"alive", l.alive},
        {"step", l.step},
        {"tokens", l.tokens},
        {"tokens_per_s", rate},
        {"loss", l.loss},
        {"restarts", l.restarts},
        {"lease_age_s", l.last_report_s >= 0 ? nlohmann::json(std::max(0.0, now - l.last_report_s))
                                             : nlohmann::json(nullptr)},
        {"applied_versions", applied}};
    if (auto p = last_push_.find(id); p != last_push_.end()) e["last_push"] = p->second;
    learners.push_back(std::move(e));
  }
  s["learners"] = std::move(learners);
  nlohmann::json frags = nlohmann::json::array();
  for (const auto& [p, v] : c.versions) {
    nlohmann::json f = {{"id", p}, {"version", v}};
    if (auto gr = c.grace_s.find(p); gr != c.grace_s.end()) f["grace_s"] = gr->second;
    if (auto m = last_merge_.find(p); m != last_merge_.end())
      f["last_merge"] = {{"t", m->second.t},
                         {"version", m->second.version},
                         {"contributors", contributors_json(m->second.contributors)},
                         {"tokens", m->second.tokens},
                         {"grace_s", m->second.grace_s},
                         {"quorum_wait_s", m->second.round_s},
                         {"merge_s", m->second.sync_s},
                         {"live", m->second.live},
                         {"needed", m->second.needed},
                         {"reason", m->second.reason}};
    frags.push_back(std::move(f));
  }
  s["fragments"] = std::move(frags);
  s["validation"] =
      nlohmann::json(std::vector<nlohmann::json>(val_history_.begin(), val_history_.end()));
  nlohmann::json curves = nlohmann::json::object();
  for (const auto& [id, h] : loss_history_) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& p : h) pts.push_back({p.t, p.tokens, p.loss});
    curves[std::to_string(id)] = std::move(pts);
  }
  s["training_loss"] = {{"columns", {"t", "tokens", "loss"}}, {"learners", std::move(curves)}};
  s["timeline"] = nlohmann::json(std::vector<nlohmann::json>(timeline_.begin(), timeline_.end()));
  return s;
}

void node_metrics::serve(http_listener& l) {
  l.route("/metrics", [this](const http_request&) {
    return http_response{200, scrape(), metrics_content_type};
  });
  l.route("/healthz", [](const http_request&) { return http_response{200, "ok\n", "text/plain"}; });
  l.route("/readyz", [this](const http_request&) {
    return ready() ? http_response{200, "ready\n", "text/plain"}
                   : http_response{503, "not ready\n", "text/plain"};
  });
  l.route("/status", [this](const http_request&) {
    return http_response{200,
                         status().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                         "application/json"};
  });
}

node_http start_node_http(const std::string& host, uint16_t port, node_metrics_options o,
                          run_log* log, const std::string& who) {
  node_http h;
  const std::string node = o.node;
  h.metrics = std::make_unique<node_metrics>(std::move(o));
  h.metrics->attach(log);
  try {
    h.listener = std::make_unique<http_listener>(host, port);
    h.metrics->serve(*h.listener);
    std::printf("%s: http on %s (/metrics /status /healthz /readyz)\n", who.c_str(),
                h.listener->url().c_str());
    std::fflush(stdout);
    if (log != nullptr)
      log->emit("http", {{"node", node}, {"host", host}, {"port", h.listener->port()}});
  } catch (const std::exception& e) {
    if (log != nullptr) {
      log->warn(std::string("http listener off: ") + e.what());
      log->emit("failure", {{"what", "http"}, {"error", e.what()}});
    } else {
      std::fprintf(stderr, "%s: http listener off: %s\n", who.c_str(), e.what());
    }
  }
  return h;
}

}  // namespace dd::actors
