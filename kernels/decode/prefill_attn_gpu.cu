// Causal GQA attention of a prefill chunk over a resident prefix: a CUDA-core kernel (fp32 FMAs from shared memory)
// and a tensor-core kernel (below), split-KV for long prefixes with few query tiles, plus the split merge. Geometry
// and per-element math in decode_math.hpp (pf_*).
//
// CUDA-core kernel: one CTA of 128 threads per (query tile, kv head, split): 32 query rows (32 / G tokens x G heads of
// the group),
// key tiles of 32. Per key tile:
//   K tile -> smem fp32 [d][key] (each thread loads 32 contiguous bytes of one key: two 16-byte loads);
//   S = Q K^T: each thread 2 rows x 4 keys (float2 of Q, float4 of K per d); mask (causal, range end), scale;
//   online softmax across the 8 threads that share a row pair (shuffles), P -> smem [row][key], alpha -> smem;
//   V tile -> smem fp32 [key][d] (16-byte loads); O = O * alpha + P V: each thread RPT rows x 8 dims (two float4
//   of V per key: dims 4c..4c+3 and D/2 + 4c..).
// Shared memory (static, < 48 KB): Q 16 KB + K/V 16 KB + P 4.5 KB at D = 128. Launch bounds (128, 4).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include "decode_math.hpp"
#include "kvf/cuda_ptx.cuh"
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

// ---------------------------------------------------------------------------------------------------
// Tensor-core kernel (PfKernel::mma, sm_80+): FlashAttention-2's scheme with mma.sync m16n8k16 bf16 -> fp32. One CTA
// of 4 warps per (query tile of kPfMmaRows rows, kv head, split); warp w owns rows 16 w .. 16 w + 15 of the tile,
// its Q as A fragments in registers for the whole walk (read once from global memory). Per key tile of kPfMmaKeys:
//   K and V tiles -> shared memory by cp.async (all 128 threads; 16-byte chunks XOR-swizzled by row, pf_mma_chunk),
//   double-buffered: tile i + 1 is in flight while tile i is computed;
//   S = Q K^T: 8 n-tiles of 8 keys x D/16 k-steps, K fragments by ldmatrix (pf_mma_k_ldsm);
//   mask (key range, causal), scale, online softmax of the lane's two rows (g, g + 8) over the row's 4 lanes;
//   P rounded to bf16 straight from the S accumulators (C of n-tiles 2 kk, 2 kk + 1 = A of k-step kk), as
//   FlashAttention does; O += P V: D/8 n-tiles x 4 k-steps, V fragments by ldmatrix.trans (pf_mma_v_ldsm).
// The row mapping, key ranges, splits, merge and online-softmax step are the CUDA-core kernel's (decode_math.hpp).
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16): lane = 4 g + t; A: (row g, k 2t, 2t+1), (row g+8, k 2t..),
// (row g, k 2t+8..), (row g+8, k 2t+8..); B: (k 2t, 2t+1; n g), (k 2t+8, 2t+9; n g); C: (row g, n 2t, 2t+1),
// (row g+8, n 2t, 2t+1).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
using kvf::ptx::cp_async16;  // cp.async and ldmatrix: kvf/cuda_ptx.cuh
using kvf::ptx::cp_async_commit;
using kvf::ptx::cp_async_wait;
using kvf::ptx::ldsm_x4;
using kvf::ptx::ldsm_x4_trans;
// P's two probabilities as one bf16x2 A register (round to nearest even, as pack2; the lower key in the low half).
__device__ __forceinline__ unsigned pack_p(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}

constexpr int kPfMmaThreads = 32 * kPfMmaWarps;
template <int D>
constexpr int pf_mma_smem_bytes() {
  return 2 * 2 * kPfMmaKeys * D * 2;  // 2 stages x (K, V) x [keys][D] bf16
}

