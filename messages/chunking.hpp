// messages/chunking.hpp — fragment payloads in chunks: `split_push` / `split_broadcast` cut a
// whole push or broadcast into chunk messages, a `chunk_assembler` puts them back together under
// caps. The messages themselves: messages/codec.hpp (which includes this header). Pure functions
// are thread-safe; a chunk_assembler is used by one actor at a time. docs/wire.md "Chunking".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "messages/codec.hpp"

namespace dd {

/// Split a whole push (payload = all payload_bytes) into chunks of at most `chunk_bytes` payload
/// bytes each (the last may be shorter; a zero-byte payload gives one empty chunk). Every chunk
/// copies the header fields and sets chunk_index/count/offset and its payload_crc32c. chunk_bytes
/// must be > 0 (errc:: invalid_argument); payload.size() must equal payload_bytes
/// (errc::size_mismatch).
result<std::vector<push_msg>> split_push(const push_msg& whole,
                                         size_t chunk_bytes = default_chunk_bytes);
/// Same for a broadcast.
result<std::vector<broadcast_msg>> split_broadcast(const broadcast_msg& whole,
                                                   size_t chunk_bytes = default_chunk_bytes);

/// split_push then encode each chunk, without the split's copy of each chunk's payload: the
/// chunks' messages, each payload copied once (into its message). Decodes to exactly what
/// encoding split_push's chunks decodes to. Errors as split_push.
result<std::vector<wire_bytes>> encode_push_chunks(const push_msg& whole, size_t chunk_bytes,
                                                   const envelope_stamp& stamp);
/// The same for a broadcast.
result<std::vector<wire_bytes>> encode_broadcast_chunks(const broadcast_msg& whole,
                                                        size_t chunk_bytes,
                                                        const envelope_stamp& stamp);

/// Caps of a chunk_assembler (flow-control: a fast sender cannot exhaust the receiver).
struct chunk_limits {
  /// Largest payload of a single chunk, bytes.
  size_t max_chunk_bytes = size_t{16} << 20;
  /// Largest whole payload of one transfer, bytes (the fragment's encoded size in practice).
  size_t max_assembly_bytes = size_t{1} << 30;
  /// Largest chunk_count of one transfer.
  uint32_t max_chunks = 1u << 16;
  /// Bytes buffered across all in-progress transfers.
  size_t max_buffered_bytes = size_t{2} << 30;
  /// In-progress transfers at once.
  size_t max_in_progress = 256;
};

/// Reassembles chunked pushes and broadcasts.
///
/// Transfers are keyed by (learner id, fragment id) for pushes and by fragment id for
/// broadcasts. Within a key the newest transfer wins: a chunk of a newer transfer (higher
/// (incarnation, transfer_id) for pushes, higher version for broadcasts) discards the partial
/// older one; a chunk of an older transfer is refused with errc::chunk_stale. Each chunk is
/// checked against the first chunk of its transfer (every header field equal, same chunk_count
/// and payload_bytes), against payload_bytes == encoded_size(encoding, total_elements), against
/// the caps, and for duplicates (errc::chunk_duplicate; the transfer is kept). Before any of
/// that, a chunk whose payload does not match its payload_crc32c (when not 0) is refused with
/// errc::checksum_mismatch and changes nothing (a re-sent copy completes the transfer). On
/// errc::chunk_inconsistent / too_large / size_mismatch the partial transfer is discarded.
/// Chunks may arrive in any order; the transfer completes when all chunk_count chunks are in
/// and they tile [0, payload_bytes) exactly. Missing chunks keep a transfer pending: call
/// `drop_*` or `clear` to give up on it (e.g. when a learner dies or a round times out).
class chunk_assembler {
 public:
  explicit chunk_assembler(chunk_limits limits = {});

