// actors/services/run_log.cpp — see run_log.hpp.
#include "actors/services/run_log.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace dd::actors {

namespace {

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// A console line "[   12.3s] LEVEL: text" at `t_s` seconds of the run.
void say(const run_log::console_fn& console, double t_s, const char* level,
         const std::string& text) {
  char t[32];
  std::snprintf(t, sizeof t, "[%7.1fs]", t_s);
  console(std::string(t) + " " + level + ": " + text);
}

}  // namespace

run_log::run_log(const std::string& events_path, bool keep_in_memory, clock_fn clock, bool append)
    : clock_(std::move(clock)), keep_(keep_in_memory) {
  if (!clock_) {
    auto start = std::chrono::steady_clock::now();
    clock_ = [start] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
  }
  events_path_ = events_path;
  if (!events_path.empty()) {
    if (auto st = out_.open(events_path, /*truncate=*/!append); !st)
      throw std::runtime_error("run_log: " + st.message);
  }
}

run_log::~run_log() = default;

double run_log::now() const { return clock_(); }

void run_log::set_clock(clock_fn clock) {
  std::lock_guard<std::mutex> guard(mutex_);
  clock_ = std::move(clock);
}

void run_log::emit(const std::string& kind, nlohmann::json fields) {
  if (!fields.is_object()) fields = nlohmann::json{{"value", fields}};
  nlohmann::json line = nlohmann::json::object();
  line["event"] = kind;
  for (auto& [k, v] : fields.items()) line[k] = v;
  if (bpb_per_nat_ > 0 && kind == "eval")
    if (auto it = line.find("val_loss"); it != line.end() && it->is_number())
      line["val_bpb"] = it->get<double>() * bpb_per_nat_;
  std::string failed;
  bool recovered = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    // "t" and "time" are stamped under the lock that orders the lines, so t never goes back
    // from one line to the next (stamped before it, a thread preempted between the stamp and
    // the lock wrote an older t after a newer one: 36 ms back once under load).
    line["t"] = clock_();
    line["time"] = unix_seconds();
    // A string garbled on a link (invalid UTF-8) is written with U+FFFD, not thrown on: an
    // exception here would end the actor that logs.
    std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
    if (out_.is_open() && write_failure_.empty()) {
      if (policy_.retries()) {
        const double now = clock_();
        if (pending_.size() + text.size() <= (size_t{8} << 20))
          pending_ += text;
        else
          ++pending_dropped_;
        const bool was_failing = failing_.count(events_path_) > 0;
        if (!was_failing || now >= next_retry_s_) {
          if (flush_pending_locked(now)) {
            recovered = was_failing;
          } else if (!was_failing) {
            failed = failing_.at(events_path_).second;
          }
        }
      } else if (auto st = out_.append(text); !st) {
        failed = st.message;
      }
    }
    if (tap_) tap_(text);
    if (observer_ != nullptr) observer_->on_event(line);
    if (keep_) events_.push_back(std::move(line));
  }
  if (policy_.retries()) {
    if (!failed.empty()) warn_error(failed + "; retrying with backoff (the run goes on, degraded)");
    if (recovered)
      warn(
          "events.jsonl: writing again after a failure (lines kept meanwhile "
          "were written in order)");
    return;
  }
  if (!failed.empty()) write_failed(failed);
}

void run_log::set_observer(run_observer* observer) {
  std::lock_guard<std::mutex> guard(mutex_);
  observer_ = observer;
}

void run_log::note_step(int32_t learner_id, double step_s) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (observer_ != nullptr) observer_->on_step(learner_id, step_s);
}

void run_log::note_applied(int32_t learner_id, int32_t fragment, uint64_t version) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto& ls = counters_.learners[learner_id];
  auto [it, fresh] = ls.applied.try_emplace(fragment, version);
  if (!fresh && it->second == version) return;
  it->second = version;
  ls.applied_at_s[fragment] = clock_();
}

bool run_log::flush_pending_locked(double now) {
  while (!pending_.empty()) {
    const size_t nl = pending_.find('\n');
    const std::string one = pending_.substr(0, nl + 1);
    if (auto st = out_.append(one); !st) {
      auto& f = failing_[events_path_];
      if (f.second.empty()) {
        f.first = now;
        backoff_s_ = 0.5;
      } else {
        backoff_s_ = std::min(10.0, backoff_s_ * 2);
      }
      f.second = st.message;
      counters_.degraded[events_path_] = st.message;
      next_retry_s_ = now + backoff_s_;
      return false;
    }
    pending_.erase(0, nl + 1);
  }
  failing_.erase(events_path_);
  if (pending_dropped_ > 0)
    counters_.degraded[events_path_] =
        std::to_string(pending_dropped_) + " event lines dropped while writes failed";
  return true;
}

void run_log::set_write_policy(const write_policy& policy) {
  std::lock_guard<std::mutex> guard(mutex_);
  policy_ = policy;
}

write_policy run_log::policy() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return policy_;
}

write_verdict run_log::write_trouble(const std::string& file, const std::string& message) {
  bool first = false;
  write_verdict verdict = write_verdict::end_the_run;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    verdict = policy_.on_failed_write();
  }
  if (verdict == write_verdict::end_the_run) {  // dd-node run: the run ends, naming the file
    write_failed(message);
    return verdict;
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    auto& f = failing_[file];
    first = f.second.empty();
    if (first) f.first = clock_();
    f.second = message;
    counters_.degraded[file] = message;
  }
  if (first) warn_error(message + "; retrying with backoff (the run goes on, degraded)");
  return verdict;
}

