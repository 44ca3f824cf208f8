// messages/control_codec.cpp — see control.hpp.
#include "messages/control.hpp"

#include <cctype>
#include <cmath>
#include <set>

#include "messages/detail/envelope.hpp"

namespace dd {

using namespace detail;

std::string_view to_string(node_refusal r) noexcept {
  switch (r) {
    case node_refusal::none: return "none";
    case node_refusal::other_run: return "otherRun";
    case node_refusal::protocol_version: return "protocolVersion";
    case node_refusal::data_mismatch: return "dataMismatch";
    case node_refusal::no_free_learner: return "noFreeLearner";
    case node_refusal::run_finished: return "runFinished";
    case node_refusal::bad_request: return "badRequest";
    case node_refusal::auth_challenge: return "authChallenge";
    case node_refusal::unauthorized: return "unauthorized";
  }
  return "unknown";
}

namespace {

constexpr size_t max_ids = 4096;
constexpr size_t max_text = size_t{16} << 20;

template <class List>
result<std::vector<int32_t>> read_ids(const char* what, List list) {
  using R = result<std::vector<int32_t>>;
  if (list.size() > max_ids)
    return R(errc::malformed, std::string(what) + " holds " + num(list.size()) + " ids (at most " +
                                  num(max_ids) + ")");
  std::vector<int32_t> out;
  out.reserve(list.size());
  for (auto id : list) {
    if (id < 0) return R(errc::malformed, std::string(what) + " holds a negative id");
    out.push_back(id);
  }
  return out;
}

template <class Builder>
void write_ids(Builder list, const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) list.set(static_cast<unsigned>(i), ids[i]);
}

status text_fits(const char* what, size_t n) {
  if (n > max_text) return {errc::malformed, std::string(what) + " is longer than 16 MiB"};
  return {};
}

/// A nonce or proof field: at most 64 bytes.
result<std::vector<uint8_t>> auth_bytes(const char* what, capnp::Data::Reader d) {
  if (d.size() > 64)
    return result<std::vector<uint8_t>>(
        errc::malformed, std::string(what) + " of " + num(d.size()) + " bytes is above 64");
  return std::vector<uint8_t>(d.begin(), d.end());
}

kj::ArrayPtr<const capnp::byte> data_of(const std::vector<uint8_t>& v) {
  return kj::ArrayPtr<const capnp::byte>(v.data(), v.size());
}

}  // namespace

wire_bytes encode(const node_join& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initNodeJoin();
  r.setRunId(m.run_id);
  r.setProtocolVersion(m.protocol_version);
  r.setNodeName(m.node_name);
  r.setHost(m.host);
  write_ids(r.initLearnerIds(static_cast<unsigned>(m.learner_ids.size())), m.learner_ids);
  r.setLearnerCount(m.learner_count);
  r.setDataBytes(m.data_bytes);
  r.setDataHash(m.data_hash);
  r.setChallenge(data_of(m.challenge));
  r.setProof(data_of(m.proof));
  return flatten(b);
}

wire_bytes encode(const node_join_reply& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b(first_segment_words(m.experiment_json.size() + 1024));
  auto r = start_envelope(b, stamp).initNodeJoinReply();
  r.setAccepted(m.accepted);
  r.setRefusal(static_cast<cw::NodeRefusal>(m.refusal));
  r.setReason(m.reason);
  r.setRunId(m.run_id);
  r.setExperimentJson(m.experiment_json);
  r.setExperimentHash(m.experiment_hash);
  write_ids(r.initLearnerIds(static_cast<unsigned>(m.learner_ids.size())), m.learner_ids);
  r.setDataBytes(m.data_bytes);
  r.setDataHash(m.data_hash);
  r.setStepsPerLearner(m.steps_per_learner);
  r.setChallenge(data_of(m.challenge));
  return flatten(b);
}

wire_bytes encode(const leave_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initLeave();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setInterrupted(m.interrupted);
  return flatten(b);
}

result<node_join> decode_node_join(const wire_bytes& bytes, const decode_limits& limits,
                                   const envelope_expect& expect) {
  using R = result<node_join>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::NODE_JOIN,
      [](cw::Envelope::Body::Reader body, uint64_t) -> R {
        auto r = body.getNodeJoin();
        node_join m;
        m.run_id = r.getRunId();
        m.protocol_version = r.getProtocolVersion();
        m.node_name = r.getNodeName();
        m.host = r.getHost();
        auto ids = read_ids("nodeJoin.learnerIds", r.getLearnerIds());
        if (!ids) return ids.error();
        m.learner_ids = std::move(*ids);
        m.learner_count = r.getLearnerCount();
        if (m.learner_count > max_ids)
          return R(errc::malformed,
                   "nodeJoin.learnerCount " + num(m.learner_count) + " is above " + num(max_ids));
        m.data_bytes = r.getDataBytes();
        m.data_hash = r.getDataHash();
        for (const auto* t : {&m.run_id, &m.node_name, &m.host, &m.data_hash})
          if (auto st = text_fits("nodeJoin text field", t->size()); !st) return st.error();
        auto challenge = auth_bytes("nodeJoin.challenge", r.getChallenge());
        if (!challenge) return challenge.error();
        m.challenge = std::move(*challenge);
        auto proof = auth_bytes("nodeJoin.proof", r.getProof());
        if (!proof) return proof.error();
        m.proof = std::move(*proof);
        return m;
      });
}

