// tests/actors/basp_tap.hpp — a wire tap for the two-node tests: it reads the bytes that cross
// between two CAF nodes (BASP, CAF 0.17's binary actor system protocol) and counts the message
// kinds that crossed, so a test can assert that every kind of the project's protocol really went
// over the (simulated or loopback) network — serialized, so no pointer can have crossed.
//
// A BASP frame is a 32-byte header (network byte order: operation u8, 2 padding bytes, flags u8,
// payload length u32, operation data u64, source actor u64, destination actor u64) and the
// payload. A direct message's operation data is its CAF message id; its payload holds the
// serialized message, whose first element is one of the project's atoms (atoms.hpp), written as
// a big-endian u64. A reply carries no atom: it is named after the request it answers
// ("dd_join reply"), matched by (requesting actor, request id). The other operations are counted
// by name ("basp:server_handshake", "basp:down_message", ...); a message without a project atom
// is "other message" (CAF's own, e.g. its middlemen's "info" lookups at connection setup).
//
// A tensor channel (actors/link/tensor_channel.hpp) shares the syncer's port: a link whose client
// side opens with the channel magic is read as a channel from then on, in both directions (the
// server side after CAF's server handshake): hellos are counted as "channel:hello", frames by the
// atom they become at the receiver ("dd_push", "dd_copy", "dd_bcast"), as if CAF had carried
// them.
//
// Single-threaded: feed each direction from one thread (the loopback proxy uses a mutex).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/atom.hpp>
#include <caf/message_id.hpp>

#include "actors/link/atoms.hpp"

namespace dd::test {

/// Counts BASP frames and the project's message kinds on the links of one test.
class basp_tap {
 public:
  basp_tap() {
    add<atoms::join_atom>();
    add<atoms::heartbeat_atom>();
    add<atoms::leave_atom>();
    add<atoms::push_atom>();
    add<atoms::ack_atom>();
    add<atoms::pull_atom>();
    add<atoms::broadcast_atom>();
    add<atoms::reject_atom>();
    add<atoms::subscribe_atom>();
    add<atoms::live_atom>();
    add<atoms::owners_atom>();
    add<atoms::stop_atom>();
    add<atoms::progress_atom>();
    add<atoms::node_join_atom>();
    add<atoms::syncer_atom>();
    add<atoms::drain_atom>();
    add<atoms::events_atom>();
    add<atoms::status_atom>();
    add<atoms::finished_atom>();
    add<atoms::budget_spent_atom>();
    add<atoms::children_done_atom>();
    add<atoms::kill_atom>();
    add<atoms::step_atom>();
  }

  /// Bytes of one direction of link `link` ("learner>syncer#1"), in stream order.
  void feed(const std::string& link, const char* data, size_t n) {
    std::lock_guard<std::mutex> g(m_);
    auto& buf = pending_[link];
    buf.insert(buf.end(), data, data + n);
    size_t pos = 0;
    const std::string conn =
        link.substr(link.find('#') == std::string::npos ? link.size() : link.find('#'));
    if (direction(link) == "learner>syncer" && !seen_.count(link) && buf.size() >= 8) {
      seen_.insert(link);
      if (std::memcmp(buf.data(), "DDTCHAN1", 8) == 0) channel_conns_.insert(conn);
    }
    while (buf.size() - pos >= k_header) {
      if (channel_conns_.count(conn) &&
          (channel_links_.count(link) || std::memcmp(buf.data() + pos, "DDTCHAN1", 8) == 0)) {
        channel_links_.insert(link);
        const auto* h = reinterpret_cast<const unsigned char*>(buf.data() + pos);
        size_t whole = 0;
        std::string kind;
        if (std::memcmp(h, "DDTCHAN1", 8) == 0) {
          whole = k_header + le(h + 12, 4);
          kind = "channel:hello";
        } else {
          if (buf.size() - pos < k_channel_header) break;
          whole = k_channel_header + le(h + 32, 8);
          static const char* names[] = {"channel:?", "dd_push", "dd_copy", "dd_bcast"};
          kind = names[h[4] <= 3 ? h[4] : 0];
        }
        if (buf.size() - pos < whole) break;
        ++kinds_[kind];
        ++directed_[direction(link) + " " + kind];
        pos += whole;
        bytes_ += whole;
        continue;
      }
      const auto* h = reinterpret_cast<const unsigned char*>(buf.data() + pos);
      const uint32_t len = be32(h + 4);
      if (buf.size() - pos < k_header + len) break;
      frame(link, h[0], be64(h + 8), be64(h + 16), be64(h + 24),
            reinterpret_cast<const unsigned char*>(buf.data() + pos + k_header), len);
      pos += k_header + len;
      bytes_ += k_header + len;
    }
    buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(pos));
  }

