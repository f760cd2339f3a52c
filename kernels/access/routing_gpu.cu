// GPU routing of the access study: scores, then an exact top-k per selection list that follows the CPU
// twin's rule (highest score first, ties to the lower index; sink and latest forced), emitted in
// ascending logical order and translated to physical entries through the page map, so the attention
// kernel can consume the list directly (no host round trip).
//
// block arm:  score[list][j] = sum over the list's kv heads h of qsum_h . centroid[b][h][j]
// token arm:  score[list][t] = sum over the list's kv heads h of qsum_h . K[b][t][h]
//             (low-rank proxy: (P_h^T qsum_h) . Kp_h[t], Kp = K P_h projected at "prefill")
// (qsum_h = sum of the query heads of kv head h, fp32; per_head lists hold one kv head, shared lists all.)
// top-k: one CTA per list finds the k-th largest key by a bitwise search on order-preserving 32-bit
// keys (32 counting passes), then emits keys > T and the first (k - count(> T)) keys == T in index
// order through block-wide prefix sums.
// Placement: scores and the top-k are in logical order (the tie rule is the CPU twin's); each emitted
// logical candidate i of `unit` tokens is written as pm.entries_per(unit) physical entries
// pm.phys_entry(b, i, unit, r), the same translation as kvf::access::place() on the host.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "access_gpu.hpp"