result<node_join_reply> decode_node_join_reply(const wire_bytes& bytes, const decode_limits& limits,
                                               const envelope_expect& expect) {
  using R = result<node_join_reply>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::NODE_JOIN_REPLY,
      [](cw::Envelope::Body::Reader body, uint64_t) -> R {
        auto r = body.getNodeJoinReply();
        node_join_reply m;
        m.accepted = r.getAccepted();
        const auto refusal = r.getRefusal();
        if (!enum_in_range(refusal, cw::NodeRefusal::UNAUTHORIZED))
          return R(errc::malformed,
                   "nodeJoinReply.refusal: unknown value " + num(static_cast<uint16_t>(refusal)));
        m.refusal = static_cast<node_refusal>(static_cast<uint16_t>(refusal));
        m.reason = r.getReason();
        m.run_id = r.getRunId();
        m.experiment_json = r.getExperimentJson();
        m.experiment_hash = r.getExperimentHash();
        auto ids = read_ids("nodeJoinReply.learnerIds", r.getLearnerIds());
        if (!ids) return ids.error();
        m.learner_ids = std::move(*ids);
        m.data_bytes = r.getDataBytes();
        m.data_hash = r.getDataHash();
        m.steps_per_learner = r.getStepsPerLearner();
        auto challenge = auth_bytes("nodeJoinReply.challenge", r.getChallenge());
        if (!challenge) return challenge.error();
        m.challenge = std::move(*challenge);
        if (m.accepted && m.refusal != node_refusal::none)
          return R(errc::malformed, "nodeJoinReply is accepted but names a refusal");
        return m;
      });
}

result<leave_msg> decode_leave(const wire_bytes& bytes, const decode_limits& limits,
                               const envelope_expect& expect) {
  using R = result<leave_msg>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::LEAVE,
                         [](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
                           auto r = body.getLeave();
                           leave_msg m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           m.interrupted = r.getInterrupted();
                           if (m.learner_id < 0)
                             return R(errc::malformed, "leave.learnerId is negative");
                           if (auto st = same_incarnation("leave", sender_inc, m.incarnation); !st)
                             return st.error();
                           return m;
                         });
}

wire_bytes encode(const fragment_query& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initFragmentQuery();
  r.setFragmentId(m.fragment_id);
  r.setQueryId(m.query_id);
  r.setSendValue(m.send_value);
  return flatten(b);
}

wire_bytes encode(const fragment_held& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initFragmentHeld();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  r.setQueryId(m.query_id);
  r.setHave(m.have);
  r.setVersion(m.version);
  return flatten(b);
}

result<fragment_query> decode_fragment_query(const wire_bytes& bytes, const decode_limits& limits,
                                             const envelope_expect& expect) {
  using R = result<fragment_query>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect,
                         cw::Envelope::Body::FRAGMENT_QUERY,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getFragmentQuery();
                           fragment_query m;
                           m.fragment_id = r.getFragmentId();
                           m.query_id = r.getQueryId();
                           m.send_value = r.getSendValue();
                           if (m.fragment_id < 0)
                             return R(errc::malformed, "fragmentQuery.fragmentId is negative");
                           return m;
                         });
}

result<fragment_held> decode_fragment_held(const wire_bytes& bytes, const decode_limits& limits,
                                           const envelope_expect& expect) {
  using R = result<fragment_held>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::FRAGMENT_HELD,
      [](cw::Envelope::Body::Reader body, uint64_t sender_inc) -> R {
        auto r = body.getFragmentHeld();
        fragment_held m;
        m.learner_id = r.getLearnerId();
        m.incarnation = r.getIncarnation();
        m.fragment_id = r.getFragmentId();
        m.query_id = r.getQueryId();
        m.have = r.getHave();
        m.version = r.getVersion();
        if (m.learner_id < 0) return R(errc::malformed, "fragmentHeld.learnerId is negative");
        if (m.fragment_id < 0) return R(errc::malformed, "fragmentHeld.fragmentId is negative");
        if (!m.have && m.version != 0)
          return R(errc::malformed,
                   "fragmentHeld.version " + num(m.version) + " is set but have is false");
        if (auto st = same_incarnation("fragmentHeld", sender_inc, m.incarnation); !st)
          return st.error();
        return m;
      });
}

