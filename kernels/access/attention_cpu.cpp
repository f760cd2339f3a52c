// CPU twin of the split-KV sparse decode attention. One work item = (batch, group of kv heads, split):
// the kv heads whose rows share physical pages (every head for NHD and the paged HND layout, one for
// unpaged HND; heads_per_item) are read together, in tasks of (16-token chunk, head) order, so a core
// walks each page of 16 tokens once, in address order. A task reads the selected K/V rows of its chunk
// once for all G = hq/hkv query heads of the group (as the GPU kernel does), with online softmax in
// fp32; the item writes a partial (m, l, acc) per query head that a merge step combines. AVX-512 path,
// per task: QK (bf16 K: vdpbf16ps on the raw rows where cpuid has AVX512_BF16, exact products, else fp32
// FMAs on widened rows; fp16/fp8: fp32 FMAs), four dots per
// horizontal reduction (bf16 with G >= 4: two tokens x four heads per pass, each q block loaded once for both
// K rows), scores transposed into one 16-token vector per head in registers -> softmax
// with a degree-7 exp2, the max kept as a vector, rescale only when some head's max grew -> PV with
// GB x DC/16 <= 16 fp32 accumulators per pass; bf16 V rows split into even/odd dims with one shift and
// one AND per 32 elements (no widening shuffle). Software pipeline: the QK of the next task runs inside
// the first PV pass of the current one, so the FMA pipes have independent work while a task's softmax
// chain completes. Software prefetch in two distances, spread over the tokens of that pass: 2-4 chunks
// ahead into L2 (prefetcht1; on or off by a calibration at the first call, calibrate_far), then the K rows
// of the task after next and the V rows of the next task into L1 (prefetcht0). Token positions are computed once per token and list (a cursor over the list
// entries, no division per token) into a ring of chunks when first prefetched.
// Portable fallback: the same algorithm per head in scalar code the compiler may vectorize.
//
// Measured (2-core Zen 5 VM, bf16, d128, hq32/hkv8, one thread, KV in L3, best of many calls): the
// old kernel issued about half the FMA-pipe peak (a vdpbf16ps/vfmadd zmm loop reaches ~2 per cycle
// here; the kernel ~1): QK + softmax took about half of the time though they are a third of the FMA
// work (dependent reduce/softmax chains, scalar stores re-read as vectors). The pipeline, in-register
// scores and even/odd V lifted hot throughput by ~1.2x (fp16 ~1.35x, G = 8/16 ~1.5-2x). Exact
// semantics kept: P stays fp32 in PV. Rounding P to bf16 for a vdpbf16ps PV (half the PV FMA work)
// measured 1.1e-3 to 1.8e-3 relative error against the 2e-3 tolerance (the fp32 twin: ~1e-6), so it
// was not taken.
//
// Paged KV (--placement shuffled, pages of 16 tokens): with one head per item, a page of one head is a
// 4 KiB run and the hardware prefetchers stop at each 4 KiB boundary; one prefetch distance alone (T0 4-8
// chunks: evicts the 48 KiB L1; T1 4 chunks without an L1 prefetch) left the dense arm at ~0.25 of the read
// ceiling (1 thread), the L2-far + L1-near pair at 0.55-0.8. Reading every head of a page together (the
// paged layout keeps them adjacent: 32 KiB runs per K and V at hkv 8) lifted dense shuffled 64K by a
// median x1.17 in alternated runs (shuffled/contiguous 0.71 -> 0.86); kernels/access/README.md has the
// figures. The rest is about what 32 KiB runs in random order lose against a sequential read here.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined pass-through operand inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "access.hpp"
#include "kvf/cpu_isa.hpp"

namespace kvf::access {
namespace {

constexpr int kChunk = 16;          // tokens per softmax step
constexpr int kRing = 8;            // chunks of token positions kept (>= kFarChunks + 1)
constexpr int kFarChunks = 4;       // L2 prefetch distance with 1-3 heads per item (4 or more: 2 chunks)
constexpr int kMaxItemHeads = 16;   // kv heads per work item at most
constexpr int kMaxItemQHeads = 64;  // query heads per work item at most (their q and state stay in L1/L2)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1.0e30f;  // "minus infinity" that keeps exp2 arithmetic finite
// 2^f for |f| <= 1/2: its degree-7 Taylor polynomial, highest power first (relative error < 1e-8).
constexpr float kExp2Taylor[8] = {1.5252734e-05f, 1.5403530e-04f, 1.3333558e-03f, 9.6181291e-03f,
                                  5.5504109e-02f, 2.4022651e-01f, 6.9314718e-01f, 1.0f};

inline float to_f32(DType t, const void* p, std::uint64_t i) {
  if (t == DType::fp8_e4m3) return e4m3_to_f32(static_cast<const std::uint8_t*>(p)[i]);
  const std::uint16_t h = static_cast<const std::uint16_t*>(p)[i];
  return t == DType::bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

// The bf16 paths keep dims as [half even | half odd] per 2 * half (what a shift and a mask of 32-bit lanes give):
// to_pairs puts D dims in that order, from_pairs back in order.
inline void to_pairs(const float* x, float* o, int D, int half) {
  for (int b = 0; b < D; b += 2 * half)
    for (int k = 0; k < half; ++k) o[b + k] = x[b + 2 * k], o[b + half + k] = x[b + 2 * k + 1];
}
inline void from_pairs(const float* a, float* o, int D, int half) {
  for (int b = 0; b < D; b += 2 * half)
    for (int k = 0; k < half; ++k) o[b + 2 * k] = a[b + k], o[b + 2 * k + 1] = a[b + half + k];
}

// One work item: the tokens [t0, t1) of the selection for nh kv heads of one batch. Heads whose rows
// share pages (NHD, paged HND) are read together so a core walks each physical page once, in address
// order: with pages of 16 tokens a page is one chunk, and the chunk's tasks (one per head) cover it.
struct Item {
  int nh = 1;
  const void* kb[kMaxItemHeads];  // head bases (the layout's head_base)
  const void* vb[kMaxItemHeads];
  const std::uint32_t* list[kMaxItemHeads];
  bool shared = false;
  bool far_prefetch = true;  // the L2 distance of the software prefetch (the L1 one follows `prefetch`)  // one list for all nh heads: positions computed once
  KvLayout kl;
  SelGeom sg;
  std::uint64_t t0 = 0, t1 = 0;
  const float* q = nullptr;           // fp32 [nh][G][D]
  const std::uint16_t* qb = nullptr;  // the same in bf16 (64-byte aligned)
  float qscale = 1;                   // scale * log2e
  float* m_out = nullptr;             // [nh][G] (log2 domain)
  float* l_out = nullptr;             // [nh][G]
  float* acc_out = nullptr;           // [nh][G][D]
  float* state = nullptr;             // 64-byte aligned, item_state_floats(nh, G, D)
  std::uint64_t* ring = nullptr;      // positions: [nh or 1][kRing][kChunk + 4]
  bool prefetch = true;
};
constexpr std::size_t item_state_floats(int nh, int G, int D) { return std::size_t(nh) * G * (D + 32); }
// Positions (KvLayout::token_off) of the next n selected tokens of `list`, from a cursor over its entries (entry e,
// token r within it), which this advances: no division per token. out[n, padded) repeat the last position (tokens
// past the item's end, weighted 0 by the kernels).
inline void cursor_positions(const KvLayout& kl, const std::uint32_t* list, std::uint64_t span, std::uint64_t& e,
                             std::uint64_t& r, int n, int padded, std::uint64_t* out) {
  for (int i = 0; i < n; ++i) {
    out[i] = kl.token_off(std::uint64_t{list[e]} * span + r);
    if (++r == span) r = 0, ++e;
  }
  for (int i = n; i < padded; ++i) out[i] = out[n - 1];
}

// AVX-512 paths, compiled whatever the -march baseline and run only where cpu_avx512() (kvf/cpu_isa.hpp):
// pick_item hands them out, bf16_dot_available() gates vdpbf16ps. Item and the helpers above stay outside, so
// the baseline code never calls a function compiled for AVX-512.
#if KVF_AVX512_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#endif
#if KVF_AVX512_DISPATCH || defined(__AVX512F__)
#define KVF_ATTN_AVX512 1
#if KVF_AVX512_DISPATCH || defined(__AVX512BF16__)
#define KVF_ATTN_AVX512_BF16 1
#endif
// Element type of K/V rows.
template <DType T>
using Elem = std::conditional_t<T == DType::fp8_e4m3, std::uint8_t, std::uint16_t>;

// 16 elements -> fp32.
template <DType T>
inline __m512 load16(const Elem<T>* p) {
  if constexpr (T == DType::fp8_e4m3) {
    // e4m3 s.eeee.mmm: normal -> f32 bits sign | (e + 120) << 23 | m << 20; subnormal (e = 0) -> m * 2^-9.
    const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    const __m512i em = _mm512_and_si512(x, _mm512_set1_epi32(0x7F));
    const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
    const __mmask16 sub = _mm512_cmplt_epu32_mask(em, _mm512_set1_epi32(8));
    const __m512 subv = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(0.001953125f));
    const __m512 mag = _mm512_mask_mov_ps(_mm512_castsi512_ps(normal), sub, subv);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
  }
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (T == DType::bf16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(h);
  }
}
// 2^x for x <= 0 (clamped at -126): x = n + f, |f| <= 1/2, 2^f by its degree-7 Taylor polynomial
// (relative error < 1e-8), scaled by 2^n with vscalefps.
inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(kExp2Taylor[0]);
  for (int c = 1; c < 8; ++c) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Taylor[c]));
  return _mm512_scalef_ps(p, n);
}
// Horizontal sums of four vectors -> [sum a, sum b, sum c, sum d].
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 x = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 y = _mm256_add_ps(_mm512_castps512_ps256(x),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
}

