// The fp32 FMA peak of this CPU at the vector width the attention twin dispatches (zmm where cpu_avx512(), ymm on
// an AVX2 + FMA baseline, 16-byte GCC vectors otherwise): independent chains of a * x + b on every thread, enough
// of them to cover the FMA latency on every pipe (two pipes x four cycles on Zen 3/4/5 and Ice Lake and later).
// A dense attention row's flops over this rate is the time its QK and PV products alone would take with every
// FMA pipe busy: the arithmetic floor the row is stated against beside the read ceiling (on a 2-core Zen 3 VM
// the dense 64K row's floor was 5.5 ms where its bytes take 7.7 ms at the read ceiling and the row took 20.8).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "fma_peak.hpp"
#include "kvf/cpu_isa.hpp"

namespace kvf::access {
namespace {

// a * x + b with x = 1 - 2^-20 and b = 2^-20 converges to 1 from any start, so the chains never overflow or
// reach denormals however long they run.
constexpr float kX = 1.0f - 1.0f / 1048576.0f, kB = 1.0f / 1048576.0f;

// The chains' start: lane l of chain c is 1 + (c * lanes + l) / 64 (exact in fp32).
inline float start_value(int c, int lanes, int l) { return 1.0f + float(c * lanes + l) / 64.0f; }

// Generic vectors: 16 bytes (SSE2 / NEON), 12 chains.
using F4 = float __attribute__((vector_size(16)));
constexpr int kChainsGeneric = 12;
double chains_generic(std::uint64_t iters) {
  F4 a[kChainsGeneric];
  for (int c = 0; c < kChainsGeneric; ++c)
    for (int l = 0; l < 4; ++l) a[c][l] = start_value(c, 4, l);
  const F4 x = {kX, kX, kX, kX}, b = {kB, kB, kB, kB};
  for (std::uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16  // every chain in a register of its own (a rolled loop keeps the array in memory)
    for (auto& v : a) {
      v = v * x + b;
    }
  double sum = 0;
  for (auto& v : a)
    for (int l = 0; l < 4; ++l) sum += v[l];
  return sum;
}

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define KVF_FMA_PEAK_AVX2 1
// ymm: 12 chains (of the 16 registers, x and b in two).
constexpr int kChainsAvx2 = 12;
double chains_avx2(std::uint64_t iters) {
  __m256 a[kChainsAvx2];
  alignas(32) float init[8];
  for (int c = 0; c < kChainsAvx2; ++c) {
    for (int l = 0; l < 8; ++l) init[l] = start_value(c, 8, l);
    a[c] = _mm256_load_ps(init);
  }
  const __m256 x = _mm256_set1_ps(kX), b = _mm256_set1_ps(kB);
  for (std::uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16  // every chain in a register of its own (a rolled loop keeps the array in memory)
    for (auto& v : a) {
      v = _mm256_fmadd_ps(v, x, b);
    }
  double sum = 0;
  alignas(32) float out[8];
  for (auto& v : a) {
    _mm256_store_ps(out, v);
    for (float f : out) sum += f;
  }
  return sum;
}
#endif

#if KVF_AVX512_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
#if KVF_AVX512_DISPATCH || defined(__AVX512F__)
#define KVF_FMA_PEAK_AVX512 1
// zmm: 16 chains (of 32 registers).
constexpr int kChainsAvx512 = 16;
double chains_avx512(std::uint64_t iters) {
  __m512 a[kChainsAvx512];
  alignas(64) float init[16];
  for (int c = 0; c < kChainsAvx512; ++c) {
    for (int l = 0; l < 16; ++l) init[l] = start_value(c, 16, l);
    a[c] = _mm512_load_ps(init);
  }
  const __m512 x = _mm512_set1_ps(kX), b = _mm512_set1_ps(kB);
  for (std::uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16  // every chain in a register of its own (a rolled loop keeps the array in memory)
    for (auto& v : a) {
      v = _mm512_fmadd_ps(v, x, b);
    }
  double sum = 0;
  alignas(64) float out[16];
  for (auto& v : a) {
    _mm512_store_ps(out, v);
    for (float f : out) sum += f;
  }
  return sum;
}
#endif
#if KVF_AVX512_DISPATCH
#pragma GCC pop_options
#endif

}  // namespace

enum : int { kGeneric, kAvx2, kAvx512 };

FmaChains fma_chains_generic() { return {"generic 16-byte vectors, fp32 a*x+b", 4, kChainsGeneric, kGeneric}; }

FmaChains fma_chains_for_this_cpu() {
#if defined(KVF_FMA_PEAK_AVX512)
  if (cpu_avx512()) return {"avx512 zmm fp32 fma", 16, kChainsAvx512, kAvx512};
#endif
#if defined(KVF_FMA_PEAK_AVX2)
  return {"avx2 ymm fp32 fma", 8, kChainsAvx2, kAvx2};
#else
  return fma_chains_generic();
#endif
}

double run_fma_chains(const FmaChains& f, std::uint64_t iters) {
#if defined(KVF_FMA_PEAK_AVX512)
  if (f.kernel == kAvx512 && cpu_avx512()) return chains_avx512(iters);
#endif
#if defined(KVF_FMA_PEAK_AVX2)
  if (f.kernel == kAvx2) return chains_avx2(iters);
#endif
  if (f.kernel != kGeneric)
    throw std::invalid_argument(std::string("run_fma_chains: ") + f.isa + " is not available here");
  return chains_generic(iters);
}

double fma_chains_ref(const FmaChains& f, std::uint64_t iters, bool fused) {
  double sum = 0;
  for (int c = 0; c < f.chains; ++c)
    for (int l = 0; l < f.lanes; ++l) {
      float v = start_value(c, f.lanes, l);
      for (std::uint64_t i = 0; i < iters; ++i) {
        if (fused) {
          v = std::fma(v, kX, kB);
        } else {
          volatile float m = v * kX;  // rounded once here, once by the add
          v = m + kB;
        }
      }
      sum += v;
    }
  return sum;
}

FmaPeak cpu_fma_peak(int threads, double seconds, int repeats) {
  if (threads < 1 || !(seconds > 0) || repeats < 1)
    throw std::invalid_argument("cpu_fma_peak: threads " + std::to_string(threads) + ", seconds " +
                                std::to_string(seconds) + ", repeats " + std::to_string(repeats) +
                                " (each must be positive)");
  using clk = std::chrono::steady_clock;
  const FmaChains f = fma_chains_for_this_cpu();
  double sink = 0;
  auto timed = [&](std::uint64_t iters) {
    const auto t0 = clk::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += run_fma_chains(f, iters);
    return std::chrono::duration<double>(clk::now() - t0).count();
  };
  // Iterations for `seconds` per repeat, from short first runs (which also wake the threads), each step the
  // faster of two: one run stretched by a descheduled thread sized the repeats at ~80 us on a loaded VM, where
  // a scheduler tick in every repeat made the "peak" 2 GFLOP/s against rows at 55-88 (2026-11-29).
  const auto faster_of_two = [&](std::uint64_t n) { return std::min(timed(n), timed(n)); };
  constexpr std::uint64_t kMaxIters = std::uint64_t{1} << 40;
  std::uint64_t iters = 1u << 14;
  double t = faster_of_two(iters);
  while (t < seconds / 8 && iters < kMaxIters) iters *= 2, t = faster_of_two(iters);
  iters = std::max<std::uint64_t>(iters, static_cast<std::uint64_t>(double(iters) * seconds / t));
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) best = std::min(best, timed(iters));
  // The repeats ran much faster than the sizing said: it was slowed, so the repeats are too short to hold a
  // scheduler tick's worth of work; size them again from the best repeat (a few times at most).
  for (int again = 0; again < 3 && best < seconds / 2 && iters < kMaxIters; ++again) {
    iters = std::min(kMaxIters, static_cast<std::uint64_t>(double(iters) * seconds / best) + 1);
    best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < repeats; ++r) best = std::min(best, timed(iters));
  }
  FmaPeak p;
  p.isa = f.isa;
  p.threads = threads;
  p.flops_per_s = 2.0 * double(f.lanes) * f.chains * double(iters) * threads / best;
  p.checksum = sink;
  return p;
}

}  // namespace kvf::access
