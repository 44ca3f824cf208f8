// runtime/config/detail/enums.hpp — the DSL spelling of every config enum, in declaration order.
// Private to runtime/config/: the reader parses with it and experiment.cpp prints with it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/experiment.hpp"

namespace dd::config::detail {

/// enum_names<E>::values[i] is the spelling of the enum value with underlying value i.
template <class E>
struct enum_names;

#define DD_CONFIG_ENUM_NAMES(E, ...)                    \
  template <>                                           \
  struct enum_names<E> {                                \
    static constexpr std::array values = {__VA_ARGS__}; \
  }

DD_CONFIG_ENUM_NAMES(model_kind, "gpt", "moe_gpt", "vit");
DD_CONFIG_ENUM_NAMES(tokenizer_kind, "byte");
DD_CONFIG_ENUM_NAMES(backend_kind, "cpu", "cuda", "reference");
DD_CONFIG_ENUM_NAMES(schedule_kind, "cosine", "constant");
DD_CONFIG_ENUM_NAMES(outer_kind, "nesterov", "sgd");
DD_CONFIG_ENUM_NAMES(merge_kind, "rda", "average");
DD_CONFIG_ENUM_NAMES(anchor_kind, "base", "current");
DD_CONFIG_ENUM_NAMES(apply_kind, "overwrite", "rebase");
DD_CONFIG_ENUM_NAMES(schedule_clock, "learner", "global");
DD_CONFIG_ENUM_NAMES(sharding_kind, "contiguous", "interleaved");
DD_CONFIG_ENUM_NAMES(data_kind, "text", "idx", "tokens");
DD_CONFIG_ENUM_NAMES(fragment_strategy_kind, "balanced", "layer", "strided");
DD_CONFIG_ENUM_NAMES(grace_mode, "adaptive", "fixed", "off");
DD_CONFIG_ENUM_NAMES(wire_format, "fp32", "bf16", "int8", "int4");
DD_CONFIG_ENUM_NAMES(budget_kind, "tokens", "steps", "seconds");
DD_CONFIG_ENUM_NAMES(chaos_trigger, "at_step", "at_time", "at_fraction");
DD_CONFIG_ENUM_NAMES(chaos_target_kind, "learners", "owners", "any");
DD_CONFIG_ENUM_NAMES(recovery_dist, "exponential", "fixed", "lognormal", "weibull");

#undef DD_CONFIG_ENUM_NAMES

/// The value spelled `s`, or nullopt.
template <class E>
std::optional<E> parse_enum(std::string_view s) {
  const auto& v = enum_names<E>::values;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (s == v[i]) return static_cast<E>(i);
  return std::nullopt;
}

/// Every spelling of E, for messages and suggestions.
template <class E>
std::vector<std::string> enum_spellings() {
  const auto& v = enum_names<E>::values;
  return std::vector<std::string>(v.begin(), v.end());
}

}  // namespace dd::config::detail