// Dot products of four (token, query head) pairs, reduced to four sums: with G >= 4 the four heads
// g..g+3 of one token, with G = 2 two tokens x two heads, with G = 1 four tokens (so the horizontal
// reduction, not FMA work, is shared by four dots whatever G is).
template <int D, int G, DType T, bool Dot>
inline __m128 qk4(const Elem<T>* kbase, const std::uint64_t* pos, int i, int g, const float* q,
                  const std::uint16_t* qb) {
  constexpr int HU = G >= 4 ? 4 : G;
  __m512 a[4];
#if defined(KVF_ATTN_AVX512_BF16)
  if constexpr (T == DType::bf16 && Dot) {
    // bf16 x bf16 products are exact in fp32: vdpbf16ps on the raw K row and the bf16 query (G < 4 only: with
    // G >= 4 qk2x4_bf16 below runs instead).
    for (int x = 0; x < 4; ++x) {
      const std::uint16_t* kr = kbase + pos[i + x / HU];
      const std::uint16_t* qr = qb + (g + x % HU) * D;
      a[x] = _mm512_setzero_ps();
      for (int j = 0; j < D / 32; ++j)
        a[x] = _mm512_dpbf16_ps(a[x], (__m512bh)_mm512_loadu_si512(kr + 32 * j), (__m512bh)_mm512_load_si512(qr + 32 * j));
    }
    return reduce4(a[0], a[1], a[2], a[3]);
  }
#endif
  (void)qb;
  // each K row converted once, used for the HU heads
  for (int u = 0; u < 4 / HU; ++u) {
    __m512 kv[D / 16];
    for (int j = 0; j < D / 16; ++j) kv[j] = load16<T>(kbase + pos[i + u] + 16 * j);
    for (int h = 0; h < HU; ++h) {
      const float* qr = q + (g + h) * D;
      __m512 x = _mm512_mul_ps(kv[0], _mm512_load_ps(qr));
      for (int j = 1; j < D / 16; ++j) x = _mm512_fmadd_ps(kv[j], _mm512_load_ps(qr + 16 * j), x);
      a[u * HU + h] = x;
    }
  }
  return reduce4(a[0], a[1], a[2], a[3]);
}

#if defined(KVF_ATTN_AVX512_BF16)
// bf16 QK of two tokens x four query heads (G >= 4): each 64-byte block of a query row, loaded once, serves both
// K rows (qk4 loads the four q rows per token: 32 loads per token against 12 here). r0: token i, heads g..g+3;
// r1: token i + 1. Always inlined: a call of its own would be AVX-512 code outside the dispatched kernels
// (tests/tools/isa_audit.sh), which a build without -mavx512 otherwise emits at -O2.
template <int D>
__attribute__((always_inline)) inline void qk2x4_bf16(const std::uint16_t* kbase, const std::uint64_t* pos, int i,
                                                      int g, const std::uint16_t* qb, __m128& r0, __m128& r1) {
  const std::uint16_t* k0 = kbase + pos[i];
  const std::uint16_t* k1 = kbase + pos[i + 1];
  // One opaque base for the 16 q blocks: GCC 12 otherwise hoists their 16 addresses out of the token loop into
  // stack slots (a scalar reload before each q load) and passes one q block through the stack; measured 6-12%
  // faster in cache with the blocks addressed as base + constant (kernels/access/README.md).
  const std::uint16_t* qg = qb + g * D;
  asm("" : "+r"(qg));
  __m512 a[8];
  for (auto& x : a) x = _mm512_setzero_ps();
  for (int j = 0; j < D / 32; ++j) {
    const __m512bh kv0 = (__m512bh)_mm512_loadu_si512(k0 + 32 * j);
    const __m512bh kv1 = (__m512bh)_mm512_loadu_si512(k1 + 32 * j);
    for (int h = 0; h < 4; ++h) {
      const __m512bh qv = (__m512bh)_mm512_load_si512(qg + h * D + 32 * j);
      a[h] = _mm512_dpbf16_ps(a[h], kv0, qv);
      a[4 + h] = _mm512_dpbf16_ps(a[4 + h], kv1, qv);
    }
  }
  r0 = reduce4(a[0], a[1], a[2], a[3]);
  r1 = reduce4(a[4], a[5], a[6], a[7]);
}
#endif