template <int D>
__global__ void __launch_bounds__(kPfMmaThreads, 2)
    prefill_attn_mma_kernel(const std::uint16_t* __restrict__ q, const std::uint16_t* __restrict__ kc,
                            const std::uint16_t* __restrict__ vc, int T, int N, int cap, int Hq, int G,
                            float scale_log2, int splits, float* __restrict__ part_o, float* __restrict__ part_ml,
                            std::uint16_t* __restrict__ out) {
  constexpr int KT = kPfMmaKeys, CH = D / 8, KS = D / 16, NT = D / 8;
  constexpr int kTileBytes = KT * D * 2;
  constexpr PfKernel kK = PfKernel::mma;
  extern __shared__ __align__(128) unsigned char pf_smem[];  // [stage][K, V][KT][D] bf16, swizzled chunks
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int tile = blockIdx.x, hk = blockIdx.y, split = blockIdx.z;
  const PfRange kr = pf_split_range(pf_tile_key_end(tile, G, T, N, kK), splits, split, KT);
  const std::uint16_t* kh = kc + std::int64_t(hk) * cap * D;
  const std::uint16_t* vh = vc + std::int64_t(hk) * cap * D;

  auto issue = [&](int stage, int kb) {
    unsigned char* kt = pf_smem + stage * 2 * kTileBytes;
    unsigned char* vt = kt + kTileBytes;
    for (int i = tid; i < KT * CH; i += kPfMmaThreads) {
      const int r = i / CH, c = i % CH;
      const bool ok = kb + r < kr.k1;
      const std::int64_t row = ok ? kb + r : kr.k0;  // a valid address even when nothing is copied
      cp_async16(kt + pf_mma_chunk(D, r, c), kh + row * D + c * 8, ok);
      cp_async16(vt + pf_mma_chunk(D, r, c), vh + row * D + c * 8, ok);
    }
    cp_async_commit();
  };
  if (kr.k0 < kr.k1) issue(0, kr.k0);

  // This lane's rows: g and g + 8 of the warp's 16 (rows past the chunk's end read zeros and are never written).
  const PfRow row0 = pf_row_of(kK, tile, 16 * warp + g, hk, G), row1 = pf_row_of(kK, tile, 16 * warp + g + 8, hk, G);
  unsigned qa[KS][4];
  {
    const unsigned* q0 = reinterpret_cast<const unsigned*>(q + (std::int64_t(row0.t) * Hq + row0.hq) * D);
    const unsigned* q1 = reinterpret_cast<const unsigned*>(q + (std::int64_t(row1.t) * Hq + row1.hq) * D);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      qa[ks][0] = row0.t < T ? __ldg(q0 + ks * 8 + t) : 0u;      // (row g, dims 16 ks + 2t, +1)
      qa[ks][1] = row1.t < T ? __ldg(q1 + ks * 8 + t) : 0u;      // (row g + 8, ..)
      qa[ks][2] = row0.t < T ? __ldg(q0 + ks * 8 + 4 + t) : 0u;  // (row g, dims 16 ks + 8 + 2t, +1)
      qa[ks][3] = row1.t < T ? __ldg(q1 + ks * 8 + 4 + t) : 0u;
    }
  }
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // l: this lane's share until the end
  float acc[NT][4];  // O: n-tile nt holds (row g, dims 8 nt + 2t, +1) in [0], [1] and row g + 8 in [2], [3]
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;

  int k_lane[2], v_lane[4];
#pragma unroll
  for (int j = 0; j < 2; ++j) k_lane[j] = pf_mma_k_lane(D, lane, j);
