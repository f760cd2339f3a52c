// The CPU stream kernels against their references: xor reads (all threads, one thread, with software prefetch),
// the write and the copy, at sizes that leave tails past every unrolled step and at 8-byte aligned starts that
// are not 32-byte aligned (the vector loads must not assume more).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/pattern.hpp"
#include "stream.hpp"

namespace st = kvf::stream;

namespace {
constexpr std::uint64_t kSeed = 0x5eed;
// Sizes in bytes: empty, one word, below and above one 128-byte step, a page and a word, 1 MiB + 3 words, and
// one not a multiple of 8 (the tail bytes are ignored by contract).
const std::size_t kSizes[] = {0, 8, 120, 136, 4096 + 8, (1u << 20) + 24, 3u * 4096 + 5};

// Words filled with pattern_word(kSeed, i), starting `skew` words into an aligned buffer.
struct Filled {
  std::vector<std::uint64_t> buf;
  std::uint64_t* p;
  Filled(std::size_t bytes, std::size_t skew) : buf(bytes / 8 + 8), p(buf.data() + skew) {
    for (std::size_t i = 0; i < bytes / 8; ++i) p[i] = kvf::pattern_word(kSeed, i);
  }
};
}  // namespace

TEST(StreamCpu, ReadsMatchTheReferenceXor) {
  for (std::size_t bytes : kSizes)
    for (std::size_t skew : {0, 1, 3}) {
      const Filled f(bytes, skew);
      const std::uint64_t want = st::read_checksum_ref(kSeed, bytes);
      EXPECT_EQ(st::cpu_read_1thread(f.p, bytes), want) << bytes << " bytes, skew " << skew;
      for (const auto& k : st::kCpuReadKernels)
        EXPECT_EQ(k.read(f.p, bytes), want) << k.name << ", " << bytes << " bytes, skew " << skew;
    }
}

// The studies run the read kernels by name (case read/<name>/..., read_ceiling/<name>/...): each name finds its
// own kernel, and an unknown one is refused with the names allowed.
TEST(StreamCpu, ReadKernelsByName) {
  EXPECT_EQ(st::cpu_read_kernel("loop").read, &st::cpu_read);
  EXPECT_EQ(st::cpu_read_kernel("prefetch").read, &st::cpu_read_prefetch);
  EXPECT_EQ(st::cpu_read_kernel("two_streams").read, &st::cpu_read_two_streams);
  EXPECT_EQ(st::cpu_read_kernel_names(), "loop, prefetch, two_streams");
  try {
    st::cpu_read_kernel("plain");
    ADD_FAILURE() << "an unknown kernel name was taken";
  } catch (const kvf::UsageError& e) {
    EXPECT_STREQ(e.what(), "read kernel plain: allowed loop, prefetch, two_streams");
  }
}

TEST(StreamCpu, ReadSeesEveryWord) {
  // One flipped bit anywhere (first word, inside a step, the tail) changes the checksum.
  const std::size_t bytes = 4096 + 24;
  for (std::size_t w : {std::size_t{0}, std::size_t{17}, bytes / 8 / 2, bytes / 8 / 2 + 5, bytes / 8 - 1}) {
    Filled f(bytes, 1);
    const std::uint64_t want = st::read_checksum_ref(kSeed, bytes);
    f.p[w] ^= std::uint64_t{1} << (w % 64);
    EXPECT_NE(st::cpu_read_1thread(f.p, bytes), want) << "word " << w;
    for (const auto& k : st::kCpuReadKernels) EXPECT_NE(k.read(f.p, bytes), want) << k.name << ", word " << w;
  }
}

TEST(StreamCpu, WriteAndCopyMatch) {
  for (std::size_t bytes : kSizes) {
    std::vector<std::uint64_t> dst(bytes / 8 + 1, 0), dst2(bytes / 8 + 1, 0);
    st::cpu_write(dst.data(), bytes, kSeed);
    EXPECT_TRUE(st::write_matches(dst.data(), bytes, kSeed)) << bytes;
    const Filled f(bytes, 1);
    st::cpu_copy(dst2.data(), f.p, bytes);
    EXPECT_TRUE(st::pattern_matches(dst2.data(), bytes, kSeed)) << bytes;
  }
}
