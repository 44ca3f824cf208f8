// tests/util/files_test.cpp — checked file I/O: write_file_atomic replaces a file whole and
// names the file and errno's text when it cannot (a missing folder, a read-only file system, a
// full disk — then the old file is left intact and no temporary stays behind); append_file adds
// whole lines and cuts a line the full disk cut short back off; read_file refuses a FIFO
// without blocking and names what it is.
#include <sys/mount.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/fresh_dir.hpp"
#include "tests/support/scoped_tmpfs.hpp"
#include "util/files.hpp"

namespace {

namespace fs = std::filesystem;
using dd::util::append_file;
using dd::util::read_file;
using dd::util::write_file_atomic;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = dd::test::fresh_dir("dd_files_" + name);
  return d;
}

TEST(files, write_file_atomic_replaces_the_whole_file_and_leaves_no_temporary) {
  const fs::path d = fresh_dir("replace");
  const std::string path = (d / "summary.json").string();
  ASSERT_TRUE(write_file_atomic(path, "first\n").ok());
  ASSERT_TRUE(write_file_atomic(path, {"sec", "ond", "\n"}).ok());
  EXPECT_EQ(slurp(path), "second\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::string back;
  ASSERT_TRUE(read_file(path, back).ok());
  EXPECT_EQ(back, "second\n");
}

TEST(files, a_missing_folder_is_named_with_errnos_text) {
  const fs::path d = fresh_dir("missing");
  const auto st = write_file_atomic((d / "no_dir" / "x.json").string(), "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error, ENOENT);
  EXPECT_NE(st.message.find("no_dir/x.json.tmp"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("No such file or directory"), std::string::npos) << st.message;
}

TEST(files, a_read_only_file_system_is_called_that_not_no_such_file) {
  const fs::path d = fresh_dir("rofs");
  dd::test::scoped_tmpfs disk(d / "mnt", 64 * 1024);
  if (!disk.mounted()) GTEST_SKIP() << disk.error();
  ASSERT_TRUE(write_file_atomic((disk.dir() / "a.json").string(), "old\n").ok());
  ASSERT_EQ(::mount(nullptr, disk.dir().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0);
  const auto st = write_file_atomic((disk.dir() / "a.json").string(), "new\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error, EROFS);
  EXPECT_NE(st.message.find("Read-only file system"), std::string::npos) << st.message;
  EXPECT_EQ(slurp(disk.dir() / "a.json"), "old\n");
  append_file f;
  const auto ap = f.open((disk.dir() / "events.jsonl").string(), true);
  EXPECT_NE(ap.message.find("Read-only file system"), std::string::npos) << ap.message;
}

TEST(files, a_full_disk_keeps_the_old_file_and_removes_the_temporary) {
  const fs::path d = fresh_dir("full");
  dd::test::scoped_tmpfs disk(d / "mnt", 256 * 1024);
  if (!disk.mounted()) GTEST_SKIP() << disk.error();
  const std::string path = (disk.dir() / "checkpoint.bin").string();
  ASSERT_TRUE(write_file_atomic(path, std::string(1000, 'a')).ok());
  ASSERT_TRUE(disk.fill(8 * 1024));
  const auto st = write_file_atomic(path, std::string(64 * 1024, 'b'));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error, ENOSPC);
  EXPECT_NE(st.message.find("checkpoint.bin.tmp"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("No space left on device"), std::string::npos) << st.message;
  EXPECT_EQ(slurp(path), std::string(1000, 'a'));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(files, append_file_never_leaves_half_a_line_on_a_full_disk) {
  const fs::path d = fresh_dir("append");
  dd::test::scoped_tmpfs disk(d / "mnt", 256 * 1024);
  if (!disk.mounted()) GTEST_SKIP() << disk.error();
  const std::string path = (disk.dir() / "events.jsonl").string();
  append_file f;
  ASSERT_TRUE(f.open(path, true).ok());
  ASSERT_TRUE(f.append("{\"event\":\"start\"}\n").ok());
  ASSERT_TRUE(disk.fill(4096));
  // Lines longer than the space left: the write is cut short (or refused) and cut back.
  const std::string line = "{\"event\":\"x\",\"pad\":\"" + std::string(3000, 'p') + "\"}\n";
  dd::util::io_status st;
  for (int i = 0; i < 10 && st.ok(); ++i) st = f.append(line);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error, ENOSPC);
  EXPECT_NE(st.message.find("events.jsonl"), std::string::npos) << st.message;
  const std::string text = slurp(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the file ends in half a line";
  std::istringstream lines(text);
  std::string l;
  while (std::getline(lines, l)) EXPECT_TRUE(l == "{\"event\":\"start\"}" || l + "\n" == line) << l;
}

TEST(files, read_file_refuses_a_fifo_without_blocking_and_says_what_it_is) {
  const fs::path d = fresh_dir("fifo");
  const std::string path = (d / "exp.lua").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  std::string out;
  const auto st = read_file(path, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message.find("a FIFO"), std::string::npos) << st.message;
  EXPECT_EQ(dd::util::special_file_kind(path), "a FIFO");
  EXPECT_EQ(dd::util::special_file_kind("/dev/null"), "a character device");
  EXPECT_EQ(dd::util::special_file_kind(d.string()), "a directory");
}

}  // namespace