namespace kvf::access::gpu {
namespace {

constexpr int kScoreThreads = 256;
constexpr int kTopkThreads = 512;

__device__ __forceinline__ float to_f32(std::uint16_t h, bool bf16) {
  return bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

// qsum[h][d] for every kv head of batch b into shared memory (hkv * d floats).
__device__ void load_qsum(const std::uint16_t* q, std::uint32_t b, std::uint32_t hq, std::uint32_t hkv,
                          std::uint32_t d, bool bf16, float* qs) {
  const std::uint32_t G = hq / hkv;
  for (std::uint32_t e = threadIdx.x; e < hkv * d; e += blockDim.x) {
    const std::uint32_t h = e / d, j = e % d;
    float a = 0.0f;
    for (std::uint32_t g = 0; g < G; ++g) a += to_f32(q[(static_cast<std::uint64_t>(b) * hq + h * G + g) * d + j], bf16);
    qs[e] = a;
  }
  __syncthreads();
}

// One warp per (list, block j); lanes stride the d floats of the centroid row with float4 loads.
__global__ void score_blocks_kernel(const std::uint16_t* __restrict__ q, const float* __restrict__ cent,
                                    std::uint32_t hq, std::uint32_t hkv, std::uint32_t d, std::uint32_t nb,
                                    bool shared, bool bf16, float* __restrict__ scores) {
  extern __shared__ float qs[];
  const std::uint32_t b = blockIdx.z, list_h = blockIdx.y;  // list_h: kv head (per_head) or 0 (shared)
  load_qsum(q, b, hq, hkv, d, bf16, qs);
  const std::uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::uint32_t j = blockIdx.x * (kScoreThreads / 32) + warp;
  if (j >= nb) return;  // whole warp leaves together (j is warp-uniform); no barrier follows
  const std::uint32_t h0 = shared ? 0 : list_h, h1 = shared ? hkv : list_h + 1;
  float a = 0.0f;
  for (std::uint32_t h = h0; h < h1; ++h) {
    const float4* row = reinterpret_cast<const float4*>(cent + ((static_cast<std::uint64_t>(b) * hkv + h) * nb + j) * d);
    for (std::uint32_t x = lane; x < d / 4; x += 32) {
      const float4 c = __ldg(row + x);
      const float* qq = qs + h * d + 4 * x;
      a = fmaf(c.x, qq[0], fmaf(c.y, qq[1], fmaf(c.z, qq[2], fmaf(c.w, qq[3], a))));
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
  const std::uint64_t list = shared ? b : static_cast<std::uint64_t>(b) * hkv + list_h;
  if (lane == 0) scores[list * nb + j] = a;
}

// Lane groups of d/8 lanes per token (16-byte loads of the 16-bit key row), grid-stride over tokens.
template <int D>
__global__ void __launch_bounds__(kScoreThreads) score_tokens_kernel(const std::uint16_t* __restrict__ q,
                                                                     const std::uint16_t* __restrict__ k,
                                                                     std::uint32_t hq, std::uint32_t hkv,
                                                                     std::uint32_t ctx, KvLayout kl, bool shared,
                                                                     bool bf16, PageMap pm, float* __restrict__ scores) {
  extern __shared__ float qs[];
  constexpr int LT = attn_lanes_per_token(D);
  constexpr int TPB = kScoreThreads / LT;  // tokens per CTA step
  const std::uint32_t b = blockIdx.z, list_h = blockIdx.y;
  load_qsum(q, b, hq, hkv, D, bf16, qs);
  const int grp = threadIdx.x / LT, sub = threadIdx.x % LT;
  const std::uint32_t h0 = shared ? 0 : list_h, h1 = shared ? hkv : list_h + 1;
  const std::uint64_t list = shared ? b : static_cast<std::uint64_t>(b) * hkv + list_h;
  // All lanes run the same number of steps (the shuffles need the whole warp).
  for (std::uint32_t base = blockIdx.x * TPB; base < ctx; base += gridDim.x * TPB) {
    const std::uint32_t t = base + grp;  // logical token
    float a = 0.0f;
    if (t < ctx) {
      const std::uint64_t pt = pm.phys_token(b, t);
      for (std::uint32_t h = h0; h < h1; ++h) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(k + kl.row(b, pt, h, ctx)) + sub);
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
        const float* qq = qs + h * D + sub * 8;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          a = fmaf(to_f32(static_cast<std::uint16_t>(w[i] & 0xFFFFu), bf16), qq[2 * i], a);
          a = fmaf(to_f32(static_cast<std::uint16_t>(w[i] >> 16), bf16), qq[2 * i + 1], a);
        }
      }
    }
#pragma unroll
    for (int off = LT / 2; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    if (t < ctx && sub == 0) scores[list * ctx + t] = a;
  }
}

// Low-rank proxy: qp[h][c] = sum_i qsum_h[i] P_h[i][c] in shared memory, then one thread per logical
// token (grid-stride) reads its r fp32 projected-key values per kv head with 16-byte loads.
__global__ void __launch_bounds__(kScoreThreads) score_lowrank_kernel(const std::uint16_t* __restrict__ q,
                                                                      const float* __restrict__ basis,
                                                                      const float* __restrict__ pk, std::uint32_t hq,
                                                                      std::uint32_t hkv, std::uint32_t d,
                                                                      std::uint32_t ctx, std::uint32_t r, bool shared,
                                                                      bool bf16, float* __restrict__ scores) {
  extern __shared__ float qs[];  // [hkv][d] query sums, then [hkv][r] projected
  float* qp = qs + hkv * d;
  const std::uint32_t b = blockIdx.z, list_h = blockIdx.y;
  load_qsum(q, b, hq, hkv, d, bf16, qs);
  const std::uint32_t h0 = shared ? 0 : list_h, h1 = shared ? hkv : list_h + 1;
  for (std::uint32_t e = threadIdx.x; e < (h1 - h0) * r; e += blockDim.x) {
    const std::uint32_t h = h0 + e / r, c = e % r;
    const float* P = basis + (static_cast<std::uint64_t>(b) * hkv + h) * d * r;
    float a = 0.0f;
    for (std::uint32_t i = 0; i < d; ++i) a = fmaf(qs[h * d + i], __ldg(P + static_cast<std::uint64_t>(i) * r + c), a);
    qp[e] = a;
  }
  __syncthreads();
  const std::uint64_t list = shared ? b : static_cast<std::uint64_t>(b) * hkv + list_h;
  for (std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < ctx; t += gridDim.x * blockDim.x) {
    float a = 0.0f;
    for (std::uint32_t h = h0; h < h1; ++h) {
      const float4* row = reinterpret_cast<const float4*>(pk + ((static_cast<std::uint64_t>(b) * hkv + h) * ctx + t) * r);
      const float* qq = qp + (h - h0) * r;
      for (std::uint32_t x = 0; x < r / 4; ++x) {
        const float4 v = __ldg(row + x);
        a = fmaf(v.x, qq[4 * x], fmaf(v.y, qq[4 * x + 1], fmaf(v.z, qq[4 * x + 2], fmaf(v.w, qq[4 * x + 3], a))));
      }
    }
    scores[list * ctx + t] = a;
  }
}

// Block-wide sum of one int per thread (all threads must call).
__device__ int block_sum(int v, int* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  int total = 0;
  for (int w = 0; w < kTopkThreads / 32; ++w) total += red[w];
  return total;
}

// Block-wide exclusive prefix sum of a 0/1 flag; *total receives the sum (all threads must call).
__device__ int block_excl_scan(int v, int* red, int* total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int x = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, off);
    if (lane >= off) x += y;
  }
  __syncthreads();
  if (lane == 31) red[warp] = x;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < kTopkThreads / 32; ++w) {
    if (w < warp) before += red[w];
    all += red[w];
  }
  *total = all;
  return before + x - v;
}