// AVX-512 work item. Tasks run in (chunk, head) order; the QK of the next task runs inside the first
// PV pass of the current one, so the FMA pipes have independent work while a softmax chain completes.
template <int D, int G, DType T, bool Dot, bool One>
void item_avx512_impl(const Item& it) {
  using E = Elem<T>;
  // PV of bf16 rows without widening each element: a 512-bit load of 32 bf16 holds dims (2k, 2k+1) in
  // dword k, so `w << 16` is the 16 even dims and `w & 0xFFFF0000` the 16 odd dims, exactly, in two
  // simple ops per 32 elements (instead of a vpmovzxwd shuffle and a shift per 16). The accumulators
  // then hold each 32-dim block as [16 even dims][16 odd dims], un-permuted once per work item.
  constexpr bool kPairs = T == DType::bf16;
  constexpr int DMIN = kPairs ? 32 : 16;                            // dims of the narrowest PV pass
  constexpr int GB = G * (DMIN / 16) <= 16 ? G : 16 / (DMIN / 16);  // heads per PV pass
  constexpr int DC = (256 / GB) < D ? (256 / GB) : D;               // dims per PV pass (GB * DC/16 <= 16 accumulators)
  constexpr int NC = DC / 16;
  static_assert(DC % DMIN == 0 && D % DC == 0 && G % GB == 0, "PV blocking");
  // Item fields in locals: the accumulator stores go through float pointers, which the compiler must
  // otherwise assume may alias it.qscale and the other fields and reload them.
  const int nh = One ? 1 : it.nh;
  const float qscale = it.qscale;
  const bool prefetch = it.prefetch;
  const bool far_pf = it.far_prefetch;
  const KvLayout kl = it.kl;
  const E* kbs[kMaxItemHeads];
  const E* vbs[kMaxItemHeads];
  const std::uint32_t* lists[kMaxItemHeads];
  for (int h = 0; h < nh; ++h) {
    kbs[h] = static_cast<const E*>(it.kb[h]);
    vbs[h] = static_cast<const E*>(it.vb[h]);
    lists[h] = it.list[h];
  }
  // One head: the state and the position ring on the stack (as the single-head kernel had them: measured
  // faster than the workspace copies for the unpaged layout).
  alignas(64) float local_state[One ? G * (D + 32) : 1];
  alignas(64) std::uint64_t local_ring[One ? kRing * (kChunk + 4) : 1];
  float* __restrict const state = One ? local_state : it.state;
  std::uint64_t* __restrict const ring = One ? local_ring : it.ring;
  const float* __restrict const qf = it.q;
  const std::uint16_t* __restrict const qbf = it.qb;
  const bool shared = One || it.shared;
  // per head: acc [G][D], then lv [G][16] (per-lane partial sums of p), mv [G][16] (running max, log2
  // domain, the same in every lane)
  auto acc_of = [&](int h) { return state + std::size_t(h) * G * (D + 32); };
  auto lv_of = [&](int h, int g) { return acc_of(h) + G * D + g * 16; };
  auto mv_of = [&](int h, int g) { return acc_of(h) + G * D + G * 16 + g * 16; };
  alignas(64) float s[G][kChunk];         // p of the current task
  alignas(64) float rb[(G + 3) / 4][64];  // qk4 sums of the next task, laid out for the transpose below
  float alpha[G];
  for (int h = 0; h < nh; ++h) {
    for (int i = 0; i < G * D; ++i) acc_of(h)[i] = 0;
    for (int g = 0; g < G; ++g)
      for (int x = 0; x < 16; ++x) {
        lv_of(h, g)[x] = 0;
        mv_of(h, g)[x] = kNegBig;
      }
  }
  // Token positions (element offsets from a head base, KvLayout::token_off), computed once per token
  // and list, a chunk at a time, by a cursor over the list entries (no division per token), kept in a
  // ring from the current chunk to the far one. qk4 reads up to 3 past a chunk's last token.
  const int npos = shared ? 1 : nh;
  const std::uint64_t span = it.sg.span;
  const std::uint64_t t0 = it.t0, t1 = it.t1;
  std::uint64_t ce[kMaxItemHeads], cr[kMaxItemHeads];
  for (int h = 0; h < npos; ++h) {
    ce[h] = t0 / span;
    cr[h] = t0 % span;
  }
  const int nchunks = static_cast<int>((t1 - t0 + kChunk - 1) / kChunk);
  auto ring_of = [&](int h, int c) {
    return ring + (std::size_t(shared ? 0 : h) * kRing + (static_cast<unsigned>(c) % kRing)) * (kChunk + 4);
  };
  int filled = 0;  // chunks whose positions are in the ring
  auto fill_upto = [&](int c) {  // positions of chunks <= c
    for (; filled <= c && filled < nchunks; ++filled) {
      const int n = static_cast<int>(std::min<std::uint64_t>(kChunk, t1 - t0 - std::uint64_t(filled) * kChunk));
      for (int h = 0; h < npos; ++h)  // the sums of the padding are masked off
        cursor_positions(kl, lists[h], span, ce[h], cr[h], n, kChunk + 4, ring_of(h, filled));
    }
  };
  // QK of token i of a task's chunk (for G < 4: of tokens i..i+TU-1 when i % TU == 0). Token i's sums
  // for heads g..g+3 go to 128-bit lane i/4 of row i%4 of rb[g/4] (G = 2: pair i/2 to lane (i/2)%4 of
  // row i/8; G = 1: tokens i..i+3 to lane i/4 of row 0), so the rows load as vectors once the chunk is
  // done (by then the 16-byte stores have long retired: no store-forwarding stall).
  auto qk_token = [&](int h, const std::uint64_t* p, int i) {
    const E* kb = kbs[h];
    const float* q = qf + std::size_t(h) * G * D;
    const std::uint16_t* qb = qbf + std::size_t(h) * G * D;
    if constexpr (G >= 4) {
#if defined(KVF_ATTN_AVX512_BF16)
      if constexpr (T == DType::bf16 && Dot) {
        if (i % 2 == 0)
          for (int g = 0; g < G; g += 4) {
            __m128 r0, r1;
            qk2x4_bf16<D>(kb, p, i, g, qb, r0, r1);
            _mm_store_ps(&rb[g / 4][16 * (i % 4) + 4 * (i / 4)], r0);
            _mm_store_ps(&rb[g / 4][16 * ((i + 1) % 4) + 4 * ((i + 1) / 4)], r1);
          }
      } else
#endif
      {
        for (int g = 0; g < G; g += 4)
          _mm_store_ps(&rb[g / 4][16 * (i % 4) + 4 * (i / 4)], qk4<D, G, T, Dot>(kb, p, i, g, q, qb));
      }
    } else if constexpr (G == 2) {
      if (i % 2 == 0) _mm_store_ps(&rb[0][4 * (i / 2)], qk4<D, G, T, Dot>(kb, p, i, 0, q, qb));
    } else {
      if (i % 4 == 0) _mm_store_ps(&rb[0][i], qk4<D, G, T, Dot>(kb, p, i, 0, q, qb));
    }
  };
  constexpr int kRowBytes = D * static_cast<int>(sizeof(E));
  auto pf_row = [&](const E* base, std::uint64_t p, auto hint) {
    const char* b = reinterpret_cast<const char*>(base + p);
    for (int x = 0; x < kRowBytes; x += 64) _mm_prefetch(b + x, static_cast<decltype(_MM_HINT_T0)>(decltype(hint)::value));
  };
  using T1 = std::integral_constant<int, static_cast<int>(_MM_HINT_T1)>;
  using T0 = std::integral_constant<int, static_cast<int>(_MM_HINT_T0)>;
  // L2 distance in chunks: the prefetched bytes ahead are far * nh * 2 * 16 rows, kept near 256 KiB.
  const int far = nh >= 4 ? 2 : kFarChunks;
  static_assert(kFarChunks + 1 <= kRing, "the ring holds the chunks from the current one to the far one");
  fill_upto(std::min(nchunks - 1, far));
  if (prefetch && far_pf)
    for (int c = 0; c <= std::min(nchunks - 1, far); ++c)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < kChunk; ++i) {
          pf_row(kbs[h], ring_of(h, c)[i], T1{});
          pf_row(vbs[h], ring_of(h, c)[i], T1{});
        }
  // Software prefetch, spread over the tokens of pass 0 of task (k, h): chunk k+far of head h into L2
  // (whole pages ahead: the hardware prefetchers stop at 4 KiB page boundaries), then into L1 the K rows
  // of the task after next and the V rows of the next task (each stream just ahead of its reader: a
  // task's K is read one task earlier than its V).
  for (int i = 0; i < kChunk; ++i) qk_token(0, ring_of(0, 0), i);
  for (int k = 0; k < nchunks; ++k) {
    const int n = static_cast<int>(std::min<std::uint64_t>(kChunk, t1 - t0 - std::uint64_t(k) * kChunk));
    const bool pf_f = prefetch && far_pf && k + far < nchunks;
    fill_upto(k + (prefetch ? far : 1));
    for (int h = 0; h < nh; ++h) {
      const bool last_head = h + 1 == nh;
      const int kn = last_head ? k + 1 : k, hn = last_head ? 0 : h + 1;  // next task
      const int k2 = h + 2 < nh ? k : k + 1, h2 = h + 2 < nh ? h + 2 : h + 2 - nh;  // task after next (nh >= 2)
      const bool has_next = kn < nchunks;
      const bool pf_k2 = prefetch && (nh == 1 ? k + 2 < nchunks : k2 < nchunks);
      const std::uint64_t* pos = ring_of(h, k);
      const std::uint64_t* pnext = ring_of(hn, kn);
      const std::uint64_t* pfar = ring_of(h, k + far);
      const std::uint64_t* pk2 = nh == 1 ? ring_of(0, k + 2) : ring_of(h2, k2);
      const E* kb2 = kbs[nh == 1 ? 0 : h2];
      const E* vbn = vbs[hn];
      const E* vbase = vbs[h];
      float* acc = acc_of(h);
      // the task's scores, one vector of 16 tokens per query head
      __m512 sc[G];
      if constexpr (G >= 4) {
        for (int g = 0; g < G; g += 4) {
          // row k lane L holds token 4L+k's sums (heads g..g+3): a 4x4 transpose within lanes leaves
          // head g+e's 16 scores in token order.
          const float* r = rb[g / 4];
          const __m512 t0v = _mm512_unpacklo_ps(_mm512_load_ps(r), _mm512_load_ps(r + 16));
          const __m512 t1v = _mm512_unpackhi_ps(_mm512_load_ps(r), _mm512_load_ps(r + 16));
          const __m512 t2v = _mm512_unpacklo_ps(_mm512_load_ps(r + 32), _mm512_load_ps(r + 48));
          const __m512 t3v = _mm512_unpackhi_ps(_mm512_load_ps(r + 32), _mm512_load_ps(r + 48));
          sc[g] = _mm512_shuffle_ps(t0v, t2v, _MM_SHUFFLE(1, 0, 1, 0));
          sc[g + 1] = _mm512_shuffle_ps(t0v, t2v, _MM_SHUFFLE(3, 2, 3, 2));
          sc[g + 2] = _mm512_shuffle_ps(t1v, t3v, _MM_SHUFFLE(1, 0, 1, 0));
          sc[g + 3] = _mm512_shuffle_ps(t1v, t3v, _MM_SHUFFLE(3, 2, 3, 2));
        }
      } else if constexpr (G == 2) {
        // (token h0, token h1) pairs of tokens 0-7, then 8-15
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        sc[0] = _mm512_permutex2var_ps(_mm512_load_ps(rb[0]), even, _mm512_load_ps(rb[0] + 16));
        sc[1] = _mm512_permutex2var_ps(_mm512_load_ps(rb[0]), _mm512_add_epi32(even, _mm512_set1_epi32(1)),
                                       _mm512_load_ps(rb[0] + 16));
      } else {
        sc[0] = _mm512_load_ps(rb[0]);
      }
      // online softmax over the chunk (log2 domain). The running max is kept broadcast in a vector, l as
      // 16 per-lane partial sums; rescale factors are computed, and the accumulators rescaled, only for a
      // chunk that raised some query head's max.
      const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1u);
      bool rescale = false;
      for (int g = 0; g < G; ++g) {
        const __m512 sv = _mm512_mask_mul_ps(_mm512_set1_ps(kNegBig), valid, sc[g], _mm512_set1_ps(qscale));
        __m512 mx = _mm512_max_ps(sv, _mm512_shuffle_f32x4(sv, sv, _MM_SHUFFLE(1, 0, 3, 2)));
        mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
        mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(1, 0, 3, 2)));
        mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(2, 3, 0, 1)));  // chunk max in every lane
        const __m512 mo = _mm512_load_ps(mv_of(h, g));
        const __m512 mn = _mm512_max_ps(mo, mx);
        const __m512 p = _mm512_maskz_mov_ps(valid, exp2_ps(_mm512_sub_ps(sv, mn)));
        _mm512_store_ps(s[g], p);
        __m512 l = _mm512_load_ps(lv_of(h, g));
        if (_mm512_cmp_ps_mask(mn, mo, _CMP_NEQ_OQ)) {
          const __m512 al = exp2_ps(_mm512_sub_ps(mo, mn));
          l = _mm512_mul_ps(l, al);
          alpha[g] = _mm512_cvtss_f32(al);
          _mm512_store_ps(mv_of(h, g), mn);
          rescale = true;
        } else {
          alpha[g] = 1.0f;
        }
        _mm512_store_ps(lv_of(h, g), _mm512_add_ps(l, p));
      }
      // PV (pass 0 also runs the next task's QK; p = 0 past a short last chunk, whose positions repeat
      // its last token, so every pass may run kChunk tokens)
      for (int gb = 0; gb < G; gb += GB)
        for (int dc = 0; dc < D; dc += DC) {
          __m512 a[GB][NC];
          for (int g = 0; g < GB; ++g)
            for (int j = 0; j < NC; ++j) {
              a[g][j] = _mm512_load_ps(&acc[(gb + g) * D + dc + 16 * j]);
              if (rescale) a[g][j] = _mm512_mul_ps(a[g][j], _mm512_set1_ps(alpha[gb + g]));
            }
          auto pv_token = [&](int i) {
            const E* vr = vbase + pos[i] + dc;
            __m512 vv[NC];
            if constexpr (kPairs) {
              for (int j = 0; j < NC; j += 2) {
                const __m512i w = _mm512_loadu_si512(vr + 16 * j);
                vv[j] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
                vv[j + 1] = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
              }
            } else {
              for (int j = 0; j < NC; ++j) vv[j] = load16<T>(vr + 16 * j);
            }
            for (int g = 0; g < GB; ++g) {
              const __m512 pg = _mm512_set1_ps(s[gb + g][i]);
              for (int j = 0; j < NC; ++j) a[g][j] = _mm512_fmadd_ps(pg, vv[j], a[g][j]);
            }
          };
          if (gb == 0 && dc == 0 && has_next) {
            for (int i = 0; i < kChunk; ++i) {
              if (pf_f) {
                pf_row(kbs[h], pfar[i], T1{});
                pf_row(vbase, pfar[i], T1{});
              }
              if (pf_k2) pf_row(kb2, pk2[i], T0{});
              if (prefetch) pf_row(vbn, pnext[i], T0{});
              pv_token(i);
              qk_token(hn, pnext, i);
            }
          } else {
            for (int i = 0; i < n; ++i) pv_token(i);
          }
          for (int g = 0; g < GB; ++g)
            for (int j = 0; j < NC; ++j) _mm512_store_ps(&acc[(gb + g) * D + dc + 16 * j], a[g][j]);
        }
    }
  }
  for (int h = 0; h < nh; ++h)
    for (int g = 0; g < G; ++g) {
      const int x = h * G + g;
      it.m_out[x] = mv_of(h, g)[0];
      float l = 0;
      for (int i = 0; i < 16; ++i) l += lv_of(h, g)[i];
      it.l_out[x] = l;
      const float* a = acc_of(h) + g * D;
      float* o = it.acc_out + std::size_t(x) * D;
      if constexpr (kPairs) from_pairs(a, o, D, 16);
      else std::memcpy(o, a, sizeof(float) * D);
    }
}
// One kv head per item (unpaged HND) compiles to the single-stream loop: no head indexing left.
template <int D, int G, DType T, bool Dot>
void item_avx512(const Item& it) {
  if (it.nh == 1) item_avx512_impl<D, G, T, Dot, true>(it);
  else item_avx512_impl<D, G, T, Dot, false>(it);
}
#endif
#if KVF_AVX512_DISPATCH
#pragma GCC pop_options
#endif

