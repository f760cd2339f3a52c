// CPU twin of the gather kernel: all cores (OpenMP, static contiguous ranges of runs), AVX-512 loads
// with four independent accumulators, and a software prefetch ring of run offsets (computed once, when
// prefetched). Runs of 1-4 KiB: two distances, spread over the reads of the current run, 16 KiB ahead
// into L2 (prefetcht1) and 4 KiB ahead into L1 (prefetcht0); other runs: one ~4 KiB-ahead ring
// (prefetchnta; inside runs longer than that). Measured (2-core Zen 5 VM, huge pages, run over
// sequential read in the same run, median of 5 alternated rounds, noisy): 1 thread 1 KiB 0.52 -> 0.56,
// 2 KiB 0.58 -> 0.69, 4 KiB 0.51 -> 0.75; 2 threads 1 KiB 0.69 -> 0.65, 2 KiB 0.62 -> 0.82, 4 KiB 0.76 ->
// 0.78. At 512 B it lost with 2 threads (0.64 -> 0.52), so shorter runs keep the single ring.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined pass-through operand inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "access.hpp"
#include "kvf/cpu_isa.hpp"

namespace kvf::access {
namespace {

constexpr std::uint64_t kAheadBytes = 4096;  // prefetch distance per core
constexpr int kRing = 256;                    // >= kAheadBytes / 32 + 1 (smallest run is 32 B); > kFarBytes / 1 KiB
constexpr std::uint64_t kFarBytes = 16384;   // runs of 1-4 KiB: into L2 this far ahead per core
constexpr std::uint64_t kNearBytes = 4096;   // and into L1 this far ahead

inline void prefetch_range(const unsigned char* p, std::uint64_t n) {
  for (std::uint64_t x = 0; x < n; x += 64) __builtin_prefetch(p + x, 0, 0);
}

// Sum of the 8-byte words of [p, p + n), n a multiple of 32: the path of the -march baseline (AVX2 for the
// portable preset).
inline std::uint64_t sum_run_base(const unsigned char* p, std::uint64_t n, bool prefetch) {
#if defined(__AVX2__)
  // Four accumulators over 128 bytes, as the stream read ceiling's loop: with two over 64 bytes the sequential
  // arm read 0.90-0.94 of that loop on a 2-core Zen 3 VM, with four 0.98-1.08 (alternated in one process).
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::uint64_t x = 0;
  for (; x + 128 <= n; x += 128) {
    if (prefetch && x + kAheadBytes < n) __builtin_prefetch(p + x + kAheadBytes, 0, 0);
    if (prefetch && x + 64 + kAheadBytes < n) __builtin_prefetch(p + x + 64 + kAheadBytes, 0, 0);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x + 96)));
  }
  a0 = _mm256_add_epi64(a0, a2);
  a1 = _mm256_add_epi64(a1, a3);
  for (; x + 64 <= n; x += 64) {
    if (prefetch && x + kAheadBytes < n) __builtin_prefetch(p + x + kAheadBytes, 0, 0);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x + 32)));
  }
  if (x < n) a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x)));
  a0 = _mm256_add_epi64(a0, a1);
  alignas(32) std::uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), a0);
  return t[0] + t[1] + t[2] + t[3];
#else
  const std::uint64_t* w = reinterpret_cast<const std::uint64_t*>(p);
  std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (std::uint64_t i = 0; i < n / 8; i += 4) {
    if (prefetch && i * 8 + kAheadBytes < n) __builtin_prefetch(p + i * 8 + kAheadBytes, 0, 0);
    s0 += w[i]; s1 += w[i + 1]; s2 += w[i + 2]; s3 += w[i + 3];
  }
  return s0 + s1 + s2 + s3;
#endif
}

