// Index, layout, permutation, split and number-format math of the access study (host side of the
// __host__ __device__ functions the CUDA kernels use).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "access_math.hpp"

using namespace kvf::access;

TEST(AccessMath, PermIsBijectionOnArbitraryN) {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 100ull, 1000ull, 4096ull, 65537ull}) {
    const std::uint32_t k = ceil_log2_u64(n);
    std::vector<char> seen(n, 0);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t y = perm_n(i, n, k, 0x1234 + n);
      ASSERT_LT(y, n);
      ASSERT_FALSE(seen[y]) << "n=" << n << " i=" << i;
      seen[y] = 1;
    }
  }
}

TEST(AccessMath, PermScattersNeighbours) {
  // Consecutive runs should land far apart: fewer than 1% of neighbours adjacent.
  const std::uint64_t n = 1 << 20;
  const std::uint32_t k = ceil_log2_u64(n);
  int adjacent = 0;
  for (std::uint64_t i = 0; i + 1 < 100000; ++i) {
    const auto a = static_cast<std::int64_t>(perm_n(i, n, k, 7)), b = static_cast<std::int64_t>(perm_n(i + 1, n, k, 7));
    adjacent += std::llabs(a - b) <= 1;
  }
  EXPECT_LT(adjacent, 1000);
}

TEST(AccessMath, GatherGeomOffsets) {
  GatherGeom g{1 << 20, 256, 1 << 18, 99, false};
  EXPECT_EQ(g.nruns(), 1024u);
  EXPECT_EQ(g.nslots(), 4096u);
  std::set<std::uint64_t> offs;
  for (std::uint64_t r = 0; r < g.nruns(); ++r) {
    const auto o = g.run_offset(r, g.slot_bits());
    EXPECT_EQ(o % 256, 0u);
    EXPECT_LT(o + 256, (1u << 20) + 1);
    offs.insert(o);
  }
  EXPECT_EQ(offs.size(), 1024u);  // without replacement
  g.sequential = true;
  EXPECT_EQ(g.run_offset(5, g.slot_bits()), 5u * 256);
}

TEST(AccessMath, ExpectedRunSum) {
  std::uint64_t s = 0;
  for (std::uint64_t w = 4; w < 8; ++w) s += kvf::pattern_word(3, w);
  EXPECT_EQ(gather_expected_run_sum(3, 32, 32), s);
}

TEST(AccessMath, LayoutOffsets) {
  const std::uint64_t N = 10, H = 3, D = 4;
  // NHD: token-major, heads adjacent
  EXPECT_EQ(kv_row(Layout::NHD, 0, 0, 1, N, H, D), 4u);
  EXPECT_EQ(kv_row(Layout::NHD, 0, 1, 0, N, H, D), 12u);
  EXPECT_EQ(kv_row(Layout::NHD, 1, 0, 0, N, H, D), 120u);
  // HND: head-major, tokens adjacent
  EXPECT_EQ(kv_row(Layout::HND, 0, 1, 0, N, H, D), 4u);
  EXPECT_EQ(kv_row(Layout::HND, 0, 0, 1, N, H, D), 40u);
  EXPECT_EQ(kv_row(Layout::HND, 1, 0, 0, N, H, D), 120u);
  // Every (b, n, h) row is distinct and in range for both layouts, and row = head_base + token_off.
  for (Layout l : {Layout::NHD, Layout::HND}) {
    const KvLayout kl = make_kv_layout(l, H, D, 0);
    std::set<std::uint64_t> rows;
    for (std::uint64_t b = 0; b < 2; ++b)
      for (std::uint64_t n = 0; n < N; ++n)
        for (std::uint64_t h = 0; h < H; ++h) {
          const auto r = kv_row(l, b, n, h, N, H, D);
          EXPECT_EQ(r % D, 0u);
          EXPECT_LT(r, 2 * N * H * D);
          EXPECT_EQ(r, kl.head_base(b, h, N) + kl.token_off(n));
          EXPECT_EQ(kl.token_off(n), n * (l == Layout::NHD ? H * D : D));
          rows.insert(r);
        }
    EXPECT_EQ(rows.size(), 2 * N * H);
  }
}

