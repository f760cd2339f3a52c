// GPU split-KV sparse decode attention of the access study (dense, block and token arms run the same
// kernel; they differ only in the selection list: entries of `span` tokens).
//
// CTA = (split, kv head x head group, batch), 4 warps. A token row (d elements of 2 bytes, or 1 byte for
// fp8 e4m3) is read by d*bytes/16 lanes with one 16-byte non-coherent load each (attn_* tiling in
// access_math.hpp); each lane group holds the query heads of its CTA in fp32 registers (8 or 16
// elements per head per lane; the query is bf16 when K/V are fp8), loads U tokens' K and V
// rows before using any (so 2U independent 16-byte loads per lane are in flight), reduces the QK
// partial dots over its lanes with xor shuffles, and keeps an online softmax (log2 domain, fp32).
// The lane groups are combined through shared memory into one (m, l, acc) per query head and split;
// a merge kernel combines the splits. fp32 accumulation throughout. Row addresses: a per-head base plus
// KvLayout::token_off_u32 of the physical token (the paged HND layout keeps a page's heads side by side,
// so one head's rows are runs of P x d elements at a stride of P x hkv x d).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "access_gpu.hpp"

namespace kvf::access::gpu {
namespace {

constexpr int kThreads = 32 * kAttnWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1.0e30f;

struct Args {
  std::uint32_t hq, hkv, ctx, head_groups;
  KvLayout kl;
  float qscale;  // scale * log2(e)
  SelGeom sel;
  std::uint32_t span_shift;  // log2(sel.span): spans are powers of two (no 64-bit division per token)
  SplitGeom split;
};

// 16 bytes -> 8 (16-bit types) or 16 (fp8 e4m3) floats, in memory order.
template <DType T>
__device__ __forceinline__ void cvt16B(const uint4 u, float* f) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (T == DType::bf16) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    } else if constexpr (T == DType::fp16) {
      f[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xFFFFu)));
      f[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    } else {
      // e4m3 -> f16 is exact (one cvt per pair on sm_89+), f16 -> f32 exact.
      const __half2 lo = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] & 0xFFFFu), __NV_E4M3));
      const __half2 hi = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> 16), __NV_E4M3));
      const float2 a = __half22float2(lo), b = __half22float2(hi);
      f[4 * i] = a.x;
      f[4 * i + 1] = a.y;
      f[4 * i + 2] = b.x;
      f[4 * i + 3] = b.y;
    }
  }
}

template <DType T>
struct KvType {
  static constexpr int bytes = T == DType::fp8_e4m3 ? 1 : 2;
  static constexpr int per16 = 16 / bytes;                                // elements per 16-byte load
  static constexpr DType q = T == DType::fp8_e4m3 ? DType::bf16 : T;      // the query stays 16-bit
};

