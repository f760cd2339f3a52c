// CPU twin of the split-KV sparse decode attention. One work item = (batch, kv head, split); it reads
// the selected K/V rows of its split once for all G = hq/hkv query heads of the group (as the GPU
// kernel does), with online softmax in fp32, and writes a partial (m, l, acc) that a merge step
// combines. AVX-512 path, per chunk of 16 tokens: QK (bf16 K: vdpbf16ps on the raw rows, exact
// products; fp16/fp8: fp32 FMAs), four dots per horizontal reduction, scores transposed into one
// 16-token vector per head in registers -> softmax with a degree-7 exp2, the max kept as a vector,
// rescale only when some head's max grew -> PV with GB x DC/16 <= 16 fp32 accumulators per pass;
// bf16 V rows split into even/odd dims with one shift and one AND per 32 elements (no widening
// shuffle). Software pipeline: the QK of chunk c+1 runs inside the first PV pass of chunk c, so the
// FMA pipes have independent work while a chunk's softmax chain completes. Software prefetch in two
// distances, spread over the tokens of that pass: 4 chunks ahead into L2 (prefetcht1), then K rows 2
// chunks and V rows 1 chunk ahead into L1 (prefetcht0). Token positions are computed once per token
// (a cursor over the list entries, no division per token) into a ring of chunks when first prefetched.
// Portable fallback: the same algorithm in scalar code the compiler may vectorize.
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
// Paged KV (--placement shuffled, pages of 16 tokens = 4 KiB per K and V stream at D = 128 bf16): the
// hardware prefetchers stop at each 4 KiB page boundary, so with only T0 prefetches 2 chunks (2 pages)
// ahead the dense arm ran at 0.19-0.36 of the read ceiling (contiguous: 0.7-0.85). One distance alone
// stays there (~0.25, 1 thread): T0 4-8 chunks ahead (32-64 KiB of K+V evicts the 48 KiB L1 before use)
// or T1 4 chunks ahead without the L1 prefetch; the L2-far + L1-near pair is what works. Dense 64K, hq32/hkv8, same-round ratios to the stream read ceiling (noisy shared VM):
// shuffled 1 thread 0.19-0.23 -> 0.55-0.67, 2 threads 0.28-0.36 -> 0.61-0.81; shuffled over contiguous
// of the same run 1 thread 0.28-0.30 -> 0.72-0.88, 2 threads 0.39-0.46 -> 0.72-1.0; contiguous unchanged
// within noise (0.6-0.98). Far distance 4 vs 8 chunks and T1 vs T0/T2 for it: no difference beyond noise.
// The rest of the shuffled gap is about what a plain 4 KiB random-run read loses (gather_cpu.cpp).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined pass-through operand inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "access.hpp"
#include "kvf/errors.hpp"

