// tools/chaos/common.hpp — small shared pieces of dd-chaos: its two error kinds, duration and
// address parsing, clocks, atomic file writes. No I/O beyond the file helpers; any thread may call.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dd::chaos {

/// Bad flags or arguments: the command line cannot be run as given (exit status 2).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A failure while acting: unreadable nodes file, unknown target, refused signal (exit status 1).
struct chaos_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses a duration: "250ms", "1.5s", "2m", "1h", "30us" or a bare number of seconds.
/// Returns seconds. Throws usage_error naming `what` on a malformed or negative value.
double parse_duration(const std::string& text, const std::string& what);

/// Formats seconds for people: "250ms", "1.5s", "2m30s".
std::string format_duration(double seconds);

/// A "HOST:PORT" pair; port 0 means "pick one" where a listener is meant.
struct host_port {
  std::string host;
  uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

/// Parses "HOST:PORT" (HOST may be empty: 127.0.0.1). Throws usage_error naming `what`.
host_port parse_host_port(const std::string& text, const std::string& what);

/// Splits on `sep`, keeping empty fields.
std::vector<std::string> split(const std::string& text, char sep);

/// Wall clock, seconds since the Unix epoch (the tape's `t`).
double wall_now();

/// Monotonic clock, seconds (timers, deadlines).
double mono_now();

/// Sleeps `seconds` (>= 0), restarting after signals.
void sleep_for(double seconds);

/// Writes `text` to `path` atomically (temporary file in the same folder, fsync, rename).
/// Throws chaos_error naming the path.
void write_file_atomic(const std::string& path, const std::string& text);

/// Reads a whole file. Throws chaos_error naming the path and the reason.
std::string read_file(const std::string& path);

/// Appends one line (a '\n' is added) with a single write(2) under O_APPEND.
void append_line(const std::string& path, const std::string& line);

}  // namespace dd::chaos