// AVX2 + FMA + F16C path (x86-64-v3: every x86 server of the last decade; compiled when the -march baseline
// has them, run where AVX-512 is absent or capped by KVF_CPU_ISA=avx2). Per 16-token step and head: QK as
// fp32 FMAs in eight independent accumulators per pass (two FMA pipes x four cycles of latency; four dependent
// chains left half the pipes idle): bf16 as four tokens x two query heads with q in registers, fp16/fp8 as two
// tokens x four heads; one softmax step per 16 tokens with a lazy running max (the max, exp2 and rescale of the
// scalar loop ran per token, 2 exp2 per (token, query head), and bound it at ~2.7 GB/s on a Zen 3 core); PV
// with four query heads x 16 dims of accumulators in registers over the step's tokens. A head's 16 tokens (one
// page of the paged layouts) are read before the next head's, so the rows come in address order. bf16 K and V
// rows are read in place (bf16_even/odd below); fp16/fp8 V rows are widened into L1 first. What bounds it on
// Zen 3 is loads as much as FMAs: that VM sustains ~1.5 256-bit loads per cycle (8 FMAs with memory operands:
// 1.34x their time from registers; the PV as GCC had compiled it, 12 loads per 8 FMAs: 1.9-2.4x), so every
// operand used twice is held in a register (2026-11-28: 1.29x in cache, 64K from DRAM 1.10-1.27x;
// kernels/access/README.md).
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KVF_ATTN_AVX2 1
template <DType T>
using Elem8 = std::conditional_t<T == DType::fp8_e4m3, std::uint8_t, std::uint16_t>;
// 8 elements -> fp32 (e4m3 as in load16 above: normal -> sign | (e + 120) << 23 | m << 20, e = 0 -> m * 2^-9).
template <DType T>
inline __m256 load8(const Elem8<T>* p) {
  if constexpr (T == DType::fp8_e4m3) {
    const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    const __m256i em = _mm256_and_si256(x, _mm256_set1_epi32(0x7F));
    const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23)));
    const __m256 sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), em));
    const __m256 subv = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(0.001953125f));
    const __m256 mag = _mm256_blendv_ps(normal, subv, sub);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(mag), sign));
  }
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (T == DType::bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else return _mm256_cvtph_ps(h);
}
// 2^x for x <= 0 (clamped at -126): the polynomial of exp2_ps, 2^n built in the exponent field.
inline __m256 exp2_8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(kExp2Taylor[0]);
  for (int c = 1; c < 8; ++c) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Taylor[c]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