// Paged HND ([batch][page][head][P][dim]): a page holds every head side by side, one head's slice is
// P*D contiguous elements; P == N is the unpaged layout; NHD ignores the page.
TEST(AccessMath, PagedHndLayout) {
  const std::uint64_t N = 16, H = 3, D = 4;
  const std::uint32_t P = 4;
  const KvLayout kl = make_kv_layout(Layout::HND, H, D, P);
  EXPECT_TRUE(kl.paged);
  EXPECT_EQ(kl.page_shift, 2u);
  EXPECT_EQ(kv_row(Layout::HND, 0, 1, 0, N, H, D, P), 4u);            // next token of a head's slice
  EXPECT_EQ(kv_row(Layout::HND, 0, 0, 1, N, H, D, P), P * D);         // next head: the next slice
  EXPECT_EQ(kv_row(Layout::HND, 0, 4, 0, N, H, D, P), H * P * D);     // next page, after every head's slice
  EXPECT_EQ(kv_row(Layout::HND, 0, 5, 2, N, H, D, P), (H * P + 2 * P + 1) * D);
  EXPECT_EQ(kv_row(Layout::HND, 1, 0, 0, N, H, D, P), N * H * D);     // batch regions as unpaged
  std::set<std::uint64_t> rows;
  for (std::uint64_t b = 0; b < 2; ++b)
    for (std::uint64_t n = 0; n < N; ++n)
      for (std::uint64_t h = 0; h < H; ++h) {
        const auto r = kv_row(Layout::HND, b, n, h, N, H, D, P);
        EXPECT_EQ(r, kl.head_base(b, h, N) + kl.token_off(n));
        EXPECT_LT(r, 2 * N * H * D);
        // each page of a batch is one run of H*P*D elements
        EXPECT_EQ((r - b * N * H * D) / (H * P * D), n / P);
        rows.insert(r);
      }
  EXPECT_EQ(rows.size(), 2 * N * H);
  for (std::uint64_t b = 0; b < 2; ++b)
    for (std::uint64_t n = 0; n < N; ++n)
      for (std::uint64_t h = 0; h < H; ++h) {
        EXPECT_EQ(kv_row(Layout::HND, b, n, h, N, H, D, static_cast<std::uint32_t>(N)), kv_row(Layout::HND, b, n, h, N, H, D));
        EXPECT_EQ(kv_row(Layout::NHD, b, n, h, N, H, D, P), kv_row(Layout::NHD, b, n, h, N, H, D));
      }
  EXPECT_FALSE(make_kv_layout(Layout::NHD, H, D, P).paged);
  EXPECT_FALSE(make_kv_layout(Layout::HND, H, D, 0).paged);
}

// The GPU's 32-bit form of the token offset equals the 64-bit one, up to the largest contexts.
TEST(AccessMath, TokenOffsetU32MatchesU64) {
  for (Layout l : {Layout::NHD, Layout::HND})
    for (std::uint32_t page : {0u, 1u, 16u, 256u, 1u << 20})
      for (std::uint64_t H : {1u, 8u, 32u}) {
        const KvLayout kl = make_kv_layout(l, H, 128, page);
        if (!kl.fits_u32()) {  // pages of 2^32 elements or more: the GPU refuses these layouts
          EXPECT_GE(std::uint64_t{page} * H * 128, std::uint64_t{1} << 32);
          continue;
        }
        for (std::uint32_t n : {0u, 1u, 15u, 16u, 17u, 4095u, 65537u, (1u << 20) - 1, (1u << 24) + 3, 0xFFFFFFFFu})
          EXPECT_EQ(kl.token_off_u32(n), kl.token_off(n)) << int(l) << " page " << page << " H " << H << " n " << n;
      }
}

