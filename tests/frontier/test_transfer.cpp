#include <sys/vfs.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/pattern.hpp"
#include "transfer.hpp"

using namespace kvf::frontier;

TEST(Transfer, PatternWriteAndCheckIncludingATail) {
  std::vector<unsigned char> b(1000 + 5);
  write_pattern(b.data(), b.size(), 42, 7);
  EXPECT_TRUE(check_pattern(b.data(), b.size(), 42, 7));
  EXPECT_FALSE(check_pattern(b.data(), b.size(), 43, 7));
  std::string why;
  b[1003] ^= 1;  // in the tail
  EXPECT_FALSE(check_pattern(b.data(), b.size(), 42, 7, &why));
  b[1003] ^= 1;
  b[80] ^= 0x10;
  EXPECT_FALSE(check_pattern(b.data(), b.size(), 42, 7, &why));
  EXPECT_NE(why.find("word 10"), std::string::npos) << why;
}

TEST(Transfer, FileDirMustExistAndBeWritable) {
  // The kernel's own terms (no flag names): "DIR: problem".
  try {
    check_file_dir("/nonexistent/dir");
    FAIL() << "no error for a missing directory";
  } catch (const DirectFileError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/dir: not a directory");
    EXPECT_EQ(e.dir(), "/nonexistent/dir");
    EXPECT_EQ(std::string(e.what()).find("--"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_file_dir("/proc/self"), DirectFileError);  // not writable even for root
  // tmpfs takes O_DIRECT on Linux 6.6+, and would be timed as the disk tier: refused by what it is.
  struct statfs fs {};
  if (::statfs("/dev/shm", &fs) == 0 && static_cast<long>(fs.f_type) == 0x01021994 && ::access("/dev/shm", W_OK) == 0) {
    try {
      check_file_dir("/dev/shm");
      ADD_FAILURE() << "/dev/shm (tmpfs) accepted";
    } catch (const DirectFileError& e) {
      EXPECT_NE(std::string(e.what()).find("tmpfs or ramfs"), std::string::npos) << e.what();
    }
  }
}

TEST(Transfer, DirectFileReadsBackThePattern) {
  const std::string dir = "/var/tmp";
  try {
    check_file_dir(dir);
  } catch (const DirectFileError& e) {
    GTEST_SKIP() << e.what();
  }
  DirectFile f(dir, std::size_t(4) << 20, 1234);
  void* buf = std::aligned_alloc(kDirectAlign, 1 << 20);
  f.read(std::size_t(2) << 20, 1 << 20, buf);
  EXPECT_TRUE(check_pattern(buf, 1 << 20, 1234, (std::size_t(2) << 20) / 8));
  EXPECT_FALSE(check_pattern(buf, 1 << 20, 1234, 0));
  std::free(buf);
  const double s = run_dd_direct(f.path(), 1 << 20, 4);
  EXPECT_GT(s, 0);
}
