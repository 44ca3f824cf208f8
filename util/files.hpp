// util/files.hpp — checked file I/O, the one place the project writes files that must not be
// lost in silence: summary.json, run_info.json, experiment.json, owner and safetensors
// checkpoints, the comparison table, dd-goodput's outputs (write_file_atomic), events.jsonl and
// loss.csv (append_file).
//
// Every system call is checked. A failure comes back as an io_status whose message names the
// file and the call and gives errno's own words ("cannot write 'runs/a/summary.json.tmp': No
// space left on device"), never a guess. Nothing here throws or prints. Any thread; an
// append_file is used by one thread at a time (run_log serializes its callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dd::util {

/// The outcome of a file operation: success (error == 0), or errno and a message naming the file.
struct io_status {
  int error = 0;        ///< errno of the failing call; 0 = success
  std::string message;  ///< "cannot <what> '<path>': <strerror(error)>"; empty on success

  bool ok() const noexcept { return error == 0; }
  explicit operator bool() const noexcept { return ok(); }
};

/// errno's own text for `e` ("No space left on device", "Read-only file system").
std::string errno_text(int e);

/// The kind of a file that is not a regular file, in words — "a directory", "a FIFO", "a
/// character device", "a block device", "a socket", "a special file" — or "" when `path` is a
/// regular file or cannot be stat()ed (the caller's open then reports why).
std::string special_file_kind(const std::string& path);

/// Replaces `path` by `bytes`, atomically and durably: writes `<path>.tmp`, fsyncs it, renames
/// it over `path` and fsyncs the directory. On any failure the temporary file is removed and
/// `path` is untouched (the old file, or none): a reader never sees a 0-byte or torn file.
io_status write_file_atomic(const std::string& path, std::string_view bytes);
/// The same for the concatenation of `pieces` (a header and tensors without copying them).
io_status write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

/// Reads the whole regular file `path` into `out`. Refuses a file that is not a regular file (a
/// FIFO is not opened for a blocking read) and one larger than `max_bytes` (error EFBIG).
io_status read_file(const std::string& path, std::string& out, size_t max_bytes = size_t{16} << 30);

/// Expands a list of paths and glob patterns (*, ?, [..]) into `out`, in order; each pattern's
/// matches are sorted. A relative pattern is tried against each of `dirs` in order (the first
/// that matches wins), then as given. Fails (EINVAL for an empty list or entry, ENOENT for a
/// pattern matching nothing, EISDIR for a directory) with a message naming the pattern.
io_status expand_file_patterns(const std::vector<std::string>& patterns,
                               const std::vector<std::string>& dirs, std::vector<std::string>& out);

/// Creates `dir` and its missing parents (like mkdir -p); the message names the component that
/// could not be created.
io_status make_dirs(const std::string& dir);

/// An owned file descriptor, closed on destruction or reset(); -1 = none. Move-only.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  /// Gives the descriptor up without closing it.
  int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor held (if any) and holds `fd`.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// A file that grows by whole lines: each append() is one write(2) of the whole line, and a
/// write that the file system cuts short (a full disk) is cut back, so the file never ends in
/// half a line. Move-only; closes on destruction.
class append_file {
 public:
  /// Opens (creates) `path` for appending; `truncate` empties it first.
  io_status open(const std::string& path, bool truncate);
  bool is_open() const noexcept { return fd_.valid(); }
  const std::string& path() const noexcept { return path_; }

  /// Appends `line` (which should end in '\n') whole, or not at all.
  io_status append(std::string_view line);
  /// Closes the file; the status of close(2) (data lost at close is reported here).
  io_status close();

 private:
  unique_fd fd_;
  std::string path_;
  uint64_t size_ = 0;  ///< bytes in the file after the last whole line
};

}  // namespace dd::util