constexpr float kLazyMax = 8.0f;  // log2 units: weights up to 256 between moves of the running max
inline float hmax8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_permute2f128_ps(x, x, 1));
  x = _mm256_max_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
  x = _mm256_max_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm256_cvtss_f32(x);
}
inline float hsum8(__m256 x) {
  const __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 z = _mm_add_ps(y, _mm_movehl_ps(y, y));
  return _mm_cvtss_f32(_mm_add_ss(z, _mm_movehdup_ps(z)));
}
// The even and odd elements of 16 bf16 values, as fp32.
inline __m256 bf16_even(__m256i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
inline __m256 bf16_odd(__m256i x) { return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536))); }
// [sum a, sum b, sum c, sum d]
inline __m128 reduce4_8(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <int D, int G, DType T>
void item_avx2(const Item& it) {
  using E = Elem8<T>;
  // Tokens per softmax step: a head's whole page, two vectors of scores per query head (8-token steps loaded and
  // stored the PV's accumulators twice as often: 2-3% slower in cache, 2-8% at 64K, 2026-11-28).
  constexpr int C = 16;
  constexpr int HU = G < 4 ? G : 4;  // query heads per PV pass (and per QK pass of fp16/fp8)
  constexpr int JU = 8 / HU;         // 8-dim vectors per PV pass
  // bf16 K rows are read in place: a 32-bit lane holds an even element (low half) and the next odd one (high
  // half), so one 16-element load gives both as fp32 (bf16_even/odd); q, the split V rows and the accumulators
  // are kept in the same [even 8 | odd 8] order per 16 dims (qp; the PV's v; acc, put back in order at the end).
  constexpr bool kSplitBf16 = T == DType::bf16;
  // Query heads and tokens per QK pass, eight accumulators either way. bf16: two heads' q (even and odd) held in
  // registers for four tokens, 0.5 loads per FMA; four heads x two tokens left no registers for q, so each FMA
  // read its q from memory (1.2 loads per FMA with the K row read twice), and this Zen 3 VM sustains only ~1.5
  // 256-bit loads per cycle: 8 FMAs with memory operands took 1.34x their time from registers.
  constexpr int HQ = kSplitBf16 ? (G < 2 ? G : 2) : HU;
  constexpr int TQ = 8 / HQ;
  constexpr int kRowBytes = D * static_cast<int>(sizeof(E));
  const int nh = it.nh;
  const int npos = it.shared ? 1 : nh;
  float ms[kMaxItemQHeads];
  alignas(32) float lv[kMaxItemQHeads][8];  // l by lane
  alignas(32) float s[G][C];
  alignas(32) float vf[kSplitBf16 ? 1 : C][D];  // fp16/fp8 V rows widened (bf16 V is split in the PV)
  // Token positions of this block (pos[cur]) and the next (pos[cur ^ 1], read by the far prefetch one block
  // ahead), by a cursor over each list's entries: one division per item, not two per token and head.
  static_assert(C == kChunk, "a step is one page of a head: a block of positions, the far prefetch's distance");
  std::uint64_t pos_blocks[2][kMaxItemHeads][C];
  const std::uint64_t span = it.sg.span;
  std::uint64_t ce[kMaxItemHeads], cr[kMaxItemHeads];
  for (int hp = 0; hp < npos; ++hp) ce[hp] = it.t0 / span, cr[hp] = it.t0 % span;
  auto fill_block = [&](std::uint64_t tb, std::uint64_t (*dst)[C]) {  // the block at tb < t1
    const int n = static_cast<int>(std::min<std::uint64_t>(C, it.t1 - tb));
    for (int hp = 0; hp < npos; ++hp) cursor_positions(it.kl, it.list[hp], span, ce[hp], cr[hp], n, C, dst[hp]);
  };
  int cur = 0;
  fill_block(it.t0, pos_blocks[0]);
  auto acc_of = [&](int h) { return it.state + std::size_t(h) * G * (D + 32); };
  for (int h = 0; h < nh; ++h) {
    std::fill(acc_of(h), acc_of(h) + G * D, 0.0f);
    for (int g = 0; g < G; ++g) ms[h * G + g] = kNegBig;
  }
  std::fill(&lv[0][0], &lv[0][0] + nh * G * 8, 0.0f);
  // q of every head with each 16-element block split into its even and odd elements (the bf16 QK below).
  alignas(32) float qp[kSplitBf16 ? kMaxItemQHeads * D : 1];
  if constexpr (kSplitBf16)
    for (int r = 0; r < nh * G; ++r) to_pairs(it.q + r * D, qp + r * D, D, 8);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::uint64_t t0 = it.t0; t0 < it.t1; t0 += C, cur ^= 1) {
    if (t0 + C < it.t1) fill_block(t0 + C, pos_blocks[cur ^ 1]);
    const auto& pos = pos_blocks[cur];
    const auto& pos_next = pos_blocks[cur ^ 1];
    for (int h = 0; h < nh; ++h) {
      const int n = static_cast<int>(std::min<std::uint64_t>(C, it.t1 - t0));
      __m256 valid[C / 8];
      for (int c8 = 0; c8 < C / 8; ++c8)
        valid[c8] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8 * c8), lane));
      const std::uint64_t* p = pos[it.shared ? 0 : h];
      const E* kb = static_cast<const E*>(it.kb[h]);
      const E* vb = static_cast<const E*>(it.vb[h]);
      const float* q = it.q + std::size_t(h) * G * D;
      float* acc = acc_of(h);
      for (int i0 = 0; i0 < C; i0 += TQ) {
        // Spread over the step, one row per token of the QK (not every head's rows in one burst at its start):
        // this head's row i of the next block into L2 (the hardware prefetchers stop at page boundaries), and
        // the next head's row i of this block into L1 (a block of K and V outgrows L1 before it is read).
        if (it.prefetch)
          for (int i = i0; i < i0 + TQ && i < n; ++i) {
            if (it.far_prefetch && t0 + C + i < it.t1) {
              const std::uint64_t off = pos_next[it.shared ? 0 : h][i] * sizeof(E);
              for (int x = 0; x < kRowBytes; x += 64) {
                _mm_prefetch(reinterpret_cast<const char*>(kb) + off + x, _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(vb) + off + x, _MM_HINT_T1);
              }
            }
            if (h + 1 < nh) {
              const std::uint64_t off = pos[it.shared ? 0 : h + 1][i] * sizeof(E);
              for (int x = 0; x < kRowBytes; x += 64) {
                _mm_prefetch(static_cast<const char*>(it.kb[h + 1]) + off + x, _MM_HINT_T0);
                _mm_prefetch(static_cast<const char*>(it.vb[h + 1]) + off + x, _MM_HINT_T0);
              }
            }
          }
        // TQ tokens x HQ query heads: eight independent FMA chains. Tokens past a short last step repeat its
        // last (weight 0).
        for (int g0 = 0; g0 < G; g0 += HQ) {
          __m256 a[8];
          for (auto& x : a) x = _mm256_setzero_ps();
          if constexpr (kSplitBf16) {
            const float* qh = qp + (std::size_t(h) * G + g0) * D;
            for (int j = 0; j < D; j += 16) {
              __m256 qe[HQ], qo[HQ];
              for (int x = 0; x < HQ; ++x) {
                qe[x] = _mm256_load_ps(qh + x * D + j);
                qo[x] = _mm256_load_ps(qh + x * D + j + 8);
                asm("" : "+x"(qe[x]), "+x"(qo[x]));  // in registers: GCC would fold the load into every FMA
              }
              for (int u = 0; u < TQ; ++u) {
                __m256i kk = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb + p[i0 + u] + j));
                asm("" : "+x"(kk));  // one load for both halves (GCC read the row again as the AND's operand)
                const __m256 ke = bf16_even(kk), ko = bf16_odd(kk);
                for (int x = 0; x < HQ; ++x) {
                  a[u * HQ + x] = _mm256_fmadd_ps(ke, qe[x], a[u * HQ + x]);
                  a[u * HQ + x] = _mm256_fmadd_ps(ko, qo[x], a[u * HQ + x]);
                }
              }
            }
          } else {
            for (int j = 0; j < D; j += 8) {
              __m256 qv[HQ];
              for (int x = 0; x < HQ; ++x) qv[x] = _mm256_loadu_ps(q + (g0 + x) * D + j);
              for (int u = 0; u < TQ; ++u) {
                const __m256 k = load8<T>(kb + p[i0 + u] + j);
                for (int x = 0; x < HQ; ++x) a[u * HQ + x] = _mm256_fmadd_ps(k, qv[x], a[u * HQ + x]);
              }
            }
          }
          alignas(32) float r[8];
          _mm_store_ps(r, reduce4_8(a[0], a[1], a[2], a[3]));
          _mm_store_ps(r + 4, reduce4_8(a[4], a[5], a[6], a[7]));
          for (int u = 0; u < TQ; ++u)
            for (int x = 0; x < HQ; ++x) s[g0 + x][i0 + u] = r[u * HQ + x];
        }
      }
      // Online softmax with a lazy max: the running max m moves (to the step's max, with the horizontal max
      // and the rescale) only when a score passes it by more than kLazyMax, so most steps compare, exp2 and
      // add. Weights stay below 2^kLazyMax; l stays a vector per head until the end. Any m the scores do not
      // pass by more than that gives the same result: the merge weighs partials by 2^(m_s - M).
      float alpha[G];
      bool rescale = false;
      for (int g = 0; g < G; ++g) {
        __m256 sv[C / 8];
        int over = 0;
        const float mo = ms[h * G + g];
        for (int c8 = 0; c8 < C / 8; ++c8) {
          const __m256 scaled = _mm256_mul_ps(_mm256_load_ps(s[g] + 8 * c8), _mm256_set1_ps(it.qscale));
          sv[c8] = _mm256_blendv_ps(_mm256_set1_ps(kNegBig), scaled, valid[c8]);
          over |= _mm256_movemask_ps(_mm256_cmp_ps(sv[c8], _mm256_set1_ps(mo + kLazyMax), _CMP_GT_OQ));
        }
        float mn = mo;
        alpha[g] = 1.0f;
        if (over) {
          __m256 mx = sv[0];
          for (int c8 = 1; c8 < C / 8; ++c8) mx = _mm256_max_ps(mx, sv[c8]);
          mn = std::max(mo, hmax8(mx));
          alpha[g] = std::exp2(mo - mn);
          rescale = true;
          _mm256_store_ps(lv[h * G + g], _mm256_mul_ps(_mm256_load_ps(lv[h * G + g]), _mm256_set1_ps(alpha[g])));
          ms[h * G + g] = mn;
        }
        __m256 lsum = _mm256_load_ps(lv[h * G + g]);
        for (int c8 = 0; c8 < C / 8; ++c8) {
          const __m256 pv = _mm256_and_ps(exp2_8(_mm256_sub_ps(sv[c8], _mm256_set1_ps(mn))), valid[c8]);
          _mm256_store_ps(s[g] + 8 * c8, pv);
          lsum = _mm256_add_ps(lsum, pv);
        }
        _mm256_store_ps(lv[h * G + g], lsum);
      }
      // PV: HU heads x JU vectors of 8 dims, again eight independent chains, V in registers (as memory
      // operands, GCC read each V vector once per head). bf16 V rows are split even/odd in registers, one load
      // per 16 dims and token; fp16/fp8 rows are widened into L1 first.
      if constexpr (!kSplitBf16)
        for (int i = 0; i < C; ++i)
          for (int j = 0; j < D; j += 16) {
            _mm256_store_ps(&vf[i][j], load8<T>(vb + p[i] + j));
            _mm256_store_ps(&vf[i][j + 8], load8<T>(vb + p[i] + j + 8));
          }
      for (int g0 = 0; g0 < G; g0 += HU)
        for (int j = 0; j < D; j += 8 * JU) {
          __m256 a[HU][JU];
          for (int x = 0; x < HU; ++x)
            for (int u = 0; u < JU; ++u) {
              a[x][u] = _mm256_loadu_ps(acc + (g0 + x) * D + j + 8 * u);
              if (rescale) a[x][u] = _mm256_mul_ps(a[x][u], _mm256_set1_ps(alpha[g0 + x]));
            }
          // One opaque base for the weights: GCC 12 (x86-64-v3) otherwise hoists the C x HU broadcast addresses
          // into stack slots, a scalar reload before most broadcasts (the q-address note above qk2x4_bf16).
          const float* sb = s[g0];
          asm("" : "+r"(sb));
          for (int i = 0; i < C; ++i) {
            if constexpr (kSplitBf16) {
              // 16 dims at a time, each split pair used at once: HU weights + 2 halves + 8 accumulators fit the 16
              // registers for every HU (with all JU halves split first, one head held 8 halves + 8 accumulators:
              // hq = hkv, one thread over 1K tokens, 183-209 us where this takes 164).
              __m256 w[HU];
              for (int x = 0; x < HU; ++x) w[x] = _mm256_broadcast_ss(sb + x * C + i);
              for (int u = 0; u < JU; u += 2) {
                const __m256i vv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vb + p[i] + j + 8 * u));
                const __m256 ve = bf16_even(vv), vo = bf16_odd(vv);
                for (int x = 0; x < HU; ++x) {
                  a[x][u] = _mm256_fmadd_ps(w[x], ve, a[x][u]);
                  a[x][u + 1] = _mm256_fmadd_ps(w[x], vo, a[x][u + 1]);
                }
              }
            } else {
              __m256 v[JU];
              for (int u = 0; u < JU; ++u) {
                v[u] = _mm256_load_ps(&vf[i][j + 8 * u]);
                if constexpr (HU > 1) asm("" : "+x"(v[u]));
              }
              for (int x = 0; x < HU; ++x) {
                const __m256 w = _mm256_broadcast_ss(sb + x * C + i);
                for (int u = 0; u < JU; ++u) a[x][u] = _mm256_fmadd_ps(w, v[u], a[x][u]);
              }
            }
          }
          for (int x = 0; x < HU; ++x)
            for (int u = 0; u < JU; ++u) _mm256_storeu_ps(acc + (g0 + x) * D + j + 8 * u, a[x][u]);
        }
    }
  }
  for (int h = 0; h < nh; ++h)
    for (int g = 0; g < G; ++g) {
      const int x = h * G + g;
      it.m_out[x] = ms[x];
      it.l_out[x] = hsum8(_mm256_load_ps(lv[x]));
      const float* a = acc_of(h) + std::size_t(g) * D;
      float* o = it.acc_out + std::size_t(x) * D;
      if constexpr (kSplitBf16) from_pairs(a, o, D, 8);
      else std::memcpy(o, a, sizeof(float) * D);
    }
}
#endif