// Logical candidate i (of `unit` tokens) at logical list position pos: its pm.entries_per(unit) physical
// entries, batch b.
__device__ __forceinline__ void emit(std::uint32_t* o, std::uint32_t pos, std::uint32_t i, std::uint32_t b,
                                     std::uint32_t unit, const PageMap& pm) {
  const std::uint32_t per = pm.entries_per(unit);
  for (std::uint32_t r = 0; r < per; ++r) o[static_cast<std::uint64_t>(pos) * per + r] = pm.phys_entry(b, i, unit, r);
}

// One CTA per list: out[list] = [lo forced entries 0..nlo-1] + top kp of scores[lo_c, hi_c) in index
// order + [forced entries hi_c..n-1], each candidate as pm.entries_per(unit) physical entries.
// Logical entries per list: nlo + kp + (n - hi_c); list l belongs to batch l / lists_per_batch.
__global__ void __launch_bounds__(kTopkThreads, 1) topk_kernel(const float* __restrict__ scores, std::uint32_t n,
                                                            std::uint32_t lo_c, std::uint32_t hi_c, std::uint32_t kp,
                                                            std::uint32_t unit, std::uint32_t lists_per_batch,
                                                            PageMap pm, std::uint32_t* __restrict__ out) {
  __shared__ int red[kTopkThreads / 32];
  const std::uint64_t list = blockIdx.x;
  const std::uint32_t b = blockIdx.x / lists_per_batch;
  const std::uint64_t n_entries = static_cast<std::uint64_t>(lo_c + kp + (n - hi_c)) * pm.entries_per(unit);
  const float* s = scores + list * n;
  std::uint32_t* o = out + list * n_entries;
  for (std::uint32_t i = threadIdx.x; i < lo_c; i += blockDim.x) emit(o, i, i, b, unit, pm);
  for (std::uint32_t i = hi_c + threadIdx.x; i < n; i += blockDim.x) emit(o, lo_c + kp + (i - hi_c), i, b, unit, pm);
  if (kp == 0) return;
  // T = the kp-th largest key among the candidates.
  std::uint32_t T = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const std::uint32_t cand = T | (1u << bit);
    int c = 0;
    for (std::uint32_t i = lo_c + threadIdx.x; i < hi_c; i += blockDim.x) c += order_key(s[i]) >= cand;
    if (block_sum(c, red) >= static_cast<int>(kp)) T = cand;
  }
  int gt = 0;
  for (std::uint32_t i = lo_c + threadIdx.x; i < hi_c; i += blockDim.x) gt += order_key(s[i]) > T;
  const int need_eq = static_cast<int>(kp) - block_sum(gt, red);
  // Ordered emission, one chunk of blockDim candidates at a time.
  int eq_base = 0, out_base = 0;
  for (std::uint32_t c0 = lo_c; c0 < hi_c; c0 += blockDim.x) {
    const std::uint32_t i = c0 + threadIdx.x;
    const std::uint32_t key = i < hi_c ? order_key(s[i]) : 0;
    const int is_eq = (i < hi_c && key == T) ? 1 : 0;
    int eq_total = 0;
    const int eq_rank = eq_base + block_excl_scan(is_eq, red, &eq_total);
    const int take = (i < hi_c && (key > T || (is_eq && eq_rank < need_eq))) ? 1 : 0;
    int take_total = 0;
    const int pos = out_base + block_excl_scan(take, red, &take_total);
    if (take) emit(o, lo_c + pos, i, b, unit, pm);
    eq_base += eq_total;
    out_base += take_total;
  }
}