// ---- membership and control -----------------------------------------------------------------

namespace {

constexpr size_t max_short_text = size_t{4} << 10;
constexpr size_t max_event_lines = size_t{1} << 20;

template <class List>
status entries_fit(const char* what, List list) {
  if (list.size() <= max_control_entries) return {};
  return {errc::malformed, std::string(what) + " holds " + num(list.size()) + " entries (at most " +
                               num(max_control_entries) + ")"};
}

status short_text(const char* what, size_t n) {
  if (n <= max_short_text) return {};
  return {errc::malformed, std::string(what) + " is " + num(n) + " bytes long (at most 4 KiB)"};
}

}  // namespace

wire_bytes encode(const live_view_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initLiveView();
  r.setEpoch(m.epoch);
  auto list = r.initLearners(static_cast<unsigned>(m.learners.size()));
  for (size_t i = 0; i < m.learners.size(); ++i) {
    auto e = list[static_cast<unsigned>(i)];
    e.setLearnerId(m.learners[i].learner_id);
    e.setIncarnation(m.learners[i].incarnation);
    e.setStepTimeEmaSeconds(m.learners[i].step_time_ema_s);
  }
  return flatten(b);
}

wire_bytes encode(const owner_directory& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initOwnerDirectory();
  write_ids(r.initFragmentIds(static_cast<unsigned>(m.fragment_ids.size())), m.fragment_ids);
  return flatten(b);
}

wire_bytes encode(const subscribe_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  start_envelope(b, stamp).initSubscribe().setFragmentId(m.fragment_id);
  return flatten(b);
}

wire_bytes encode(const stop_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  start_envelope(b, stamp).initStop().setReason(m.reason);
  return flatten(b);
}

wire_bytes encode(const status_request&, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  start_envelope(b, stamp).initStatusRequest();
  return flatten(b);
}

wire_bytes encode(const status_reply& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b(first_segment_words(m.json.size()));
  auto r = start_envelope(b, stamp).initStatusReply();
  r.setJson(m.json);
  r.setChallenge(data_of(m.challenge));
  return flatten(b);
}

wire_bytes encode(const drain_msg& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initDrain();
  r.setLearnerId(m.learner_id);
  r.setChallenge(data_of(m.challenge));
  r.setProof(data_of(m.proof));
  return flatten(b);
}

wire_bytes encode(const drain_reply& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b;
  auto r = start_envelope(b, stamp).initDrainReply();
  r.setAccepted(m.accepted);
  r.setDetail(m.detail);
  return flatten(b);
}

wire_bytes encode(const node_events& m, const envelope_stamp& stamp) {
  capnp::MallocMessageBuilder b(first_segment_words(m.lines.size()));
  auto r = start_envelope(b, stamp).initNodeEvents();
  r.setNode(m.node);
  r.setLines(m.lines);
  r.setStream(m.stream);
  r.setOffset(m.offset);
  return flatten(b);
}

result<live_view_msg> decode_live_view(const wire_bytes& bytes, const decode_limits& limits,
                                       const envelope_expect& expect) {
  using R = result<live_view_msg>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::LIVE_VIEW,
      [](cw::Envelope::Body::Reader body, uint64_t) -> R {
        auto r = body.getLiveView();
        live_view_msg m;
        m.epoch = r.getEpoch();
        auto list = r.getLearners();
        if (auto st = entries_fit("liveView.learners", list); !st) return st.error();
        m.learners.reserve(list.size());
        for (auto e : list) {
          live_learner_entry l{e.getLearnerId(), e.getIncarnation(), e.getStepTimeEmaSeconds()};
          if (l.learner_id < 0) return R(errc::malformed, "liveView.learners holds a negative id");
          if (!m.learners.empty() && l.learner_id <= m.learners.back().learner_id)
            return R(errc::malformed, "liveView.learners is not in ascending learner id (" +
                                          std::to_string(l.learner_id) + " after " +
                                          std::to_string(m.learners.back().learner_id) + ")");
          if (!std::isfinite(l.step_time_ema_s) || l.step_time_ema_s < 0)
            return R(errc::malformed, "liveView: learner " + std::to_string(l.learner_id) +
                                          " has a negative or non-finite step time");
          m.learners.push_back(l);
        }
        return m;
      });
}

