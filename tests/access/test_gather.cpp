// CPU twin of the gather kernel against its reference (recomputed from the fill pattern), every run size.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "access.hpp"

using namespace kvf::access;

namespace {
struct Pool {
  std::uint64_t* p;
  std::uint64_t bytes;
  explicit Pool(std::uint64_t b, std::uint64_t seed) : p(static_cast<std::uint64_t*>(std::aligned_alloc(4096, b))), bytes(b) {
    for (std::uint64_t i = 0; i < b / 8; ++i) p[i] = kvf::pattern_word(seed, i);
  }
  ~Pool() { std::free(p); }
};
}  // namespace

TEST(Gather, TwinMatchesReferenceEveryRunSize) {
  Pool pool(8u << 20, 42);
  for (std::uint64_t R = 32; R <= 65536; R *= 2) {
    for (bool seq : {false, true}) {
      for (bool pf : {false, true}) {
        GatherGeom g{pool.bytes, R, 2u << 20, 7, seq};
        validate_gather(g);
        EXPECT_EQ(gather_cpu(pool.p, g, pf), gather_ref(42, g)) << "R=" << R << " seq=" << seq << " pf=" << pf;
      }
      GatherGeom g{pool.bytes, R, 2u << 20, 7, seq};
      EXPECT_EQ(gather_plain_cpu(pool.p, g), gather_ref(42, g)) << "plain R=" << R << " seq=" << seq;
    }
  }
}

TEST(Gather, ChecksumDetectsWrongRuns) {
  Pool pool(1u << 20, 1);
  GatherGeom g{pool.bytes, 256, 1u << 18, 3, false};
  GatherGeom other = g;
  other.key = 4;
  EXPECT_NE(gather_ref(1, g), gather_ref(1, other));
  pool.p[g.run_offset(0, g.slot_bits()) / 8] ^= 1;  // corrupt one word of a selected run
  EXPECT_NE(gather_cpu(pool.p, g), gather_ref(1, g));
  EXPECT_NE(gather_plain_cpu(pool.p, g), gather_ref(1, g));
}

TEST(Gather, RejectsBadGeometry) {
  EXPECT_THROW(validate_gather(GatherGeom{1 << 20, 48, 1 << 10, 0, false}), std::invalid_argument);
  EXPECT_THROW(validate_gather(GatherGeom{1 << 20, 16, 1 << 10, 0, false}), std::invalid_argument);
  EXPECT_THROW(validate_gather(GatherGeom{1 << 20, 256, 2 << 20, 0, false}), std::invalid_argument);
  EXPECT_NO_THROW(validate_gather(GatherGeom{1 << 20, 256, 1 << 20, 0, false}));
}
