// messages/error.cpp — names of error codes.
#include "messages/error.hpp"

namespace dd {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument: return "invalid_argument";
    case errc::malformed: return "malformed";
    case errc::too_large: return "too_large";
    case errc::size_mismatch: return "size_mismatch";
    case errc::chunk_inconsistent: return "chunk_inconsistent";
    case errc::chunk_duplicate: return "chunk_duplicate";
    case errc::chunk_stale: return "chunk_stale";
    case errc::version_gone: return "version_gone";
    case errc::corrupt: return "corrupt";
    case errc::io: return "io";
    case errc::checksum_mismatch: return "checksum_mismatch";
    case errc::schema_mismatch: return "schema_mismatch";
    case errc::other_run: return "other_run";
    case errc::stale_incarnation: return "stale_incarnation";
  }
  return "unknown";
}

}  // namespace dd