  /// Frames seen per kind: "dd_push", "dd_join reply", "basp:heartbeat", ...
  std::map<std::string, uint64_t> kinds() const {
    std::lock_guard<std::mutex> g(m_);
    return kinds_;
  }
  /// Frames seen per kind and direction ("learner>syncer dd_push").
  std::map<std::string, uint64_t> directed() const {
    std::lock_guard<std::mutex> g(m_);
    return directed_;
  }
  uint64_t count(const std::string& kind) const {
    std::lock_guard<std::mutex> g(m_);
    auto it = kinds_.find(kind);
    return it == kinds_.end() ? 0 : it->second;
  }
  /// Whole frames parsed, bytes.
  uint64_t bytes() const {
    std::lock_guard<std::mutex> g(m_);
    return bytes_;
  }

 private:
  static constexpr size_t k_header = 32;
  static constexpr size_t k_channel_header = 48;
  static uint64_t le(const unsigned char* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
    return v;
  }

  template <class Atom>
  void add() {
    const uint64_t v = Atom::uint_value();
    unsigned char be[8];
    for (int i = 0; i < 8; ++i) be[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
    atoms_.push_back({std::string(be, be + 8), caf::to_string(Atom::get_value())});
  }

  static std::string fmt_hex(unsigned char c) {
    static const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }
  static uint32_t be32(const unsigned char* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  }
  static uint64_t be64(const unsigned char* p) { return (uint64_t{be32(p)} << 32) | be32(p + 4); }

  /// The link's direction without its connection number ("learner>syncer").
  static std::string direction(const std::string& link) { return link.substr(0, link.find('#')); }

  void frame(const std::string& link, unsigned op, uint64_t op_data, uint64_t src, uint64_t dst,
             const unsigned char* payload, size_t len) {
    static const char* names[] = {"server_handshake", "client_handshake", "direct_message",
                                  "routed_message",   "monitor_message",  "down_message",
                                  "heartbeat"};
    std::string kind;
    if (op == 2 || op == 3) {
      // The earliest project atom in the payload names the message.
      size_t best = len;
      for (const auto& [bytes, name] : atoms_) {
        const void* hit = memmem(payload, len, bytes.data(), bytes.size());
        if (hit == nullptr) continue;
        const size_t at = static_cast<size_t>(static_cast<const unsigned char*>(hit) - payload);
        if (at < best) {
          best = at;
          kind = name;
        }
      }
      const auto mid = caf::message_id{op_data};
      if (mid.is_response()) {
        auto it = requests_.find(std::make_pair(dst, mid.request_id().integer_value()));
        kind = (it != requests_.end() ? it->second : std::string("?")) + " reply";
        if (it != requests_.end()) requests_.erase(it);
      } else {
        if (kind.empty()) {
          // Without a project atom: CAF's own traffic (at connection setup each middleman asks
          // the other's config and spawn servers for "info"). DD_TAP_DEBUG=1 prints them.
          kind = "other message";
          if (std::getenv("DD_TAP_DEBUG") != nullptr) {
            std::string hex;
            for (size_t i = 0; i < len && i < 160; ++i) hex += fmt_hex(payload[i]);
            std::fprintf(stderr, "tap: %s unknown message (%zu bytes): %s\n", link.c_str(), len,
                         hex.c_str());
          }
        }
        if (mid.is_request())
          requests_[std::make_pair(src, mid.request_id().integer_value())] = kind;
      }
    } else {
      kind = std::string("basp:") + (op < 7 ? names[op] : "invalid");
    }
    ++kinds_[kind];
    ++directed_[direction(link) + " " + kind];
  }

  mutable std::mutex m_;
  std::vector<std::pair<std::string, std::string>> atoms_;  ///< (big-endian bytes, name)
  std::map<std::string, std::vector<char>> pending_;        ///< partial frame per link
  std::set<std::string> seen_;           ///< client links whose first bytes were looked at
  std::set<std::string> channel_conns_;  ///< connections ("#3") that are tensor channels
  std::set<std::string> channel_links_;  ///< links already read as channel frames
  std::map<std::pair<uint64_t, uint64_t>, std::string> requests_;  ///< (requester, id) → kind
  std::map<std::string, uint64_t> kinds_, directed_;
  uint64_t bytes_ = 0;
};

/// The message kinds of the learner <-> syncer protocol (actors/link/atoms.hpp) that a two-node run
/// must carry at least once in each listed direction.
inline std::vector<std::string> protocol_kinds() {
  return {
      "learner>syncer dd_njoin",       "syncer>learner dd_njoin reply",  "learner>syncer dd_join",
      "syncer>learner dd_join reply",  "learner>syncer dd_hbeat",        "syncer>learner dd_prog",
      "learner>syncer dd_leave",       "learner>syncer dd_push",         "syncer>learner dd_ack",
      "learner>syncer dd_pull",        "syncer>learner dd_bcast",        "syncer>learner dd_reject",
      "syncer>learner dd_owners",      "syncer>learner dd_stop",         "learner>syncer dd_events",
      "learner>syncer dd_status",      "syncer>learner dd_status reply", "learner>syncer dd_drain",
      "syncer>learner dd_drain reply",
  };
}

}  // namespace dd::test
