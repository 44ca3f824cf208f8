// actors/link/wire_refusal.hpp — how an actor reports a message it dropped because it did not
// decode. Every receive site of a wire message uses it, so a message of another run, of a stale
// sender incarnation or of another schema version is logged and counted the same way everywhere
// (docs/wire.md "Envelope"). Any thread (the event sink is thread-safe).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "actors/services/run_log.hpp"
#include "messages/error.hpp"

namespace dd::actors {

/// True for the refusals the envelope check makes (errc::other_run, stale_incarnation,
/// schema_mismatch), as opposed to bytes that are damaged or inconsistent.
inline bool refused_at_envelope(errc code) {
  return code == errc::other_run || code == errc::stale_incarnation ||
         code == errc::schema_mismatch;
}

/// Logs a dropped message: a `failure` event {what, code, error} plus `fields` (e.g. the
/// learner id). A refusal at the envelope also adds 1 to run_counters::envelopes_refused and an
/// `envelope_refused` event with the same fields. `log` may be null (nothing is logged).
inline void log_refused_message(event_sink* log, const char* what, const wire_error& err,
                                nlohmann::json fields = nlohmann::json::object()) {
  if (log == nullptr) return;
  fields["what"] = what;
  fields["code"] = std::string(to_string(err.code));
  fields["error"] = err.message;
  log->emit("failure", fields);
  if (refused_at_envelope(err.code)) {
    log->update([](run_counters& c) { c.envelopes_refused += 1; });
    log->emit("envelope_refused", fields);
  }
}

}  // namespace dd::actors
