// runtime/config/detail/source_index.cpp — see source_index.hpp.
#include "runtime/config/detail/source_index.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace dd::config::detail {

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

/// Level of a long bracket "[==[" starting at i (number of '='), or -1.
int long_bracket(std::string_view s, std::size_t i) {
  if (i >= s.size() || s[i] != '[') return -1;
  std::size_t j = i + 1;
  while (j < s.size() && s[j] == '=') ++j;
  return j < s.size() && s[j] == '[' ? static_cast<int>(j - i - 1) : -1;
}

/// Blanks [from, to) except newlines.
void blank(std::string& s, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to && i < s.size(); ++i)
    if (s[i] != '\n') s[i] = ' ';
}

/// End (exclusive) of the long bracket of `level` whose body starts at i.
std::size_t long_end(std::string_view s, std::size_t i, int level) {
  const std::string close = "]" + std::string(static_cast<std::size_t>(level), '=') + "]";
  const std::size_t e = s.find(close, i);
  return e == std::string_view::npos ? s.size() : e + close.size();
}

}  // namespace

std::vector<path_part> split_path(std::string_view path) {
  std::vector<path_part> parts;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      ++i;
      continue;
    }
    if (path[i] == '[') {
      const std::size_t e = path.find(']', i);
      const std::string inner(path.substr(i + 1, e == std::string_view::npos ? 0 : e - i - 1));
      path_part p;
      try {
        p.index = std::stoi(inner);
      } catch (...) {
        p.key = inner;
      }
      parts.push_back(p);
      i = e == std::string_view::npos ? path.size() : e + 1;
      continue;
    }
    std::size_t e = i;
    while (e < path.size() && path[e] != '.' && path[e] != '[') ++e;
    parts.push_back(path_part{std::string(path.substr(i, e - i)), 0});
    i = e;
  }
  return parts;
}

source_index::source_index(std::string_view text) : text_(text) {
  // Blank comments and string contents so that only code is searched.
  std::string& s = text_;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '-' && i + 1 < s.size() && s[i + 1] == '-') {
      const int level = long_bracket(s, i + 2);
      const std::size_t end =
          level >= 0 ? long_end(s, i + 2, level) : std::min(s.find('\n', i), s.size());
      blank(s, i, end);
      i = end;
    } else if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < s.size() && s[j] != c && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      blank(s, i + 1, std::min(j, s.size()));
      i = j + 1;
    } else if (const int level = long_bracket(s, i); level >= 0) {
      const std::size_t end = long_end(s, i, level);
      blank(s, i, end);
      i = end;
    } else {
      ++i;
    }
  }
  line_starts_.push_back(0);
  for (std::size_t k = 0; k < s.size(); ++k)
    if (s[k] == '\n') line_starts_.push_back(k + 1);
}

std::size_t source_index::offset_of(int line) const {
  if (line <= 1) return 0;
  if (line > lines()) return text_.size();
  return line_starts_[static_cast<std::size_t>(line - 1)];
}

int source_index::line_of(std::size_t offset) const {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  return static_cast<int>(it - line_starts_.begin());
}

std::size_t source_index::find_key(const std::string& key, std::size_t from, std::size_t to,
                                   int n) const {
  if (key.empty()) return std::string::npos;
  std::size_t pos = from;
  while (pos < to) {
    const std::size_t at = text_.find(key, pos);
    if (at == std::string::npos || at + key.size() > to) return std::string::npos;
    pos = at + 1;
    if (at > 0 && ident_char(text_[at - 1])) continue;
    std::size_t j = at + key.size();
    if (j < text_.size() && ident_char(text_[j])) continue;
    while (j < to && (text_[j] == ' ' || text_[j] == '\t')) ++j;
    if (j >= to || text_[j] != '=' || (j + 1 < text_.size() && text_[j + 1] == '=')) continue;
    if (--n <= 0) return at + key.size();
  }
  return std::string::npos;
}

int source_index::match_from(const std::vector<path_part>& path, std::size_t from, std::size_t to,
                             std::size_t* first_at) const {
  std::size_t pos = from;
  int line = 0;
  int repeat = 1;
  bool first = true;
  for (const auto& part : path) {
    if (part.key.empty()) {
      repeat = std::max(1, part.index);
      continue;
    }
    const std::size_t end = find_key(part.key, pos, to, repeat);
    if (end == std::string::npos) return 0;
    if (first && first_at != nullptr) *first_at = end - part.key.size();
    first = false;
    line = line_of(end - part.key.size());
    pos = end;
    repeat = 1;
  }
  return line;
}

int source_index::find(const std::vector<path_part>& path, int from_line, int to_line,
                       bool last) const {
  const std::size_t from = offset_of(from_line);
  const std::size_t to = to_line > lines() ? text_.size() : offset_of(to_line);
  int found = 0;
  std::size_t pos = from;
  while (pos < to) {
    std::size_t first_at = std::string::npos;
    const int line = match_from(path, pos, to, &first_at);
    if (line == 0) break;
    found = line;
    if (!last) break;
    pos = first_at + 1;
  }
  return found;
}

}  // namespace dd::config::detail