TEST(AccessMath, SelectionTokens) {
  const std::uint32_t list[] = {0, 5, 9};
  SelGeom g{3, 4, false};
  EXPECT_EQ(g.n_tokens(), 12u);
  EXPECT_EQ(g.token(list, 0), 0u);
  EXPECT_EQ(g.token(list, 3), 3u);
  EXPECT_EQ(g.token(list, 4), 20u);
  EXPECT_EQ(g.token(list, 11), 39u);
  EXPECT_EQ(g.list_offset(1, 2, 8), (1u * 8 + 2) * 3);
  g.shared = true;
  EXPECT_EQ(g.list_offset(1, 2, 8), 3u);
}

// Paged placement: a page table per batch (bijection on its pages), in-page offsets kept, entries of
// any power-of-two span translated so SelGeom::token reads exactly the physical rows of the logical tokens.
TEST(AccessMath, PageMapContiguousIsIdentity) {
  const PageMap pm = make_page_map(4096, 0, 5);
  EXPECT_TRUE(pm.contiguous());
  for (std::uint64_t t : {0ull, 1ull, 17ull, 4095ull}) EXPECT_EQ(pm.phys_token(3, t), t);
  EXPECT_EQ(pm.entry_span(256), 256u);
  EXPECT_EQ(pm.entries_per(256), 1u);
  EXPECT_EQ(pm.phys_entry(0, 7, 32, 0), 7u);
}

TEST(AccessMath, PageMapIsPerBatchBijectionKeepingOffsets) {
  for (std::uint32_t page : {1u, 16u, 64u, 4096u}) {
    const std::uint32_t ctx = 4096;
    const PageMap pm = make_page_map(ctx, page, 0xacce55);
    ASSERT_EQ(pm.n_pages, ctx / page);
    std::vector<std::vector<std::uint32_t>> tables;
    for (std::uint32_t b = 0; b < 3; ++b) {
      std::vector<char> seen(pm.n_pages, 0);
      std::vector<std::uint32_t> tab;
      for (std::uint32_t p = 0; p < pm.n_pages; ++p) {
        const std::uint32_t y = pm.phys_page(b, p);
        ASSERT_LT(y, pm.n_pages);
        ASSERT_FALSE(seen[y]) << "page " << page << " batch " << b << " p " << p;
        seen[y] = 1;
        tab.push_back(y);
      }
      for (std::uint32_t t = 0; t < ctx; t += 7) {
        const std::uint64_t pt = pm.phys_token(b, t);
        EXPECT_EQ(pt % page, t % page);
        EXPECT_EQ(pt / page, pm.phys_page(b, t / page));
      }
      tables.push_back(tab);
    }
    if (pm.n_pages >= 16) {
      EXPECT_NE(tables[0], tables[1]) << "batches share one page order";
      // Shuffled: logical neighbours are rarely physical neighbours (an identity map would give all).
      int adjacent = 0;
      for (std::uint32_t p = 0; p + 1 < pm.n_pages; ++p) adjacent += tables[0][p + 1] == tables[0][p] + 1;
      EXPECT_LT(adjacent, static_cast<int>(pm.n_pages / 8) + 1) << "page " << page;
    }
  }
}

