// util/suggest.hpp — "did you mean" suggestions (Levenshtein distance) for a misspelled name:
// a config key (runtime/config/), a command-line flag (flags.hpp). Pure functions, callable from
// any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dd::util {

/// Edit distance between a and b counting insertions, deletions, substitutions and swaps of two
/// adjacent characters, each 1 (optimal string alignment): "bacth" is 1 from "batch", as a
/// typist's slip is one mistake.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` if it is close enough to be a likely typo (distance at most
/// max(1, |word| / 3), or 2 for words of 6+ characters), else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

/// "; did you mean 'x'?" when closest() finds x, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace dd::util
