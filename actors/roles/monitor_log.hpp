// actors/roles/monitor_log.hpp — what the health monitor tells the run log: its events (join,
// rejoin, join_refused, leave, failure, straggler, node_join, node_refused, monitor_restored)
// and, for learners in other processes, the mirror of each one's progress (step, tokens, loss,
// compute seconds, alive, stepping) on which this process computes summary.json, the progress
// line, goodput and uptime. Each function takes the run log (null: it does nothing) and what a
// membership decision (membership.hpp) said. Called on the monitor's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/roles/membership.hpp"
#include "actors/services/event_sink.hpp"
#include "messages/codec.hpp"
#include "messages/control.hpp"
#include "messages/error.hpp"

namespace dd::actors::monitor_log {

/// A learner declared dead: a `failure` event; its entry not alive, not stepping.
void dead(event_sink* log, const learner_down& d);
/// An accepted join: a `join` or `rejoin` event; its entry alive, with its restarts (a remote
/// respawn) and, for a live rejoin of a remote learner, the tokens, step and compute seconds it
/// reports.
void joined(event_sink* log, bool remote, const join_decision& d, const learner_record& r);
/// A join refused for want of a reservation: a `join_refused` event and a warning.
void join_refused(event_sink* log, int32_t id, const std::string& why);
/// Remote learners: the heartbeat's figures into the learner's entry.
void heartbeat(event_sink* log, bool remote, const heartbeat_msg& hb, const learner_record& r);
/// A recorded leave: a `leave` event; a remote learner that finished, was drained or was stopped
/// with the run shows as "left", one whose own node was stopped as away (✗).
void left(event_sink* log, bool remote, int32_t id, uint64_t incarnation, const leave_decision& d);
/// A node handshake's outcome under the node's name (whatever run `bytes` named): `node_join`
/// with the ids handed out, or `node_refused` and a warning.
void node_join(event_sink* log, const wire_bytes& bytes, const node_join_reply& rep);
/// A resumed syncer's record: a `monitor_restored` event, every learner's entry, the finished
/// ones marked.
void restored(event_sink* log, const membership& m);
/// monitor.json written (`st`): a failure is a `failure` event (the monitor reports it to its
/// node, whose policy makes it the end of the run or a degraded node); `recovered`: the record's
/// path when it was failing and is written again (empty: it was not failing).
void record_written(event_sink* log, const status& st, const std::string& recovered);
/// Learners newly flagged as stragglers: a `straggler` event each.
void stragglers(event_sink* log, const std::vector<straggler_flag>& flags);

}  // namespace dd::actors::monitor_log
