// Host-side transfer tiers of the frontier study: pattern checks and the O_DIRECT file tier
// (the CPU-offload SSD tier).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvf::frontier {

// True when p holds pattern_word(seed, first_word + i) for every 8-byte word i (a tail shorter than
// 8 bytes holds the low bytes of its word). On mismatch *why names the first bad word.
bool check_pattern(const void* p, std::size_t bytes, std::uint64_t seed, std::uint64_t first_word,
                   std::string* why = nullptr);
void write_pattern(void* p, std::size_t bytes, std::uint64_t seed, std::uint64_t first_word);

// A directory the O_DIRECT file tier cannot use, or a tier file that cannot be made there. what() is
// "DIR: problem" (e.g. "/dev/shm: its file system refuses O_DIRECT (Invalid argument)"); the studies turn it
// into their flag's message.
class DirectFileError : public std::runtime_error {
 public:
  DirectFileError(std::string dir, std::string problem)
      : std::runtime_error(dir + ": " + problem), dir_(std::move(dir)), problem_(std::move(problem)) {}
  const std::string& dir() const { return dir_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string dir_, problem_;
};

// Throws DirectFileError when dir is not a writable directory or its file system refuses O_DIRECT.
void check_file_dir(const std::string& dir);

inline constexpr std::size_t kDirectAlign = 4096;

// A file of `bytes` (multiple of 4096) in `dir` holding the pattern of `seed`, written once and
// read back with O_DIRECT (no page cache). Removed on destruction. Throws DirectFileError when the file
// cannot be created, opened with O_DIRECT or written.
class DirectFile {
 public:
  DirectFile(const std::string& dir, std::size_t bytes, std::uint64_t seed);
  ~DirectFile();
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  // pread with O_DIRECT: dst 4096-aligned, offset and len multiples of 4096. Throws on short reads.
  void read(std::size_t offset, std::size_t len, void* dst) const;
  const std::string& path() const { return path_; }
  std::size_t bytes() const { return bytes_; }
  std::uint64_t seed() const { return seed_; }

 private:
  std::string path_;
  std::size_t bytes_ = 0;
  std::uint64_t seed_ = 0;
  int fd_ = -1;
};

// Runs `dd if=<path> of=/dev/null bs=<bs> count=<count> iflag=direct` and returns the seconds dd
// itself reports (throws std::runtime_error when dd fails or prints no time).
double run_dd_direct(const std::string& path, std::size_t bs, std::size_t count);

}  // namespace kvf::frontier
