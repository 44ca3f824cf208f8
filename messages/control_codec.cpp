// messages/control_codec.cpp — see control.hpp.
#include "messages/control.hpp"

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

}  // namespace

wire_bytes encode(const node_join& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initNodeJoin();
  r.setRunId(m.run_id);
  r.setProtocolVersion(m.protocol_version);
  r.setNodeName(m.node_name);
  r.setHost(m.host);
  write_ids(r.initLearnerIds(static_cast<unsigned>(m.learner_ids.size())), m.learner_ids);
  r.setLearnerCount(m.learner_count);
  r.setDataBytes(m.data_bytes);
  r.setDataHash(m.data_hash);
  return flatten(b);
}

wire_bytes encode(const node_join_reply& m) {
  capnp::MallocMessageBuilder b(first_segment_words(m.experiment_json.size() + 1024));
  auto r = b.initRoot<cw::Envelope>().getBody().initNodeJoinReply();
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
  return flatten(b);
}

wire_bytes encode(const leave_msg& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initLeave();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  return flatten(b);
}

result<node_join> decode_node_join(const wire_bytes& bytes, const decode_limits& limits) {
  using R = result<node_join>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, cw::Envelope::Body::NODE_JOIN,
      [](cw::Envelope::Body::Reader body) -> R {
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
        return m;
      });
}

result<node_join_reply> decode_node_join_reply(const wire_bytes& bytes,
                                               const decode_limits& limits) {
  using R = result<node_join_reply>;
  return decode_envelope(
      bytes.data(), bytes.size(), limits, cw::Envelope::Body::NODE_JOIN_REPLY,
      [](cw::Envelope::Body::Reader body) -> R {
        auto r = body.getNodeJoinReply();
        node_join_reply m;
        m.accepted = r.getAccepted();
        const auto refusal = r.getRefusal();
        if (!enum_in_range(refusal, cw::NodeRefusal::BAD_REQUEST))
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
        if (m.accepted && m.refusal != node_refusal::none)
          return R(errc::malformed, "nodeJoinReply is accepted but names a refusal");
        return m;
      });
}

result<leave_msg> decode_leave(const wire_bytes& bytes, const decode_limits& limits) {
  using R = result<leave_msg>;
  return decode_envelope(bytes.data(), bytes.size(), limits, cw::Envelope::Body::LEAVE,
                         [](cw::Envelope::Body::Reader body) -> R {
                           auto r = body.getLeave();
                           leave_msg m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           if (m.learner_id < 0)
                             return R(errc::malformed, "leave.learnerId is negative");
                           return m;
                         });
}

wire_bytes encode(const fragment_query& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initFragmentQuery();
  r.setFragmentId(m.fragment_id);
  r.setQueryId(m.query_id);
  r.setSendValue(m.send_value);
  return flatten(b);
}

wire_bytes encode(const fragment_held& m) {
  capnp::MallocMessageBuilder b;
  auto r = b.initRoot<cw::Envelope>().getBody().initFragmentHeld();
  r.setLearnerId(m.learner_id);
  r.setIncarnation(m.incarnation);
  r.setFragmentId(m.fragment_id);
  r.setQueryId(m.query_id);
  r.setHave(m.have);
  r.setVersion(m.version);
  return flatten(b);
}

result<fragment_query> decode_fragment_query(const wire_bytes& bytes, const decode_limits& limits) {
  using R = result<fragment_query>;
  return decode_envelope(bytes.data(), bytes.size(), limits, cw::Envelope::Body::FRAGMENT_QUERY,
                         [](cw::Envelope::Body::Reader body) -> R {
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

result<fragment_held> decode_fragment_held(const wire_bytes& bytes, const decode_limits& limits) {
  using R = result<fragment_held>;
  return decode_envelope(bytes.data(), bytes.size(), limits, cw::Envelope::Body::FRAGMENT_HELD,
                         [](cw::Envelope::Body::Reader body) -> R {
                           auto r = body.getFragmentHeld();
                           fragment_held m;
                           m.learner_id = r.getLearnerId();
                           m.incarnation = r.getIncarnation();
                           m.fragment_id = r.getFragmentId();
                           m.query_id = r.getQueryId();
                           m.have = r.getHave();
                           m.version = r.getVersion();
                           if (m.learner_id < 0)
                             return R(errc::malformed, "fragmentHeld.learnerId is negative");
                           if (m.fragment_id < 0)
                             return R(errc::malformed, "fragmentHeld.fragmentId is negative");
                           if (!m.have && m.version != 0)
                             return R(errc::malformed, "fragmentHeld.version " + num(m.version) +
                                                           " is set but have is false");
                           return m;
                         });
}

}  // namespace dd