TEST(AccessMath, PlacedEntriesReadThePhysicalRowsOfTheLogicalTokens) {
  const std::uint32_t ctx = 2048;
  for (std::uint32_t page : {1u, 4u, 16u, 64u, 256u}) {
    const PageMap pm = make_page_map(ctx, page, 99);
    for (std::uint32_t span : {1u, 16u, 32u, 256u}) {
      const std::uint32_t es = pm.entry_span(span), per = pm.entries_per(span);
      EXPECT_EQ(es, std::min(span, page));
      EXPECT_EQ(es * per, span);
      // A logical list of entries e (span tokens each), placed, read through SelGeom::token.
      const std::vector<std::uint32_t> logical = {0u, 3u, ctx / span - 1};
      std::vector<std::uint32_t> phys;
      for (auto e : logical)
        for (std::uint32_t r = 0; r < per; ++r) phys.push_back(pm.phys_entry(2, e, span, r));
      const SelGeom g{static_cast<std::uint32_t>(phys.size()), es, false};
      ASSERT_EQ(g.n_tokens(), logical.size() * span);
      for (std::uint64_t t = 0; t < g.n_tokens(); ++t) {
        const std::uint64_t lt = std::uint64_t{logical[t / span]} * span + t % span;  // logical token
        ASSERT_EQ(g.token(phys.data(), t), pm.phys_token(2, lt)) << "page " << page << " span " << span << " t " << t;
      }
    }
  }
}

TEST(AccessMath, SplitsCoverExactlyOnce) {
  for (std::uint64_t n : {1ull, 15ull, 16ull, 100ull, 4096ull, 100000ull}) {
    for (std::uint64_t items : {1ull, 8ull, 64ull}) {
      const SplitGeom s = make_splits(n, items, 132, 2, 256, 32);
      ASSERT_GE(s.n_splits, 1u);
      EXPECT_EQ(s.chunk % 32, 0u);
      std::uint64_t covered = 0;
      for (std::uint32_t i = 0; i < s.n_splits; ++i) {
        EXPECT_EQ(s.begin(i), covered);
        EXPECT_GT(s.end(i), s.begin(i)) << "empty split";
        covered = s.end(i);
      }
      EXPECT_EQ(covered, n);
      if (n >= 256 * 2) {
        EXPECT_GE(s.chunk, 256u);
      }
    }
  }
  // Small batch at long context fills the device: 1 x 8 lists, 132 units, 2 waves -> >= 33 splits.
  EXPECT_GE(make_splits(256 * 1024, 8, 132, 2, 256, 32).n_splits, 33u);
}

TEST(AccessMath, Bf16Fp16RoundTrip) {
  for (float x : {0.0f, 1.0f, -1.0f, 0.5f, 3.14159f, -2.71828f, 1e-3f, 65504.0f, 1e-6f}) {
    EXPECT_NEAR(bf16_to_f32(f32_to_bf16(x)), x, std::fabs(x) * 0.004f + 1e-30f);
    EXPECT_NEAR(fp16_to_f32(f32_to_fp16(x)), x, std::fabs(x) * 0.0005f + 6e-8f);
  }
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_fp16(1e6f), 0x7C00);
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));
  // Round to nearest even: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 -> 1.
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // Every fp16 value round-trips exactly.
  for (std::uint32_t h = 0; h < 0x7C00; ++h) ASSERT_EQ(f32_to_fp16(fp16_to_f32(static_cast<std::uint16_t>(h))), h);
  for (std::uint32_t h = 0; h < 0x7F80; h += 7) ASSERT_EQ(f32_to_bf16(bf16_to_f32(static_cast<std::uint16_t>(h))), h);
}

TEST(AccessMath, E4m3) {
  // Encoding equals a brute-force nearest-even search over the finite codes, saturating at 448.
  auto brute = [](float f) {
    const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    std::uint8_t best = 0;
    float bestd = a;
    for (std::uint32_t c = 1; c < 0x7F; ++c) {
      const float d = std::fabs(e4m3_to_f32(static_cast<std::uint8_t>(c)) - a);
      if (d < bestd || (d == bestd && (c & 1u) == 0)) { bestd = d; best = static_cast<std::uint8_t>(c); }
    }
    return static_cast<std::uint8_t>(sign | best);
  };
  for (std::uint64_t i = 0; i < 200000; ++i) {
    const float x = pattern_unit(77, i) * (i % 3 == 0 ? 1.0f : i % 3 == 1 ? 0.02f : 500.0f);
    ASSERT_EQ(f32_to_e4m3(x), brute(std::fmin(std::fmax(x, -448.0f), 448.0f))) << x;
  }
  for (std::uint32_t c = 0; c + 1 < 0x7F; ++c) {  // ties between neighbouring codes round to even
    const float lo = e4m3_to_f32(static_cast<std::uint8_t>(c)), hi = e4m3_to_f32(static_cast<std::uint8_t>(c + 1));
    EXPECT_EQ(f32_to_e4m3(0.5f * (lo + hi)), (c & 1u) ? c + 1 : c);
  }
  EXPECT_EQ(f32_to_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-1000.0f), 0xFE);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  for (std::uint32_t c = 0; c < 0x7F; ++c) EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<std::uint8_t>(c))), c);
}