template <int D, int GB, int U, DType T>
__global__ void __launch_bounds__(kThreads) attn_split_kernel(const std::uint16_t* __restrict__ q,
                                                              const unsigned char* __restrict__ k,
                                                              const unsigned char* __restrict__ v,
                                                              const std::uint32_t* __restrict__ idx, const Args a,
                                                              float* __restrict__ ws) {
  constexpr int EB = KvType<T>::bytes;
  constexpr int EPL = KvType<T>::per16;  // elements per lane
  constexpr int LT = attn_lanes_per_token(D, EB);
  constexpr int TPC = attn_tokens_per_cta(D, EB);
  constexpr int NG = TPC;  // lane groups per CTA
  const int grp = attn_group_of_thread(D, threadIdx.x, EB);
  const int sub = attn_sub_of_thread(D, threadIdx.x, EB);
  const std::uint32_t sp = blockIdx.x;
  const std::uint32_t h = blockIdx.y / a.head_groups, hg = blockIdx.y % a.head_groups;
  const std::uint32_t b = blockIdx.z;
  const std::uint32_t G = a.hq / a.hkv;
  const std::uint32_t qh0 = h * G + hg * GB;

  float qf[GB][EPL];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    const uint4* qrow = reinterpret_cast<const uint4*>(q + (static_cast<std::uint64_t>(b) * a.hq + qh0 + g) * D + sub * EPL);
#pragma unroll
    for (int c = 0; c < EPL / 8; ++c) cvt16B<KvType<T>::q>(__ldg(qrow + c), &qf[g][8 * c]);
#pragma unroll
    for (int j = 0; j < EPL; ++j) qf[g][j] *= a.qscale;
  }
  const std::uint64_t row0 = a.kl.head_base(b, h, a.ctx) * EB + static_cast<std::uint64_t>(sub) * 16;
  const unsigned char* kb = k + row0;
  const unsigned char* vb = v + row0;
  const std::uint32_t* list = idx + a.sel.list_offset(b, h, a.hkv);
  const std::uint32_t t0 = static_cast<std::uint32_t>(a.split.begin(sp)), t1 = static_cast<std::uint32_t>(a.split.end(sp));

  float m[GB], l[GB], acc[GB][EPL];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = kNegBig;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) acc[g][j] = 0.0f;
  }

  for (std::uint32_t base = t0; base < t1; base += static_cast<std::uint32_t>(TPC) * U) {
    // Positions first (index loads), then all 2U row loads, then the math.
    // Byte offsets of the selected rows (physical token -> KvLayout::token_off: paged HND keeps the
    // pages of every head side by side).
    std::uint64_t off[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::uint32_t t = base + static_cast<std::uint32_t>(u * TPC + grp);
      ok[u] = t < t1;
      const std::uint32_t n = ok[u] ? (__ldg(list + (t >> a.span_shift)) << a.span_shift) + (t & ((1u << a.span_shift) - 1u))
                                    : 0u;
      off[u] = a.kl.token_off_u32(n) * EB;  // fits_u32() checked at launch
    }
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      kr[u] = ok[u] ? __ldg(reinterpret_cast<const uint4*>(kb + off[u])) : make_uint4(0, 0, 0, 0);
      vr[u] = ok[u] ? __ldg(reinterpret_cast<const uint4*>(vb + off[u])) : make_uint4(0, 0, 0, 0);
    }
    float s[U][GB];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[EPL];
      cvt16B<T>(kr[u], kf);
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        float x = 0.0f;
#pragma unroll
        for (int j = 0; j < EPL; ++j) x = fmaf(qf[g][j], kf[j], x);
        s[u][g] = x;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int g = 0; g < GB; ++g)
#pragma unroll
        for (int off = LT / 2; off > 0; off >>= 1) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
    // Online softmax over the U tokens at once: one rescale per step.
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = ok[u] ? fmaxf(mx, s[u][g]) : mx;
      const float alpha = exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= alpha;
#pragma unroll
      for (int j = 0; j < EPL; ++j) acc[g][j] *= alpha;
#pragma unroll
      for (int u = 0; u < U; ++u) s[u][g] = ok[u] ? exp2f(s[u][g] - mx) : 0.0f;  // now p
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[EPL];
      cvt16B<T>(vr[u], vf);
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        l[g] += s[u][g];
#pragma unroll
        for (int j = 0; j < EPL; ++j) acc[g][j] = fmaf(s[u][g], vf[j], acc[g][j]);
      }
    }
  }

  // Combine the lane groups of the CTA.
  __shared__ float sm_m[NG][GB], sm_l[NG][GB];
  __shared__ float sm_acc[NG][GB][D];
  if (sub == 0)
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      sm_m[grp][g] = m[g];
      sm_l[grp][g] = l[g];
    }
#pragma unroll
  for (int g = 0; g < GB; ++g)
#pragma unroll
    for (int j = 0; j < EPL; ++j) sm_acc[grp][g][sub * EPL + j] = acc[g][j];
  __syncthreads();
  for (int e = threadIdx.x; e < GB * D; e += kThreads) {
    const int g = e / D, d = e % D;
    float M = kNegBig;
    for (int n = 0; n < NG; ++n) M = fmaxf(M, sm_m[n][g]);
    float L = 0.0f, A = 0.0f;
    for (int n = 0; n < NG; ++n) {
      const float w = exp2f(sm_m[n][g] - M);  // groups without tokens: m = -1e30 -> w = 0
      L = fmaf(w, sm_l[n][g], L);
      A = fmaf(w, sm_acc[n][g][d], A);
    }
    float* rec = ws + ((static_cast<std::uint64_t>(b) * a.hq + qh0 + g) * a.split.n_splits + sp) * (D + 2);
    if (d == 0) {
      rec[0] = M;
      rec[1] = L;
    }
    rec[2 + d] = A;
  }
}

