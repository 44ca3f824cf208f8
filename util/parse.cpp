// util/parse.cpp — see parse.hpp.
#include "util/parse.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

namespace dd::util {

namespace {

template <class T>
bool parse_integer(std::string_view text, T& out) {
  if (text.empty()) return false;
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, 10);
  if (ec != std::errc() || ptr != end) return false;
  out = v;
  return true;
}

}  // namespace

bool parse_number(std::string_view text, long long& out) { return parse_integer(text, out); }
bool parse_number(std::string_view text, unsigned long long& out) {
  return parse_integer(text, out);
}
bool parse_number(std::string_view text, int& out) { return parse_integer(text, out); }
bool parse_number(std::string_view text, unsigned& out) { return parse_integer(text, out); }
bool parse_number(std::string_view text, long& out) { return parse_integer(text, out); }
bool parse_number(std::string_view text, unsigned long& out) { return parse_integer(text, out); }

double seconds_per_unit(std::string_view unit) {
  if (unit.empty() || unit == "s") return 1.0;
  if (unit == "ms") return 1e-3;
  if (unit == "us") return 1e-6;
  if (unit == "m" || unit == "min") return 60.0;
  if (unit == "h") return 3600.0;
  return 0.0;
}

bool parse_number(std::string_view text, double& out) {
  if (text.empty() || text.size() > 64) return false;
  // Only digits, sign, '.', and an exponent: refuses "nan", "inf", hex floats and spaces.
  for (const char c : text)
    if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'))
      return false;
  if (text[0] == '+') return false;
  char copy[65];  // strtod needs a terminator (GCC 10's from_chars has no double overload)
  text.copy(copy, text.size());
  copy[text.size()] = '\0';
  char* end = nullptr;
  const double v = std::strtod(copy, &end);  // locale: "C" unless the program changed it
  if (end != copy + text.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

}  // namespace dd::util