// Portable fallback (and the path for group sizes without an AVX-512 instantiation): the same
// algorithm per head, token by token, in scalar code the compiler may vectorize.
void item_portable(DType T, int D, int G, const Item& it) {
  std::vector<float> acc(static_cast<std::size_t>(G) * D), kr(D), vr(D), m(G), l(G);
  const std::uint64_t eb = dtype_bytes(T);
  for (int h = 0; h < it.nh; ++h) {
    const std::uint32_t* list = it.list[h];
    const float* q = it.q + std::size_t(h) * G * D;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(m.begin(), m.end(), kNegBig);
    std::fill(l.begin(), l.end(), 0.0f);
    for (std::uint64_t t = it.t0; t < it.t1; ++t) {
      const std::uint64_t p = it.kl.token_off(it.sg.token(list, t));
      if (it.prefetch && t + 2 * kChunk < it.t1) {
        const std::uint64_t pp = it.kl.token_off(it.sg.token(list, t + 2 * kChunk));
        for (std::uint64_t x = 0; x < D * eb; x += 64) {
          __builtin_prefetch(static_cast<const char*>(it.kb[h]) + pp * eb + x, 0, 3);
          __builtin_prefetch(static_cast<const char*>(it.vb[h]) + pp * eb + x, 0, 3);
        }
      }
      for (int d = 0; d < D; ++d) {
        kr[d] = to_f32(T, it.kb[h], p + d);
        vr[d] = to_f32(T, it.vb[h], p + d);
      }
      for (int g = 0; g < G; ++g) {
        float sc = 0;
#pragma omp simd reduction(+ : sc)
        for (int d = 0; d < D; ++d) sc += q[g * D + d] * kr[d];
        sc *= it.qscale;
        const float mn = std::max(m[g], sc);
        const float alpha = std::exp2(m[g] - mn), pr = std::exp2(sc - mn);
        l[g] = l[g] * alpha + pr;
        m[g] = mn;
        float* a = &acc[static_cast<std::size_t>(g) * D];
#pragma omp simd
        for (int d = 0; d < D; ++d) a[d] = a[d] * alpha + pr * vr[d];
      }
    }
    for (int g = 0; g < G; ++g) {
      const int x = h * G + g;
      it.m_out[x] = m[g];
      it.l_out[x] = l[g];
      std::memcpy(it.acc_out + static_cast<std::size_t>(x) * D, &acc[static_cast<std::size_t>(g) * D], sizeof(float) * D);
    }
  }
}

