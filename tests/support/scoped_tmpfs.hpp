// tests/support/scoped_tmpfs.hpp — a small tmpfs mounted for one test (a disk that fills up), and
// a ballast file that fills it to a chosen number of free bytes. Needs root (or CAP_SYS_ADMIN):
// when mount(2) is refused the caller skips with the reason. Unmounted (lazily, so a file still
// open cannot keep it) when the object goes away, whatever the test did.
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace dd::test {

class scoped_tmpfs {
 public:
  /// Mounts a tmpfs of `bytes` at `dir` (created). Check mounted() / error() after.
  scoped_tmpfs(const std::filesystem::path& dir, size_t bytes) : dir_(dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string opts = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0)
      mounted_ = true;
    else
      error_ =
          "mount -t tmpfs -o " + opts + " tmpfs " + dir_.string() + ": " + std::strerror(errno);
  }
  ~scoped_tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  scoped_tmpfs(const scoped_tmpfs&) = delete;
  scoped_tmpfs& operator=(const scoped_tmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  const std::filesystem::path& dir() const { return dir_; }

  /// Bytes free on the file system now.
  size_t free_bytes() const {
    struct statvfs v {};
    if (::statvfs(dir_.c_str(), &v) != 0) return 0;
    return static_cast<size_t>(v.f_bavail) * v.f_frsize;
  }

  /// Fills the file system with `dir/ballast` until at most `leave` bytes stay free (written
  /// until ENOSPC, then cut back by `leave`, rounded down to whole pages). True on success.
  bool fill(size_t leave) {
    const std::string path = (dir_ / "ballast").string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    std::vector<char> block(64 * 1024, 'x');
    size_t written = 0;
    for (;;) {
      const ssize_t n = ::write(fd, block.data(), block.size());
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
    const size_t keep = written > leave ? written - leave : 0;
    const bool ok = ::ftruncate(fd, static_cast<off_t>(keep)) == 0;
    ::close(fd);
    return ok;
  }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
  std::string error_;
};

}  // namespace dd::test
