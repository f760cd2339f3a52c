// __host__ __device__ math of the frontier kernels, tested on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "frontier_math.hpp"

using namespace kvf::frontier;

TEST(FrontierMath, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(INFINITY)), INFINITY);
  for (float v : {0.f, 1.f, -3.5f, 1e-20f, 65504.f}) EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(v)))));
}

TEST(FrontierMath, Bf16RelativeErrorAtMostHalfUlp) {
  for (int i = 1; i < 100000; ++i) {
    const float v = std::sin(float(i)) * float(i);
    const float r = bf16_to_f32(f32_to_bf16(v));
    EXPECT_LE(std::fabs(r - v), std::fabs(v) / 256.0f) << v;
  }
}

TEST(FrontierMath, CacheIndexIsABijectionOverTheLayout) {
  const int nkv = 2, D = 4, blocks = 3;
  std::set<std::int64_t> seen;
  for (std::int64_t slot = 0; slot < blocks * kBlockTokens; ++slot)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < nkv; ++h)
        for (int d = 0; d < D; ++d) {
          const auto i = cache_index(slot, kv, h, d, nkv, D);
          EXPECT_GE(i, 0);
          EXPECT_LT(i, std::int64_t(blocks) * 2 * kBlockTokens * nkv * D);
          seen.insert(i);
        }
  EXPECT_EQ(seen.size(), std::size_t(blocks) * 2 * kBlockTokens * nkv * D);
  // Head dim is innermost, then head, then token; K and V of a block are adjacent.
  EXPECT_EQ(cache_index(0, 0, 0, 1, nkv, D), 1);
  EXPECT_EQ(cache_index(0, 0, 1, 0, nkv, D), D);
  EXPECT_EQ(cache_index(1, 0, 0, 0, nkv, D), nkv * D);
  EXPECT_EQ(cache_index(0, 1, 0, 0, nkv, D), kBlockTokens * nkv * D);
  EXPECT_EQ(cache_index(kBlockTokens, 0, 0, 0, nkv, D), 2 * kBlockTokens * nkv * D);
}

TEST(FrontierMath, RopeRotationPreservesNorm) {
  const RopePair o = rope_rotate(3.f, 4.f, std::cos(0.7f), std::sin(0.7f));
  EXPECT_NEAR(o.lo * o.lo + o.hi * o.hi, 25.f, 1e-4);
  const RopePair id = rope_rotate(3.f, 4.f, 1.f, 0.f);
  EXPECT_EQ(id.lo, 3.f);
  EXPECT_EQ(id.hi, 4.f);
  const RopePair q = rope_rotate(1.f, 0.f, 0.f, 1.f);  // 90 degrees
  EXPECT_EQ(q.lo, 0.f);
  EXPECT_EQ(q.hi, 1.f);
}

TEST(FrontierMath, Int4PackRoundTrips) {
  for (int lo = -8; lo <= 7; ++lo)
    for (int hi = -8; hi <= 7; ++hi) {
      const auto b = int4_pack(lo, hi);
      EXPECT_EQ(int4_lo(b), lo);
      EXPECT_EQ(int4_hi(b), hi);
    }
}

TEST(FrontierMath, QuantRoundClampsAndRoundsHalfAway) {
  EXPECT_EQ(quant_round(0.5f, 1.f, 127), 1);
  EXPECT_EQ(quant_round(-0.5f, 1.f, 127), -1);
  EXPECT_EQ(quant_round(0.49f, 1.f, 127), 0);
  EXPECT_EQ(quant_round(300.f, 1.f, 127), 127);
  EXPECT_EQ(quant_round(-300.f, 1.f, 7), -7);
}

TEST(FrontierMath, ResidentBytesOfALlama8BPage) {
  // 128 tokens, hidden 4096, 2 * 8 * 128 KV values per token.
  const std::int64_t T = 128, H = 4096, kv = 2 * 8 * 128;
  EXPECT_EQ(resident_bytes(Resident::kv_bf16, T, H, kv), 512 * 1024);
  EXPECT_EQ(resident_bytes(Resident::kv_fp8, T, H, kv), 256 * 1024);
  EXPECT_EQ(resident_bytes(Resident::x_bf16, T, H, kv), 1024 * 1024);  // X is 2x the KV for GQA-8
  EXPECT_EQ(resident_bytes(Resident::x_int8, T, H, kv), T * (H + 32 * 4));
  EXPECT_EQ(resident_bytes(Resident::x_int4, T, H, kv), T * (H / 2 + 32 * 4));
  EXPECT_EQ(resident_bytes(Resident::token_ids, T, H, kv), 512);
}
