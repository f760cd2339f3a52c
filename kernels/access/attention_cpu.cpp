// CPU twin of the split-KV sparse decode attention. One work item = (batch, kv head, split); it reads
// the selected K/V rows of its split once for all G = hq/hkv query heads of the group (as the GPU
// kernel does), with online softmax in fp32, and writes a partial (m, l, acc) that a merge step
// combines. AVX-512 path: chunks of 16 tokens (QK -> 16-wide softmax with a degree-7 exp2 -> PV with
// G x (256/G) fp32 accumulators in registers), software prefetch two chunks ahead. Portable fallback:
// the same algorithm in scalar code the compiler may vectorize.
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

constexpr int kChunk = 16;         // tokens per softmax step
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

// One work item, AVX-512. q: fp32 [G][D] (and qb: the same in bf16, 64-byte aligned); scores are
// multiplied by qscale = scale*log2e. Writes m (log2 domain), l, acc.
template <int D, int G, DType T>
void item_avx512(const void* kbase_v, const void* vbase_v, std::uint64_t tstride,
                 const std::uint32_t* list, const SelGeom& sg, std::uint64_t t0, std::uint64_t t1,
                 const float* q, const std::uint16_t* qb, float qscale, float* m_out, float* l_out, float* acc_out,
                 bool prefetch) {
  using E = Elem<T>;
  const E* kbase = static_cast<const E*>(kbase_v);
  const E* vbase = static_cast<const E*>(vbase_v);
  constexpr int NV = D / 16;                          // zmm per row
  constexpr int DC = (256 / G) < D ? (256 / G) : D;   // PV: dims per pass (G * DC/16 <= 16 accumulators)
  constexpr int NC = DC / 16;
  alignas(64) float acc[G][D];
  alignas(64) float s[G][kChunk];
  float m[G], l[G];
  for (int g = 0; g < G; ++g) {
    m[g] = kNegBig;
    l[g] = 0;
    for (int d = 0; d < D; ++d) acc[g][d] = 0;
  }
  std::uint64_t pos[kChunk];
  auto pf_token = [&](std::uint64_t t) {
    const std::uint64_t p = sg.token(list, t) * tstride;
    const char* kp = reinterpret_cast<const char*>(kbase + p);
    const char* vp = reinterpret_cast<const char*>(vbase + p);
    for (int x = 0; x < D * static_cast<int>(sizeof(E)); x += 64) {
      _mm_prefetch(kp + x, _MM_HINT_T0);
      _mm_prefetch(vp + x, _MM_HINT_T0);
    }
  };
  if (prefetch)
    for (std::uint64_t t = t0; t < std::min(t1, t0 + 2 * kChunk); ++t) pf_token(t);
  for (std::uint64_t c0 = t0; c0 < t1; c0 += kChunk) {
    const int n = static_cast<int>(std::min<std::uint64_t>(kChunk, t1 - c0));
    if (prefetch) {
      const std::uint64_t pe = std::min(t1, c0 + 3 * kChunk);
      for (std::uint64_t t = c0 + 2 * kChunk; t < pe; ++t) pf_token(t);
    }
    for (int i = 0; i < n; ++i) pos[i] = sg.token(list, c0 + i) * tstride;
    // QK
#if defined(__AVX512BF16__)
    if constexpr (T == DType::bf16) {
      // bf16 x bf16 products are exact in fp32: vdpbf16ps on the raw K row and the bf16 query.
      constexpr int NB = D / 32;
      for (int i = 0; i < n; ++i) {
        const E* kr = kbase + pos[i];
        __m512bh kb[NB];
        for (int j = 0; j < NB; ++j) kb[j] = (__m512bh)_mm512_loadu_si512(kr + 32 * j);
        if constexpr (G % 4 == 0) {
          for (int g = 0; g < G; g += 4) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int j = 0; j < NB; ++j) {
              a0 = _mm512_dpbf16_ps(a0, kb[j], (__m512bh)_mm512_load_si512(qb + (g + 0) * D + 32 * j));
              a1 = _mm512_dpbf16_ps(a1, kb[j], (__m512bh)_mm512_load_si512(qb + (g + 1) * D + 32 * j));
              a2 = _mm512_dpbf16_ps(a2, kb[j], (__m512bh)_mm512_load_si512(qb + (g + 2) * D + 32 * j));
              a3 = _mm512_dpbf16_ps(a3, kb[j], (__m512bh)_mm512_load_si512(qb + (g + 3) * D + 32 * j));
            }
            alignas(16) float r[4];
            _mm_store_ps(r, reduce4(a0, a1, a2, a3));
            s[g][i] = r[0]; s[g + 1][i] = r[1]; s[g + 2][i] = r[2]; s[g + 3][i] = r[3];
          }
        } else {
          for (int g = 0; g < G; ++g) {
            __m512 a = _mm512_setzero_ps();
            for (int j = 0; j < NB; ++j)
              a = _mm512_dpbf16_ps(a, kb[j], (__m512bh)_mm512_load_si512(qb + g * D + 32 * j));
            s[g][i] = _mm512_reduce_add_ps(a);
          }
        }
      }
    } else