// out[bq][d] = sum_s 2^(m_s - M) acc_s[d] / sum_s 2^(m_s - M) l_s. One CTA per (batch, query head).
__global__ void attn_merge_kernel(const float* __restrict__ ws, std::uint32_t ns, std::uint32_t D,
                                  float* __restrict__ out) {
  const std::uint64_t bq = blockIdx.x;
  const float* r0 = ws + bq * ns * (D + 2);
  float M = kNegBig;
  for (std::uint32_t s = 0; s < ns; ++s) M = fmaxf(M, r0[s * (D + 2)]);
  for (std::uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
    float L = 0.0f, A = 0.0f;
    for (std::uint32_t s = 0; s < ns; ++s) {
      const float* r = r0 + s * (D + 2);
      const float w = exp2f(r[0] - M);
      L = fmaf(w, r[1], L);
      A = fmaf(w, r[2 + d], A);
    }
    out[bq * D + d] = A / L;
  }
}

template <int D, int GB, int U, DType T>
void launch_split(const AttnDims& s, const void* q, const void* k, const void* v, const std::uint32_t* idx,
                  const Args& a, float* ws, cudaStream_t st) {
  const dim3 grid(a.split.n_splits, s.hkv * a.head_groups, s.batch);
  attn_split_kernel<D, GB, U, T><<<grid, kThreads, 0, st>>>(static_cast<const std::uint16_t*>(q),
                                                           static_cast<const unsigned char*>(k),
                                                           static_cast<const unsigned char*>(v), idx, a, ws);
}

// Unroll (token rows in flight per lane group) and heads per CTA, chosen so ptxas reports no spills on
// sm_80, sm_90 and sm_100: 16-bit K/V: 1 head -> 8 rows, 2 or 4 heads -> 4, 8 heads -> 2; fp8 K/V
// (16 elements per lane): at most 4 heads per CTA, 1 head -> 8 rows, 2 or 4 heads -> 4.
template <int D, DType T>
void dispatch_gb(std::uint32_t gb, const AttnDims& s, const void* q, const void* k, const void* v,
                 const std::uint32_t* idx, const Args& a, float* ws, cudaStream_t st) {
  switch (gb) {
    case 1: return launch_split<D, 1, 8, T>(s, q, k, v, idx, a, ws, st);
    case 2: return launch_split<D, 2, 4, T>(s, q, k, v, idx, a, ws, st);
    case 4: return launch_split<D, 4, 4, T>(s, q, k, v, idx, a, ws, st);
    case 8:
      if constexpr (T != DType::fp8_e4m3) return launch_split<D, 8, 2, T>(s, q, k, v, idx, a, ws, st);
      [[fallthrough]];
    default: throw std::invalid_argument("gpu::attention: unsupported heads per CTA");
  }
}

std::uint32_t max_heads_per_cta(DType t) { return t == DType::fp8_e4m3 ? 4u : 8u; }
int unroll_for(std::uint32_t gb) { return gb == 8 ? 2 : gb == 1 ? 8 : 4; }

