// util/parse.hpp — one strict number parser for every command-line flag and text field: the
// whole string must be the number (no leading/trailing space or junk, no empty string), an
// integer must fit its type, a floating value must be finite. Replaces atoi/stoi/strtol, which
// take "12abc" as 12, "x" as 0, or throw std::invalid_argument out of main().
// No allocation, no exceptions, no locale (std::from_chars); any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace dd::util {

/// A whole decimal integer (std::int64_t and std::uint64_t are among these types) ("-12", "+3" and
/// "0x10" are refused except the leading '-' of a signed type) that fits `out`'s type. False
/// (leaving `out` unchanged) otherwise.
bool parse_number(std::string_view text, long long& out);
bool parse_number(std::string_view text, unsigned long long& out);
bool parse_number(std::string_view text, int& out);
bool parse_number(std::string_view text, unsigned& out);
bool parse_number(std::string_view text, long& out);
bool parse_number(std::string_view text, unsigned long& out);
/// Seconds per `unit` of a duration ("" and "s" 1, "ms", "us", "m" and "min", "h"); 0 for any
/// other unit. What every duration the tools take ("250ms", "10s", "2m") is read with.
double seconds_per_unit(std::string_view unit);
/// A finite decimal floating-point number ("1.5", "-2", "1e-3"; not "nan", "inf", "1e999",
/// hex floats). False (leaving `out` unchanged) otherwise.
bool parse_number(std::string_view text, double& out);
/// As parse_number, and within [lo, hi].
template <class T>
bool parse_number_in(std::string_view text, T& out, T lo, T hi) {
  T v{};
  if (!parse_number(text, v) || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace dd::util