void run_log::write_recovered(const std::string& file) {
  bool was = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    was = failing_.erase(file) > 0;
  }
  if (was) warn("'" + file + "': writing again after a failure");
}

double run_log::failing_for_s() const {
  std::lock_guard<std::mutex> guard(mutex_);
  double oldest = -1;
  for (const auto& [file, f] : failing_)
    if (oldest < 0 || f.first < oldest) oldest = f.first;
  return oldest < 0 ? 0.0 : clock_() - oldest;
}

std::string run_log::failing_files() const {
  std::lock_guard<std::mutex> guard(mutex_);
  std::string out;
  for (const auto& [file, f] : failing_) out += (out.empty() ? "" : "; ") + f.second;
  return out;
}

void run_log::retry_pending() {
  bool recovered = false;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!policy_.retries() || !out_.is_open() || pending_.empty() || !write_failure_.empty())
      return;
    const double now = clock_();
    if (now < next_retry_s_) return;
    recovered = flush_pending_locked(now);
  }
  if (recovered)
    warn(
        "events.jsonl: writing again after a failure (lines kept meanwhile were "
        "written in order)");
}

void run_log::warn_error(const std::string& text) const {
  console_fn console;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    console = console_;
  }
  if (console) say(console, clock_(), "error", text);
}

void run_log::set_tap(tap_fn tap) {
  std::lock_guard<std::mutex> guard(mutex_);
  tap_ = std::move(tap);
}

void run_log::write_failed(const std::string& message) {
  console_fn console;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!write_failure_.empty()) return;
    write_failure_ = message;
    console = console_;
  }
  if (console) say(console, clock_(), "error", message);
}

std::string run_log::write_failure() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return write_failure_;
}

void run_log::set_console(console_fn console) {
  std::lock_guard<std::mutex> guard(mutex_);
  console_ = std::move(console);
}

void run_log::warn(const std::string& text) const {
  console_fn console;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    console = console_;
  }
  if (console) say(console, clock_(), "warning", text);
}

std::vector<nlohmann::json> run_log::events() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return events_;
}

void run_log::update(const std::function<void(run_counters&)>& f) {
  std::lock_guard<std::mutex> guard(mutex_);
  f(counters_);
}

run_counters run_log::snapshot() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return counters_;
}

void run_log::set_stepping(int32_t learner_id, bool stepping) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto& l = counters_.learners[learner_id];
  l.stepping = stepping;
  if (stepping) l.finished = false;  // back (a node given its ids again)
}

void run_log::set_uptime(double uptime_s, double observed_s) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (uptime_frozen_) return;
  counters_.uptime_s = uptime_s;
  counters_.observed_s = observed_s;
}

void run_log::freeze_uptime() {
  std::lock_guard<std::mutex> guard(mutex_);
  uptime_frozen_ = true;
}

void run_log::learner_finished(int32_t learner_id) {
  std::lock_guard<std::mutex> guard(mutex_);
  counters_.learners[learner_id].stepping = false;
  counters_.learners[learner_id].finished = true;
}

retried_lines::retried_lines(run_log* log, std::string path, std::string header)
    : log_(log), path_(std::move(path)) {
  std::error_code ec;
  if (!header.empty() && !std::filesystem::exists(path_, ec)) pending_ = std::move(header);
}

void retried_lines::append(std::string_view lines) {
  if (dead_) return;
  const size_t end = lines.rfind('\n');
  if (end != std::string_view::npos) {
    if (pending_.size() + end + 1 <= (size_t{8} << 20))
      pending_.append(lines.substr(0, end + 1));
    else
      ++dropped_;
  }
  if (!pending_.empty()) flush();
}

void retried_lines::retry() {
  if (!dead_ && failing_) flush();
}

void retried_lines::flush() {
  const double now = log_ != nullptr ? log_->now() : 0.0;
  if (failing_ && now < next_retry_s_) return;
  util::io_status st;
  if (!out_.is_open()) {
    // Its directory too (a learner node's forwarded file lives in nodes/, made at first use).
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    if (!dir.empty()) st = util::make_dirs(dir);
    if (st) st = out_.open(path_, false);
  }
  while (st && !pending_.empty()) {
    const size_t nl = pending_.find('\n');
    st = out_.append(std::string_view(pending_).substr(0, nl + 1));
    if (st) pending_.erase(0, nl + 1);
  }
  if (!st) {
    if (log_ == nullptr) return;
    // The node's policy answers: write it again with backoff, or (dd-node run) the run ends,
    // naming the file, and nothing more is written.
    if (log_->write_trouble(path_, st.message) != write_verdict::retry_degraded) {
      dead_ = true;
      pending_.clear();
      return;
    }
    backoff_s_ = failing_ ? std::min(10.0, backoff_s_ * 2) : 0.5;
    failing_ = true;
    next_retry_s_ = now + backoff_s_;
    return;
  }
  if (failing_ && log_ != nullptr) {
    failing_ = false;
    if (dropped_ > 0) {
      const std::string what =
          std::to_string(dropped_) + " appends of lines dropped while writes failed";
      log_->update([&](run_counters& c) { c.degraded[path_] = what; });
    }
    log_->write_recovered(path_);
  }
}

}  // namespace dd::actors
