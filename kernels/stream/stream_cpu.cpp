// CPU stream kernels. The write and copy loops are plain (`omp simd`: GCC vectorizes them for the -march
// baseline); the read is written with 32-byte vectors (xor_words: GCC left its scalar form scalar), and the
// prefetching read has hand-written AVX-512 and AVX2 paths chosen at run time. OpenMP splits the buffer into one
// contiguous chunk per core so each core streams sequentially and the hardware prefetchers run ahead.
#include "stream.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kvf/cpu_isa.hpp"
#include "kvf/errors.hpp"
#include "kvf/pattern.hpp"

namespace kvf::stream {

namespace {

// 32-byte vectors of words (GCC/Clang vector extensions: ymm on x86-64-v3 and up, two xmm or NEON q registers
// elsewhere), loaded with 8-byte alignment.
using Words4 = std::uint64_t __attribute__((vector_size(32), aligned(8)));

std::uint64_t xor_words(const std::uint64_t* __restrict p, std::size_t n) {
  // Written as vectors, not left to the vectorizer: GCC 12 kept the earlier loop (four scalar accumulators
  // interleaved over 32 words) as scalar 8-byte loads, and on a 2-core Zen 3 VM that read 256 MiB at 17-27 GB/s
  // where this loop reads 27-35 in the same rounds (a plain kv read of the attention study beat the "ceiling").
  // Four accumulators, 128 bytes per step: the xor chains never limit issue.
  Words4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 ^= *reinterpret_cast<const Words4*>(p + i);
    a1 ^= *reinterpret_cast<const Words4*>(p + i + 4);
    a2 ^= *reinterpret_cast<const Words4*>(p + i + 8);
    a3 ^= *reinterpret_cast<const Words4*>(p + i + 12);
  }
  const Words4 a = a0 ^ a1 ^ a2 ^ a3;
  std::uint64_t tail = a[0] ^ a[1] ^ a[2] ^ a[3];
  for (; i < n; ++i) tail ^= p[i];
  return tail;
}

// The same over two sequential streams, the two halves of the range, 128 bytes of each in turn: the AMD EPYC
// VMs here read two streams per core faster than one (the attention study's plain read of a page's K and V
// together ran 1.1-1.2x the one-stream loop in the same run), so the read ceiling takes this kernel too.
std::uint64_t xor_words_two_streams(const std::uint64_t* __restrict p, std::size_t n) {
  const std::size_t half = n / 2 / 16 * 16;
  const std::uint64_t* __restrict q = p + half;
  Words4 a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
  for (std::size_t i = 0; i < half; i += 16) {
    a0 ^= *reinterpret_cast<const Words4*>(p + i);
    a1 ^= *reinterpret_cast<const Words4*>(p + i + 4);
    a2 ^= *reinterpret_cast<const Words4*>(p + i + 8);
    a3 ^= *reinterpret_cast<const Words4*>(p + i + 12);
    b0 ^= *reinterpret_cast<const Words4*>(q + i);
    b1 ^= *reinterpret_cast<const Words4*>(q + i + 4);
    b2 ^= *reinterpret_cast<const Words4*>(q + i + 8);
    b3 ^= *reinterpret_cast<const Words4*>(q + i + 12);
  }
  const Words4 a = a0 ^ a1 ^ a2 ^ a3 ^ b0 ^ b1 ^ b2 ^ b3;
  return a[0] ^ a[1] ^ a[2] ^ a[3] ^ xor_words(p + 2 * half, n - 2 * half);
}

// xor of n words with software prefetch kPrefetchBytes ahead: the path of the -march baseline (AVX2 for the
// portable preset).
std::uint64_t xor_words_prefetch_base(const std::uint64_t* __restrict p, std::size_t n) {
  constexpr std::size_t ahead = kPrefetchBytes / 8;  // in words
  std::size_t i = 0;
  std::uint64_t tail = 0;
#if defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 16 <= n; i += 16) {  // two cache lines per step
    const char* pf = reinterpret_cast<const char*>(p + i + ahead);
    _mm_prefetch(pf, _MM_HINT_T0);
    _mm_prefetch(pf + 64, _MM_HINT_T0);
    a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)));
  for (auto l : lanes) tail ^= l;
#else
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(p + i + ahead);
    for (std::size_t k = 0; k < 8; ++k) tail ^= p[i + k];
  }
#endif
  for (; i < n; ++i) tail ^= p[i];
  return tail;
}

// The AVX-512 path, compiled whatever the -march baseline and run only where cpu_avx512() (kvf/cpu_isa.hpp).
#if KVF_AVX512_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
#if KVF_AVX512_DISPATCH || defined(__AVX512F__)
#define KVF_STREAM_AVX512 1
std::uint64_t xor_words_prefetch_avx512(const std::uint64_t* __restrict p, std::size_t n) {
  constexpr std::size_t ahead = kPrefetchBytes / 8;  // in words
  std::size_t i = 0;
  std::uint64_t tail = 0;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 32 <= n; i += 32) {  // four cache lines per step
    const char* pf = reinterpret_cast<const char*>(p + i + ahead);
    _mm_prefetch(pf, _MM_HINT_T0);
    _mm_prefetch(pf + 64, _MM_HINT_T0);
    _mm_prefetch(pf + 128, _MM_HINT_T0);
    _mm_prefetch(pf + 192, _MM_HINT_T0);
    a0 = _mm512_xor_si512(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_loadu_si512(p + i + 8));
    a2 = _mm512_xor_si512(a2, _mm512_loadu_si512(p + i + 16));
    a3 = _mm512_xor_si512(a3, _mm512_loadu_si512(p + i + 24));
  }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
  for (auto l : lanes) tail ^= l;
  for (; i < n; ++i) tail ^= p[i];
  return tail;
}
#endif
#if KVF_AVX512_DISPATCH
#pragma GCC pop_options
#endif

