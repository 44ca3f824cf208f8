// util/hex.hpp — bytes as lowercase hexadecimal text and back (two digits per byte), for byte
// fields kept in JSON files (the health monitor's record: each learner's data cursor).
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dd::util {

/// `bytes` as lowercase hex, two digits per byte ("" for none).
std::string to_hex(const std::vector<uint8_t>& bytes);

/// The bytes `text` spells in lowercase hex; nullopt when its length is odd or a character is not
/// a lowercase hex digit.
std::optional<std::vector<uint8_t>> from_hex(std::string_view text);

}  // namespace dd::util