// Runs [r0, r1) with the one ~4 KiB-ahead prefetch ring (or none), each summed by SumRun. A macro-free
// template would be compiled for the baseline and could not inline the AVX-512 sum, so each ISA region
// below instantiates this body as its own function (gather_runs_base, gather_runs_avx512).
#define KVF_GATHER_RING_BODY(SumRun)                                                                       \
  const std::uint64_t R = g.run_bytes;                                                                     \
  const std::uint32_t k = g.slot_bits();                                                                   \
  std::uint64_t sum = 0;                                                                                   \
  if (!prefetch) {                                                                                         \
    for (std::uint64_t r = r0; r < r1; ++r) sum += SumRun(pool + g.run_offset(r, k), R, false);            \
    return sum;                                                                                            \
  }                                                                                                        \
  /* Runs ahead so that about kAheadBytes are prefetched; long runs prefetch inside themselves. */         \
  const std::uint64_t ahead = std::max<std::uint64_t>(1, std::min<std::uint64_t>(kAheadBytes / R, kRing - 1)); \
  const std::uint64_t head_bytes = std::min<std::uint64_t>(R, kAheadBytes);                                \
  std::uint64_t ring[kRing];                                                                               \
  for (std::uint64_t r = r0; r < std::min(r1, r0 + ahead); ++r) {                                          \
    ring[r % kRing] = g.run_offset(r, k);                                                                  \
    prefetch_range(pool + ring[r % kRing], head_bytes);                                                    \
  }                                                                                                        \
  for (std::uint64_t r = r0; r < r1; ++r) {                                                                \
    const std::uint64_t rp = r + ahead;                                                                    \
    if (rp < r1) {                                                                                         \
      ring[rp % kRing] = g.run_offset(rp, k);                                                              \
      prefetch_range(pool + ring[rp % kRing], head_bytes);                                                 \
    }                                                                                                      \
    sum += SumRun(pool + ring[r % kRing], R, true);                                                        \
  }                                                                                                        \
  return sum;

std::uint64_t gather_runs_base(const unsigned char* pool, const GatherGeom& g, std::uint64_t r0, std::uint64_t r1,
                               bool prefetch) {
  KVF_GATHER_RING_BODY(sum_run_base)
}

// Sum of the words of two runs of n bytes (n a multiple of 32) read together, 64 bytes of each per step.
inline std::uint64_t sum_pair_base(const unsigned char* p, const unsigned char* q, std::uint64_t n) {
#if defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::uint64_t x = 0;
  for (; x + 64 <= n; x += 64) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + x)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + x + 32)));
  }
  if (x < n) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + x)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + x)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) std::uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), a0);
  return t[0] + t[1] + t[2] + t[3];
#else
  const std::uint64_t* v = reinterpret_cast<const std::uint64_t*>(p);
  const std::uint64_t* w = reinterpret_cast<const std::uint64_t*>(q);
  std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (std::uint64_t i = 0; i < n / 8; i += 2) {
    s0 += v[i]; s1 += v[i + 1]; s2 += w[i]; s3 += w[i + 1];
  }
  return s0 + s1 + s2 + s3;
#endif
}

// Two streams per thread: run i of the first half of [r0, r1) read together with run i of the second half (an
// odd run left over is read alone), no software prefetch: one more stream in flight per core, which read
// sequential and long random runs 1.1-1.35x faster than one stream on a 2-core AMD EPYC Zen 3 VM (the stream
// study's two-stream read). A macro for the same reason as the ring body.
#define KVF_GATHER_PAIRS_BODY(SumPair, SumRun)                                                           \
  const std::uint64_t R = g.run_bytes;                                                                   \
  const std::uint32_t k = g.slot_bits();                                                                 \
  const std::uint64_t half = (r1 - r0) / 2;                                                              \
  std::uint64_t sum = 0;                                                                                 \
  for (std::uint64_t i = 0; i < half; ++i)                                                               \
    sum += SumPair(pool + g.run_offset(r0 + i, k), pool + g.run_offset(r0 + half + i, k), R);            \
  if (r0 + 2 * half < r1) sum += SumRun(pool + g.run_offset(r1 - 1, k), R, false);                       \
  return sum;

std::uint64_t gather_pairs_base(const unsigned char* pool, const GatherGeom& g, std::uint64_t r0, std::uint64_t r1) {
  KVF_GATHER_PAIRS_BODY(sum_pair_base, sum_run_base)
}

