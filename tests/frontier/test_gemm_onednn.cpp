// The oneDNN bf16 GEMM (kernels/frontier/gemm_onednn.hpp) against an fp64 reference of the same bf16 inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontier_math.hpp"
#include "gemm_onednn.hpp"
#include "recompute.hpp"

namespace fr = kvf::frontier;

namespace {

// Y = X . W^T in fp64 from the bf16 values; |got - ref| within fp32 accumulation of K products.
void expect_matches_reference(int M, int N, int K) {
  std::vector<std::uint16_t> x(std::size_t(M) * K), w(std::size_t(N) * K);
  fr::fill_bf16_uniform(x.data(), x.size(), 11, 1.f);
  fr::fill_bf16_uniform(w.data(), w.size(), 12, 1.f);
  fr::OnednnGemm g(M, N, K, w.data());
  EXPECT_FALSE(g.impl().empty());
  std::vector<float> y(std::size_t(M) * N, std::nanf(""));
  g.run(x.data(), y.data());
  int bad = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(fr::bf16_to_f32(x[std::size_t(m) * K + k])) * fr::bf16_to_f32(w[std::size_t(n) * K + k]);
        ref += p;
        mag += std::fabs(p);
      }
      const double got = y[std::size_t(m) * N + n];
      // fp32 accumulation: a few ulps of the sum of magnitudes, K-long in the worst case.
      if (!(std::fabs(got - ref) <= 1e-6 * K * mag + 1e-30) && bad++ < 5)
        ADD_FAILURE() << M << "x" << N << "x" << K << " at (" << m << ", " << n << "): got " << got << ", ref " << ref;
    }
  EXPECT_EQ(bad, 0);
}

// oneDNN 2.6 has a bf16 matmul only from AVX-512 up: on an AVX2-only host the study skips its oneDNN rows (with
// this reason) and these tests say so instead of failing.
#define SKIP_WITHOUT_ONEDNN_BF16()                                                      \
  do {                                                                                  \
    std::string why;                                                                    \
    if (!fr::onednn_bf16_available(&why)) GTEST_SKIP() << "no oneDNN bf16 matmul here: " << why; \
  } while (0)

}  // namespace

TEST(OnednnGemm, MatchesTheReferenceAtOddAndRecomputeShapes) {
  SKIP_WITHOUT_ONEDNN_BF16();
  expect_matches_reference(1, 37, 64);     // one row (decode-like)
  expect_matches_reference(13, 29, 70);    // odd sizes, K not a multiple of the bf16 pair
  expect_matches_reference(128, 256, 512); // a recompute page's shape, scaled down
}

TEST(OnednnGemm, RunsAgainWithTheSamePackedWeights) {
  SKIP_WITHOUT_ONEDNN_BF16();
  const int M = 8, N = 16, K = 32;
  std::vector<std::uint16_t> x(M * K), w(N * K);
  fr::fill_bf16_uniform(x.data(), x.size(), 3, 1.f);
  fr::fill_bf16_uniform(w.data(), w.size(), 4, 1.f);
  fr::OnednnGemm g(M, N, K, w.data());
  w.assign(w.size(), 0);  // the GEMM packed its own copy
  std::vector<float> y1(M * N), y2(M * N);
  g.run(x.data(), y1.data());
  g.run(x.data(), y2.data());
  EXPECT_EQ(y1, y2);
  double sum = 0;
  for (float v : y1) sum += std::fabs(v);
  EXPECT_GT(sum, 0);
}

// Products packed one after another into one arena (a model's layers) give what products with memory of their own
// give, the arena's pages reused (its address stays) when the next product is no larger.
TEST(OnednnGemm, PackArenaReusedByTheNextProductGivesTheSameResult) {
  SKIP_WITHOUT_ONEDNN_BF16();
  fr::PackArena arena;
  const void* first = nullptr;
  for (int layer = 0; layer < 3; ++layer) {
    const int M = 8, N = 48 - 8 * layer, K = 64;  // shrinking: the arena keeps its first allocation
    std::vector<std::uint16_t> x(M * K), w(N * K);
    fr::fill_bf16_uniform(x.data(), x.size(), 10 + layer, 1.f);
    fr::fill_bf16_uniform(w.data(), w.size(), 20 + layer, 1.f);
    std::vector<float> own(M * N), in_arena(M * N, -1.f);
    fr::Bf16Gemm(M, N, K, w.data()).run(x.data(), own.data());
    {
      const fr::Bf16Gemm g(M, N, K, w.data(), &arena);
      g.run(x.data(), in_arena.data());
    }
    EXPECT_EQ(own, in_arena) << "layer " << layer;
    if (layer == 0) first = arena.reserve(1);
    EXPECT_EQ(arena.reserve(1), first);
  }
}
TEST(OnednnGemm, RefusesAnEmptyDimension) {
  std::vector<std::uint16_t> w(16);
  EXPECT_THROW(fr::OnednnGemm(0, 4, 4, w.data()), std::invalid_argument);
  EXPECT_THROW(fr::OnednnGemm(4, 4, -1, w.data()), std::invalid_argument);
}

TEST(OnednnGemm, IsaFamilyFromTheImplementationName) {
  EXPECT_EQ(fr::onednn_isa("brg:avx512_core_amx_bf16"), "amx_bf16");
  EXPECT_EQ(fr::onednn_isa("brg:avx512_core_bf16"), "avx512_bf16");
  EXPECT_EQ(fr::onednn_isa("brg:avx512_core"), "avx512");
  EXPECT_EQ(fr::onednn_isa("gemm:jit:avx2"), "avx2");
  EXPECT_EQ(fr::onednn_isa("ref:any"), "ref:any");
  EXPECT_FALSE(fr::onednn_version().empty());
}

// Once a product has been planned in the process oneDNN takes no ISA cap any more, and says so.
TEST(OnednnIsa, UnknownNameIsRefusedAndALateCapIsAnError) {
  EXPECT_THROW(fr::set_onednn_max_isa("sse9"), std::invalid_argument);
  EXPECT_THROW(fr::set_onednn_max_isa(""), std::invalid_argument);
  EXPECT_EQ(fr::onednn_isa_names().front(), "all");
  SKIP_WITHOUT_ONEDNN_BF16();
  const std::uint16_t w = 0;
  (void)fr::OnednnGemm(1, 1, 1, &w);
  EXPECT_THROW(fr::set_onednn_max_isa("avx2"), std::runtime_error);
}