#pragma unroll
  for (int j = 0; j < 4; ++j) v_lane[j] = pf_mma_v_lane(D, lane, j);

  int stage = 0;
  for (int kb = kr.k0; kb < kr.k1; kb += KT, stage ^= 1) {
    // Every warp is past the previous tile (its stage is free) before the next tile's copies overwrite it.
    __syncthreads();
    if (kb + KT < kr.k1) {
      issue(stage ^ 1, kb + KT);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this tile's chunks, copied by every thread, are visible
    const unsigned char* kt = pf_smem + stage * 2 * kTileBytes;
    const unsigned char* vt = kt + kTileBytes;

    float s[8][4];
#pragma unroll
    for (int jn = 0; jn < 8; ++jn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[jn][e] = 0.f;
#pragma unroll
      for (int kp = 0; kp < KS / 2; ++kp) {
        unsigned bm[4];  // at pf_mma_chunk of pf_mma_k_ldsm(lane, jn, kp)
        ldsm_x4(bm, kt + k_lane[kp & 1] + pf_mma_k_const(D, jn, kp));
        mma_bf16(s[jn], qa[2 * kp], bm[0], bm[1]);
        mma_bf16(s[jn], qa[2 * kp + 1], bm[2], bm[3]);
      }
    }
    // Mask and scale; the online-softmax step of rows g (i = 0) and g + 8 (i = 1); P = 2^(S - m) in place of S.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = pf_mma_mask_scale(s, i, kb, t, kr.k1, i == 0 ? row0.t : row1.t, T, N, scale_log2);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      pf_mma_softmax(s, acc, i, mx, m_run[i], l_run[i]);
    }
    // O += P V, k-step kk = keys 16 kk .. 16 kk + 15 of the tile.
#pragma unroll
    for (int kk = 0; kk < KT / 16; ++kk) {
      const unsigned pa[4] = {pack_p(s[2 * kk][0], s[2 * kk][1]), pack_p(s[2 * kk][2], s[2 * kk][3]),
                              pack_p(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack_p(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        unsigned bm[4];  // at pf_mma_chunk of pf_mma_v_ldsm(lane, kk, np)
        ldsm_x4_trans(bm, vt + v_lane[np & 3] + pf_mma_v_const(D, kk, np));
        mma_bf16(acc[2 * np], pa, bm[0], bm[1]);
        mma_bf16(acc[2 * np + 1], pa, bm[2], bm[3]);
      }
    }
  }

  const std::int64_t rows = std::int64_t(T) * Hq;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = l_run[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const PfRow row = i == 0 ? row0 : row1;
    if (row.t >= T) continue;
    const std::int64_t orow = std::int64_t(row.t) * Hq + row.hq;
    if (splits == 1) {
      const float inv = 1.0f / l;
      unsigned* o = reinterpret_cast<unsigned*>(out + orow * D);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) o[4 * nt + t] = pack2(acc[nt][2 * i] * inv, acc[nt][2 * i + 1] * inv);
    } else {
      const std::int64_t prow = std::int64_t(split) * rows + orow;
      float2* o = reinterpret_cast<float2*>(part_o + prow * D);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) o[4 * nt + t] = make_float2(acc[nt][2 * i], acc[nt][2 * i + 1]);
      if (t == 0) *reinterpret_cast<float2*>(part_ml + prow * 2) = make_float2(m_run[i], l);
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

const char* prefill_attention_kernel_name(PfKernel k) {
  return k == PfKernel::mma ? "tensor cores (mma.sync bf16, P in bf16; FlashAttention-2 scheme)"
                            : "CUDA cores (fp32 FMAs from shared memory)";
}

void prefill_attention(const PrefillAttnDims& d, const PfPlan& plan, const std::uint16_t* q, const std::uint16_t* k,
                       const std::uint16_t* v, float* ws, std::uint16_t* out, cudaStream_t s) {
  const int G = d.Hkv > 0 ? d.Hq / d.Hkv : 0;
  const bool mma = plan.kernel == PfKernel::mma;
  if ((d.D != 64 && d.D != 128) || d.Hkv < 1 || d.Hq % d.Hkv != 0 || G < 1 || G > pf_rows_per_tile(plan.kernel) ||
      (G & (G - 1)) != 0 || d.T < 1 || d.N < 0 || d.cap < d.N + d.T || plan.splits < 1 || plan.splits > kPfMaxSplits ||
      plan.tile_tokens != pf_rows_per_tile(plan.kernel) / G || std::int64_t(plan.tiles) * plan.tile_tokens < d.T ||
      d.Hkv > 65535 || (plan.splits > 1 && ws == nullptr))
    throw std::runtime_error("prefill_attention: unsupported dims (T " + std::to_string(d.T) + ", N " +
                             std::to_string(d.N) + ", Hq " + std::to_string(d.Hq) + ", Hkv " + std::to_string(d.Hkv) +
                             ", D " + std::to_string(d.D) + ", splits " + std::to_string(plan.splits) + ")");
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(d.D)));
  const dim3 grid(unsigned(plan.tiles), unsigned(d.Hkv), unsigned(plan.splits));
  const std::int64_t rows = std::int64_t(d.T) * d.Hq;
  float* part_o = plan.splits > 1 ? ws : nullptr;
  float* part_ml = plan.splits > 1 ? ws + std::int64_t(plan.splits) * rows * d.D : nullptr;
  if (mma) {
    // 64 KiB of dynamic shared memory at D 128, above the default 48 KiB: allowed once per kernel and device, at the
    // first (eager) launch -- PrefillGpu's constructor runs a step before any graph captures one.
    auto launch = [&](auto kernel, int bytes, int which) {
      static std::atomic<std::uint64_t> allowed{0};  // bit 2 device + which
      int dev = 0;
      check(cudaGetDevice(&dev), "cudaGetDevice");
      const std::uint64_t bit = dev < 32 ? std::uint64_t{1} << (2 * dev + which) : 0;
      if (!bit || !(allowed.load() & bit)) {
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
              "prefill_attn_mma_kernel shared memory");
        allowed.fetch_or(bit);
      }
      kernel<<<grid, kPfMmaThreads, bytes, s>>>(q, k, v, d.T, d.N, d.cap, d.Hq, G, scale_log2, plan.splits, part_o,
                                                part_ml, out);
    };
    if (d.D == 128) launch(prefill_attn_mma_kernel<128>, pf_mma_smem_bytes<128>(), 0);
    else launch(prefill_attn_mma_kernel<64>, pf_mma_smem_bytes<64>(), 1);
    check(cudaGetLastError(), "prefill_attn_mma_kernel launch");
  } else {
    if (d.D == 128)
      prefill_attn_kernel<128><<<grid, kPfThreads, 0, s>>>(q, k, v, d.T, d.N, d.cap, d.Hq, G, scale_log2,
                                                            plan.splits, part_o, part_ml, out);
    else
      prefill_attn_kernel<64><<<grid, kPfThreads, 0, s>>>(q, k, v, d.T, d.N, d.cap, d.Hq, G, scale_log2,
                                                           plan.splits, part_o, part_ml, out);
    check(cudaGetLastError(), "prefill_attn_kernel launch");
  }
  if (plan.splits > 1) {
    const std::int64_t n = rows * d.D;
    const int blocks = int(std::min<std::int64_t>((n + 255) / 256, 65536));
    prefill_merge_kernel<<<blocks, 256, 0, s>>>(part_o, part_ml, plan.splits, rows, d.D, out);
    check(cudaGetLastError(), "prefill_merge_kernel launch");
  }
}

}  // namespace kvf::decode::gpu