#endif
    for (int i = 0; i < n; ++i) {
      const E* kr = kbase + pos[i];
      __m512 kv[NV];
      for (int j = 0; j < NV; ++j) kv[j] = load16<T>(kr + 16 * j);
      if constexpr (G % 4 == 0) {
        for (int g = 0; g < G; g += 4) {
          __m512 a0 = _mm512_mul_ps(kv[0], _mm512_load_ps(q + (g + 0) * D));
          __m512 a1 = _mm512_mul_ps(kv[0], _mm512_load_ps(q + (g + 1) * D));
          __m512 a2 = _mm512_mul_ps(kv[0], _mm512_load_ps(q + (g + 2) * D));
          __m512 a3 = _mm512_mul_ps(kv[0], _mm512_load_ps(q + (g + 3) * D));
          for (int j = 1; j < NV; ++j) {
            a0 = _mm512_fmadd_ps(kv[j], _mm512_load_ps(q + (g + 0) * D + 16 * j), a0);
            a1 = _mm512_fmadd_ps(kv[j], _mm512_load_ps(q + (g + 1) * D + 16 * j), a1);
            a2 = _mm512_fmadd_ps(kv[j], _mm512_load_ps(q + (g + 2) * D + 16 * j), a2);
            a3 = _mm512_fmadd_ps(kv[j], _mm512_load_ps(q + (g + 3) * D + 16 * j), a3);
          }
          alignas(16) float r[4];
          _mm_store_ps(r, reduce4(a0, a1, a2, a3));
          s[g][i] = r[0]; s[g + 1][i] = r[1]; s[g + 2][i] = r[2]; s[g + 3][i] = r[3];
        }
      } else {
        for (int g = 0; g < G; ++g) {
          __m512 a = _mm512_mul_ps(kv[0], _mm512_load_ps(q + g * D));
          for (int j = 1; j < NV; ++j) a = _mm512_fmadd_ps(kv[j], _mm512_load_ps(q + g * D + 16 * j), a);
          s[g][i] = _mm512_reduce_add_ps(a);
        }
      }
    }
    // online softmax over the chunk (log2 domain)
    const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1u);
    float alpha[G];
    for (int g = 0; g < G; ++g) {
      const __m512 sv = _mm512_mask_mul_ps(_mm512_set1_ps(kNegBig), valid, _mm512_loadu_ps(s[g]), _mm512_set1_ps(qscale));
      const float mn = std::max(m[g], _mm512_reduce_max_ps(sv));
      const __m512 p = _mm512_maskz_mov_ps(valid, exp2_ps(_mm512_sub_ps(sv, _mm512_set1_ps(mn))));
      _mm512_store_ps(s[g], p);
      alpha[g] = exp2_ps(_mm512_set1_ps(m[g] - mn))[0];
      l[g] = l[g] * alpha[g] + _mm512_reduce_add_ps(p);
      m[g] = mn;
    }
    // PV
    for (int dc = 0; dc < D; dc += DC) {
      __m512 a[G][NC];
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < NC; ++j)
          a[g][j] = _mm512_mul_ps(_mm512_load_ps(&acc[g][dc + 16 * j]), _mm512_set1_ps(alpha[g]));
      for (int i = 0; i < n; ++i) {
        const E* vr = vbase + pos[i] + dc;
        __m512 vv[NC];
        for (int j = 0; j < NC; ++j) vv[j] = load16<T>(vr + 16 * j);
        for (int g = 0; g < G; ++g) {
          const __m512 pg = _mm512_set1_ps(s[g][i]);
          for (int j = 0; j < NC; ++j) a[g][j] = _mm512_fmadd_ps(pg, vv[j], a[g][j]);
        }
      }
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < NC; ++j) _mm512_store_ps(&acc[g][dc + 16 * j], a[g][j]);
    }
  }
  for (int g = 0; g < G; ++g) {
    m_out[g] = m[g];
    l_out[g] = l[g];
    std::memcpy(acc_out + g * D, acc[g], sizeof(float) * D);
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
