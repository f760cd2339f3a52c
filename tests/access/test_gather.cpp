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
      // An odd run count too: two_streams reads the run left over by its halves alone.
      for (const std::uint64_t total : {std::uint64_t{2} << 20, (std::uint64_t{2} << 20) - 3 * R})
        for (GatherPath path : {GatherPath::one_stream, GatherPath::prefetch, GatherPath::two_streams}) {
          GatherGeom g{pool.bytes, R, total, 7, seq};
          validate_gather(g);
          EXPECT_EQ(gather_cpu(pool.p, g, path), gather_ref(42, g))
              << "R=" << R << " seq=" << seq << " runs=" << g.nruns() << " " << gather_path_name(path);
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
  EXPECT_NE(gather_cpu(pool.p, g, GatherPath::two_streams), gather_ref(1, g));
  EXPECT_NE(gather_plain_cpu(pool.p, g), gather_ref(1, g));
}

// Two streams per thread pair run i of each half of its range and read a left-over run alone: a word changed in any
// of them changes the sum (an odd run count, so each thread's range has one).
TEST(Gather, TwoStreamsReadEveryRun) {
  Pool pool(1u << 20, 1);
  const GatherGeom g{pool.bytes, 256, (1u << 18) - 256, 3, false};
  const std::uint64_t want = gather_ref(1, g);
  ASSERT_EQ(gather_cpu(pool.p, g, GatherPath::two_streams), want);
  for (const std::uint64_t r : {std::uint64_t{0}, g.nruns() / 4, g.nruns() / 2, g.nruns() / 2 + 1, g.nruns() - 1}) {
    std::uint64_t& w = pool.p[g.run_offset(r, g.slot_bits()) / 8 + 3];
    w ^= 4;
    EXPECT_NE(gather_cpu(pool.p, g, GatherPath::two_streams), want) << "run " << r;
    w ^= 4;
  }
}

TEST(Gather, RejectsBadGeometry) {
  EXPECT_THROW(validate_gather(GatherGeom{1 << 20, 48, 1 << 10, 0, false}), std::invalid_argument);
  EXPECT_THROW(validate_gather(GatherGeom{1 << 20, 16, 1 << 10, 0, false}), std::invalid_argument);
  EXPECT_THROW(validate_gather(GatherGeom{1 << 20, 256, 2 << 20, 0, false}), std::invalid_argument);
  EXPECT_NO_THROW(validate_gather(GatherGeom{1 << 20, 256, 1 << 20, 0, false}));
}

// The dense arm's control reads every byte of K and V once, whatever the layout and placement: its sum is the
// plain sum of both buffers (a chunk read twice or skipped changes it: the data is pseudo-random).
TEST(KvRead, EveryLayoutAndPlacementReadsEveryByteOnce) {
  for (Layout lay : {Layout::HND, Layout::NHD})
    for (DType dt : {DType::bf16, DType::fp8_e4m3})
      for (std::uint32_t page : {0u, 16u, 64u}) {
        AttnShape s;
        s.batch = 2;
        s.hq = 8;
        s.hkv = 4;
        s.d = 64;
        s.ctx = 1024;
        s.dtype = dt;
        s.layout = lay;
        s.page = page;
        std::vector<unsigned char> q(s.q_bytes()), k(s.kv_bytes()), v(s.kv_bytes());
        fill_qkv(s, q.data(), k.data(), v.data(), 5);
        const PageMap pm = make_page_map(s.ctx, page, 9);
        const std::uint64_t want = kv_sum_ref(s, k.data(), v.data());
        EXPECT_EQ(kv_read_cpu(s, pm, k.data(), v.data()), want)
            << to_string(lay) << " " << to_string(dt) << " page " << page;
        k[k.size() / 3] ^= 0x10;  // a byte the walk must read
        EXPECT_NE(kv_read_cpu(s, pm, k.data(), v.data()), want);
      }
}
