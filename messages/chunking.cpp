// messages/chunking.cpp — see chunking.hpp.
#include "messages/chunking.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "messages/detail/envelope.hpp"
#include "util/crc32c.hpp"

namespace dd {

using namespace detail;

namespace {

constexpr uint64_t not_received = std::numeric_limits<uint64_t>::max();

/// Asks the kernel to back the 2 MiB-aligned part of [p, p + size) with transparent huge pages
/// (Linux, MADV_HUGEPAGE; a hint, failure is ignored). A transfer buffer is fresh memory written
/// once: with 4 KiB pages a 64 MiB fragment takes 16,384 page faults, which cost more than the
/// copy itself (docs/benchmarks-transport.md "Transport").
void advise_huge_pages(void* p, size_t size) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t huge = uintptr_t{2} << 20;
  const auto lo = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto hi = (reinterpret_cast<uintptr_t>(p) + size) & ~(huge - 1);
  if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)size;
#endif
}

/// The fields of `whole` a chunk repeats, without its payload (copying `whole` would copy it).
/// Every field but payload, payload_crc32c and the chunk fields, which each chunk sets; a field
/// added to the message must be added here (ChunkEncode tests compare every field).
push_msg chunk_header(const push_msg& whole) {
  push_msg c;
  c.learner_id = whole.learner_id;
  c.incarnation = whole.incarnation;
  c.fragment_id = whole.fragment_id;
  c.base_version = whole.base_version;
  c.steps = whole.steps;
  c.tokens = whole.tokens;
  c.transfer_id = whole.transfer_id;
  c.encoding = whole.encoding;
  c.total_elements = whole.total_elements;
  c.payload_bytes = whole.payload_bytes;
  c.contains_from = whole.contains_from;
  return c;
}

broadcast_msg chunk_header(const broadcast_msg& whole) {
  broadcast_msg c;
  c.fragment_id = whole.fragment_id;
  c.version = whole.version;
  c.encoding = whole.encoding;
  c.total_elements = whole.total_elements;
  c.payload_bytes = whole.payload_bytes;
  c.merged = whole.merged;
  c.value_digest = whole.value_digest;
  return c;
}

/// Cuts `whole` into chunks and calls emit(chunk header, its payload slice) for each, in order:
/// the header fields copied once per chunk (copying `whole` per chunk would copy the whole
/// payload count times), the payload not at all. errc::invalid_argument for chunk_bytes 0,
/// size_mismatch when payload and payload_bytes disagree, too_large past 2^32 chunks.
template <class Msg, class Emit>
status for_each_chunk(const Msg& whole, size_t chunk_bytes, const char* what, Emit&& emit) {
  if (chunk_bytes == 0) return {errc::invalid_argument, "chunk_bytes must be > 0"};
  if (whole.payload.size() != whole.payload_bytes) {
    return {errc::size_mismatch, std::string(what) + ".payload holds " + num(whole.payload.size()) +
                                     " bytes, payload_bytes says " + num(whole.payload_bytes)};
  }
  const size_t total = whole.payload.size();
  const size_t count = total == 0 ? 1 : (total + chunk_bytes - 1) / chunk_bytes;
  if (count > std::numeric_limits<uint32_t>::max())
    return {errc::too_large, std::string(what) + ": " + num(count) + " chunks do not fit u32"};
  for (size_t i = 0; i < count; ++i) {
    Msg c = chunk_header(whole);
    const size_t off = i * chunk_bytes;
    const size_t len = std::min(chunk_bytes, total - off);
    c.chunk_index = static_cast<uint32_t>(i);
    c.chunk_count = static_cast<uint32_t>(count);
    c.chunk_offset = off;
    emit(std::move(c), payload_view{whole.payload.data() + off, len});
  }
  return {};
}

template <class Msg>
result<std::vector<Msg>> split_impl(const Msg& whole, size_t chunk_bytes, const char* what) {
  std::vector<Msg> out;
  auto st = for_each_chunk(whole, chunk_bytes, what, [&](Msg c, const payload_view& p) {
    c.payload.assign(p.data, p.data + p.size);
    c.payload_crc32c = util::crc32c(p.data, p.size);
    out.push_back(std::move(c));
  });
  if (!st) return st.error();
  return out;
}