result<owner_directory> decode_owner_directory(const wire_bytes& bytes, const decode_limits& limits,
                                               const envelope_expect& expect) {
  using R = result<owner_directory>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::OWNER_DIRECTORY,
      [](cw::Envelope::Body::Reader body, uint64_t) -> R {
        auto ids =
            read_ids("ownerDirectory.fragmentIds", body.getOwnerDirectory().getFragmentIds());
        if (!ids) return ids.error();
        std::set<int32_t> seen;
        for (int32_t id : *ids)
          if (!seen.insert(id).second)
            return R(errc::malformed,
                     "ownerDirectory names fragment " + std::to_string(id) + " twice");
        return owner_directory{std::move(*ids)};
      });
}

result<subscribe_msg> decode_subscribe(const wire_bytes& bytes, const decode_limits& limits,
                                       const envelope_expect& expect) {
  using R = result<subscribe_msg>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::SUBSCRIBE,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           subscribe_msg m{body.getSubscribe().getFragmentId()};
                           if (m.fragment_id < 0)
                             return R(errc::malformed, "subscribe.fragmentId is negative");
                           return m;
                         });
}

result<stop_msg> decode_stop(const wire_bytes& bytes, const decode_limits& limits,
                             const envelope_expect& expect) {
  using R = result<stop_msg>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::STOP,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           stop_msg m{body.getStop().getReason()};
                           if (auto st = short_text("stop.reason", m.reason.size()); !st)
                             return st.error();
                           return m;
                         });
}

result<status_request> decode_status_request(const wire_bytes& bytes, const decode_limits& limits,
                                             const envelope_expect& expect) {
  using R = result<status_request>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::STATUS_REQUEST,
      [](cw::Envelope::Body::Reader, uint64_t) -> R { return status_request{}; });
}

result<status_reply> decode_status_reply(const wire_bytes& bytes, const decode_limits& limits,
                                         const envelope_expect& expect) {
  using R = result<status_reply>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect,
                         cw::Envelope::Body::STATUS_REPLY,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getStatusReply();
                           status_reply m{r.getJson(), {}};
                           if (auto st = text_fits("statusReply.json", m.json.size()); !st)
                             return st.error();
                           auto c = auth_bytes("statusReply.challenge", r.getChallenge());
                           if (!c) return c.error();
                           m.challenge = std::move(*c);
                           return m;
                         });
}

result<drain_msg> decode_drain(const wire_bytes& bytes, const decode_limits& limits,
                               const envelope_expect& expect) {
  using R = result<drain_msg>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::DRAIN,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getDrain();
                           drain_msg m{r.getLearnerId(), {}, {}};
                           if (m.learner_id < 0)
                             return R(errc::malformed, "drain.learnerId is negative");
                           auto c = auth_bytes("drain.challenge", r.getChallenge());
                           if (!c) return c.error();
                           m.challenge = std::move(*c);
                           auto p = auth_bytes("drain.proof", r.getProof());
                           if (!p) return p.error();
                           m.proof = std::move(*p);
                           return m;
                         });
}

result<drain_reply> decode_drain_reply(const wire_bytes& bytes, const decode_limits& limits,
                                       const envelope_expect& expect) {
  using R = result<drain_reply>;
  return decode_envelope(bytes.data(), bytes.size(), limits, expect,
                         cw::Envelope::Body::DRAIN_REPLY,
                         [](cw::Envelope::Body::Reader body, uint64_t) -> R {
                           auto r = body.getDrainReply();
                           drain_reply m{r.getAccepted(), r.getDetail()};
                           if (auto st = short_text("drainReply.detail", m.detail.size()); !st)
                             return st.error();
                           return m;
                         });
}

result<node_events> decode_node_events(const wire_bytes& bytes, const decode_limits& limits,
                                       const envelope_expect& expect) {
  using R = result<node_events>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, expect, cw::Envelope::Body::NODE_EVENTS,
      [](cw::Envelope::Body::Reader body, uint64_t) -> R {
        auto r = body.getNodeEvents();
        node_events m{r.getNode(), r.getLines(), r.getStream(), r.getOffset()};
        if (m.stream.size() > 64)
          return R(errc::malformed,
                   "nodeEvents.stream must be at most 64 bytes, not " + num(m.stream.size()));
        if (m.node.empty() || m.node.size() > 64)
          return R(errc::malformed,
                   "nodeEvents.node must be 1 to 64 characters, not " + num(m.node.size()));
        for (char ch : m.node)
          if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                ch == '.'))
            return R(errc::malformed,
                     "nodeEvents.node '" + m.node + "' holds a character outside [A-Za-z0-9._-]");
        if (m.lines.size() > max_event_lines)
          return R(errc::too_large,
                   "nodeEvents.lines is " + num(m.lines.size()) + " bytes (at most 1 MiB)");
        return m;
      });
}

}  // namespace dd