// AVX-512 paths, compiled whatever the -march baseline and run only where cpu_avx512() (kvf/cpu_isa.hpp).
#if KVF_AVX512_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
#if KVF_AVX512_DISPATCH || defined(__AVX512F__)
#define KVF_GATHER_AVX512 1
// Wrapping sums of the lanes. GCC 12's _mm512_reduce_add_epi64 adds as signed 64-bit (undefined on
// overflow, flagged by UBSan); these adds are the unsigned vector ones.
inline std::uint64_t hsum_u64(__m256i a) {
  const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  return static_cast<std::uint64_t>(_mm_cvtsi128_si64(t)) + static_cast<std::uint64_t>(_mm_extract_epi64(t, 1));
}
inline std::uint64_t hsum_u64(__m512i a) {
  return hsum_u64(_mm256_add_epi64(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1)));
}

// Sum of the 8-byte words of [p, p + n), n a multiple of 32, with four independent 512-bit accumulators.
inline std::uint64_t sum_run_avx512(const unsigned char* p, std::uint64_t n, bool prefetch) {
  if (n >= 256) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (std::uint64_t x = 0; x < n; x += 256) {
      if (prefetch && x + kAheadBytes < n) {
        __builtin_prefetch(p + x + kAheadBytes, 0, 0);
        __builtin_prefetch(p + x + kAheadBytes + 64, 0, 0);
        __builtin_prefetch(p + x + kAheadBytes + 128, 0, 0);
        __builtin_prefetch(p + x + kAheadBytes + 192, 0, 0);
      }
      a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + x));
      a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + x + 64));
      a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + x + 128));
      a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + x + 192));
    }
    return hsum_u64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  }
  if (n >= 64) {
    __m512i a = _mm512_setzero_si512();
    for (std::uint64_t x = 0; x < n; x += 64) a = _mm512_add_epi64(a, _mm512_load_si512(p + x));
    return hsum_u64(a);
  }
  return hsum_u64(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

// sum_run of a run of 256 B .. kNearBytes with software prefetch spread over its 256-B steps: the same
// offsets of the run kFarBytes ahead into L2 (hardware prefetchers stop at 4 KiB page boundaries) and of
// the run kNearBytes ahead into L1.
inline std::uint64_t sum_run_pf(const unsigned char* p, std::uint64_t n, const unsigned char* pf_far,
                                std::uint64_t lim_far, const unsigned char* pf_near, std::uint64_t lim_near) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (std::uint64_t x = 0; x < n; x += 256) {
    if (x < lim_far)
      for (int c = 0; c < 256; c += 64) _mm_prefetch(reinterpret_cast<const char*>(pf_far + x + c), _MM_HINT_T1);
    if (x < lim_near)
      for (int c = 0; c < 256; c += 64) _mm_prefetch(reinterpret_cast<const char*>(pf_near + x + c), _MM_HINT_T0);
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + x));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + x + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + x + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + x + 192));
  }
  return hsum_u64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

// sum_pair_base with 512-bit loads: 128 bytes of each run per step (runs under 128 B: one after the other).
inline std::uint64_t sum_pair_avx512(const unsigned char* p, const unsigned char* q, std::uint64_t n) {
  if (n < 128) return sum_run_avx512(p, n, false) + sum_run_avx512(q, n, false);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (std::uint64_t x = 0; x < n; x += 128) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + x));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + x + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(q + x));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(q + x + 64));
  }
  return hsum_u64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

std::uint64_t gather_pairs_avx512(const unsigned char* pool, const GatherGeom& g, std::uint64_t r0,
                                  std::uint64_t r1) {
  KVF_GATHER_PAIRS_BODY(sum_pair_avx512, sum_run_avx512)
}