bool same_transfer_header(const push_msg& a, const push_msg& b) {
  return a.learner_id == b.learner_id && a.incarnation == b.incarnation &&
         a.fragment_id == b.fragment_id && a.base_version == b.base_version && a.steps == b.steps &&
         a.tokens == b.tokens && a.transfer_id == b.transfer_id && a.encoding == b.encoding &&
         a.total_elements == b.total_elements && a.payload_bytes == b.payload_bytes &&
         a.chunk_count == b.chunk_count && a.contains_from == b.contains_from;
}

bool same_transfer_header(const broadcast_msg& a, const broadcast_msg& b) {
  return a.fragment_id == b.fragment_id && a.version == b.version && a.encoding == b.encoding &&
         a.total_elements == b.total_elements && a.payload_bytes == b.payload_bytes &&
         a.chunk_count == b.chunk_count && a.value_digest == b.value_digest;
}

std::tuple<uint64_t, uint64_t> order_of(const push_msg& m) {
  return {m.incarnation, m.transfer_id};
}
std::tuple<uint64_t, uint64_t> order_of(const broadcast_msg& m) { return {m.version, 0}; }

const char* name_of(const push_msg&) { return "push"; }
const char* name_of(const broadcast_msg&) { return "broadcast"; }

std::string describe(const push_msg& m) {
  return "push (learner " + std::to_string(m.learner_id) + ", fragment " +
         std::to_string(m.fragment_id) + ", transfer " + num(m.transfer_id) + ")";
}
std::string describe(const broadcast_msg& m) {
  return "broadcast (fragment " + std::to_string(m.fragment_id) + ", version " + num(m.version) +
         ")";
}

}  // namespace

result<std::vector<push_msg>> split_push(const push_msg& whole, size_t chunk_bytes) {
  return split_impl(whole, chunk_bytes, "push");
}

result<std::vector<broadcast_msg>> split_broadcast(const broadcast_msg& whole, size_t chunk_bytes) {
  return split_impl(whole, chunk_bytes, "broadcast");
}

result<std::vector<wire_bytes>> encode_push_chunks(const push_msg& whole, size_t chunk_bytes,
                                                   const envelope_stamp& stamp) {
  std::vector<wire_bytes> out;
  auto st =
      for_each_chunk(whole, chunk_bytes, "push", [&](const push_msg& c, const payload_view& p) {
        out.push_back(encode_push_chunk(c, p, stamp));
      });
  if (!st) return st.error();
  return out;
}

result<std::vector<wire_bytes>> encode_broadcast_chunks(const broadcast_msg& whole,
                                                        size_t chunk_bytes,
                                                        const envelope_stamp& stamp) {
  std::vector<wire_bytes> out;
  auto st = for_each_chunk(whole, chunk_bytes, "broadcast",
                           [&](const broadcast_msg& c, const payload_view& p) {
                             out.push_back(encode_broadcast_chunk(c, p, stamp));
                           });
  if (!st) return st.error();
  return out;
}

chunk_assembler::chunk_assembler(chunk_limits limits) : limits_(limits) {}

template <class Msg>
void chunk_assembler::release(assembly<Msg>& a) noexcept {
  buffered_ -= a.reserved;
  a.reserved = 0;
  a.bytes = {};
}

namespace {

/// Whether [off, off + size) overlaps none of the disjoint slices in `slices` (offset → end).
bool slice_free(const std::map<uint64_t, uint64_t>& slices, uint64_t off, uint64_t size) {
  auto next = slices.lower_bound(off);
  if (next != slices.end() && next->first < off + size) return false;
  if (next != slices.begin() && std::prev(next)->second > off) return false;
  return true;
}

}  // namespace

