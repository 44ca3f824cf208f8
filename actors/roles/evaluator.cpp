// actors/roles/evaluator.cpp — see evaluator.hpp.
//
//   idle --tick / global step crossed a multiple of every_steps / request--> collecting (owners
//   from the monitor, pull every fragment) collecting --all fragments--> evaluate (blocking) -->
//   idle (reply to requests, next tick) collecting --round timeout--> collecting (re-ask owners,
//   re-pull the missing fragments)
#include "actors/roles/evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <caf/all.hpp>

#include "actors/link/atoms.hpp"
#include "actors/link/chunk_flow.hpp"
#include "actors/roles/role_entry.hpp"
#include "actors/roles/supervisor.hpp"
#include "actors/services/run_log.hpp"
#include "messages/control.hpp"
#include "runtime/eval.hpp"
#include "runtime/model_file.hpp"
#include "runtime/quantize.hpp"
#include "runtime/vit.hpp"
#include "util/duration.hpp"

namespace dd::actors {

uint64_t digest_floats(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

namespace {

/// What the evaluator works with: its configuration and the services its node handed it.
using evaluator_env = role_env<evaluator_config, evaluator_services>;

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

caf::timespan span(double s) { return util::to_timespan(s); }

/// The evaluator is a syncer role: it stamps the run and the syncer's incarnation.
envelope_stamp stamp_of(const evaluator_env& ctx) { return {ctx.run_id, ctx.syncer_incarnation}; }
envelope_expect expect_of(const evaluator_env& ctx) { return {ctx.run_id, 0}; }

void pull_missing(evaluator_actor* self, const evaluator_env& ctx) {
  auto& st = self->state;
  for (size_t p = 0; p < st.owners.size(); ++p)
    if (st.got.count(static_cast<int32_t>(p)) == 0 && st.owners[p])
      self->send(st.owners[p], atoms::pull_atom_v,
                 encode(pull_request{-1, 0, static_cast<int32_t>(p)}, stamp_of(ctx)));
}

void ask_owners(evaluator_actor* self, const evaluator_env& ctx) {
  const uint64_t round = self->state.round;
  const evaluator_env* c = &ctx;  // the behavior's context outlives its requests
  self->request(ctx.monitor, std::chrono::seconds(30), caf::get_atom_v, atoms::owners_atom_v)
      .then(
          [=](const std::vector<uint8_t>& bytes, const std::vector<owner_hdl>& handles) {
            auto& st = self->state;
            if (!st.in_round || st.round != round) return;
            auto dir = decode_owner_directory(bytes, {}, expect_of(*c));
            if (!dir || dir->fragment_ids.size() != handles.size()) return;
            st.owners.assign(c->plan.fragments.size(), owner_hdl{});
            for (size_t i = 0; i < handles.size(); ++i) {
              const auto p = static_cast<size_t>(dir->fragment_ids[i]);
              if (p < st.owners.size()) st.owners[p] = handles[i];
            }
            pull_missing(self, *c);
          },
          [](caf::error&) {});
  self->delayed_send(self, span(ctx.round_timeout_s), atoms::round_timeout_atom_v, round);
}

/// The monitor's word on the run's progress (the global step and the tokens), kept for the
/// `every_steps` clock and the next `eval` event; then `next` with the global step.
template <class F>
void ask_progress(evaluator_actor* self, const evaluator_env& ctx, F next) {
  self->request(ctx.monitor, std::chrono::seconds(30), caf::get_atom_v, atoms::progress_atom_v)
      .then(
          [=](double step, uint64_t tokens) {
            self->state.global_step = step;
            self->state.tokens = tokens;
            next(step);
          },
          [](caf::error&) {});
}

void start_round(evaluator_actor* self, const evaluator_env& ctx) {
  auto& st = self->state;
  if (st.in_round) return;
  st.in_round = true;
  st.round += 1;
  st.got.clear();
  st.assembler.clear();
  // The progress answer arrives before the owner directory (both from the monitor, in order),
  // so the round's event carries the global step it started at.
  if (ctx.monitor) ask_progress(self, ctx, [](double) {});
  ask_owners(self, ctx);
}

/// The final evaluation's model: <run_dir>/model.safetensors (atomic). Written twice: as soon as
/// the global model is assembled (`scored` false: metadata "evaluation" "none", or "last
/// periodic" with last_periodic_val_loss when a periodic evaluation ran, and no val_loss), so an
/// interrupt that cuts the scoring short still leaves the model; then with the loss it scored
/// ("evaluation" "final", val_loss). Returns false when the write failed (a "failure" event and
/// run_log::write_failed: the run fails).
bool write_final_model(evaluator_actor* self, const evaluator_env& ctx, bool scored, double loss,
                       double accuracy, const nlohmann::json& versions) {
  auto& st = self->state;
  auto md = ctx.model_metadata;
  const char* evaluation = scored ? "final" : st.last_loss >= 0 ? "last periodic" : "none";
  md["evaluation"] = evaluation;
  if (auto it = md.find("eval"); it != md.end()) {  // the windows; whether val_loss scored them
    auto windows = nlohmann::json::parse(it->second, nullptr, false);
    if (windows.is_object()) {
      windows["evaluation"] = evaluation;
      it->second = windows.dump();
    }
  }
  if (scored) {
    md["val_loss"] = fmt::format("{:.17g}", loss);
    if (accuracy >= 0) md["val_accuracy"] = fmt::format("{:.17g}", accuracy);
  } else if (st.last_loss >= 0) {
    md["last_periodic_val_loss"] = fmt::format("{:.17g}", st.last_loss);
  }
  md["digest"] = fmt::format("{:016x}", st.last_digest);
  md["versions"] = versions.dump();
  try {
    write_model_file(ctx.model_path, *st.model, md);
    if (ctx.svc.log != nullptr) {
      nlohmann::json ev = {
          {"path", ctx.model_path}, {"evaluation", evaluation}, {"digest", st.last_digest}};
      if (scored) ev["val_loss"] = loss;
      ctx.svc.log->emit("model_written", ev);
    }
    if (!scored && ctx.svc.model_written) ctx.svc.model_written->store(true);
    return true;
  } catch (const std::exception& e) {
    if (ctx.svc.log != nullptr) {
      ctx.svc.log->emit("failure", {{"what", "model_file"}, {"error", e.what()}});
      ctx.svc.log->write_failed(e.what());
    }
    return false;
  }
}

void finish_round(evaluator_actor* self, const evaluator_env& ctx) {
  auto& st = self->state;
  std::vector<float> flat(st.model->num_params());
  nlohmann::json versions = nlohmann::json::array();
  for (const auto& layout : ctx.plan.fragments) {
    const auto& [version, values] = st.got.at(layout.fragment_id);
    scatter_fragment(layout, values.data(), flat.data());
    versions.push_back(version);
  }
  st.model->set_parameters(flat);
  st.last_digest = digest_floats(flat);
  // The final model reaches the disk before its (possibly long) scoring.
  const bool write_model = st.waiting_final && !ctx.model_path.empty();
  const bool written = write_model && write_final_model(self, ctx, false, -1.0, -1.0, versions);
  auto t0 = std::chrono::steady_clock::now();
  double loss = 0.0;
  double accuracy = -1.0;    // < 0: not a classifier
  std::int64_t windows = 0;  // text: the windows scored
  if (ctx.images != nullptr) {
    const classification_eval ev = dynamic_cast<vit&>(*st.model).evaluate(*ctx.images, ctx.batch);
    loss = ev.loss;
    accuracy = ev.accuracy;
  } else {
    windows = st.waiting_final ? ctx.final_windows : ctx.windows;
    loss = evaluate_windows(*st.model, ctx.data->validation(), ctx.batch, ctx.seq_len, windows,
                            ctx.svc.stop.get());
    if (windows == 0) windows = windows_in_split(ctx.data->validation().size(), ctx.seq_len);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.last_loss = loss;
  st.last_eval_s = secs;
  st.last_eval_end_s = steady_seconds();
  st.in_round = false;
  if (ctx.svc.log != nullptr) {
    nlohmann::json ev = {{"val_loss", loss},         {"versions", versions},
                         {"digest", st.last_digest}, {"tokens", st.tokens},
                         {"step", st.global_step},   {"eval_s", secs}};
    if (accuracy >= 0) ev["val_accuracy"] = accuracy;
    if (windows > 0) ev["windows"] = windows;
    if (st.waiting_final) ev["final"] = true;
    ctx.svc.log->emit("eval", ev);
    const double at = ctx.svc.log->now();
    ctx.svc.log->update([&](run_counters& c) {
      c.last_val_loss = loss;
      c.last_val_accuracy = accuracy;
      c.last_val_at_s = at;
    });
  }
  if (ctx.job) self->send(ctx.job, atoms::eval_atom_v, loss);  // the job's last loss
  if (written) write_final_model(self, ctx, true, loss, accuracy, versions);
  st.waiting_final = false;
  for (auto& rp : st.waiting) rp.deliver(loss, st.last_digest);
  st.waiting.clear();
}

}  // namespace

evaluator_hdl::behavior_type evaluator(evaluator_actor* self,
                                       std::shared_ptr<const evaluator_config> config,
                                       evaluator_services services) {
  const auto ctx = enter_role<evaluator_env>(self, *config, std::move(services), "evaluator");
  auto& st = self->state;
  kernels::backend_options bo;
  bo.threads = ctx->threads;
  st.backend = kernels::make_backend(ctx->backend, bo);
  st.model = make_model(*st.backend, ctx->model);
  if (ctx->every_seconds > 0)
    self->delayed_send(self, span(ctx->every_seconds), atoms::eval_atom_v);
  const bool by_steps = ctx->every_steps > 0 && ctx->monitor;
  if (by_steps) self->delayed_send(self, span(ctx->step_poll_s), atoms::step_poll_atom_v);
  return {
      // The every_steps clock: poll the global step; one evaluation per crossing of a multiple.
      [=](atoms::step_poll_atom) {
        if (!by_steps) return;
        ask_progress(self, *ctx, [=](double g) {
          auto& s = self->state;
          const auto k = static_cast<uint64_t>(std::floor(g / ctx->every_steps));
          if (k > s.steps_fired) {
            s.steps_fired = k;
            const bool cooled = !ctx->adaptive_cadence || s.last_eval_end_s < 0 ||
                                steady_seconds() - s.last_eval_end_s >= 9.0 * s.last_eval_s;
            if (cooled) start_round(self, *ctx);
          }
        });
        self->delayed_send(self, span(ctx->step_poll_s), atoms::step_poll_atom_v);
      },
      [=](atoms::eval_atom) {
        start_round(self, *ctx);
        // Never spend more than about a tenth of the machine on periodic evaluation: the cadence
        // stretches to 9 × the last evaluation's duration when that is longer.
        if (ctx->every_seconds > 0)
          self->delayed_send(self,
                             span(ctx->adaptive_cadence
                                      ? std::max(ctx->every_seconds, 9.0 * self->state.last_eval_s)
                                      : ctx->every_seconds),
                             atoms::eval_atom_v);
      },
      [=](atoms::final_eval_atom) -> caf::result<double, uint64_t> {
        auto rp = self->make_response_promise<double, uint64_t>();
        auto& s = self->state;
        // A round already in flight may hold older values: the next round answers.
        if (s.in_round) {
          s.deferred.push_back(rp);
          s.deferred_final = true;
        } else {
          s.waiting.push_back(rp);
          s.waiting_final = true;
          start_round(self, *ctx);
        }
        return rp;
      },
      [=](atoms::round_timeout_atom, uint64_t round) {
        auto& s = self->state;
        if (!s.in_round || s.round != round) return;
        ask_owners(self, *ctx);
      },
      [=](atoms::broadcast_atom, const std::vector<uint8_t>& bytes, uint64_t seq) {
        grant_credit(self, seq);  // taken: the owner may send the next chunk
        auto& s = self->state;
        if (!s.in_round) return;
        auto chunk = decode_broadcast_ref(bytes, {}, expect_of(*ctx));
        if (!chunk) return;
        auto whole = s.assembler.add(*chunk);
        if (!whole || !whole->has_value()) return;
        const auto& b = **whole;
        if (b.fragment_id < 0 || static_cast<size_t>(b.fragment_id) >= ctx->plan.fragments.size())
          return;
        const auto& layout = ctx->plan.fragments[static_cast<size_t>(b.fragment_id)];
        auto values = decode_payload(b.encoding, b.payload.data(), b.payload.size(), layout.numel);
        if (!values) return;
        s.got[b.fragment_id] = {b.version, std::move(*values)};
        if (s.got.size() == ctx->plan.fragments.size()) {
          finish_round(self, *ctx);
          if (!s.deferred.empty()) {
            s.waiting = std::move(s.deferred);
            s.deferred.clear();
            s.waiting_final = s.deferred_final;
            s.deferred_final = false;
            start_round(self, *ctx);
          }
        }
      },
  };
}

}  // namespace dd::actors
