// runtime/json_fields.hpp — reading a required integer field of a JSON object (a model's config
// in a checkpoint or model file), with an error that names the object and the field.
#pragma once

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

}  // namespace dd