template <class Msg, class Key>
result<std::optional<Msg>> chunk_assembler::add_impl(std::map<Key, assembly<Msg>>& table,
                                                     const Key& key, const Msg& chunk,
                                                     const uint8_t* payload, size_t size,
                                                     std::optional<uint32_t> payload_crc,
                                                     const pending_seal* seal) {
  // `chunk.payload` is not read: the payload is [payload, payload + size); `payload_crc`, when
  // given, is its CRC-32C (computed by the decoder); `seal`, when given, is the message's
  // trailer check the decoder left to this call (then nothing of the chunk is checked yet).
  using R = result<std::optional<Msg>>;
  const std::string what = describe(chunk);
  // The checksum verdict on the payload's CRC-32C: the message's trailer (when its check was
  // left here), then the chunk's own payload_crc32c (when not 0).
  auto verdict = [&](uint32_t crc) -> std::optional<R> {
    if (seal != nullptr) {
      if (auto st = check_pending_seal(*seal, crc); !st) {
        return R(errc::checksum_mismatch, what + ": " + st.error().message);
      }
    }
    if (chunk.payload_crc32c != 0 && crc != chunk.payload_crc32c) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": chunk %u of %u: payload CRC32C %08x does not match %08x",
                    chunk.chunk_index, chunk.chunk_count, crc, chunk.payload_crc32c);
      return R(errc::checksum_mismatch, what + buf + " sent with it (damaged in transit)");
    }
    return std::nullopt;
  };
  // A chunk damaged in transit is refused before it can touch anything accepted. With the
  // trailer's check left here (`pending`), the verdict waits for the copy into the transfer's
  // buffer only where that copy changes nothing accepted (bytes the buffer holds, in a slice no
  // accepted chunk overlaps: see add(chunk_ref)); every other way on (an error, a change to the
  // table, a copy elsewhere) settles it first.
  bool pending = seal != nullptr;
  auto settle = [&]() -> std::optional<R> {
    if (!pending) return std::nullopt;
    pending = false;
    return verdict(util::crc32c(payload, size));
  };
  if (!pending && chunk.payload_crc32c != 0) {
    if (auto v = verdict(payload_crc ? *payload_crc : util::crc32c(payload, size))) return *v;
  }
  auto it = table.find(key);
  const auto order = order_of(chunk);
  if (it != table.end()) {
    if (order < it->second.order) {
      if (auto v = settle()) return *v;
      return R(errc::chunk_stale, what + ": chunk of an older transfer than the one in progress");
    }
    if (order > it->second.order) {  // newest transfer wins
      if (auto v = settle()) return *v;
      release(it->second);
      table.erase(it);
      it = table.end();
    }
  }
  // From here on an error for this transfer discards its partial assembly.
  auto fail = [&](errc code, const std::string& msg) -> R {
    if (auto v = settle()) return *v;
    if (it != table.end()) {
      release(it->second);
      table.erase(it);
    }
    return R(code, what + ": " + msg);
  };

  if (auto st = check_chunk_fields(name_of(chunk), chunk.encoding, chunk.total_elements,
                                   chunk.payload_bytes, chunk.chunk_index, chunk.chunk_count,
                                   chunk.chunk_offset, size);
      !st) {
    errc code = st.code() == errc::malformed ? errc::chunk_inconsistent : st.code();
    return fail(code, st.error().message);
  }
  if (chunk.chunk_count > limits_.max_chunks) {
    return fail(errc::too_large, "chunkCount " + num(chunk.chunk_count) + " exceeds max_chunks " +
                                     num(limits_.max_chunks));
  }
  if (size > limits_.max_chunk_bytes) {
    return fail(errc::too_large, "chunk of " + num(size) + " bytes exceeds max_chunk_bytes " +
                                     num(limits_.max_chunk_bytes));
  }
  if (chunk.payload_bytes > limits_.max_assembly_bytes) {
    return fail(errc::too_large, "payloadBytes " + num(chunk.payload_bytes) +
                                     " exceeds max_assembly_bytes " +
                                     num(limits_.max_assembly_bytes));
  }
  if (size == 0 && chunk.payload_bytes != 0) {
    return fail(errc::chunk_inconsistent,
                "empty chunk " + num(chunk.chunk_index) + " of a non-empty payload");
  }
  if (chunk.payload_bytes == 0 && chunk.chunk_count != 1) {
    return fail(errc::chunk_inconsistent,
                "an empty payload must travel as 1 chunk, not " + num(chunk.chunk_count));
  }
  if (chunk.chunk_count > 1 && chunk.chunk_count > chunk.payload_bytes) {
    return fail(errc::chunk_inconsistent, "chunkCount " + num(chunk.chunk_count) +
                                              " exceeds payloadBytes " + num(chunk.payload_bytes));
  }

  // Inside [0, payload_bytes) (check_chunk_fields), so within the reserved capacity.
  const auto off = static_cast<size_t>(chunk.chunk_offset);
  bool copied = false;
  if (it == table.end()) {
    if (in_progress() >= limits_.max_in_progress) {
      if (auto v = settle()) return *v;
      return R(errc::too_large, what + ": " + num(in_progress()) +
                                    " transfers already in progress (max_in_progress)");
    }
    if (chunk.payload_bytes >
        limits_.max_buffered_bytes - std::min(buffered_, limits_.max_buffered_bytes)) {
      if (auto v = settle()) return *v;
      return R(errc::too_large, what + ": " + num(chunk.payload_bytes) +
                                    " more bytes would exceed "
                                    "max_buffered_bytes " +
                                    num(limits_.max_buffered_bytes) + " (" + num(buffered_) +
                                    " buffered)");
    }
    const auto reserved = static_cast<size_t>(chunk.payload_bytes);
    const size_t spare = spare_.capacity();
    const bool reuse = spare != 0 && spare >= reserved && spare <= 2 * reserved + 4096;
    // The bytes the recycled buffer already holds: a chunk inside them is copied in place.
    const size_t held = reuse ? std::min(spare_.size(), reserved) : 0;
    if (pending && !(size != 0 && off + size <= held)) {
      if (auto v = settle()) return *v;
    }
    assembly<Msg> a;
    a.order = order;
    a.reserved = reserved;
    if (reuse) {
      a.bytes = std::move(spare_);  // pages already mapped: no faults, no zero-fill
      a.bytes.resize(held);         // shrinks or keeps: nothing written
    } else {
      a.bytes.reserve(a.reserved);  // no zero-fill: each page is first written by its chunk
      advise_huge_pages(a.bytes.data(), a.reserved);
    }
    std::vector<uint8_t>().swap(spare_);  // used, or freed: it does not fit
    if (pending) {  // the transfer's first chunk, copied and checksummed in one pass
      pending = false;
      if (auto v = verdict(util::crc32c_copy(a.bytes.data() + off, payload, size))) {
        spare_ = std::move(a.bytes);  // no transfer started; the buffer stays the spare
        return *v;
      }
      copied = true;
    }
    a.offsets.assign(chunk.chunk_count, not_received);
    a.lengths.assign(chunk.chunk_count, 0);
    a.header = chunk;
    a.header.payload.clear();  // empty already where the caller passed the payload apart
    a.header.chunk_index = 0;
    a.header.chunk_offset = 0;
    buffered_ += a.reserved;
    it = table.emplace(key, std::move(a)).first;
  } else if (!same_transfer_header(it->second.header, chunk)) {
    return fail(errc::chunk_inconsistent,
                "chunk " + num(chunk.chunk_index) +
                    " disagrees with the transfer's first chunk (header fields differ)");
  }

  assembly<Msg>& a = it->second;
  if (a.offsets[chunk.chunk_index] != not_received) {
    if (auto v = settle()) return *v;
    return R(errc::chunk_duplicate,
             what + ": chunk " + num(chunk.chunk_index) + " arrived twice; the copy is ignored");
  }
  if (pending) {
    if (size != 0 && off + size <= a.bytes.size() && !a.overlapping &&
        slice_free(a.slices, off, size)) {
      // Into bytes no accepted chunk holds: a refused chunk leaves this slice not received.
      pending = false;
      if (auto v = verdict(util::crc32c_copy(a.bytes.data() + off, payload, size))) return *v;
      copied = true;
    } else if (auto v = settle()) {
      return *v;
    }
  }
  if (size != 0 && !copied) {
    // No reallocation: bytes below the current end are overwritten, the rest appended.
    if (a.bytes.size() < off) a.bytes.resize(off);
    const size_t inside = std::min(size, a.bytes.size() - off);
    if (inside != 0) std::memcpy(a.bytes.data() + off, payload, inside);
    a.bytes.insert(a.bytes.end(), payload + inside, payload + size);
  }
  if (size != 0 && !a.overlapping) {
    if (slice_free(a.slices, off, size)) {
      a.slices.emplace(off, off + size);
    } else {
      a.overlapping = true;  // the transfer cannot complete; no copy before a verdict now
      a.slices.clear();
    }
  }
  a.offsets[chunk.chunk_index] = chunk.chunk_offset;
  a.lengths[chunk.chunk_index] = size;
  a.received += 1;
  if (a.received < a.header.chunk_count) return R(std::optional<Msg>{});

  // All chunks in: they must tile [0, payload_bytes) in index order.
  uint64_t expected = 0;
  for (uint32_t i = 0; i < a.header.chunk_count; ++i) {
    if (a.offsets[i] != expected) {
      return fail(errc::chunk_inconsistent, "chunk " + num(i) + " starts at byte " +
                                                num(a.offsets[i]) + ", expected " + num(expected));
    }
    expected += a.lengths[i];
  }
  if (expected != a.header.payload_bytes || a.bytes.size() != a.reserved) {
    return fail(errc::chunk_inconsistent, "chunks cover " + num(expected) + " of " +
                                              num(a.header.payload_bytes) + " payload bytes");
  }
  Msg whole = std::move(a.header);
  whole.chunk_index = 0;
  whole.chunk_count = 1;
  whole.chunk_offset = 0;
  whole.payload_crc32c = 0;  // every chunk was checked; the whole payload's CRC is not computed
  buffered_ -= a.reserved;
  whole.payload = std::move(a.bytes);
  table.erase(it);
  return R(std::optional<Msg>(std::move(whole)));
}