using ItemFn = void (*)(const Item&);

// dot: bf16 QK with vdpbf16ps (only where bf16_dot_available()); otherwise bf16 rows are widened to fp32.
#define KVF_ACCESS_SHAPES(PICK)                                                                        \
  PICK(64, 1) PICK(64, 2) PICK(64, 4) PICK(64, 8) PICK(64, 16) PICK(128, 1) PICK(128, 2) PICK(128, 4) PICK(128, 8) \
  PICK(128, 16)
ItemFn pick_item(DType t, int d, int g, bool dot) {
#if defined(KVF_ATTN_AVX512)
  if (cpu_avx512()) {
#define KVF_ACCESS_PICK(D_, G_)                                                                        \
  if (d == D_ && g == G_)                                                                              \
    return t == DType::bf16   ? (dot ? &item_avx512<D_, G_, DType::bf16, true>                         \
                                     : &item_avx512<D_, G_, DType::bf16, false>)                       \
           : t == DType::fp16 ? &item_avx512<D_, G_, DType::fp16, false>                               \
                              : &item_avx512<D_, G_, DType::fp8_e4m3, false>;
    KVF_ACCESS_SHAPES(KVF_ACCESS_PICK)
#undef KVF_ACCESS_PICK
    return nullptr;
  }
#endif
#if defined(KVF_ATTN_AVX2)
  if (!dot) {
#define KVF_ACCESS_PICK(D_, G_)                                                                        \
  if (d == D_ && g == G_)                                                                              \
    return t == DType::bf16 ? &item_avx2<D_, G_, DType::bf16>                                          \
           : t == DType::fp16 ? &item_avx2<D_, G_, DType::fp16> : &item_avx2<D_, G_, DType::fp8_e4m3>;
    KVF_ACCESS_SHAPES(KVF_ACCESS_PICK)
#undef KVF_ACCESS_PICK
  }
#endif
  (void)t; (void)d; (void)g; (void)dot;
  return nullptr;
}

// Per-thread scratch, in floats: q, qb, the heads' state, the item outputs (m, l, acc), the position ring.
struct ScratchLayout {
  std::size_t q, qb, state, m, l, acc, ring, total;
};
inline std::size_t up64(std::size_t floats) { return (floats + 15) / 16 * 16; }
ScratchLayout scratch_layout(std::uint32_t nh, std::uint32_t G, std::uint32_t D) {
  ScratchLayout x{};
  const std::size_t qh = std::size_t(nh) * G * D;
  x.q = 0;
  x.qb = x.q + up64(qh);
  x.state = x.qb + up64((qh + 1) / 2);
  x.m = x.state + up64(item_state_floats(static_cast<int>(nh), static_cast<int>(G), static_cast<int>(D)));
  x.l = x.m + up64(std::size_t(nh) * G);
  x.acc = x.l + up64(std::size_t(nh) * G);
  x.ring = x.acc + up64(qh);
  x.total = x.ring + up64(std::size_t(nh) * kRing * (kChunk + 4) * 2);
  return x;
}

}  // namespace

std::uint32_t heads_per_item(const AttnShape& s) {
  // Unpaged HND: a head's rows are one contiguous run of their own; reading heads together gains nothing.
  if (s.layout == Layout::HND && s.page == 0) return 1;
  std::uint32_t nh = std::min<std::uint32_t>(s.hkv, kMaxItemHeads);
  while (nh > 1 && nh * s.group() > kMaxItemQHeads) nh /= 2;
  return nh;
}

void plan_cpu(const AttnShape& s, const Selection& sel, AttnWorkspace& ws) {
  ws.threads = omp_get_max_threads();
  ws.heads_per_item = heads_per_item(s);
  const std::uint64_t head_groups = (s.hkv + ws.heads_per_item - 1) / ws.heads_per_item;
  // >= 16 items per thread (dynamic scheduling balances them when a core is shared), no split under
  // 256 tokens; chunks in whole softmax steps.
  ws.split = make_splits(sel.geom.n_tokens(), std::uint64_t{s.batch} * head_groups,
                         static_cast<std::uint32_t>(ws.threads), 16, 256, kChunk);
  ws.part.assign(std::uint64_t{s.batch} * s.hq * ws.split.n_splits * (s.d + 2), 0.0f);
  ws.scratch_stride = scratch_layout(ws.heads_per_item, s.group(), s.d).total;
  ws.scratch.assign(ws.scratch_stride * ws.threads + 16, 0.0f);
  ws.far_resolved = false;  // a new plan (shape, selection, threads) is calibrated again
  ws.path_note.clear();     // and its path described again at its first call
}

bool bf16_dot_available() {
#if defined(KVF_ATTN_AVX512_BF16)
  return cpu_avx512_bf16();
#else
  return false;
#endif
}

namespace {

// Every work item of one call, then the merge; fn = nullptr runs the portable fallback.
void run_items(const AttnShape& s, const void* qv, const void* kv, const void* vv, const Selection& sel,
               AttnWorkspace& ws, float* out, ItemFn fn, bool prefetch, bool far_prefetch) {
  const int D = static_cast<int>(s.d), G = static_cast<int>(s.group());
  const std::uint32_t ns = ws.split.n_splits, nhp = ws.heads_per_item;
  const std::uint64_t head_groups = (s.hkv + nhp - 1) / nhp;
  const std::uint64_t n_items = std::uint64_t{s.batch} * head_groups * ns;
  const KvLayout kl = s.kv_layout();
  const float qscale = s.scale() * kLog2e;
  const auto* kc = static_cast<const char*>(kv);
  const auto* vc = static_cast<const char*>(vv);
  const std::uint64_t eb = dtype_bytes(s.dtype);
  float* part = ws.part.data();
  const std::size_t rec = static_cast<std::size_t>(D) + 2;  // m, l, acc[D]
  const ScratchLayout sl = scratch_layout(nhp, s.group(), s.d);
  // 64-byte aligned base of the scratch
  float* scratch0 = ws.scratch.data();
  scratch0 += (16 - (reinterpret_cast<std::uintptr_t>(scratch0) / sizeof(float)) % 16) % 16;
#pragma omp parallel num_threads(ws.threads)
  {
    float* sc = scratch0 + ws.scratch_stride * static_cast<std::size_t>(omp_get_thread_num());
    float* q = sc + sl.q;
    auto* qb = reinterpret_cast<std::uint16_t*>(sc + sl.qb);
    Item it;
    it.kl = kl;
    it.sg = sel.geom;
    it.q = q;
    it.qb = qb;
    it.qscale = qscale;
    it.m_out = sc + sl.m;
    it.l_out = sc + sl.l;
    it.acc_out = sc + sl.acc;
    it.state = sc + sl.state;
    it.ring = reinterpret_cast<std::uint64_t*>(sc + sl.ring);
    it.prefetch = prefetch;
    it.far_prefetch = far_prefetch;
#pragma omp for schedule(dynamic, 1)
    for (std::uint64_t i = 0; i < n_items; ++i) {
      const std::uint32_t sp = static_cast<std::uint32_t>(i % ns);
      const std::uint64_t bg = i / ns;
      const std::uint64_t h0 = (bg % head_groups) * nhp, b = bg / head_groups;
      it.nh = static_cast<int>(std::min<std::uint64_t>(nhp, s.hkv - h0));
      for (int h = 0; h < it.nh; ++h) {
        const std::uint64_t base = kl.head_base(b, h0 + h, s.ctx) * eb;
        it.kb[h] = kc + base;
        it.vb[h] = vc + base;
        it.list[h] = sel.idx.data() + sel.geom.list_offset(b, h0 + h, s.hkv);
      }
      it.shared = sel.geom.shared || it.nh == 1;
      for (int x = 0; x < it.nh * G; ++x)
        for (int d = 0; d < D; ++d) {
          const std::uint64_t qi = (b * s.hq + h0 * G + x) * D + d;
          qb[x * D + d] = static_cast<const std::uint16_t*>(qv)[qi];  // q is 16-bit for every K/V dtype
          q[x * D + d] = to_f32(s.q_dtype(), qv, qi);
        }
      it.t0 = ws.split.begin(sp);
      it.t1 = ws.split.end(sp);
      if (fn) fn(it);
      else item_portable(s.dtype, D, G, it);
      for (int x = 0; x < it.nh * G; ++x) {
        float* r = part + ((b * s.hq + h0 * G + x) * ns + sp) * rec;
        r[0] = it.m_out[x];
        r[1] = it.l_out[x];
        std::memcpy(r + 2, it.acc_out + static_cast<std::size_t>(x) * D, sizeof(float) * D);
      }
    }
    // merge splits: out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s
#pragma omp for schedule(static)
    for (std::uint64_t bq = 0; bq < std::uint64_t{s.batch} * s.hq; ++bq) {
      const float* r0 = part + bq * ns * rec;
      float M = kNegBig;
      for (std::uint32_t sp = 0; sp < ns; ++sp)
        if (r0[sp * rec + 1] > 0) M = std::max(M, r0[sp * rec]);
      float L = 0;
      float* o = out + bq * D;
      for (int d = 0; d < D; ++d) o[d] = 0;
      for (std::uint32_t sp = 0; sp < ns; ++sp) {
        const float* r = r0 + sp * rec;
        if (!(r[1] > 0)) continue;
        const float w = std::exp2(r[0] - M);
        L += w * r[1];
        for (int d = 0; d < D; ++d) o[d] += w * r[2 + d];
      }
      const float inv = 1.0f / L;
      for (int d = 0; d < D; ++d) o[d] *= inv;
    }
  }
}

// The L2-distance prefetch (prefetcht1 2-4 chunks ahead) is what lifted one-head items over 4 KiB page runs
// (see the top of this file), but where every kv head of a page is read together the L1 prefetch alone kept
// the same memory rate and the extra prefetch instructions cost issue slots: Zen 5 VM, 1 thread, dense
// paged 64K bf16 hq32/hkv8, thread CPU time: far on/off 17.6/17.3-18.0 GB/s cold, 27.7/32.1 GB/s with the
// KV in cache (1K); 2 threads (process CPU time / 2), medians on/off: 64K 33.4/35.0, 256K 29.1/30.9, 4K in
// cache 35.8/42.0 GB/s; per-head 4 KiB runs (block keep 1/8, 256K) 18.8/14.0. Which one wins depends on the core's prefetchers and the layout, so the first call with
// `automatic` times both on its own data (best of 3 each, alternated) and keeps the far one only where it is
// faster by more than 3%.
// Best of 3 rounds each, on and off alternated (the order turned each round, so a drift weighs on both).
std::pair<double, double> best_far_on_off(const AttnShape& s, const void* q, const void* k, const void* v,
                                          const Selection& sel, AttnWorkspace& ws, float* out, ItemFn fn,
                                          const std::function<void()>& before_run) {
  using clk = std::chrono::steady_clock;
  double best[2] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 2; ++i) {
      const int f = (i + r) % 2;
      if (before_run) before_run();
      const auto t0 = clk::now();
      run_items(s, q, k, v, sel, ws, out, fn, true, f == 1);
      best[f] = std::min(best[f], std::chrono::duration<double>(clk::now() - t0).count());
    }
  return {best[1], best[0]};
}

