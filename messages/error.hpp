// messages/error.hpp — the small error/result type of the wire layer and the sync math.
//
// The codec (messages/codec.hpp), the chunk assembler, quantization (runtime/quantize.hpp),
// fragmentation (runtime/fragments.hpp) and the merge (runtime/merge.hpp) report failures a
// caller reacts to as a `dd::result<T>` holding either a value or a `dd::wire_error` {code,
// message naming the field}. Nothing here throws for bad input. Actors convert a wire_error to
// their own error type (or to a rejection reason) at their boundary. Plain values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "util/assert.hpp"

namespace dd {

/// Why a wire/sync-math operation failed. One line per code; a caller reacts to each.
enum class errc : uint8_t {
  /// A caller-supplied argument or configuration value is invalid (P < 1, unknown strategy...).
  invalid_argument = 1,
  /// Bytes are not a well-formed message of the expected kind (Cap'n Proto refused them, wrong
  /// message kind, a field out of range). Maps to reject reason `malformed`.
  malformed,
  /// A size exceeds a configured cap (message bytes, assembly bytes, chunk count, elements).
  too_large,
  /// Sizes disagree: payload bytes vs element count and encoding, or a contribution's length vs
  /// the fragment. Maps to reject reason `shapeMismatch`.
  size_mismatch,
  /// A chunk disagrees with the other chunks of its transfer (index >= count, changed header,
  /// overlapping or non-contiguous offsets). The partial transfer is discarded.
  chunk_inconsistent,
  /// A chunk index of a transfer arrived twice. The partial transfer is kept; the copy ignored.
  chunk_duplicate,
  /// A chunk belongs to an older transfer than the one being assembled; it is ignored.
  chunk_stale,
  /// A merge needs θ at a version the anchor ring no longer holds (anchor = current). Maps to
  /// reject reason `stale`.
  version_gone,
  /// A checkpoint file's magic, format version, length or CRC32 does not match: refuse it.
  corrupt,
  /// A file could not be opened, written, synced or renamed; the message has errno's text.
  io,
  /// A chunk's payload does not match the CRC-32C it carries (damaged in transit). The chunk is
  /// refused before assembly and changes nothing; maps to reject reason `malformed`, so the
  /// learner sends the push again.
  checksum_mismatch,
  /// An envelope of another schema version than this build's (Envelope.schemaVersion).
  schema_mismatch,
  /// An envelope names another run than the receiver's (Envelope.runId): never applied.
  other_run,
  /// An envelope's sender incarnation is older than the one the receiver knows for that sender
  /// (a message of a dead learner or syncer still in flight): never applied.
  stale_incarnation,
};

/// Short stable name of a code, e.g. "malformed".
std::string_view to_string(errc code) noexcept;

/// An error value: a code and a human-readable message naming the field/file/peer at fault.
struct wire_error {
  errc code = errc::malformed;
  std::string message;
};

/// Either a T or a wire_error. Accessing the wrong alternative is a bug (DD_ASSERT: aborts, in
/// every build).
template <class T>
class result {
 public:
  result(T value) : v_(std::move(value)) {}       // NOLINT: implicit by design
  result(wire_error err) : v_(std::move(err)) {}  // NOLINT: implicit by design
  result(errc code, std::string message) : v_(wire_error{code, std::move(message)}) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    DD_ASSERT(ok(), "value() of a failed result");
    return std::get<0>(v_);
  }
  const T& value() const& {
    DD_ASSERT(ok(), "value() of a failed result");
    return std::get<0>(v_);
  }
  T&& value() && {
    DD_ASSERT(ok(), "value() of a failed result");
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const wire_error& error() const {
    DD_ASSERT(!ok(), "error() of a successful result");
    return std::get<1>(v_);
  }
  errc code() const { return error().code; }

 private:
  std::variant<T, wire_error> v_;
};

/// Success with no value, or a wire_error.
template <>
class result<void> {
 public:
  result() = default;
  result(wire_error err) : err_(std::move(err)), ok_(false) {}  // NOLINT: implicit by design
  result(errc code, std::string message) : err_{code, std::move(message)}, ok_(false) {}

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const wire_error& error() const {
    DD_ASSERT(!ok_, "error() of a successful result");
    return err_;
  }
  errc code() const { return error().code; }

 private:
  wire_error err_;
  bool ok_ = true;
};

using status = result<void>;

}  // namespace dd