__global__ void fill_kernel(void* p, std::uint64_t n, std::uint64_t seed, float mul, DType t) {
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const float x = pattern_unit(seed, i) * mul;
    if (t == DType::fp8_e4m3) static_cast<std::uint8_t*>(p)[i] = f32_to_e4m3(x);
    else static_cast<std::uint16_t*>(p)[i] = t == DType::bf16 ? f32_to_bf16(x) : f32_to_fp16(x);
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

AttnPlan plan_attention(const AttnDims& s, const SelGeom& sel, int sm_count) {
  if (s.d != 64 && s.d != 128) throw std::invalid_argument("gpu::attention: head dim must be 64 or 128");
  if (s.hkv == 0 || s.hq % s.hkv) throw std::invalid_argument("gpu::attention: hq must be a multiple of hkv");
  const std::uint32_t G = s.hq / s.hkv;
  if (G == 0 || G > 16 || (G & (G - 1))) throw std::invalid_argument("gpu::attention: group must be 1, 2, 4, 8, 16");
  AttnPlan p;
  const std::uint32_t hmax = max_heads_per_cta(s.dtype);
  p.heads_per_cta = G > hmax ? hmax : G;
  p.head_groups = G / p.heads_per_cta;
  const std::uint64_t quantum =
      static_cast<std::uint64_t>(attn_tokens_per_cta(static_cast<int>(s.d), static_cast<int>(dtype_bytes(s.dtype)))) *
      unroll_for(p.heads_per_cta);
  // >= 4 CTAs per SM when the work allows, no split shorter than 128 tokens.
  p.split = make_splits(sel.n_tokens(), static_cast<std::uint64_t>(s.batch) * s.hkv * p.head_groups,
                        static_cast<std::uint32_t>(sm_count > 0 ? sm_count : 1), 4, 128, quantum);
  if (p.split.n_splits > 65535) throw std::invalid_argument("gpu::attention: more than 65535 splits");
  return p;
}

std::size_t attention_workspace_floats(const AttnDims& s, const AttnPlan& p) {
  return static_cast<std::size_t>(s.batch) * s.hq * p.split.n_splits * (s.d + 2);
}

void attention(const AttnDims& s, const void* q, const void* k, const void* v, const SelGeom& sel,
               const std::uint32_t* idx, const AttnPlan& p, float* workspace, float* out, cudaStream_t st) {
  if (sel.span == 0 || (sel.span & (sel.span - 1))) throw std::invalid_argument("gpu::attention: span must be a power of two");
  std::uint32_t shift = 0;
  while ((1u << shift) < sel.span) ++shift;
  if (s.page && ((s.page & (s.page - 1)) || s.ctx % s.page))
    throw std::invalid_argument("gpu::attention: page must be 0 or a power of two dividing the context");
  Args a{s.hq, s.hkv, s.ctx, p.head_groups, make_kv_layout(s.layout, s.hkv, s.d, s.page), s.scale * kLog2e, sel, shift, p.split};
  if (!a.kl.fits_u32()) throw std::invalid_argument("gpu::attention: a page of this layout exceeds 2^32 elements");
  auto go = [&](auto dc, auto tc) {
    dispatch_gb<decltype(dc)::value, decltype(tc)::value>(p.heads_per_cta, s, q, k, v, idx, a, workspace, st);
  };
  using D64 = std::integral_constant<int, 64>;
  using D128 = std::integral_constant<int, 128>;
  using TB = std::integral_constant<DType, DType::bf16>;
  using TH = std::integral_constant<DType, DType::fp16>;
  using T8 = std::integral_constant<DType, DType::fp8_e4m3>;
  switch (s.dtype) {
    case DType::bf16: s.d == 128 ? go(D128{}, TB{}) : go(D64{}, TB{}); break;
    case DType::fp16: s.d == 128 ? go(D128{}, TH{}) : go(D64{}, TH{}); break;
    case DType::fp8_e4m3: s.d == 128 ? go(D128{}, T8{}) : go(D64{}, T8{}); break;
  }
  check_launch("attn_split_kernel launch");
  attn_merge_kernel<<<s.batch * s.hq, s.d, 0, st>>>(workspace, p.split.n_splits, s.d, out);
  check_launch("attn_merge_kernel launch");
}

void fill_qkv(const AttnDims& s, void* q, void* k, void* v, std::uint64_t seed, cudaStream_t st) {
  const std::uint64_t nq = static_cast<std::uint64_t>(s.batch) * s.hq * s.d;
  const std::uint64_t nkv = static_cast<std::uint64_t>(s.batch) * s.hkv * s.ctx * s.d;
  const DType qt = s.dtype == DType::fp8_e4m3 ? DType::bf16 : s.dtype;
  // Same seeds, scales and encodings as kvf::access::fill_qkv.
  fill_kernel<<<1024, 256, 0, st>>>(q, nq, seed * 3 + 1, 4.0f, qt);
  fill_kernel<<<1024, 256, 0, st>>>(k, nkv, seed * 3 + 2, 1.0f, s.dtype);
  fill_kernel<<<1024, 256, 0, st>>>(v, nkv, seed * 3 + 3, 1.0f, s.dtype);
  check_launch("fill_kernel launch");
}

}  // namespace kvf::access::gpu
