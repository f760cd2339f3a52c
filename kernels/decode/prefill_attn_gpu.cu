// Causal GQA attention of a prefill chunk over a resident prefix: a CUDA-core kernel (fp32 FMAs from shared memory,
// not tensor cores; see prefill_attn_gpu.hpp for what that means for the figures), split-KV for long prefixes
// with few query tiles, plus the split merge. Geometry and per-element math in decode_math.hpp (pf_*).
//
// One CTA of 128 threads per (query tile, kv head, split): 32 query rows (32 / G tokens x G heads of the group),
// key tiles of 32. Per key tile:
//   K tile -> smem fp32 [d][key] (each thread loads 32 contiguous bytes of one key: two 16-byte loads);
//   S = Q K^T: each thread 2 rows x 4 keys (float2 of Q, float4 of K per d); mask (causal, range end), scale;
//   online softmax across the 8 threads that share a row pair (shuffles), P -> smem [row][key], alpha -> smem;
//   V tile -> smem fp32 [key][d] (16-byte loads); O = O * alpha + P V: each thread RPT rows x 8 dims (two float4
//   of V per key: dims 4c..4c+3 and D/2 + 4c..).
// Shared memory (static, < 48 KB): Q 16 KB + K/V 16 KB + P 4.5 KB at D = 128. Launch bounds (128, 4).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "decode_math.hpp"
#include "prefill_attn_gpu.hpp"

