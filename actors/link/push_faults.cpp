// actors/link/push_faults.cpp — see push_faults.hpp.
#include "actors/link/push_faults.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "actors/services/fault_hooks.hpp"
#include "actors/services/run_log.hpp"
#include "messages/chunking.hpp"
#include "runtime/quantize.hpp"
#include "runtime/rng.hpp"

namespace dd::actors {

wire_bytes damaged_copy(const wire_bytes& chunk) {
  wire_bytes out = chunk;
  // Our own chunk: decoded against the run it was stamped with.
  auto header = peek_envelope(chunk);
  auto m = header ? decode_push(chunk, {}, envelope_expect{header->run_id, 0}) : decode_push(chunk);
  if (!m || m->payload.empty()) {
    if (!out.empty()) out.back() ^= 0x01;
    return out;
  }
  auto at = std::search(out.begin(), out.end(), m->payload.begin(), m->payload.end());
  if (at == out.end()) return out;
  *(at + static_cast<std::ptrdiff_t>(m->payload.size() / 2)) ^= 0x10;
  return out;
}

result<decoded_push> decode_whole_push(const std::vector<wire_bytes>& chunks) {
  if (chunks.empty()) return wire_error{errc::malformed, "push: no chunks"};
  auto header = peek_envelope(chunks.front());
  if (!header) return header.error();
  decoded_push d;
  d.stamp = envelope_stamp{header->run_id, header->sender_incarnation};
  chunk_assembler assembler;
  std::optional<push_msg> whole;
  for (const auto& c : chunks) {
    auto m = decode_push(c, {}, envelope_expect{header->run_id, 0});
    if (!m) return m.error();
    if (m->chunk_count > 1) d.chunk_bytes = std::max<size_t>(d.chunk_bytes, m->payload.size());
    auto done = assembler.add(std::move(*m));
    if (!done) return done.error();
    if (*done) whole = std::move(**done);
  }
  if (!whole) return wire_error{errc::malformed, "push: its chunks do not make one whole push"};
  auto values = decode_payload(whole->encoding, whole->payload.data(), whole->payload.size(),
                               static_cast<size_t>(whole->total_elements));
  if (!values) return values.error();
  d.values = std::move(*values);
  d.whole = std::move(*whole);
  return d;
}

result<std::vector<wire_bytes>> encode_edited_push(decoded_push d) {
  d.whole.payload = encode_payload(d.whole.encoding, d.values.data(), d.values.size());
  d.whole.payload_bytes = d.whole.payload.size();
  d.whole.chunk_index = 0;
  d.whole.chunk_count = 1;
  d.whole.chunk_offset = 0;
  d.whole.payload_crc32c = 0;
  if (d.chunk_bytes == 0) return std::vector<wire_bytes>{encode(d.whole, d.stamp)};
  return encode_push_chunks(d.whole, d.chunk_bytes, d.stamp);
}

namespace {

/// Replaces the push `bytes` by its values edited by `f` (edited_push); leaves it unchanged (and
/// emits a "failure" event naming `what`) when it does not decode.
void edit(std::vector<wire_bytes>& bytes, event_sink* log, const nlohmann::json& where,
          const char* what, const std::function<void(std::vector<float>&)>& f) {
  auto out = edited_push(bytes, f);
  if (out) {
    bytes = std::move(*out);
    return;
  }
  if (log != nullptr) {
    auto ev = where;
    ev["what"] = what;
    ev["error"] = out.error().message;
    log->emit("failure", ev);
  }
}

}  // namespace

std::vector<push_send> push_filter::route(fault_hooks* hooks, event_sink* log,
                                          const caf::actor& dest, outgoing_push p) {
  auto held = std::exchange(held_, std::nullopt);
  std::vector<push_send> out;
  push_fault fate;
  const std::pair<uint64_t, uint64_t> key{p.incarnation, p.transfer_id};
  auto last = filtered_.find(p.fragment);
  if (last == filtered_.end() || last->second < key) {
    filtered_[p.fragment] = key;
    if (hooks != nullptr)
      fate = hooks->on_push(p.learner, p.incarnation, p.fragment, p.transfer_id);
  }
  const nlohmann::json where = {
      {"learner", p.learner}, {"fragment", p.fragment}, {"step", p.transfer_id}};
  if (fate.drop) {
    if (log != nullptr) {
      log->emit("push_dropped", where);
      log->update([](run_counters& c) { c.pushes_dropped += 1; });
    }
  } else {
    std::vector<wire_bytes> bytes = std::move(p.chunks);
    if (fate.scale != 1.0) {
      const double factor = fate.scale;
      edit(bytes, log, where, "scale_push", [factor](std::vector<float>& v) {
        for (auto& x : v) x = static_cast<float>(x * factor);
      });
      if (log != nullptr) {
        auto ev = where;
        ev["factor"] = factor;
        log->emit("push_scaled", ev);
      }
    }
    if (fate.random) {
      // One stream per push: the fault's seed, the fragment and the transfer.
      const uint64_t seed =
          derive_seed(derive_seed(fate.seed, static_cast<uint64_t>(p.fragment)), p.transfer_id);
      edit(bytes, log, where, "random_push", [seed](std::vector<float>& v) {
        rng r(seed);
        for (auto& x : v) x = static_cast<float>(r.normal());
      });
      if (log != nullptr) {
        auto ev = where;
        ev["seed"] = fate.seed;
        ev["push_seed"] = seed;
        log->emit("push_randomized", ev);
      }
    }
    if (fate.corrupt) bytes.front() = damaged_copy(bytes.front());
    if (fate.reorder) {
      if (log != nullptr) log->emit("push_held", where);
      if (fate.duplicate) bytes.insert(bytes.end(), bytes.begin(), bytes.end());
      held_.emplace(push_send{dest, std::move(bytes), 0.0});
    } else {
      for (int copy = 0; copy < (fate.duplicate ? 2 : 1); ++copy)
        out.push_back(push_send{dest, bytes, fate.delay_s});
    }
  }
  if (held) out.push_back(std::move(*held));
  if (log != nullptr && !out.empty()) {  // the node's metrics: pushes and bytes that left
    const int32_t id = p.learner;
    log->update([&](run_counters& c) {
      auto& l = c.learners[id];
      for (const auto& s : out) {
        l.pushes_sent += 1;
        for (const auto& b : s.chunks) l.push_bytes_sent += b.size();
      }
    });
  }
  return out;
}

}  // namespace dd::actors
