#include <sys/vfs.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "kvf/pattern.hpp"
#include "transfer.hpp"

namespace kvf::frontier {

bool check_pattern(const void* p, std::size_t bytes, std::uint64_t seed, std::uint64_t first_word,
                   std::string* why) {
  const auto* b = static_cast<const unsigned char*>(p);
  const std::size_t words = bytes / 8;
  std::size_t bad = words;
#pragma omp parallel for schedule(static) reduction(min : bad)
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t v;
    std::memcpy(&v, b + 8 * i, 8);
    if (v != pattern_word(seed, first_word + i) && i < bad) bad = i;
  }
  if (bad == words && bytes % 8) {
    std::uint64_t want = pattern_word(seed, first_word + words), got = 0;
    std::memcpy(&got, b + 8 * words, bytes % 8);
    std::uint64_t mask = (1ull << (8 * (bytes % 8))) - 1;
    if ((got & mask) != (want & mask)) bad = words;
    else return true;
  } else if (bad == words) {
    return true;
  }
  if (why) *why = "word " + std::to_string(bad) + " of " + std::to_string((bytes + 7) / 8) + " differs from the pattern";
  return false;
}

void write_pattern(void* p, std::size_t bytes, std::uint64_t seed, std::uint64_t first_word) {
  auto* b = static_cast<unsigned char*>(p);
  const std::size_t words = bytes / 8;
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t v = pattern_word(seed, first_word + i);
    std::memcpy(b + 8 * i, &v, 8);
  }
  if (bytes % 8) {
    const std::uint64_t v = pattern_word(seed, first_word + words);
    std::memcpy(b + 8 * words, &v, bytes % 8);
  }
}

void check_file_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw DirectFileError(dir, "not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw DirectFileError(dir, "not writable");
  // tmpfs takes O_DIRECT since Linux 6.6: its "disk" reads would time memory, and the rows price a disk tier.
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994, kRamfsMagic = static_cast<long>(0x858458f6);
  if (::statfs(dir.c_str(), &fs) == 0 && (static_cast<long>(fs.f_type) == kTmpfsMagic ||
                                         static_cast<long>(fs.f_type) == kRamfsMagic))
    throw DirectFileError(dir, "on tmpfs or ramfs (memory): its O_DIRECT reads would time RAM, not a disk");
  std::string probe = dir + "/.kvf_frontier_probe_XXXXXX";
  int fd = ::mkstemp(probe.data());
  if (fd < 0) throw DirectFileError(dir, std::string("cannot create a file (") + std::strerror(errno) + ")");
  ::close(fd);
  fd = ::open(probe.c_str(), O_RDWR | O_DIRECT);
  const int err = errno;
  ::unlink(probe.c_str());
  if (fd < 0)
    throw DirectFileError(dir, std::string("its file system refuses O_DIRECT (") + std::strerror(err) + ")");
  ::close(fd);
}

DirectFile::DirectFile(const std::string& dir, std::size_t bytes, std::uint64_t seed) : bytes_(bytes), seed_(seed) {
  if (bytes % kDirectAlign) throw std::invalid_argument("DirectFile: size must be a multiple of 4096");
  path_ = dir + "/kvf_frontier_tier_XXXXXX";
  int fd = ::mkstemp(path_.data());
  if (fd < 0) throw DirectFileError(dir, std::string("cannot create a file (") + std::strerror(errno) + ")");
  ::close(fd);
  fd_ = ::open(path_.c_str(), O_RDWR | O_DIRECT);
  if (fd_ < 0) {
    const std::string e = std::strerror(errno);
    ::unlink(path_.c_str());
    throw DirectFileError(dir, "O_DIRECT open failed (" + e + ")");
  }
  const std::size_t chunk = std::size_t(8) << 20;
  void* buf = std::aligned_alloc(kDirectAlign, chunk);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t len = std::min(chunk, bytes - off);
    write_pattern(buf, len, seed, off / 8);
    if (::pwrite(fd_, buf, len, off_t(off)) != ssize_t(len)) {
      std::free(buf);
      const std::string e = std::strerror(errno);
      ::close(fd_);
      ::unlink(path_.c_str());
      throw DirectFileError(dir, "writing the tier file failed (" + e + ")");
    }
  }
  std::free(buf);
  ::fsync(fd_);
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

void DirectFile::read(std::size_t offset, std::size_t len, void* dst) const {
  std::size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd_, static_cast<char*>(dst) + done, len - done, off_t(offset + done));
    if (n <= 0) throw std::runtime_error(std::string("O_DIRECT pread failed: ") + (n < 0 ? std::strerror(errno) : "EOF"));
    done += std::size_t(n);
  }
}

double run_dd_direct(const std::string& path, std::size_t bs, std::size_t count) {
  const std::string cmd = "dd if='" + path + "' of=/dev/null bs=" + std::to_string(bs) + " count=" +
                          std::to_string(count) + " iflag=direct 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run dd");
  std::string out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) out += line;
  const int rc = ::pclose(p);
  if (rc != 0) throw std::runtime_error("dd failed: " + out);
  // "... bytes (...) copied, 0.123 s, 2.2 GB/s"
  const auto at = out.find("copied, ");
  if (at == std::string::npos) throw std::runtime_error("dd printed no time: " + out);
  return std::strtod(out.c_str() + at + 8, nullptr);
}

}  // namespace kvf::frontier
