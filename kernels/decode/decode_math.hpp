// Per-element bodies of the decode step's small fused kernels, __host__ __device__: decode_gpu.cu runs them as
// grid-stride loops; tests/idleness runs the same bodies on the CPU over every index and compares with the CPU
// twin's loops (indexing and rounding points).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "frontier_math.hpp"  // KVF_FHD, f32_to_bf16, bf16_to_f32, rope_rotate
#include "kvf/pattern.hpp"    // pattern_word

namespace kvf::decode::elems {

// Deterministic fill: the value kvf::frontier::fill_bf16_uniform writes at index i.
KVF_FHD std::uint16_t fill_bf16(std::uint64_t seed, std::uint64_t i, float scale) {
  const float u = float(std::int64_t(pattern_word(seed, i) >> 40) - (std::int64_t(1) << 23)) * (1.0f / float(1 << 23));
  return kvf::frontier::f32_to_bf16(u * scale);
}

// After the QKV GEMM, idx over B * (Hq + 2 Hkv) * (D/2): bias, RoPE on q and k (pair i, i + D/2), bf16 q to
// q_out [B][Hq][D], bf16 k and v to position C-1 of the HND caches [B][Hkv][C][D].
KVF_FHD void qkv_post(std::int64_t idx, const float* qkv, const float* bias, int Hq, int Hkv, int D, int C,
                      const float* cs, std::uint16_t* q_out, std::uint16_t* kc, std::uint16_t* vc) {
  const int half = D / 2, heads = Hq + 2 * Hkv;
  const int i = int(idx % half);
  const int hh = int((idx / half) % heads);
  const std::int64_t b = idx / (std::int64_t(half) * heads);
  const float* x = qkv + b * std::int64_t(heads) * D + std::int64_t(hh) * D;
  const float* bb = bias ? bias + std::int64_t(hh) * D : nullptr;
  float lo = x[i], hi = x[i + half];
  if (bb) {
    lo += bb[i];
    hi += bb[i + half];
  }
  if (hh < Hq + Hkv) {
    const kvf::frontier::RopePair o = kvf::frontier::rope_rotate(lo, hi, cs[i], cs[half + i]);
    std::uint16_t* dst = hh < Hq ? q_out + (b * Hq + hh) * std::int64_t(D)
                                 : kc + ((b * Hkv + (hh - Hq)) * std::int64_t(C) + (C - 1)) * D;
    dst[i] = kvf::frontier::f32_to_bf16(o.lo);
    dst[i + half] = kvf::frontier::f32_to_bf16(o.hi);
  } else {
    std::uint16_t* dst = vc + ((b * Hkv + (hh - Hq - Hkv)) * std::int64_t(C) + (C - 1)) * D;
    dst[i] = kvf::frontier::f32_to_bf16(lo);
    dst[i + half] = kvf::frontier::f32_to_bf16(hi);
  }
}

// SwiGLU, e over B * I: bf16(silu(gate) * up) of row e / I, gu rows [gate (I) | up (I)].
KVF_FHD std::uint16_t swiglu(std::int64_t e, const float* gu, int I) {
  const std::int64_t t = e / I, i = e % I;
  const float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
  return kvf::frontier::f32_to_bf16(g / (1.0f + expf(-g)) * u);
}

// One RMSNorm output element given the row's 1/rms.
KVF_FHD std::uint16_t rms_elem(float x, float inv, float g) { return kvf::frontier::f32_to_bf16(x * inv * g); }


// ---------------------------------------------------------------- prefill chunk
// After the chunk's QKV GEMM, idx over T * (Hq + 2 Hkv) * (D/2): row t is the token at position N + t. Bias, RoPE
// (cos_sin: rows of D values [cos | sin] per position, the twin's rope_table) on q and k, bf16 q to q_out
// [T][Hq][D], bf16 k and v appended at position N + t of the caches [Hkv][cap][D] (cap = N + T).
KVF_FHD void prefill_qkv_post(std::int64_t idx, const float* qkv, const float* bias, int Hq, int Hkv, int D, int N,
                              int cap, const float* cos_sin, std::uint16_t* q_out, std::uint16_t* kc,
                              std::uint16_t* vc) {
  const int half = D / 2, heads = Hq + 2 * Hkv;
  const int i = int(idx % half);
  const int hh = int((idx / half) % heads);
  const std::int64_t t = idx / (std::int64_t(half) * heads);
  const float* x = qkv + t * std::int64_t(heads) * D + std::int64_t(hh) * D;
  float lo = x[i], hi = x[i + half];
  if (bias) {
    lo += bias[std::int64_t(hh) * D + i];
    hi += bias[std::int64_t(hh) * D + i + half];
  }
  const std::int64_t pos = N + t;
  if (hh < Hq + Hkv) {
    const float* cs = cos_sin + pos * D;
    const kvf::frontier::RopePair o = kvf::frontier::rope_rotate(lo, hi, cs[i], cs[half + i]);
    std::uint16_t* dst = hh < Hq ? q_out + (t * Hq + hh) * std::int64_t(D)
                                 : kc + (std::int64_t(hh - Hq) * cap + pos) * D;
    dst[i] = kvf::frontier::f32_to_bf16(o.lo);
    dst[i + half] = kvf::frontier::f32_to_bf16(o.hi);
  } else {
    std::uint16_t* dst = vc + (std::int64_t(hh - Hq - Hkv) * cap + pos) * D;
    dst[i] = kvf::frontier::f32_to_bf16(lo);
    dst[i + half] = kvf::frontier::f32_to_bf16(hi);
  }
}

// Causal attention of the chunk (prefill_attn_gpu.cu). One CTA per (query tile, kv head, KV split): a tile holds
// kPfRows query rows = kPfRows / G tokens x the G query heads of the kv head's group (row r: token
// tile * (kPfRows / G) + r / G, head hk * G + r % G), streams keys in tiles of kPfKeys, online softmax in fp32
// (base-2 exponent: scores carry scale * log2(e)). Row t sees keys 0 .. N + t (the prefix and the chunk up to itself).
inline constexpr int kPfRows = 32, kPfKeys = 32, kPfThreads = 128;
inline constexpr int kPfMaxSplits = 128;      // KV splits per tile at most
inline constexpr int kPfMinSplitKeys = 256;   // keys per split at least (8 key tiles)

struct PfRow {
  int t, hq;
};

// The tensor-core kernel (PfKernel::mma, sm_80+, the default): tiles of kPfMmaRows query rows in the same order (row
// r: token tile * (kPfMmaRows / G) + r / G, head hk * G + r % G), one warp per 16 rows, keys in tiles of kPfMmaKeys.
enum class PfKernel { cuda_core, mma };
inline constexpr PfKernel kPfDefaultKernel = PfKernel::mma;
inline constexpr int kPfMmaRows = 64, kPfMmaKeys = 64, kPfMmaWarps = kPfMmaRows / 16;
KVF_FHD int pf_rows_per_tile(PfKernel k) { return k == PfKernel::mma ? kPfMmaRows : kPfRows; }
KVF_FHD PfRow pf_row_of(PfKernel k, int tile, int r, int hk, int G) {
  const int tt = pf_rows_per_tile(k) / G;
  return {tile * tt + r / G, hk * G + r % G};
}
// The CUDA-core kernel's tiles.
KVF_FHD int pf_tile_tokens(int G) { return pf_rows_per_tile(PfKernel::cuda_core) / G; }
KVF_FHD PfRow pf_row(int tile, int r, int hk, int G) { return pf_row_of(PfKernel::cuda_core, tile, r, hk, G); }
// Byte offset of 16-byte chunk c (8 dims) of key row r in a [rows][D] bf16 tile of shared memory: chunk c ^ (r & 7)
// of the row, so the 8 rows one ldmatrix matrix reads (the same chunk column) fall on 8 different 16-byte bank groups.
KVF_FHD int pf_mma_chunk(int D, int r, int c) { return (r * (D / 8) + (c ^ (r & 7))) * 16; }
// The lane addresses of ldmatrix.x4 in the mma kernel (lane = 4 g + t; matrix lane >> 3 from the row its lane
// gives). K (B of S = Q K^T, not transposed): n-tile jn (keys 8 jn ..), k-steps 2 kp, 2 kp + 1 of the head dims:
// matrices (k-step 2 kp, dims 0-7), (2 kp, 8-15), (2 kp + 1, 0-7), (2 kp + 1, 8-15).
struct PfLdsm {
  int row, chunk;
};
KVF_FHD PfLdsm pf_mma_k_ldsm(int lane, int jn, int kp) { return {8 * jn + (lane & 7), 4 * kp + (lane >> 3)}; }
// V (B of O += P V, transposed): k-step kk (keys 16 kk ..), n-tiles 2 np, 2 np + 1 (dims 16 np ..): matrices
// (keys 0-7, n-tile 2 np), (keys 8-15, 2 np), (keys 0-7, 2 np + 1), (keys 8-15, 2 np + 1).
KVF_FHD PfLdsm pf_mma_v_ldsm(int lane, int kk, int np) {
  return {16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * np + (lane >> 4)};
}
// The same byte offsets (pf_mma_chunk of those rows and chunks) as a per-lane part, held in a register, plus a
// constant of the unrolled loops: chunk 8 a + b of a row r = R0 + r_l (R0 a multiple of 8) sits at
// R0 D 2 + 128 a + [r_l D 2 + 16 (b ^ (r & 7))], and b takes 2 values per lane for K, 4 for V. (The kernel kept
// one address per (n-tile, k-step) live otherwise: 254 registers and spills at D 128.)
KVF_FHD int pf_mma_k_lane(int D, int lane, int kp_odd) {
  const int r = lane & 7;
  return r * D * 2 + ((4 * kp_odd + (lane >> 3)) ^ r) * 16;
}
KVF_FHD int pf_mma_k_const(int D, int jn, int kp) { return 8 * jn * D * 2 + (kp >> 1) * 128; }
KVF_FHD int pf_mma_v_lane(int D, int lane, int np_low) {
  const int r = (lane & 7) + 8 * ((lane >> 3) & 1);
  return r * D * 2 + ((2 * np_low + (lane >> 4)) ^ (lane & 7)) * 16;
}
KVF_FHD int pf_mma_v_const(int D, int kk, int np) { return 16 * kk * D * 2 + (np >> 2) * 128; }

// Row t (chunk token) sees key position `key` (prefix 0..N-1, chunk N..N+T-1).
KVF_FHD bool pf_visible(int key, int N, int t) { return key <= N + t; }
// Keys a tile needs at all: up to its last token's position (exclusive end).
KVF_FHD int pf_tile_key_end(int tile, int G, int T, int N, PfKernel k = PfKernel::cuda_core) {
  const int last = (tile + 1) * (pf_rows_per_tile(k) / G);
  return N + (last < T ? last : T);
}
struct PfRange {
  int k0, k1;  // [k0, k1), possibly empty
};
// Keys of split s of `splits` over [0, kend): equal shares rounded up to whole key tiles (kPfKeys, kPfMmaKeys).
KVF_FHD PfRange pf_split_range(int kend, int splits, int s, int key_tile = kPfKeys) {
  const int share = (kend + splits - 1) / splits;
  const int chunk = (share + key_tile - 1) / key_tile * key_tile;
  const std::int64_t a = std::int64_t(s) * chunk;
  const int k0 = a < kend ? int(a) : kend;
  const int k1 = kend - k0 < chunk ? kend : k0 + chunk;
  return {k0, k1};
}
// Online softmax step of one row: running max m_old, the new tile's max. m_use is the offset the tile's exponents
// use (0 while the row has seen no visible key, so exp2(-inf - 0) = 0 instead of NaN); alpha rescales the running
// sum and output.
struct PfOnline {
  float m_new, alpha, m_use;
};
KVF_FHD PfOnline pf_online(float m_old, float tile_max) {
  const float m_new = m_old > tile_max ? m_old : tile_max;
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  return {m_new, exp2f(m_old - m_use), m_use};
}
// The tensor-core kernel's online-softmax step, one of a lane's two rows (i 0: row g, i 1: row g + 8) over one key
// tile, in two halves around the max over the row's 4 lanes (shuffles in the kernel). s[jn][2 i + e] is S of key
// kb + 8 jn + 2 t + e (the C fragment): masked (the split's end k1; causal for chunk token rt) and scaled in place;
// returns this lane's max.
template <int NJ>
KVF_FHD float pf_mma_mask_scale(float (&s)[NJ][4], int i, int kb, int t, int k1, int rt, int T, int N,
                                float scale_log2) {
  float mx = -INFINITY;
  for (int jn = 0; jn < NJ; ++jn)
    for (int e = 0; e < 2; ++e) {
      const int key = kb + 8 * jn + 2 * t + e;
      float& x = s[jn][2 * i + e];
      x = (key < k1 && rt < T && pf_visible(key, N, rt)) ? x * scale_log2 : -INFINITY;
      mx = mx > x ? mx : x;
    }
  return mx;
}
// With the row's max: P = 2^(S - m) in place of S, this lane's share of l and the row's accumulators rescaled
// (acc[nt][2 i], [2 i + 1]: the row's two output dims of n-tile nt in this lane).
template <int NJ, int NT>
KVF_FHD void pf_mma_softmax(float (&s)[NJ][4], float (&acc)[NT][4], int i, float row_max, float& m_run,
                            float& l_run) {
  const PfOnline o = pf_online(m_run, row_max);
  float sum = 0.f;
  for (int jn = 0; jn < NJ; ++jn)
    for (int e = 0; e < 2; ++e) sum += (s[jn][2 * i + e] = exp2f(s[jn][2 * i + e] - o.m_use));
  l_run = l_run * o.alpha + sum;
  m_run = o.m_new;
  for (int nt = 0; nt < NT; ++nt) {
    acc[nt][2 * i] *= o.alpha;
    acc[nt][2 * i + 1] *= o.alpha;
  }
}
// Merge of the KV splits of one output element: partial o [split][rows][D] (unnormalized), ml [split][rows][2]
// (running max, sum), rows = T * Hq, row = t * Hq + hq. Splits that saw no visible key have m = -inf, l = 0.
KVF_FHD float pf_merge(const float* o, const float* ml, int splits, std::int64_t rows, std::int64_t row, int D,
                       int d) {
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) {
    const float m = ml[(s * rows + row) * 2];
    mx = m > mx ? m : mx;
  }
  float num = 0, den = 0;
  for (int s = 0; s < splits; ++s) {
    const float m = ml[(s * rows + row) * 2], l = ml[(s * rows + row) * 2 + 1];
    const float wgt = m == -INFINITY ? 0.0f : exp2f(m - mx);
    den += l * wgt;
    num += o[(s * rows + row) * D + d] * wgt;
  }
  return num / den;
}
// Launch geometry: tiles = ceil(T / tile_tokens) (grid x; tile_tokens = the kernel's rows per tile / G), Hkv (grid
// y), splits (grid z). KV splits only when the tiles and heads alone give fewer than two CTAs per SM; each split
// keeps at least kPfMinSplitKeys keys. The kernel: tensor cores (mma) unless asked otherwise; the CUDA-core kernel
// stays for comparison.
struct PfPlan {
  int tile_tokens = 0, tiles = 0, splits = 1;
  PfKernel kernel = kPfDefaultKernel;
};
inline PfPlan pf_plan(int T, int N, int Hkv, int G, int sm_count, PfKernel kernel = kPfDefaultKernel) {
  PfPlan p;
  p.kernel = kernel;
  p.tile_tokens = pf_rows_per_tile(p.kernel) / G;
  p.tiles = (T + p.tile_tokens - 1) / p.tile_tokens;
  const std::int64_t ctas = std::int64_t(p.tiles) * Hkv, want = 2 * std::int64_t(sm_count > 0 ? sm_count : 1);
  if (ctas < want) {
    std::int64_t s = (want + ctas - 1) / ctas;
    const std::int64_t by_keys = std::int64_t(N + T) / kPfMinSplitKeys;
    s = s < by_keys ? s : by_keys;
    s = s < kPfMaxSplits ? s : kPfMaxSplits;
    p.splits = int(s < 1 ? 1 : s);
  }
  return p;
}
// Floats of the split workspace: partial outputs and (max, sum) pairs; 0 without splits.
inline std::int64_t pf_workspace_floats(const PfPlan& p, int T, int Hq, int D) {
  return p.splits > 1 ? std::int64_t(p.splits) * T * Hq * (D + 2) : 0;
}

}  // namespace kvf::decode::elems