std::uint64_t gather_runs_avx512(const unsigned char* pool, const GatherGeom& g, std::uint64_t r0, std::uint64_t r1,
                                 bool prefetch) {
  if (prefetch && g.run_bytes >= 1024 && g.run_bytes <= 4096) {
    // Runs of 1-4 KiB: two distances, into L2 far ahead and into L1 near (the top of this file).
    const std::uint64_t R = g.run_bytes;
    const std::uint32_t k = g.slot_bits();
    std::uint64_t ring[kRing];
    std::uint64_t sum = 0;
    const std::uint64_t af = std::max<std::uint64_t>(1, std::min<std::uint64_t>(kFarBytes / R, kRing - 1));
    const std::uint64_t an = std::max<std::uint64_t>(1, std::min<std::uint64_t>(kNearBytes / R, af));
    const std::uint64_t lf = std::min(R, kFarBytes), ln = std::min(R, kNearBytes);
    for (std::uint64_t r = r0; r < std::min(r1, r0 + af + 1); ++r) ring[r % kRing] = g.run_offset(r, k);
    for (std::uint64_t r = r0; r < std::min(r1, r0 + af); ++r)
      for (std::uint64_t x = 0; x < lf; x += 64) _mm_prefetch(reinterpret_cast<const char*>(pool + ring[r % kRing] + x), _MM_HINT_T1);
    for (std::uint64_t r = r0; r < r1; ++r) {
      if (r + af + 1 < r1) ring[(r + af + 1) % kRing] = g.run_offset(r + af + 1, k);
      const bool f = r + af < r1, nn = r + an < r1;
      sum += sum_run_pf(pool + ring[r % kRing], R, f ? pool + ring[(r + af) % kRing] : pool, f ? lf : 0,
                        nn ? pool + ring[(r + an) % kRing] : pool, nn ? ln : 0);
    }
    return sum;
  }
  KVF_GATHER_RING_BODY(sum_run_avx512)
}
#endif
#if KVF_AVX512_DISPATCH
#pragma GCC pop_options
#endif
#undef KVF_GATHER_RING_BODY
#undef KVF_GATHER_PAIRS_BODY

}  // namespace

void validate_gather(const GatherGeom& g) {
  auto pow2 = [](std::uint64_t x) { return x && !(x & (x - 1)); };
  if (!pow2(g.run_bytes) || g.run_bytes < 32 || g.run_bytes > (std::uint64_t{1} << 30))
    throw std::invalid_argument("run of " + std::to_string(g.run_bytes) +
                                " bytes: must be a power of two from 32 to 1 GiB");
  if (g.pool_bytes < g.run_bytes || g.pool_bytes % g.run_bytes)
    throw std::invalid_argument("pool of " + std::to_string(g.pool_bytes) +
                                " bytes: must be a multiple of the run size " + std::to_string(g.run_bytes));
  if (g.total_bytes == 0 || g.total_bytes % g.run_bytes || g.total_bytes > g.pool_bytes)
    throw std::invalid_argument("gather of " + std::to_string(g.total_bytes) +
                                " bytes: must be a non-zero multiple of the run size and fit in the pool");
}

const char* gather_path_name(GatherPath p) {
  switch (p) {
    case GatherPath::prefetch: return "prefetch";
    case GatherPath::one_stream: return "one_stream";
    case GatherPath::two_streams: return "two_streams";
  }
  return "?";
}

std::uint64_t gather_cpu(const void* pool_v, const GatherGeom& g, GatherPath path) {
  const unsigned char* pool = static_cast<const unsigned char*>(pool_v);
  const std::uint64_t nruns = g.nruns();
  // The ISA chosen here is the one the CPU backend records as device.arch (kvf::dispatch_isa).
  auto* runs = &gather_runs_base;
  auto* pairs = &gather_pairs_base;
#if defined(KVF_GATHER_AVX512)
  if (cpu_avx512()) runs = &gather_runs_avx512, pairs = &gather_pairs_avx512;
#endif
  std::uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const std::uint64_t nt = static_cast<std::uint64_t>(omp_get_num_threads());
    const std::uint64_t t = static_cast<std::uint64_t>(omp_get_thread_num());
    const std::uint64_t r0 = nruns * t / nt, r1 = nruns * (t + 1) / nt;
    total += path == GatherPath::two_streams ? pairs(pool, g, r0, r1)
                                             : runs(pool, g, r0, r1, path == GatherPath::prefetch);
  }
  return total;
}

namespace {
// The plain sum of one run of 8-byte words (the loop both controls share).
inline std::uint64_t plain_run_sum(const std::uint64_t* w, std::uint64_t words) {
  std::uint64_t s = 0;
  for (std::uint64_t i = 0; i < words; ++i) s += w[i];
  return s;
}
}  // namespace