  /// Adds one push chunk. Returns the whole push (chunk_index 0, chunk_count 1, payload = all
  /// bytes) when this chunk completes it, std::nullopt while it is incomplete, or an error.
  result<std::optional<push_msg>> add(push_msg chunk);
  /// Adds one broadcast chunk; as above.
  result<std::optional<broadcast_msg>> add(broadcast_msg chunk);
  /// Adds one push chunk decoded by decode_push_ref: as add(push_msg), but the payload is
  /// checked and copied straight from the encoded message into the transfer's buffer; its
  /// CRC-32C is the one the decoder computed (chunk_ref::payload_crc) where it has one. Where
  /// the decoder left the trailer's check to this call (chunk_ref::seal), that check comes
  /// first, as in the decoder: a chunk that fails it is refused with errc::checksum_mismatch
  /// whatever else is wrong with it, and changes nothing accepted. When the chunk's slice lies
  /// in bytes the transfer's buffer already holds (a recycled buffer) and overlaps no slice
  /// already accepted, the payload is checksummed while it is copied there (one read,
  /// util::crc32c_copy) and the verdict comes after the copy: a refused chunk leaves its bytes
  /// in a slice that stays not received, which the chunk that fills it overwrites. Otherwise the
  /// payload is checksummed first and copied after.
  result<std::optional<push_msg>> add(const chunk_ref<push_msg>& chunk);
  /// Adds one broadcast chunk decoded by decode_broadcast_ref; as above.
  result<std::optional<broadcast_msg>> add(const chunk_ref<broadcast_msg>& chunk);

  /// Discards partial pushes from `learner_id` (all fragments). Returns how many were dropped.
  size_t drop_learner(int32_t learner_id);
  /// Discards the partial broadcast of `fragment_id`, if any.
  size_t drop_broadcast(int32_t fragment_id);
  /// Discards everything (the spare buffer too).
  void clear();

  /// Hands back the payload buffer of a transfer this assembler completed once its receiver is
  /// done with it. The next transfer whose payload fits it (payload_bytes ≤ its capacity ≤
  /// 2 × payload_bytes + 4 KiB) assembles into it instead of a fresh allocation, whose pages the
  /// kernel would fault in and zero-fill, at about the cost of the copy into them. Holds one spare
  /// at most (a later one replaces it); one that does not fit the next transfer is freed. The
  /// buffer keeps its bytes (up to the next transfer's payload_bytes), so a chunk can be copied
  /// and checksummed into place before its verdict (add(chunk_ref)). The assembled bytes are the
  /// same either way: every byte of a completed transfer is written by its chunks.
  void recycle(std::vector<uint8_t>&& buffer);
  /// Capacity in bytes of the spare buffer held for the next transfer (0: none).
  size_t spare_bytes() const noexcept { return spare_.capacity(); }

  /// Transfers in progress.
  size_t in_progress() const noexcept { return pushes_.size() + broadcasts_.size(); }
  /// Payload bytes reserved by transfers in progress.
  size_t buffered_bytes() const noexcept { return buffered_; }

 private:
  template <class Msg>
  struct assembly {
    std::tuple<uint64_t, uint64_t> order;  // (incarnation, transfer_id) or (version, 0)
    uint32_t received = 0;
    // The payload: capacity payload_bytes (reserved, not touched), grown as chunks are copied
    // in; a chunk that lands past the end first zero-fills the gap its missing chunks will fill.
    std::vector<uint8_t> bytes;
    size_t reserved = 0;            // payload_bytes, counted in buffered_
    std::vector<uint64_t> offsets;  // per chunk index; UINT64_MAX = not yet received
    std::vector<uint64_t> lengths;  // per chunk index
    Msg header;                     // the first chunk's header (payload empty)
    // The accepted slices, offset → end, while they are disjoint (`overlapping` once two
    // accepted slices overlap, which fails the transfer at completion): a chunk whose trailer is
    // still unchecked is copied into place only where it overlaps none of them.
    std::map<uint64_t, uint64_t> slices;
    bool overlapping = false;
  };
  template <class Msg, class Key>
  result<std::optional<Msg>> add_impl(std::map<Key, assembly<Msg>>& table, const Key& key,
                                      const Msg& chunk, const uint8_t* payload, size_t size,
                                      std::optional<uint32_t> payload_crc = std::nullopt,
                                      const pending_seal* seal = nullptr);
  template <class Msg>
  void release(assembly<Msg>& a) noexcept;

  chunk_limits limits_;
  std::map<std::pair<int32_t, int32_t>, assembly<push_msg>> pushes_;
  std::map<int32_t, assembly<broadcast_msg>> broadcasts_;
  size_t buffered_ = 0;
  std::vector<uint8_t> spare_;  // recycle()'s buffer for the next transfer
};

}  // namespace dd