TEST(AccessMath, PatternUnitRange) {
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const float x = pattern_unit(5, i);
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 1.0f);
  }
}

TEST(AccessMath, GpuGatherVectorDecomposition) {
  // Summing pattern words over the GPU's 16-byte vector walk equals the reference checksum.
  for (std::uint64_t R : {32ull, 64ull, 256ull, 4096ull, 65536ull}) {
    for (bool seq : {false, true}) {
      GatherGeom g{1 << 20, R, 1 << 18, 5, seq};
      const std::uint32_t k = g.slot_bits(), vs = gather_vshift(R);
      EXPECT_EQ(std::uint64_t{16} << vs, R);
      std::uint64_t s = 0, want = 0;
      for (std::uint64_t v = 0; v < g.total_bytes / 16; ++v) {
        const std::uint64_t off = gather_vec_offset(g, k, vs, v);
        ASSERT_EQ(off % 16, 0u);
        s += kvf::pattern_word(9, off / 8) + kvf::pattern_word(9, off / 8 + 1);
      }
      for (std::uint64_t r = 0; r < g.nruns(); ++r) want += gather_expected_run_sum(9, g.run_offset(r, k), R);
      EXPECT_EQ(s, want) << "R=" << R;
    }
  }
}

TEST(AccessMath, GpuAttentionTilingCoversEachTokenOnce) {
  for (auto [d, eb] : {std::pair{64, 2}, std::pair{128, 2}, std::pair{64, 1}, std::pair{128, 1}}) {
    const int tpc = attn_tokens_per_cta(d, eb), lanes = attn_lanes_per_token(d, eb);
    EXPECT_EQ(lanes * attn_tokens_per_warp(d, eb), 32);
    EXPECT_EQ(lanes * 16, d * eb);  // 16 bytes per lane cover the row
    // Every thread maps to one (group, sub) pair and every pair is used once.
    std::set<std::pair<int, int>> pairs;
    for (int t = 0; t < 32 * kAttnWarps; ++t) {
      const int grp = attn_group_of_thread(d, t, eb), sub = attn_sub_of_thread(d, t, eb);
      ASSERT_LT(grp, tpc);
      ASSERT_LT(sub, lanes);
      pairs.insert({grp, sub});
    }
    EXPECT_EQ(pairs.size(), static_cast<std::size_t>(32 * kAttnWarps));
    for (int U : {1, 2, 4}) {
      const SplitGeom sg = make_splits(1000, 8, 132, 4, 64, static_cast<std::uint64_t>(tpc) * U);
      std::vector<int> hits(1000, 0);
      for (std::uint32_t sp = 0; sp < sg.n_splits; ++sp)
        for (std::uint64_t base = sg.begin(sp); base < sg.end(sp); base += static_cast<std::uint64_t>(tpc) * U)
          for (int u = 0; u < U; ++u)
            for (int grp = 0; grp < tpc; ++grp) {
              const std::uint64_t t = attn_token_of(d, base, u, grp, eb);
              if (t < sg.end(sp)) ++hits[t];
            }
      for (int t = 0; t < 1000; ++t) ASSERT_EQ(hits[t], 1) << "d=" << d << " U=" << U << " t=" << t;
    }
  }
}