// The control: a gather as anyone would write it first (issue 14's "40-line two-thread gather", which read 256 B
// runs faster on a Xeon than the tuned one did). OpenMP static over the runs, each run's words summed by a loop
// the compiler vectorizes for the -march baseline; no intrinsics, no software prefetch, the same run order.
std::uint64_t gather_plain_cpu(const void* pool_v, const GatherGeom& g) {
  const auto* pool = static_cast<const std::uint64_t*>(pool_v);
  const std::uint64_t nruns = g.nruns(), words = g.run_bytes / 8;
  const std::uint32_t k = g.slot_bits();
  std::uint64_t total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (std::uint64_t r = 0; r < nruns; ++r) {
    total += plain_run_sum(pool + g.run_offset(r, k) / 8, words);
  }
  return total;
}

// The attention kernel walks, per batch, the chunks of a context in logical order (a page of the paged layouts,
// 16 tokens otherwise), a chunk holding every kv head where the layout keeps them side by side (NHD, paged HND),
// one head otherwise (unpaged HND, head by head as its items go); its pipeline reads a task's V beside the next
// task's K, so a chunk's K and V stream together, and so does this loop. (Read one after the other, a chunk's K
// and then its V, random 32 KiB pages ran at 0.66-0.69 of a sequential read on a 2-core Zen 5 VM, together at
// 0.81-0.88: two streams keep more lines in flight.) Every byte of K and V is read once, so the sum is the plain
// sum of both buffers (kv_sum_ref).
std::uint64_t kv_read_cpu(const AttnShape& s, const PageMap& pm, const void* k, const void* v) {
  const KvLayout lay = make_kv_layout(s.layout, s.hkv, s.d, pm.page);
  const bool all_heads = s.layout == Layout::NHD || lay.paged;
  std::uint64_t chunk = pm.page ? pm.page : 16;
  while (s.ctx % chunk) chunk /= 2;
  const std::uint64_t eb = dtype_bytes(s.dtype), groups = all_heads ? 1 : s.hkv, chunks = s.ctx / chunk;
  const std::uint64_t run_bytes = chunk * s.d * (all_heads ? s.hkv : 1) * eb, run_words = run_bytes / 8;
  if (run_bytes % 8)
    throw std::invalid_argument("kv read: a chunk of " + std::to_string(run_bytes) + " bytes is not a multiple of 8");
  const auto* kw = static_cast<const unsigned char*>(k);
  const auto* vw = static_cast<const unsigned char*>(v);
  const std::uint64_t n = std::uint64_t{s.batch} * groups * chunks;
  std::uint64_t total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t c = i % chunks, h = (i / chunks) % groups, b = i / chunks / groups;
    const std::uint64_t off = lay.row(b, pm.phys_token(b, c * chunk), h, s.ctx) * eb;
    const auto* kr = reinterpret_cast<const std::uint64_t*>(kw + off);
    const auto* vr = reinterpret_cast<const std::uint64_t*>(vw + off);
    std::uint64_t sum = 0;
    for (std::uint64_t w = 0; w < run_words; ++w) sum += kr[w] + vr[w];
    total += sum;
  }
  return total;
}

std::uint64_t kv_sum_ref(const AttnShape& s, const void* k, const void* v) {
  if (s.kv_bytes() % 8) throw std::invalid_argument("kv sum: K of " + std::to_string(s.kv_bytes()) + " bytes");
  const std::uint64_t words = s.kv_bytes() / 8;
  return plain_run_sum(static_cast<const std::uint64_t*>(k), words) +
         plain_run_sum(static_cast<const std::uint64_t*>(v), words);
}

std::uint64_t gather_ref(std::uint64_t seed, const GatherGeom& g) {
  const std::uint64_t nruns = g.nruns();
  const std::uint32_t k = g.slot_bits();
  std::uint64_t total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (std::uint64_t r = 0; r < nruns; ++r) total += gather_expected_run_sum(seed, g.run_offset(r, k), g.run_bytes);
  return total;
}

}  // namespace kvf::access
