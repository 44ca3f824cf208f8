// runtime/json_fields.hpp — reading a required integer field of a JSON object (a model's config
// in a checkpoint or model file), with an error that names the object and the field; a config's
// integer fields as one table that reads, writes and checks them.
#pragma once

#include <cstddef>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dd {

/// `j[field]` as an int; std::invalid_argument "WHAT: missing field 'F'" or "WHAT: field 'F' must
/// be an integer" otherwise.
inline int required_int(const nlohmann::json& j, const char* field, const char* what) {
  auto it = j.find(field);
  if (it == j.end())
    throw std::invalid_argument(fmt::format("{}: missing field '{}'", what, field));
  if (!it->is_number_integer())
    throw std::invalid_argument(fmt::format("{}: field '{}' must be an integer", what, field));
  return it->get<int>();
}

/// One integer field of a config struct S: its JSON name, the member, its least valid value.
template <class S>
struct int_field {
  const char* name;
  int S::*member;
  int min;
};

/// Reads every field of the table into `out` (required_int; `what` names the object).
template <class S, size_t N>
void read_int_fields(const nlohmann::json& j, const int_field<S> (&fields)[N], const char* what,
                     S& out) {
  for (const auto& f : fields) out.*f.member = required_int(j, f.name, what);
}

/// The table's fields of `s` as a JSON object.
template <class S, size_t N>
nlohmann::json int_fields_json(const S& s, const int_field<S> (&fields)[N]) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields) j[f.name] = s.*f.member;
  return j;
}

/// std::invalid_argument "WHAT: FIELD must be >= MIN, got V" for the first field below its min.
template <class S, size_t N>
void check_int_fields(const S& s, const int_field<S> (&fields)[N], const char* what) {
  for (const auto& f : fields)
    if (s.*f.member < f.min)
      throw std::invalid_argument(
          fmt::format("{}: {} must be >= {}, got {}", what, f.name, f.min, s.*f.member));
}

}  // namespace dd
