// util/suggest.cpp — see suggest.hpp.
#include "util/suggest.hpp"

#include <algorithm>

namespace dd::util {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the table: i - 2 (for a swap), i - 1 and i.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    before.swap(prev);
    prev.swap(row);
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], before[j - 2] + 1);
    }
  }
  return row[b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(word.size() >= 6 ? 2 : 1, word.size() / 3);
  std::string best;
  std::size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    // The distance is at least the difference of the lengths: a candidate that cannot be close
    // costs nothing (a key of a megabyte once cost seconds per candidate).
    const std::size_t gap =
        word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (gap >= best_d) continue;
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string c = closest(word, candidates);
  return c.empty() ? std::string() : "; did you mean '" + c + "'?";
}

}  // namespace dd::util