namespace kvf::decode::gpu {
namespace {

using namespace kvf::decode::elems;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

constexpr int kPs = kPfKeys + 4;  // P row stride (floats): 16-byte aligned, and the two row groups a warp reads
                                  // in P.V land on different banks

__device__ __forceinline__ void unpack8(const uint4 u, float* f) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  return unsigned(kvf::frontier::f32_to_bf16(lo)) | (unsigned(kvf::frontier::f32_to_bf16(hi)) << 16);
}

template <int D>
__global__ void __launch_bounds__(kPfThreads, 4)
    prefill_attn_kernel(const std::uint16_t* __restrict__ q, const std::uint16_t* __restrict__ kc,
                        const std::uint16_t* __restrict__ vc, int T, int N, int cap, int Hq, int G, float scale_log2,
                        int splits, float* __restrict__ part_o, float* __restrict__ part_ml,
                        std::uint16_t* __restrict__ out) {
  constexpr int R = kPfRows, KT = kPfKeys, NT = kPfThreads;
  constexpr int CH = D / 8;             // 16-byte chunks of a head row
  constexpr int RPT = R * CH / NT;      // P.V rows per thread: 4 (D = 128) or 2 (D = 64)
  constexpr int H2 = D / 2;
  static_assert(RPT == 2 || RPT == 4, "head dim 64 or 128");
  __shared__ __align__(16) float Qs[D * R];    // [d][row]
  __shared__ __align__(16) float KVs[D * KT];  // K: [d][key]; then V: [key][d]
  __shared__ __align__(16) float Ps[R * kPs];  // [row][key]
  __shared__ float alpha_s[R], m_s[R], l_s[R];

  const int tid = threadIdx.x, tile = blockIdx.x, hk = blockIdx.y, split = blockIdx.z;
  const PfRange kr = pf_split_range(pf_tile_key_end(tile, G, T, N), splits, split);

  // Q tile, zeros for rows past the chunk's end.
  for (int i = tid; i < R * CH; i += NT) {
    const int r = i % R, c = i / R;
    const PfRow row = pf_row(tile, r, hk, G);
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    if (row.t < T) u = __ldg(reinterpret_cast<const uint4*>(q + (std::int64_t(row.t) * Hq + row.hq) * D) + c);
    float f[8];
    unpack8(u, f);
#pragma unroll
    for (int e = 0; e < 8; ++e) Qs[(c * 8 + e) * R + r] = f[e];
  }

  const int sr = (tid / 8) * 2, sk = (tid % 8) * 4;  // scores: rows sr, sr+1; keys sk .. sk+3 of the tile
  const int t0 = pf_row(tile, sr, hk, G).t, t1 = pf_row(tile, sr + 1, hk, G).t;
  const int pc = tid % CH, pr = (tid / CH) * RPT;    // P.V: rows pr .. pr+RPT-1; dims 4pc.., H2 + 4pc..
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc[RPT][8];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;

  for (int kb = kr.k0; kb < kr.k1; kb += KT) {
    __syncthreads();  // Q stores visible; the previous tile's P.V is done with KVs, Ps, alpha_s
    for (int i = tid; i < KT * CH / 2; i += NT) {
      const int key = i % KT, cp = i / KT;
      uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
      if (kb + key < kr.k1) {
        const uint4* src = reinterpret_cast<const uint4*>(kc + (std::int64_t(hk) * cap + kb + key) * D) + 2 * cp;
        a = __ldg(src);
        b = __ldg(src + 1);
      }
      float f[16];
      unpack8(a, f);
      unpack8(b, f + 8);
#pragma unroll
      for (int e = 0; e < 16; ++e) KVs[(cp * 16 + e) * KT + key] = f[e];
    }
    __syncthreads();
    float s[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[i][j] = 0.f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) {
      const float2 qv = *reinterpret_cast<const float2*>(&Qs[d * R + sr]);
      const float4 kv = *reinterpret_cast<const float4*>(&KVs[d * KT + sk]);
      s[0][0] = fmaf(qv.x, kv.x, s[0][0]);
      s[0][1] = fmaf(qv.x, kv.y, s[0][1]);
      s[0][2] = fmaf(qv.x, kv.z, s[0][2]);
      s[0][3] = fmaf(qv.x, kv.w, s[0][3]);
      s[1][0] = fmaf(qv.y, kv.x, s[1][0]);
      s[1][1] = fmaf(qv.y, kv.y, s[1][1]);
      s[1][2] = fmaf(qv.y, kv.z, s[1][2]);
      s[1][3] = fmaf(qv.y, kv.w, s[1][3]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int t = i == 0 ? t0 : t1;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key = kb + sk + j;
        s[i][j] = (key < kr.k1 && t < T && pf_visible(key, N, t)) ? s[i][j] * scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const PfOnline o = pf_online(m_run[i], mx);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = exp2f(s[i][j] - o.m_use);
        sum += s[i][j];
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      l_run[i] = l_run[i] * o.alpha + sum;
      m_run[i] = o.m_new;
      *reinterpret_cast<float4*>(&Ps[(sr + i) * kPs + sk]) = make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
      if ((tid & 7) == 0) alpha_s[sr + i] = o.alpha;
    }
    __syncthreads();  // scores done with K: load V over it
    for (int i = tid; i < KT * CH; i += NT) {
      const int key = i / CH, c = i % CH;
      uint4 a = make_uint4(0u, 0u, 0u, 0u);
      if (kb + key < kr.k1) a = __ldg(reinterpret_cast<const uint4*>(vc + (std::int64_t(hk) * cap + kb + key) * D) + c);
      float f[8];
      unpack8(a, f);
      *reinterpret_cast<float4*>(&KVs[key * D + c * 8]) = make_float4(f[0], f[1], f[2], f[3]);
      *reinterpret_cast<float4*>(&KVs[key * D + c * 8 + 4]) = make_float4(f[4], f[5], f[6], f[7]);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const float a = alpha_s[pr + r];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= a;
    }
#pragma unroll 2
    for (int j = 0; j < KT; j += 4) {
      float4 p[RPT];
#pragma unroll
      for (int r = 0; r < RPT; ++r) p[r] = *reinterpret_cast<const float4*>(&Ps[(pr + r) * kPs + j]);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float4 v0 = *reinterpret_cast<const float4*>(&KVs[(j + jj) * D + 4 * pc]);
        const float4 v1 = *reinterpret_cast<const float4*>(&KVs[(j + jj) * D + H2 + 4 * pc]);
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
          const float w = jj == 0 ? p[r].x : jj == 1 ? p[r].y : jj == 2 ? p[r].z : p[r].w;
          acc[r][0] = fmaf(w, v0.x, acc[r][0]);
          acc[r][1] = fmaf(w, v0.y, acc[r][1]);
          acc[r][2] = fmaf(w, v0.z, acc[r][2]);
          acc[r][3] = fmaf(w, v0.w, acc[r][3]);
          acc[r][4] = fmaf(w, v1.x, acc[r][4]);
          acc[r][5] = fmaf(w, v1.y, acc[r][5]);
          acc[r][6] = fmaf(w, v1.z, acc[r][6]);
          acc[r][7] = fmaf(w, v1.w, acc[r][7]);
        }
      }
    }
  }
  if ((tid & 7) == 0) {
    m_s[sr] = m_run[0];
    m_s[sr + 1] = m_run[1];
    l_s[sr] = l_run[0];
    l_s[sr + 1] = l_run[1];
  }
  __syncthreads();
  const std::int64_t rows = std::int64_t(T) * Hq;
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    const PfRow row = pf_row(tile, pr + r, hk, G);
    if (row.t >= T) continue;
    const std::int64_t orow = std::int64_t(row.t) * Hq + row.hq;
    if (splits == 1) {
      const float inv = 1.0f / l_s[pr + r];
      std::uint16_t* o = out + orow * D;
      *reinterpret_cast<uint2*>(o + 4 * pc) =
          make_uint2(pack2(acc[r][0] * inv, acc[r][1] * inv), pack2(acc[r][2] * inv, acc[r][3] * inv));
      *reinterpret_cast<uint2*>(o + H2 + 4 * pc) =
          make_uint2(pack2(acc[r][4] * inv, acc[r][5] * inv), pack2(acc[r][6] * inv, acc[r][7] * inv));
    } else {
      const std::int64_t prow = std::int64_t(split) * rows + orow;
      float* o = part_o + prow * D;
      *reinterpret_cast<float4*>(o + 4 * pc) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      *reinterpret_cast<float4*>(o + H2 + 4 * pc) = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
      if (pc == 0) *reinterpret_cast<float2*>(part_ml + prow * 2) = make_float2(m_s[pr + r], l_s[pr + r]);
    }
  }
}