// [begin, end) word range of thread t of T, aligned to 8 words (one cache line).
void chunk(std::size_t words, int t, int T, std::size_t& b, std::size_t& e) {
  const std::size_t lines = (words + 7) / 8;
  const std::size_t per = (lines + T - 1) / T;
  b = std::min(words, static_cast<std::size_t>(t) * per * 8);
  e = std::min(words, b + per * 8);
}

}  // namespace

// Each thread xors its own contiguous chunk with `fold`.
template <class Fold>
std::uint64_t xor_all_threads(const void* src, std::size_t bytes, Fold fold) {
  const auto* p = static_cast<const std::uint64_t*>(src);
  const std::size_t words = bytes / 8;
  std::uint64_t acc = 0;
#pragma omp parallel reduction(^ : acc)
  {
    std::size_t b, e;
    chunk(words, omp_get_thread_num(), omp_get_num_threads(), b, e);
    acc ^= fold(p + b, e - b);
  }
  return acc;
}

std::uint64_t cpu_read(const void* src, std::size_t bytes) { return xor_all_threads(src, bytes, xor_words); }

std::uint64_t cpu_read_two_streams(const void* src, std::size_t bytes) {
  return xor_all_threads(src, bytes, xor_words_two_streams);
}

std::uint64_t cpu_read_prefetch(const void* src, std::size_t bytes) {
#if defined(KVF_STREAM_AVX512)
  if (cpu_avx512()) return xor_all_threads(src, bytes, xor_words_prefetch_avx512);
#endif
  return xor_all_threads(src, bytes, xor_words_prefetch_base);
}

std::string cpu_read_kernel_names() {
  std::string names;
  for (const CpuReadKernel& k : kCpuReadKernels) names += (names.empty() ? "" : ", ") + std::string(k.name);
  return names;
}

const CpuReadKernel& cpu_read_kernel(std::string_view name) {
  for (const CpuReadKernel& k : kCpuReadKernels)
    if (name == k.name) return k;
  bad_flag("read kernel", name, "allowed " + cpu_read_kernel_names());
}

std::uint64_t cpu_read_1thread(const void* src, std::size_t bytes) {
  return xor_words(static_cast<const std::uint64_t*>(src), bytes / 8);
}

void cpu_write(void* dst, std::size_t bytes, std::uint64_t seed) {
  auto* p = static_cast<std::uint64_t*>(dst);
  const std::size_t words = bytes / 8;
#pragma omp parallel
  {
    std::size_t b, e;
    chunk(words, omp_get_thread_num(), omp_get_num_threads(), b, e);
#pragma omp simd
    for (std::size_t i = b; i < e; ++i) p[i] = seed ^ i;
  }
}

void cpu_copy(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<std::uint64_t*>(dst);
  const auto* s = static_cast<const std::uint64_t*>(src);
  const std::size_t words = bytes / 8;
#pragma omp parallel
  {
    std::size_t b, e;
    chunk(words, omp_get_thread_num(), omp_get_num_threads(), b, e);
#pragma omp simd
    for (std::size_t i = b; i < e; ++i) d[i] = s[i];
  }
}

void cpu_memcpy_1thread(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

void cpu_memcpy_threads(void* dst, const void* src, std::size_t bytes) {
#pragma omp parallel
  {
    std::size_t b, e;
    chunk(bytes / 8, omp_get_thread_num(), omp_get_num_threads(), b, e);
    std::memcpy(static_cast<char*>(dst) + b * 8, static_cast<const char*>(src) + b * 8, (e - b) * 8);
  }
}

std::uint64_t read_checksum_ref(std::uint64_t seed, std::size_t bytes) {
  std::uint64_t acc = 0;
  const std::size_t words = bytes / 8;
#pragma omp parallel for reduction(^ : acc) schedule(static)
  for (std::size_t i = 0; i < words; ++i) acc ^= pattern_word(seed, i);
  return acc;
}

bool write_matches(const void* dst, std::size_t bytes, std::uint64_t seed) {
  const auto* p = static_cast<const std::uint64_t*>(dst);
  const std::size_t words = bytes / 8;
  std::size_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
  for (std::size_t i = 0; i < words; ++i) bad += p[i] != (seed ^ i);
  return bad == 0;
}

bool pattern_matches(const void* p, std::size_t bytes, std::uint64_t seed) {
  const auto* w = static_cast<const std::uint64_t*>(p);
  const std::size_t words = bytes / 8;
  std::size_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
  for (std::size_t i = 0; i < words; ++i) bad += w[i] != pattern_word(seed, i);
  return bad == 0;
}

}  // namespace kvf::stream
