// The GPU top-k (gpu::topk_select, the radix select of routing_gpu.cu) against the CPU reference
// topk_by_key, entry for entry, on a real device; skips without a usable GPU. One scratch, zeroed once,
// serves every call (as in the access study), so a call that left it dirty fails the next one.
// TopkGpu.Time64K prints the time of the H100 target shape (64K scores, keep 1/8, 8 lists and 1).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "access.hpp"
#include "access_gpu.hpp"

using namespace kvf::access;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Dev {
  cudaStream_t st = nullptr;
  int sms = 0;
  float* scores = nullptr;
  std::uint32_t *scratch = nullptr, *out = nullptr;
  std::uint32_t max_lists = 0;
  Dev(std::size_t max_scores, std::size_t max_out, std::uint32_t lists) : max_lists(lists) {
    EXPECT_EQ(cudaStreamCreate(&st), cudaSuccess);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    EXPECT_EQ(cudaMalloc(&scores, max_scores * 4 + 16), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&out, max_out * 4), cudaSuccess);
    const std::size_t sb = gpu::topk_scratch_bytes(lists, sms);
    EXPECT_EQ(cudaMalloc(&scratch, sb), cudaSuccess);
    EXPECT_EQ(cudaMemset(scratch, 0, sb), cudaSuccess);
  }
  ~Dev() {
    cudaFree(scores);
    cudaFree(out);
    cudaFree(scratch);
    cudaStreamDestroy(st);
  }
};

// Runs the GPU top-k on `lists` lists of n scores (scores + offset floats: offset 1 makes every list
// misaligned for 16-byte loads) and compares with topk_by_key.
void check(Dev& d, const std::vector<float>& s, std::uint32_t n, std::uint32_t lo, std::uint32_t hi,
           std::uint32_t kp, std::uint32_t lists, std::uint32_t offset, const char* what) {
  ASSERT_LE(lists, d.max_lists);
  ASSERT_EQ(cudaMemcpy(d.scores + offset, s.data(), s.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const std::uint32_t ne = lo + kp + (n - hi);
  ASSERT_EQ(cudaMemset(d.out, 0xFF, std::size_t{lists} * ne * 4), cudaSuccess);
  gpu::topk_select(d.scores + offset, n, lo, hi, kp, 1, lists, lists, PageMap{}, d.scratch, d.sms, d.out, d.st);
  ASSERT_EQ(cudaStreamSynchronize(d.st), cudaSuccess);
  std::vector<std::uint32_t> got(std::size_t{lists} * ne);
  ASSERT_EQ(cudaMemcpy(got.data(), d.out, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::uint32_t l = 0; l < lists; ++l) {
    const auto ref = topk_by_key(s.data() + std::size_t{l} * n, n, lo, hi, kp);
    ASSERT_TRUE(std::equal(ref.begin(), ref.end(), got.begin() + std::size_t{l} * ne))
        << what << ": list " << l << " n=" << n << " lo=" << lo << " hi=" << hi << " kp=" << kp
        << " offset=" << offset;
  }
}

std::vector<float> normal(std::size_t m, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> v(m);
  for (auto& x : v) x = g(rng);
  return v;
}

}  // namespace

TEST(TopkGpu, MatchesTheCpuTopkExactly) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const std::uint32_t big = 1u << 18;
  Dev d(std::size_t{8} * big, std::size_t{8} * big, 8);
  for (std::uint32_t offset : {0u, 1u}) {
    check(d, normal(8 * 65536, 1), 65536, 64, 65536 - 64, 8192 - 128, 8, offset, "64K x 8");
    check(d, normal(65536, 2), 65536, 64, 65536 - 64, 8192 - 128, 1, offset, "64K x 1");
    check(d, normal(big, 3), big, 64, big - 64, big / 8, 1, offset, "256K x 1");
    check(d, normal(3 * 10007, 4), 10007, 13, 9990, 1234, 3, offset, "10007 x 3");
    check(d, normal(2 * 1024, 5), 1024, 1, 1023, 126, 2, offset, "blocks 1024 x 2");
    check(d, normal(2 * 5000, 6), 5000, 32, 4968, 0, 2, offset, "kp 0");
    check(d, normal(2 * 5000, 7), 5000, 32, 4968, 4936, 2, offset, "kp all");
    check(d, normal(2 * 5000, 8), 5000, 32, 4968, 1, 2, offset, "kp 1");
  }
  std::mt19937 rng(9);
  std::vector<float> few(std::size_t{4} * 20000);
  for (auto& x : few) x = static_cast<float>(static_cast<int>(rng() % 5) - 2) * 0.5f;
  for (std::uint32_t kp : {1u, 4000u, 8000u, 19000u}) check(d, few, 20000, 32, 20000 - 32, kp, 4, 0, "five values");
  std::vector<float> eq(std::size_t{2} * 20000, 0.25f);
  for (std::uint32_t kp : {1u, 9000u, 19936u}) check(d, eq, 20000, 32, 20000 - 32, kp, 2, 0, "all equal");
  std::vector<float> z(6000);
  for (auto& x : z) x = (rng() % 3 == 0) ? -0.0f : (rng() % 2 ? 0.0f : -1.0f);
  for (std::uint32_t kp : {10u, 2500u, 4000u}) check(d, z, 6000, 16, 6000 - 16, kp, 1, 0, "signed zeros");
}

TEST(TopkGpu, Time64K) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const std::uint32_t n = 65536, lo = 64, hi = n - 64, kp = n / 8 - 128;
  Dev d(std::size_t{8} * n, std::size_t{8} * n, 8);
  for (std::uint32_t lists : {8u, 1u}) {
    const auto s = normal(std::size_t{lists} * n, 11);
    ASSERT_EQ(cudaMemcpy(d.scores, s.data(), s.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> us;
    for (int r = 0; r < 60; ++r) {
      cudaEventRecord(a, d.st);
      gpu::topk_select(d.scores, n, lo, hi, kp, 1, lists, lists, PageMap{}, d.scratch, d.sms, d.out, d.st);
      cudaEventRecord(b, d.st);
      ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (r >= 10) us.push_back(ms * 1000.0f);
    }
    std::sort(us.begin(), us.end());
    std::printf("topk_select 64K scores, kp %u, %u list(s), %u CTAs/list: median %.1f us (min %.1f)\n", kp, lists,
                gpu::topk_grid(lo, hi, kp, lists, d.sms).ctas, us[us.size() / 2], us[0]);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  check(d, normal(std::size_t{8} * n, 12), n, lo, hi, kp, 8, 0, "after timing");
}