// One thread per output element (grid-stride): merge of the splits (pf_merge), bf16.
__global__ void prefill_merge_kernel(const float* __restrict__ part_o, const float* __restrict__ part_ml, int splits,
                                     std::int64_t rows, int D, std::uint16_t* __restrict__ out) {
  const std::int64_t n = rows * D;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = kvf::frontier::f32_to_bf16(pf_merge(part_o, part_ml, splits, rows, i / D, D, int(i % D)));
}

}  // namespace

void prefill_attention(const PrefillAttnDims& d, const PfPlan& plan, const std::uint16_t* q, const std::uint16_t* k,
                       const std::uint16_t* v, float* ws, std::uint16_t* out, cudaStream_t s) {
  const int G = d.Hq / d.Hkv;
  if ((d.D != 64 && d.D != 128) || d.Hkv < 1 || d.Hq % d.Hkv != 0 || G > kPfRows || (G & (G - 1)) != 0 || d.T < 1 ||
      d.N < 0 || d.cap < d.N + d.T || plan.splits < 1 || plan.splits > kPfMaxSplits ||
      plan.tile_tokens != pf_tile_tokens(G) || std::int64_t(plan.tiles) * plan.tile_tokens < d.T ||
      d.Hkv > 65535 || (plan.splits > 1 && ws == nullptr))
    throw std::runtime_error("prefill_attention: unsupported dims (T " + std::to_string(d.T) + ", N " +
                             std::to_string(d.N) + ", Hq " + std::to_string(d.Hq) + ", Hkv " + std::to_string(d.Hkv) +
                             ", D " + std::to_string(d.D) + ", splits " + std::to_string(plan.splits) + ")");
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(d.D)));
  const dim3 grid(unsigned(plan.tiles), unsigned(d.Hkv), unsigned(plan.splits));
  const std::int64_t rows = std::int64_t(d.T) * d.Hq;
  float* part_o = plan.splits > 1 ? ws : nullptr;
  float* part_ml = plan.splits > 1 ? ws + std::int64_t(plan.splits) * rows * d.D : nullptr;
  if (d.D == 128)
    prefill_attn_kernel<128><<<grid, kPfThreads, 0, s>>>(q, k, v, d.T, d.N, d.cap, d.Hq, G, scale_log2, plan.splits,
                                                          part_o, part_ml, out);
  else
    prefill_attn_kernel<64><<<grid, kPfThreads, 0, s>>>(q, k, v, d.T, d.N, d.cap, d.Hq, G, scale_log2, plan.splits,
                                                         part_o, part_ml, out);
  check(cudaGetLastError(), "prefill_attn_kernel launch");
  if (plan.splits > 1) {
    const std::int64_t n = rows * d.D;
    const int blocks = int(std::min<std::int64_t>((n + 255) / 256, 65536));
    prefill_merge_kernel<<<blocks, 256, 0, s>>>(part_o, part_ml, plan.splits, rows, d.D, out);
    check(cudaGetLastError(), "prefill_merge_kernel launch");
  }
}

}  // namespace kvf::decode::gpu