result<std::optional<push_msg>> chunk_assembler::add(push_msg chunk) {
  const auto key = std::make_pair(chunk.learner_id, chunk.fragment_id);
  const std::vector<uint8_t> payload = std::move(chunk.payload);  // the header alone is kept
  return add_impl(pushes_, key, chunk, payload.data(), payload.size());
}

result<std::optional<broadcast_msg>> chunk_assembler::add(broadcast_msg chunk) {
  const int32_t key = chunk.fragment_id;
  const std::vector<uint8_t> payload = std::move(chunk.payload);
  return add_impl(broadcasts_, key, chunk, payload.data(), payload.size());
}

result<std::optional<push_msg>> chunk_assembler::add(const chunk_ref<push_msg>& chunk) {
  const auto key = std::make_pair(chunk.header.learner_id, chunk.header.fragment_id);
  return add_impl(pushes_, key, chunk.header, chunk.payload, chunk.payload_size, chunk.payload_crc,
                  chunk.seal ? &*chunk.seal : nullptr);
}

result<std::optional<broadcast_msg>> chunk_assembler::add(const chunk_ref<broadcast_msg>& chunk) {
  const int32_t key = chunk.header.fragment_id;
  return add_impl(broadcasts_, key, chunk.header, chunk.payload, chunk.payload_size,
                  chunk.payload_crc, chunk.seal ? &*chunk.seal : nullptr);
}

size_t chunk_assembler::drop_learner(int32_t learner_id) {
  size_t n = 0;
  for (auto it = pushes_.begin(); it != pushes_.end();) {
    if (it->first.first == learner_id) {
      release(it->second);
      it = pushes_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t chunk_assembler::drop_broadcast(int32_t fragment_id) {
  auto it = broadcasts_.find(fragment_id);
  if (it == broadcasts_.end()) return 0;
  release(it->second);
  broadcasts_.erase(it);
  return 1;
}

void chunk_assembler::clear() {
  pushes_.clear();
  broadcasts_.clear();
  buffered_ = 0;
  std::vector<uint8_t>().swap(spare_);
}

void chunk_assembler::recycle(std::vector<uint8_t>&& buffer) {
  spare_ = std::move(buffer);  // its bytes kept: the next transfer's chunks land in place
}

}  // namespace dd
