// util/files.cpp — see files.hpp.
#include "util/files.hpp"

#include <glob.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "util/net.hpp"

namespace dd::util {

namespace {

io_status fail(int e, const char* what, const std::string& path) {
  return {e, std::string("cannot ") + what + " '" + path + "': " + errno_text(e)};
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string errno_text(int e) { return std::strerror(e); }

std::string special_file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  if (S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a special file";
}

io_status write_file_atomic(const std::string& path, std::string_view bytes) {
  return write_file_atomic(path, std::vector<std::string_view>{bytes});
}

io_status write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(errno, "create", tmp);
  auto abandon = [&](int e, const char* what) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return fail(e, what, tmp);
  };
  for (auto piece : pieces)
    if (int e = write_all(fd, piece.data(), piece.size()); e != 0) return abandon(e, "write");
  if (::fsync(fd) != 0) return abandon(errno, "fsync");
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return fail(e, "close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return {e, "cannot rename '" + tmp + "' to '" + path + "': " + errno_text(e)};
  }
  // Make the rename durable. EINVAL: the file system cannot sync a directory (nothing to do).
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return fail(errno, "open directory", dir);
  const int rc = ::fsync(dfd);
  const int e = errno;
  ::close(dfd);
  if (rc != 0 && e != EINVAL) return fail(e, "fsync directory", dir);
  return {};
}

io_status read_file(const std::string& path, std::string& out, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fail(errno, "open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return fail(e, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const std::string kind = special_file_kind(path);
    return {EINVAL, "cannot read '" + path + "': it is " +
                        (kind.empty() ? std::string("not a regular file") : kind) +
                        ", not a regular file"};
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return {EFBIG, "cannot read '" + path + "': it has " + std::to_string(st.st_size) +
                       " bytes, more than the " + std::to_string(max_bytes) + " allowed"};
  }
  out.assign(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return fail(e, "read", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return {};
}

io_status make_dirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if ((i == dir.size() || dir[i] == '/') && !cur.empty() && cur != "/") {
      if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return fail(errno, "create directory", cur);
      struct stat st {};
      if (::stat(cur.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
        return {ENOTDIR, "cannot create directory '" + cur + "': " + errno_text(EEXIST) +
                             " and is not a directory"};
    }
    if (i < dir.size()) cur.push_back(dir[i]);
  }
  return {};
}

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

io_status append_file::open(const std::string& path, bool truncate) {
  fd_.reset();
  path_ = path;
  fd_.reset(::open(path.c_str(),
                   O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644));
  if (!fd_.valid()) return fail(errno, "open", path);
  const off_t end = ::lseek(fd_.get(), 0, SEEK_END);
  if (end < 0) return fail(errno, "seek", path);
  size_ = static_cast<uint64_t>(end);
  return {};
}

io_status append_file::append(std::string_view line) {
  if (!fd_.valid()) return {EBADF, "cannot append to '" + path_ + "': it is not open"};
  for (;;) {
    const ssize_t w = ::write(fd_.get(), line.data(), line.size());
    if (w < 0 && errno == EINTR) continue;
    if (w == static_cast<ssize_t>(line.size())) {
      size_ += line.size();
      return {};
    }
    // Failed, or cut short (the disk filled mid-line): cut the partial line back off.
    const int e = w < 0 ? errno : ENOSPC;
    if (w > 0 && ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) {
      const int te = errno;
      return {e, "cannot append to '" + path_ + "': " + errno_text(e) +
                     " (and cutting the partial line back failed: " + errno_text(te) + ")"};
    }
    return fail(e, "append to", path_);
  }
}

io_status append_file::close() {
  if (!fd_.valid()) return {};
  const int rc = ::close(fd_.release());
  if (rc != 0) return fail(errno, "close", path_);
  return {};
}

io_status expand_file_patterns(const std::vector<std::string>& patterns,
                               const std::vector<std::string>& dirs,
                               std::vector<std::string>& out) {
  namespace fs = std::filesystem;
  out.clear();
  auto fail = [&](int e, std::string msg) {
    out.clear();
    return io_status{e, std::move(msg)};
  };
  if (patterns.empty()) return fail(EINVAL, "the list of files is empty");
  auto matches = [](const std::string& pattern) {
    std::vector<std::string> found;
    glob_t g{};
    if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    std::sort(found.begin(), found.end());
    return found;
  };
  for (const auto& pat : patterns) {
    if (pat.empty()) return fail(EINVAL, "an entry of the list of files is empty");
    std::vector<std::string> found;
    if (fs::path(pat).is_relative())
      for (const auto& d : dirs) {
        found = matches((fs::path(d) / pat).string());
        if (!found.empty()) break;
      }
    if (found.empty()) found = matches(pat);
    if (found.empty())
      return fail(ENOENT, "'" + pat +
                              "' matches no file (a relative path is tried against the "
                              "experiment file's directory, then the current directory)");
    for (auto& f : found) {
      std::error_code ec;
      if (fs::is_directory(f, ec))
        return fail(EISDIR, "'" + f + "' is a directory; name the files in it");
      out.push_back(fs::absolute(f, ec).lexically_normal().string());
    }
  }
  return {};
}

}  // namespace dd::util
