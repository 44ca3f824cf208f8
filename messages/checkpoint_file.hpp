// messages/checkpoint_file.hpp — a fragment owner's checkpoint file: a 24-byte header (magic,
// format version, CRC32, body length) and a flat Cap'n Proto OwnerCheckpoint; atomic writes and
// bounded reads. The checkpoint value itself (owner_checkpoint) is in messages/codec.hpp, which
// includes this header. Pure and thread-safe. docs/wire.md "Checkpoint files".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "messages/codec.hpp"

namespace dd {

/// Checkpoint file format version written by this build.
inline constexpr uint32_t checkpoint_format_version = 1;

/// Encode a checkpoint as file bytes: a 24-byte header (magic "DDOWNCK1", u32 format version,
/// u32 CRC32 (zlib) of the body, u64 body length, little-endian) followed by a flat Cap'n Proto
/// OwnerCheckpoint. value.size() must equal momentum.size() and every anchor's size (asserts).
std::vector<uint8_t> encode_checkpoint(const owner_checkpoint& c);
/// Decode checkpoint file bytes. errc::corrupt for a wrong magic, unsupported format version,
/// length or CRC mismatch; errc::malformed for a body Cap'n Proto refuses or inconsistent sizes
/// (value/momentum/anchor lengths differ, a float array not a multiple of 4 bytes). Never throws.
result<owner_checkpoint> decode_checkpoint(const uint8_t* data, size_t size);

/// Write `bytes` to `path` atomically (util::write_file_atomic: `path`.tmp, fsync, rename over
/// `path`, fsync the directory). A crash or a full disk leaves either the old or the new file,
/// never a torn one. errc::io with errno's text and the path on failure.
status write_file_atomic(const std::string& path, const uint8_t* data, size_t size);
/// Read a whole regular file. errc::io when it cannot be read (or is a FIFO, a device, a
/// directory); errc::too_large over `max_bytes`.
result<std::vector<uint8_t>> read_file(const std::string& path,
                                       size_t max_bytes = size_t{16} << 30);

/// encode_checkpoint + write_file_atomic.
status save_checkpoint(const std::string& path, const owner_checkpoint& c);
/// read_file + decode_checkpoint; a corrupt file is refused with errc::corrupt naming the path.
result<owner_checkpoint> load_checkpoint(const std::string& path);

}  // namespace dd
