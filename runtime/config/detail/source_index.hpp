// runtime/config/detail/source_index.hpp — finds the line where a key is written in a script.
//
// Lua does not record where each table field was written, so error lines for keys are found in the
// source text: comments and string contents are blanked, then `key =` occurrences are searched
// along the key path. Best effort (a key built by code, such as t[k] = v, is not found); callers
// fall back to the line of the experiment{} call. Private to runtime/config/; any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dd::config::detail {

/// One step of a key path: a name, or a 1-based list position.
struct path_part {
  std::string key;  ///< name; empty for a list position
  int index = 0;    ///< list position when key is empty
};

/// Splits "chaos.events[2].target" into {chaos, events, [2], target}. Malformed parts are kept
/// as names.
std::vector<path_part> split_path(std::string_view path);

/// A script's text prepared for key searches.
class source_index {
 public:
  /// Indexes `text` (Lua source).
  explicit source_index(std::string_view text);

  /// Number of lines.
  int lines() const { return static_cast<int>(line_starts_.size()); }

  /// Line (1-based) of `path` searched in lines [from_line, to_line); the first match, or with
  /// `last` the last one. 0 when the path is not found there.
  int find(const std::vector<path_part>& path, int from_line, int to_line, bool last) const;

 private:
  std::size_t offset_of(int line) const;
  int line_of(std::size_t offset) const;
  /// Offset just past the n-th `key =` in [from, to), or npos.
  std::size_t find_key(const std::string& key, std::size_t from, std::size_t to, int n) const;
  /// Line of the full path matched with its first part starting at or after `from`.
  int match_from(const std::vector<path_part>& path, std::size_t from, std::size_t to,
                 std::size_t* first_at) const;

  std::string text_;  ///< comments and string contents replaced by spaces
  std::vector<std::size_t> line_starts_;
};

}  // namespace dd::config::detail