namespace kvf::access {
namespace {

constexpr int kChunk = 16;          // tokens per softmax step
constexpr int kRing = 8;            // chunks of token positions kept (>= kFarChunks + 1)
constexpr int kFarChunks = 4;       // L2 prefetch distance: 4 chunks = 4 pages of 16 tokens per K and V stream
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1.0e30f;  // "minus infinity" that keeps exp2 arithmetic finite

inline float to_f32(DType t, const void* p, std::uint64_t i) {
  if (t == DType::fp8_e4m3) return e4m3_to_f32(static_cast<const std::uint8_t*>(p)[i]);
  const std::uint16_t h = static_cast<const std::uint16_t*>(p)[i];
  return t == DType::bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

#if defined(__AVX512F__)
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
  __m512 p = _mm512_set1_ps(1.5252734e-05f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530e-04f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
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
template <int D, int G, DType T>
inline __m128 qk4(const Elem<T>* kbase, const std::uint64_t* pos, int i, int g, const float* q,
                  const std::uint16_t* qb) {
  constexpr int HU = G >= 4 ? 4 : G;
  __m512 a[4];
#if defined(__AVX512BF16__)
  if constexpr (T == DType::bf16) {
    // bf16 x bf16 products are exact in fp32: vdpbf16ps on the raw K row and the bf16 query.
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

// One work item, AVX-512. q: fp32 [G][D] (and qb: the same in bf16, 64-byte aligned); scores are
// multiplied by qscale = scale*log2e. Writes m (log2 domain), l, acc.
template <int D, int G, DType T>
void item_avx512(const void* kbase_v, const void* vbase_v, std::uint64_t tstride,
                 const std::uint32_t* list, const SelGeom& sg, std::uint64_t t0, std::uint64_t t1,
                 const float* q, const std::uint16_t* qb, float qscale, float* m_out, float* l_out, float* acc_out,
                 bool prefetch) {
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
  const E* kbase = static_cast<const E*>(kbase_v);
  const E* vbase = static_cast<const E*>(vbase_v);
  alignas(64) float acc[G][D];
  alignas(64) float s[G][kChunk];        // p of the current chunk
  alignas(64) float rb[(G + 3) / 4][64];  // qk4 sums of the next chunk, laid out for the transpose below
  alignas(64) float lv[G][16];            // per-lane partial sums of p (reduced once at the end)
  alignas(64) float mv[G][16];            // running max (log2 domain), the same in every lane
  float alpha[G];
  for (int g = 0; g < G; ++g) {
    for (int x = 0; x < 16; ++x) {
      lv[g][x] = 0;
      mv[g][x] = kNegBig;
    }
    for (int d = 0; d < D; ++d) acc[g][d] = 0;
  }
  // Token positions (element offsets of K/V rows), computed once per token, a chunk at a time, when the
  // chunk is first prefetched (kFarChunks ahead), by a cursor over the list entries (no division per
  // token), kept in a ring until the chunk has been read. qk4 reads up to 3 past a chunk's last token.
  std::uint64_t ring[kRing][kChunk + 4];
  const std::uint64_t span = sg.span;
  std::uint64_t ce = t0 / span, cr = t0 % span;  // cursor: entry, token within it
  const int nchunks = static_cast<int>((t1 - t0 + kChunk - 1) / kChunk);
  int filled = 0;  // chunks whose positions are in the ring
  auto fill_next = [&] {
    std::uint64_t* p = ring[filled % kRing];
    const int n = static_cast<int>(std::min<std::uint64_t>(kChunk, t1 - t0 - std::uint64_t(filled) * kChunk));
    for (int i = 0; i < n; ++i) {
      p[i] = (std::uint64_t{list[ce]} * span + cr) * tstride;
      if (++cr == span) {
        cr = 0;
        ++ce;
      }
    }
    for (int i = n; i < kChunk + 4; ++i) p[i] = p[n - 1];  // sums of these are masked off
    ++filled;
  };
  // QK of token i of a chunk (for G < 4: of tokens i..i+TU-1 when i % TU == 0). Token i's sums for
  // heads g..g+3 go to 128-bit lane i/4 of row i%4 of rb[g/4] (G = 2: pair i/2 to lane (i/2)%4 of row
  // i/8; G = 1: tokens i..i+3 to lane i/4 of row 0), so the rows load as vectors once the chunk is done
  // (by then the 16-byte stores have long retired: no store-forwarding stall).
  auto qk_token = [&](const std::uint64_t* p, int i) {
    if constexpr (G >= 4) {
      for (int g = 0; g < G; g += 4)
        _mm_store_ps(&rb[g / 4][16 * (i % 4) + 4 * (i / 4)], qk4<D, G, T>(kbase, p, i, g, q, qb));
    } else if constexpr (G == 2) {
      if (i % 2 == 0) _mm_store_ps(&rb[0][4 * (i / 2)], qk4<D, G, T>(kbase, p, i, 0, q, qb));
    } else {
      if (i % 4 == 0) _mm_store_ps(&rb[0][i], qk4<D, G, T>(kbase, p, i, 0, q, qb));
    }
  };
  constexpr int kRowBytes = D * static_cast<int>(sizeof(E));
  auto pf_far = [&](std::uint64_t p) {
    const char* kp = reinterpret_cast<const char*>(kbase + p);
    const char* vp = reinterpret_cast<const char*>(vbase + p);
    for (int x = 0; x < kRowBytes; x += 64) {
      _mm_prefetch(kp + x, _MM_HINT_T1);
      _mm_prefetch(vp + x, _MM_HINT_T1);
    }
  };
  auto pf_near = [&](const E* base, std::uint64_t p) {
    const char* b = reinterpret_cast<const char*>(base + p);
    for (int x = 0; x < kRowBytes; x += 64) _mm_prefetch(b + x, _MM_HINT_T0);
  };
  constexpr int far = kFarChunks;
  static_assert(far >= 1 && far + 1 <= kRing, "the ring holds the chunks from the current one to the far one");
  for (int k = 0; k < std::min(nchunks, far + 1); ++k) {
    fill_next();
    if (prefetch)
      for (int i = 0; i < kChunk; ++i) pf_far(ring[k % kRing][i]);
  }
  // Software pipeline: QK of chunk c+1 runs inside the first PV pass of chunk c, so the FMA pipes have
  // independent work while the softmax of a chunk (a long dependent chain) completes. Software prefetch,
  // spread over the tokens of that pass: chunk k+kFarChunks into L2 (whole pages ahead, as the hardware
  // prefetchers stop at 4 KiB page boundaries), then into L1 the K rows of chunk k+2 and the V rows of
  // chunk k+1 (each stream just ahead of its reader: K is read one chunk earlier than V).
  std::uint64_t* pos = ring[0];
  for (int i = 0; i < kChunk; ++i) qk_token(pos, i);
  int k = 0;
  for (std::uint64_t c0 = t0; c0 < t1; c0 += kChunk, ++k) {
    const int n = static_cast<int>(std::min<std::uint64_t>(kChunk, t1 - c0));
    const bool has_next = c0 + kChunk < t1;
    pos = ring[k % kRing];
    const std::uint64_t* pnext = ring[(k + 1) % kRing];
    const bool pf_f = prefetch && k + far < nchunks;
    if (pf_f && filled == k + far) fill_next();
    const std::uint64_t* pfar = ring[(k + far) % kRing];
    const bool pf_k2 = prefetch && k + 2 < nchunks;
    const std::uint64_t* pk2 = ring[(k + 2) % kRing];
    // the chunk's scores, one vector of 16 tokens per head
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
    // chunk that raised some head's max.
    const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1u);
    bool rescale = false;
    for (int g = 0; g < G; ++g) {
      const __m512 sv = _mm512_mask_mul_ps(_mm512_set1_ps(kNegBig), valid, sc[g], _mm512_set1_ps(qscale));
      __m512 mx = _mm512_max_ps(sv, _mm512_shuffle_f32x4(sv, sv, _MM_SHUFFLE(1, 0, 3, 2)));
      mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
      mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(1, 0, 3, 2)));
      mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(2, 3, 0, 1)));  // chunk max in every lane
      const __m512 mo = _mm512_load_ps(mv[g]);
      const __m512 mn = _mm512_max_ps(mo, mx);
      const __m512 p = _mm512_maskz_mov_ps(valid, exp2_ps(_mm512_sub_ps(sv, mn)));
      _mm512_store_ps(s[g], p);
      __m512 l = _mm512_load_ps(lv[g]);
      if (_mm512_cmp_ps_mask(mn, mo, _CMP_NEQ_OQ)) {
        const __m512 al = exp2_ps(_mm512_sub_ps(mo, mn));
        l = _mm512_mul_ps(l, al);
        alpha[g] = _mm512_cvtss_f32(al);
        _mm512_store_ps(mv[g], mn);
        rescale = true;
      } else {
        alpha[g] = 1.0f;
      }
      _mm512_store_ps(lv[g], _mm512_add_ps(l, p));
    }
    if (!prefetch && has_next && filled == k + 1) fill_next();
    // PV (pass 0 also runs the next chunk's QK)
    for (int gb = 0; gb < G; gb += GB)
      for (int dc = 0; dc < D; dc += DC) {
        __m512 a[GB][NC];
        for (int g = 0; g < GB; ++g)
          for (int j = 0; j < NC; ++j) {
            a[g][j] = _mm512_load_ps(&acc[gb + g][dc + 16 * j]);
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
          for (int i = 0; i < kChunk; ++i) {  // n == kChunk: only the last chunk can be short
            if (pf_f) pf_far(pfar[i]);
            if (pf_k2) pf_near(kbase, pk2[i]);
            if (prefetch) pf_near(vbase, pnext[i]);
            pv_token(i);
            qk_token(pnext, i);
          }
        } else {
          for (int i = 0; i < n; ++i) pv_token(i);
        }
        for (int g = 0; g < GB; ++g)
          for (int j = 0; j < NC; ++j) _mm512_store_ps(&acc[gb + g][dc + 16 * j], a[g][j]);
      }
  }
  for (int g = 0; g < G; ++g) {
    m_out[g] = mv[g][0];
    float l = 0;
    for (int x = 0; x < 16; ++x) l += lv[g][x];
    l_out[g] = l;
    float* o = acc_out + g * D;
    if constexpr (kPairs) {
      for (int b = 0; b < D; b += 32)
        for (int k = 0; k < 16; ++k) {
          o[b + 2 * k] = acc[g][b + k];
          o[b + 2 * k + 1] = acc[g][b + 16 + k];
        }
    } else {
      std::memcpy(o, acc[g], sizeof(float) * D);
    }
  }
}
#endif

// Portable fallback (and the path for group sizes without an AVX-512 instantiation).
void item_portable(DType T, int D, int G, const void* kbase, const void* vbase,
                   std::uint64_t tstride, const std::uint32_t* list, const SelGeom& sg, std::uint64_t t0,
                   std::uint64_t t1, const float* q, float qscale, float* m_out, float* l_out, float* acc_out,
                   bool prefetch) {
  std::vector<float> acc(static_cast<std::size_t>(G) * D, 0.0f), kr(D), vr(D), m(G, kNegBig), l(G, 0.0f);
  for (std::uint64_t t = t0; t < t1; ++t) {
    const std::uint64_t p = sg.token(list, t) * tstride;
    if (prefetch && t + 2 * kChunk < t1) {
      const std::uint64_t pp = sg.token(list, t + 2 * kChunk) * tstride;
      const std::uint64_t eb = dtype_bytes(T);
      for (std::uint64_t x = 0; x < D * eb; x += 64) {
        __builtin_prefetch(static_cast<const char*>(kbase) + pp * eb + x, 0, 3);
        __builtin_prefetch(static_cast<const char*>(vbase) + pp * eb + x, 0, 3);
      }
    }
    for (int d = 0; d < D; ++d) {
      kr[d] = to_f32(T, kbase, p + d);
      vr[d] = to_f32(T, vbase, p + d);
    }
    for (int g = 0; g < G; ++g) {
      float sc = 0;
#pragma omp simd reduction(+ : sc)
      for (int d = 0; d < D; ++d) sc += q[g * D + d] * kr[d];
      sc *= qscale;
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
    m_out[g] = m[g];
    l_out[g] = l[g];
    std::memcpy(acc_out + static_cast<std::size_t>(g) * D, &acc[static_cast<std::size_t>(g) * D], sizeof(float) * D);
  }
}

using ItemFn = void (*)(const void*, const void*, std::uint64_t, const std::uint32_t*,
                        const SelGeom&, std::uint64_t, std::uint64_t, const float*, const std::uint16_t*, float,
                        float*, float*, float*, bool);

ItemFn pick_item(DType t, int d, int g) {
#if defined(__AVX512F__)
#define KVF_ACCESS_PICK(D_, G_)                                                                   \
  if (d == D_ && g == G_) return t == DType::bf16   ? &item_avx512<D_, G_, DType::bf16>         \
                                  : t == DType::fp16 ? &item_avx512<D_, G_, DType::fp16>         \
                                                     : &item_avx512<D_, G_, DType::fp8_e4m3>;
  KVF_ACCESS_PICK(64, 1) KVF_ACCESS_PICK(64, 2) KVF_ACCESS_PICK(64, 4) KVF_ACCESS_PICK(64, 8)
  KVF_ACCESS_PICK(64, 16) KVF_ACCESS_PICK(128, 1) KVF_ACCESS_PICK(128, 2) KVF_ACCESS_PICK(128, 4)
  KVF_ACCESS_PICK(128, 8) KVF_ACCESS_PICK(128, 16)
#undef KVF_ACCESS_PICK
#endif
  (void)t; (void)d; (void)g;
  return nullptr;
}

}  // namespace

void plan_cpu(const AttnShape& s, const Selection& sel, AttnWorkspace& ws) {
  ws.threads = omp_get_max_threads();
  const std::uint64_t lists_items = std::uint64_t{s.batch} * s.hkv;
  // >= 16 items per thread (dynamic scheduling balances them when a core is shared), no split under
  // 256 tokens; chunks in whole softmax steps.
  ws.split = make_splits(sel.geom.n_tokens(), lists_items, static_cast<std::uint32_t>(ws.threads), 16, 256, kChunk);
  ws.part.assign(std::uint64_t{s.batch} * s.hq * ws.split.n_splits * (s.d + 2), 0.0f);
}

void attention_cpu(const AttnShape& s, const void* qv, const void* kv, const void* vv, const Selection& sel,
                   AttnWorkspace& ws, float* out, bool prefetch) {
  const int D = static_cast<int>(s.d), G = static_cast<int>(s.group());
  const std::uint32_t ns = ws.split.n_splits;
  const std::uint64_t n_items = std::uint64_t{s.batch} * s.hkv * ns;
  const std::uint64_t tstride = kv_token_stride(s.layout, s.hkv, s.d);
  const float qscale = s.scale() * kLog2e;
  const ItemFn fn = pick_item(s.dtype, D, G);
  const auto* kc = static_cast<const char*>(kv);
  const auto* vc = static_cast<const char*>(vv);
  const std::uint64_t eb = dtype_bytes(s.dtype);
  float* part = ws.part.data();
  const std::size_t rec = static_cast<std::size_t>(D) + 2;  // m, l, acc[D]
#pragma omp parallel
  {
    alignas(64) float q[16 * 128];
    alignas(64) std::uint16_t qb[16 * 128];
    alignas(64) float mt[16], lt[16];
    alignas(64) float at[16 * 128];
#pragma omp for schedule(dynamic, 1)
    for (std::uint64_t it = 0; it < n_items; ++it) {
      const std::uint32_t sp = static_cast<std::uint32_t>(it % ns);
      const std::uint64_t bh = it / ns;
      const std::uint64_t h = bh % s.hkv, b = bh / s.hkv;
      for (int g = 0; g < G; ++g)
        for (int d = 0; d < D; ++d) {
          const std::uint64_t qi = (b * s.hq + h * G + g) * D + d;
          qb[g * D + d] = static_cast<const std::uint16_t*>(qv)[qi];  // q is 16-bit for every K/V dtype
          q[g * D + d] = to_f32(s.q_dtype(), qv, qi);
        }
      const void* kb = kc + kv_row(s.layout, b, 0, h, s.ctx, s.hkv, s.d) * eb;
      const void* vb = vc + kv_row(s.layout, b, 0, h, s.ctx, s.hkv, s.d) * eb;
      const std::uint32_t* list = sel.idx.data() + sel.geom.list_offset(b, h, s.hkv);
      const std::uint64_t t0 = ws.split.begin(sp), t1 = ws.split.end(sp);
      if (fn) fn(kb, vb, tstride, list, sel.geom, t0, t1, q, qb, qscale, mt, lt, at, prefetch);
      else item_portable(s.dtype, D, G, kb, vb, tstride, list, sel.geom, t0, t1, q, qscale, mt, lt, at, prefetch);
      for (int g = 0; g < G; ++g) {
        float* r = part + ((b * s.hq + h * G + g) * ns + sp) * rec;
        r[0] = mt[g];
        r[1] = lt[g];
        std::memcpy(r + 2, at + g * D, sizeof(float) * D);
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

}  // namespace kvf::access