void check(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

void route_blocks(const AttnDims& s, const void* q, const float* centroids, std::uint32_t block,
                  std::uint32_t k_blocks, bool shared, const PageMap& pm, float* scores, std::uint32_t* idx,
                  cudaStream_t st) {
  const std::uint32_t nb = s.ctx / block;
  if (k_blocks < 2 || k_blocks > nb) throw std::invalid_argument("gpu::route_blocks: 2 <= k_blocks <= ctx/block");
  const dim3 grid((nb + kScoreThreads / 32 - 1) / (kScoreThreads / 32), shared ? 1 : s.hkv, s.batch);
  const std::size_t smem = static_cast<std::size_t>(s.hkv) * s.d * sizeof(float);
  score_blocks_kernel<<<grid, kScoreThreads, smem, st>>>(static_cast<const std::uint16_t*>(q), centroids, s.hq, s.hkv,
                                                          s.d, nb, shared, s.dtype == DType::bf16, scores);
  check("score_blocks_kernel launch");
  const std::uint32_t lists = shared ? s.batch : s.batch * s.hkv;
  topk_kernel<<<lists, kTopkThreads, 0, st>>>(scores, nb, 1, nb - 1, k_blocks - 2, block, shared ? 1 : s.hkv, pm, idx);
  check("topk_kernel launch");
}

void route_tokens(const AttnDims& s, const void* q, const void* k, std::uint32_t block, std::uint32_t k_blocks,
                  bool shared, const PageMap& pm, float* scores, std::uint32_t* idx, int sm_count, cudaStream_t st) {
  const std::uint32_t budget = k_blocks * block;
  if (k_blocks < 2 || budget > s.ctx) throw std::invalid_argument("gpu::route_tokens: 2 blocks <= budget <= ctx");
  const std::uint32_t lists_y = shared ? 1 : s.hkv;
  const std::uint32_t tpb = kScoreThreads / static_cast<std::uint32_t>(attn_lanes_per_token(static_cast<int>(s.d)));
  std::uint32_t gx = (s.ctx + tpb - 1) / tpb;
  const std::uint32_t cap = static_cast<std::uint32_t>(sm_count > 0 ? sm_count : 1) * 8 / (lists_y * s.batch) + 1;
  if (gx > cap) gx = cap;
  const dim3 grid(gx, lists_y, s.batch);
  const std::size_t smem = static_cast<std::size_t>(s.hkv) * s.d * sizeof(float);
  const auto* q16 = static_cast<const std::uint16_t*>(q);
  const auto* k16 = static_cast<const std::uint16_t*>(k);
  const bool bf16 = s.dtype == DType::bf16;
  if (s.d == 128)
    score_tokens_kernel<128><<<grid, kScoreThreads, smem, st>>>(q16, k16, s.hq, s.hkv, s.ctx, make_kv_layout(s.layout, s.hkv, s.d, s.page), shared, bf16, pm, scores);
  else if (s.d == 64)
    score_tokens_kernel<64><<<grid, kScoreThreads, smem, st>>>(q16, k16, s.hq, s.hkv, s.ctx, make_kv_layout(s.layout, s.hkv, s.d, s.page), shared, bf16, pm, scores);
  else
    throw std::invalid_argument("gpu::route_tokens: head dim must be 64 or 128");
  check("score_tokens_kernel launch");
  const std::uint32_t lists = shared ? s.batch : s.batch * s.hkv;
  topk_kernel<<<lists, kTopkThreads, 0, st>>>(scores, s.ctx, block, s.ctx - block, budget - 2 * block, 1,
                                              shared ? 1 : s.hkv, pm, idx);
  check("topk_kernel launch");
}

void route_tokens_lowrank(const AttnDims& s, const void* q, const float* basis, const float* pkeys, std::uint32_t r,
                          std::uint32_t block, std::uint32_t k_blocks, bool shared, const PageMap& pm, float* scores,
                          std::uint32_t* idx, int sm_count, cudaStream_t st) {
  const std::uint32_t budget = k_blocks * block;
  if (k_blocks < 2 || budget > s.ctx) throw std::invalid_argument("gpu::route_tokens_lowrank: 2 blocks <= budget <= ctx");
  if (!(r == 8 || r == 16 || r == 32 || r == 64)) throw std::invalid_argument("gpu::route_tokens_lowrank: r 8/16/32/64");
  const std::uint32_t lists_y = shared ? 1 : s.hkv;
  std::uint32_t gx = (s.ctx + kScoreThreads - 1) / kScoreThreads;
  const std::uint32_t cap = static_cast<std::uint32_t>(sm_count > 0 ? sm_count : 1) * 8 / (lists_y * s.batch) + 1;
  if (gx > cap) gx = cap;
  const dim3 grid(gx, lists_y, s.batch);
  const std::size_t smem = static_cast<std::size_t>(s.hkv) * (s.d + r) * sizeof(float);
  score_lowrank_kernel<<<grid, kScoreThreads, smem, st>>>(static_cast<const std::uint16_t*>(q), basis, pkeys, s.hq,
                                                           s.hkv, s.d, s.ctx, r, shared, s.dtype == DType::bf16, scores);
  check("score_lowrank_kernel launch");
  const std::uint32_t lists = shared ? s.batch : s.batch * s.hkv;
  topk_kernel<<<lists, kTopkThreads, 0, st>>>(scores, s.ctx, block, s.ctx - block, budget - 2 * block, 1,
                                              shared ? 1 : s.hkv, pm, idx);
  check("topk_kernel launch");
}

}  // namespace kvf::access::gpu