void calibrate_far(const AttnShape& s, const void* q, const void* k, const void* v, const Selection& sel,
                   AttnWorkspace& ws, float* out, ItemFn fn) {
  const auto [on_s, off_s] = best_far_on_off(s, q, k, v, sel, ws, out, fn, {});
  take_far_prefetch(ws, on_s, off_s, "back to back, best of 3");
}

}  // namespace

void take_far_prefetch(AttnWorkspace& ws, double on_s, double off_s, std::string how) {
  ws.far_on_s = on_s;
  ws.far_off_s = off_s;
  ws.far_how = std::move(how);
  // Within 3% the two are equal within the noise of a shared machine: the cheaper path (fewer instructions) then.
  ws.use_far_prefetch = on_s < 0.97 * off_s;
  ws.far_resolved = true;
  ws.path_note.clear();  // composed again at the next call
}

namespace {
// The vdpbf16ps QK where bf16 K/V, the choice and this CPU allow it (pick_item then hands out the dot kernel).
bool dot_allowed(const AttnShape& s, const AttnWorkspace& ws) {
  return s.dtype == DType::bf16 && ws.bf16_dot != CpuChoice::off && bf16_dot_available();
}
}  // namespace

std::pair<double, double> time_far_prefetch(const AttnShape& s, const void* q, const void* k, const void* v,
                                            const Selection& sel, AttnWorkspace& ws, float* out,
                                            const std::function<void()>& before_run) {
  const ItemFn fn = pick_item(s.dtype, static_cast<int>(s.d), static_cast<int>(s.group()), dot_allowed(s, ws));
  if (!fn) throw std::invalid_argument("time_far_prefetch: this shape runs the portable loop, which has none");
  return best_far_on_off(s, q, k, v, sel, ws, out, fn, before_run);
}

bool attention_cpu_has_far_prefetch(const AttnShape& s, const AttnWorkspace& ws) {
  return pick_item(s.dtype, static_cast<int>(s.d), static_cast<int>(s.group()), dot_allowed(s, ws)) != nullptr;
}

bool attention_cpu_qk_dot(const AttnShape& s, const AttnWorkspace& ws) {
  return dot_allowed(s, ws) && cpu_avx512() &&
         pick_item(s.dtype, static_cast<int>(s.d), static_cast<int>(s.group()), true);
}

void attention_cpu(const AttnShape& s, const void* qv, const void* kv, const void* vv, const Selection& sel,
                   AttnWorkspace& ws, float* out, bool prefetch) {
  const std::uint32_t nhp = ws.heads_per_item;
  if (nhp == 0 || nhp != heads_per_item(s) || ws.scratch.size() < ws.scratch_stride * ws.threads)
    throw std::invalid_argument("attention_cpu: the workspace was not planned for this shape (plan_cpu)");
  const bool dot = dot_allowed(s, ws);
  if (ws.bf16_dot == CpuChoice::on && !dot)
    throw std::invalid_argument("attention_cpu: bf16_dot on, but K/V are not bf16 or this CPU or build has no AVX512_BF16");
  const ItemFn fn = pick_item(s.dtype, static_cast<int>(s.d), static_cast<int>(s.group()), dot);
  const bool avx512 = fn && cpu_avx512();
  bool far = false;
  if (fn && prefetch) {
    if (ws.far_prefetch != CpuChoice::automatic) {
      far = ws.far_prefetch == CpuChoice::on;
    } else {
      if (!ws.far_resolved) calibrate_far(s, qv, kv, vv, sel, ws, out, fn);
      far = ws.use_far_prefetch;
    }
  }
  ws.use_bf16_dot = dot;
  ws.use_far_prefetch = far;
  // The note is composed at a plan's first call and when the path changes, not in every timed call (~1 us of
  // string work beside a 90 us row); plan_cpu clears it.
  if (ws.path_note.empty() || ws.path_note_fn != reinterpret_cast<const void*>(fn) ||
      ws.path_note_prefetch != prefetch || ws.path_note_far != ws.far_prefetch) {
    std::string note = !fn                      ? "cpu_attn=portable"
                       : !avx512                 ? "cpu_attn=avx2 (fp32 fma, 16-token softmax steps)"
                       : dot                     ? "cpu_attn=avx512 qk=vdpbf16ps (cpuid avx512_bf16)"
                       : s.dtype != DType::bf16  ? "cpu_attn=avx512"
                       : bf16_dot_available()    ? "cpu_attn=avx512 qk=fp32 fma (vdpbf16ps off)"
                                                 : "cpu_attn=avx512 qk=fp32 fma (no avx512_bf16)";
    if (!prefetch) {
      note += "; prefetch=off";
    } else if (fn && ws.far_prefetch != CpuChoice::automatic) {
      note += far ? "; far_prefetch=on (forced)" : "; far_prefetch=off (forced)";
    } else if (fn) {
      char buf[192];
      std::snprintf(buf, sizeof buf,
                    "; far_prefetch=%s (calibrated %s: on %.3g ms, off %.3g ms, on only when 3%% faster)",
                    far ? "on" : "off", ws.far_how.c_str(), ws.far_on_s * 1e3, ws.far_off_s * 1e3);
      note += buf;
    }
    ws.path_note = std::move(note);
    ws.path_note_fn = reinterpret_cast<const void*>(fn);
    ws.path_note_prefetch = prefetch;
    ws.path_note_far = ws.far_prefetch;
  }
  run_items(s, qv, kv, vv, sel, ws, out, fn, prefetch, far);
}

}  // namespace kvf::access
