// GPU routing of the access study: scores, then an exact top-k per selection list that follows the CPU
// twin's rule (highest score first, ties to the lower index; sink and latest forced), emitted in
// ascending logical order and translated to physical entries through the page map, so the attention
// kernel can consume the list directly (no host round trip).
//
// block arm:  score[list][j] = sum over the list's kv heads h of qsum_h . centroid[b][h][j]
// token arm:  score[list][t] = sum over the list's kv heads h of qsum_h . K[b][t][h]
//             (low-rank proxy: (P_h^T qsum_h) . Kp_h[t], Kp = K P_h projected at "prefill")
// (qsum_h = sum of the query heads of kv head h, fp32; per_head lists hold one kv head, shared lists all.)
// top-k: a multi-CTA radix select on order-preserving 32-bit keys (order_key): three digit passes
// (11/11/10 bits) find T, the k-th largest key, then every CTA counts keys > T and == T of its slice and
// emits keys > T and the first (k - count(> T)) keys == T in index order (counts of the CTAs before it
// + block scans). 5 launches, ~2 CTAs per SM over all lists; details above topk_pass_kernel.
// (It replaced one CTA per list with 32 serial bit passes: 842 us at 64K on the H100.)
// Placement: scores and the top-k are in logical order (the tie rule is the CPU twin's); each emitted
// logical candidate i of `unit` tokens is written as pm.entries_per(unit) physical entries
// pm.phys_entry(b, i, unit, r), the same translation as kvf::access::place() on the host.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <stdexcept>
#include <string>

#include "access_gpu.hpp"

namespace kvf::access::gpu {
namespace {

constexpr int kScoreThreads = 256;

__device__ __forceinline__ float to_f32(std::uint16_t h, bool bf16) {
  return bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

// qsum[h][d] for every kv head of batch b into shared memory (hkv * d floats).
__device__ __forceinline__ void load_qsum(const std::uint16_t* q, std::uint32_t b, std::uint32_t hq, std::uint32_t hkv,
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
__global__ void __launch_bounds__(kScoreThreads, 4) score_lowrank_kernel(const std::uint16_t* __restrict__ q,
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

// Logical candidate i (of `unit` tokens) at logical list position pos: its pm.entries_per(unit) physical
// entries, batch b.
__device__ __forceinline__ void emit(std::uint32_t* o, std::uint32_t pos, std::uint32_t i, std::uint32_t b,
                                     std::uint32_t unit, const PageMap& pm) {
  const std::uint32_t per = pm.entries_per(unit);
  for (std::uint32_t r = 0; r < per; ++r) o[static_cast<std::uint64_t>(pos) * per + r] = pm.phys_entry(b, i, unit, r);
}

// ---------------------------------------------------------------------------------------------------
// Top-k: multi-CTA radix select (math and its host emulation: access_math.hpp, test_topk_radix.cpp).
// Grid (ctas, lists); CTA c of a list owns slice c of make_topk_grid. Launches on the caller's stream:
//   topk_pass_kernel<0..2>: shared histogram of the digit of the slice's candidates matching the prefix,
//     added to the list's global histogram; the last CTA (threadfence + ticket) scans it (descending
//     digits, one cub::BlockScan), fixes the digit and the remaining need, and zeroes histogram + ticket.
//   topk_count_kernel: per CTA, candidates > T and == T of its slice.
//   topk_emit_kernel: forced entries; per CTA the counts of the CTAs before it, then chunk by chunk a
//     block scan of packed (gt, eq) counts places each taken candidate at G + min(E, need_eq).
// Keys: 4 consecutive scores per thread per chunk, one 16-byte load where the list is 16-byte aligned.
// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ void load_keys(const float* s, bool vec, std::uint32_t i, std::uint32_t n,
                                          std::uint32_t b, std::uint32_t e, std::uint32_t (&k)[kTopkItems],
                                          bool (&ok)[kTopkItems]) {
  if (vec && i + kTopkItems <= n) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(s + i));
    k[0] = order_key(v.x);
    k[1] = order_key(v.y);
    k[2] = order_key(v.z);
    k[3] = order_key(v.w);
#pragma unroll
    for (int j = 0; j < kTopkItems; ++j) ok[j] = i + j >= b && i + j < e;
  } else {
#pragma unroll
    for (int j = 0; j < kTopkItems; ++j) {
      ok[j] = i + j >= b && i + j < e;
      k[j] = ok[j] ? order_key(__ldg(s + i + j)) : 0u;
    }
  }
}

__device__ __forceinline__ bool aligned16(const float* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

template <int PASS>
__global__ void __launch_bounds__(kTopkThreads) topk_pass_kernel(const float* __restrict__ scores, std::uint32_t n,
                                                                 std::uint32_t lo, std::uint32_t hi, std::uint32_t kp,
                                                                 TopkGrid g, std::uint32_t* __restrict__ scratch) {
  constexpr std::uint32_t NB = topk_bins(PASS);
  constexpr int BPT = static_cast<int>(NB) / kTopkThreads;  // bins per thread in the last CTA's scan
  static_assert(NB % kTopkThreads == 0 && NB <= kTopkMaxBins, "bins");
  using Scan = cub::BlockScan<std::uint32_t, kTopkThreads>;
  __shared__ std::uint32_t hist[NB];
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ bool last;
  const std::uint32_t list = blockIdx.y, c = blockIdx.x;
  std::uint32_t* st = scratch + static_cast<std::uint64_t>(list) * kTopkStateWords;
  const float* s = scores + static_cast<std::uint64_t>(list) * n;
  const std::uint32_t prefix = PASS == 0 ? 0u : st[kTopkPrefix];
  const std::uint32_t need = PASS == 0 ? kp : st[kTopkNeed];
  for (std::uint32_t d = threadIdx.x; d < NB; d += kTopkThreads) hist[d] = 0;
  __syncthreads();
  const std::uint32_t b = g.begin(c, lo), e = g.end(c, hi);
  const bool vec = aligned16(s);
  for (std::uint32_t i = (b & ~3u) + kTopkItems * threadIdx.x; i < e; i += kTopkChunk) {
    std::uint32_t k[kTopkItems];
    bool ok[kTopkItems];
    load_keys(s, vec, i, n, b, e, k, ok);
#pragma unroll
    for (int j = 0; j < kTopkItems; ++j)
      if (ok[j] && topk_in_prefix(k[j], prefix, PASS)) atomicAdd(&hist[topk_digit(k[j], PASS)], 1u);
  }
  __syncthreads();
  for (std::uint32_t d = threadIdx.x; d < NB; d += kTopkThreads) {
    const std::uint32_t v = hist[d];
    if (v) atomicAdd(st + d, v);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(st + kTopkTicket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Thread t holds bins NB-1 - (t*BPT + j): descending digits, so an exclusive scan gives `above`.
  std::uint32_t h[BPT], sum = 0;
#pragma unroll
  for (int j = 0; j < BPT; ++j) {
    h[j] = __ldcg(st + (NB - 1u - (threadIdx.x * BPT + j)));
    sum += h[j];
  }
  std::uint32_t above;
  Scan(scan_tmp).ExclusiveSum(sum, above);
#pragma unroll
  for (int j = 0; j < BPT; ++j) {
    const std::uint32_t d = NB - 1u - (threadIdx.x * BPT + j);
    if (topk_pick_digit(above, h[j], need)) {
      st[kTopkPrefix] = prefix | (d << topk_digit_shift(PASS));
      st[kTopkNeed] = need - above;
    }
    above += h[j];
    st[d] = 0;
  }
  if (threadIdx.x == 0) st[kTopkTicket] = 0;
}

__global__ void __launch_bounds__(kTopkThreads) topk_count_kernel(const float* __restrict__ scores, std::uint32_t n,
                                                                  std::uint32_t lo, std::uint32_t hi, TopkGrid g,
                                                                  const std::uint32_t* __restrict__ scratch,
                                                                  std::uint32_t* __restrict__ counts) {
  using Reduce = cub::BlockReduce<unsigned long long, kTopkThreads>;
  __shared__ typename Reduce::TempStorage red_tmp;
  const std::uint32_t list = blockIdx.y, c = blockIdx.x;
  const std::uint32_t T = scratch[static_cast<std::uint64_t>(list) * kTopkStateWords + kTopkPrefix];
  const float* s = scores + static_cast<std::uint64_t>(list) * n;
  const std::uint32_t b = g.begin(c, lo), e = g.end(c, hi);
  const bool vec = aligned16(s);
  std::uint32_t gt = 0, eq = 0;
  for (std::uint32_t i = (b & ~3u) + kTopkItems * threadIdx.x; i < e; i += kTopkChunk) {
    std::uint32_t k[kTopkItems];
    bool ok[kTopkItems];
    load_keys(s, vec, i, n, b, e, k, ok);
#pragma unroll
    for (int j = 0; j < kTopkItems; ++j) {
      gt += (ok[j] && k[j] > T) ? 1u : 0u;
      eq += (ok[j] && k[j] == T) ? 1u : 0u;
    }
  }
  const unsigned long long tot = Reduce(red_tmp).Sum(gt | (static_cast<unsigned long long>(eq) << 32));
  if (threadIdx.x == 0) {
    std::uint32_t* o = counts + (static_cast<std::uint64_t>(list) * g.ctas + c) * 2;
    o[0] = static_cast<std::uint32_t>(tot);
    o[1] = static_cast<std::uint32_t>(tot >> 32);
  }
}

// out[list] = [lo forced entries 0..lo-1] + top kp of scores[lo, hi) in index order + [forced entries
// hi..n-1], each candidate as pm.entries_per(unit) physical entries; list l belongs to batch
// l / lists_per_batch. kp == 0: forced entries only (no top-k launch ran before).
__global__ void __launch_bounds__(kTopkThreads) topk_emit_kernel(const float* __restrict__ scores, std::uint32_t n,
                                                                 std::uint32_t lo, std::uint32_t hi, std::uint32_t kp,
                                                                 TopkGrid g, std::uint32_t unit,
                                                                 std::uint32_t lists_per_batch, PageMap pm,
                                                                 const std::uint32_t* __restrict__ scratch,
                                                                 const std::uint32_t* __restrict__ counts,
                                                                 std::uint32_t* __restrict__ out) {
  using Reduce = cub::BlockReduce<unsigned long long, kTopkThreads>;
  using Scan = cub::BlockScan<std::uint32_t, kTopkThreads>;
  __shared__ union {
    typename Reduce::TempStorage red;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ unsigned long long before_sh;
  const std::uint32_t list = blockIdx.y, c = blockIdx.x;
  const std::uint32_t b = list / lists_per_batch;
  const std::uint64_t n_entries = static_cast<std::uint64_t>(lo + kp + (n - hi)) * pm.entries_per(unit);
  std::uint32_t* o = out + list * n_entries;
  const std::uint32_t stride = gridDim.x * kTopkThreads;
  for (std::uint32_t i = c * kTopkThreads + threadIdx.x; i < lo; i += stride) emit(o, i, i, b, unit, pm);
  for (std::uint32_t i = hi + c * kTopkThreads + threadIdx.x; i < n; i += stride)
    emit(o, lo + kp + (i - hi), i, b, unit, pm);
  if (kp == 0) return;
  const std::uint32_t* st = scratch + static_cast<std::uint64_t>(list) * kTopkStateWords;
  const std::uint32_t T = st[kTopkPrefix], need_eq = st[kTopkNeed];
  // Candidates > T (low word) and == T (high word) in the slices before this CTA's.
  const std::uint32_t* cnt = counts + static_cast<std::uint64_t>(list) * g.ctas * 2;
  unsigned long long mine = 0;
  for (std::uint32_t x = threadIdx.x; x < c; x += kTopkThreads)
    mine += cnt[2 * x] | (static_cast<unsigned long long>(cnt[2 * x + 1]) << 32);
  const unsigned long long bef = Reduce(tmp.red).Sum(mine);
  if (threadIdx.x == 0) before_sh = bef;
  __syncthreads();
  std::uint32_t G = static_cast<std::uint32_t>(before_sh), E = static_cast<std::uint32_t>(before_sh >> 32);
  const float* s = scores + static_cast<std::uint64_t>(list) * n;
  const std::uint32_t lb = g.begin(c, lo), le = g.end(c, hi);
  const bool vec = aligned16(s);
  // Block-uniform loop (every thread reaches the scan); stops once all kp are placed.
  for (std::uint32_t base = lb & ~3u; base < le && topk_out_pos(G, E, need_eq) < kp; base += kTopkChunk) {
    const std::uint32_t i = base + kTopkItems * threadIdx.x;
    std::uint32_t k[kTopkItems] = {0u, 0u, 0u, 0u};
    bool ok[kTopkItems] = {false, false, false, false};
    if (i < le) load_keys(s, vec, i, n, lb, le, k, ok);
    std::uint32_t mg = 0, me = 0;
#pragma unroll
    for (int j = 0; j < kTopkItems; ++j) {
      mg += (ok[j] && k[j] > T) ? 1u : 0u;
      me += (ok[j] && k[j] == T) ? 1u : 0u;
    }
    std::uint32_t excl, agg;  // (gt | eq << 16): a chunk holds kTopkChunk < 2^16 keys
    Scan(tmp.scan).ExclusiveSum(mg | (me << 16), excl, agg);
    std::uint32_t Gi = G + (excl & 0xFFFFu), Ei = E + (excl >> 16);
#pragma unroll
    for (int j = 0; j < kTopkItems; ++j) {
      if (!ok[j] || k[j] < T) continue;
      if (topk_taken(k[j], T, Ei, need_eq)) emit(o, lo + topk_out_pos(Gi, Ei, need_eq), i + j, b, unit, pm);
      if (k[j] > T) ++Gi;
      else ++Ei;
    }
    G += agg & 0xFFFFu;
    E += agg >> 16;
    __syncthreads();  // tmp.scan is reused by the next chunk
  }
}

void check(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

TopkGrid topk_grid(std::uint32_t lo, std::uint32_t hi, std::uint32_t kp, std::uint32_t lists, int sm_count) {
  return kp ? make_topk_grid(lo, hi, lists, static_cast<std::uint32_t>(sm_count > 0 ? sm_count : 1)) : TopkGrid{};
}
std::size_t topk_scratch_bytes(std::uint32_t lists, int sm_count) {
  return topk_scratch_words(lists, static_cast<std::uint32_t>(sm_count > 0 ? sm_count : 1)) * 4;
}

void topk_select(const float* scores, std::uint32_t n, std::uint32_t lo, std::uint32_t hi, std::uint32_t kp,
                 std::uint32_t unit, std::uint32_t lists, std::uint32_t lists_per_batch, const PageMap& pm,
                 std::uint32_t* scratch, int sm_count, std::uint32_t* out, cudaStream_t st) {
  if (!(lo <= hi && hi <= n) || kp > hi - lo) throw std::invalid_argument("gpu top-k: needs lo <= hi <= n, kp <= hi - lo");
  if (kp && !scratch) throw std::invalid_argument("gpu top-k: no scratch (topk_scratch_bytes)");
  if (lists == 0 || lists > 65535) throw std::invalid_argument("gpu top-k: 1 to 65535 lists (grid y)");
  const TopkGrid g = topk_grid(lo, hi, kp, lists, sm_count);
  const dim3 grid(g.ctas, lists);
  std::uint32_t* counts = scratch ? scratch + static_cast<std::uint64_t>(lists) * kTopkStateWords : nullptr;
  if (kp) {
    topk_pass_kernel<0><<<grid, kTopkThreads, 0, st>>>(scores, n, lo, hi, kp, g, scratch);
    check("topk_pass_kernel<0> launch");
    topk_pass_kernel<1><<<grid, kTopkThreads, 0, st>>>(scores, n, lo, hi, kp, g, scratch);
    check("topk_pass_kernel<1> launch");
    topk_pass_kernel<2><<<grid, kTopkThreads, 0, st>>>(scores, n, lo, hi, kp, g, scratch);
    check("topk_pass_kernel<2> launch");
    topk_count_kernel<<<grid, kTopkThreads, 0, st>>>(scores, n, lo, hi, g, scratch, counts);
    check("topk_count_kernel launch");
  }
  topk_emit_kernel<<<grid, kTopkThreads, 0, st>>>(scores, n, lo, hi, kp, g, unit, lists_per_batch, pm, scratch, counts,
                                                  out);
  check("topk_emit_kernel launch");
}


void route_blocks(const AttnDims& s, const void* q, const float* centroids, std::uint32_t block,
                  std::uint32_t k_blocks, bool shared, const PageMap& pm, float* scores, std::uint32_t* idx,
                  std::uint32_t* topk_scratch, int sm_count, cudaStream_t st) {
  const std::uint32_t nb = s.ctx / block;
  if (k_blocks < 2 || k_blocks > nb) throw std::invalid_argument("gpu::route_blocks: 2 <= k_blocks <= ctx/block");
  const dim3 grid((nb + kScoreThreads / 32 - 1) / (kScoreThreads / 32), shared ? 1 : s.hkv, s.batch);
  const std::size_t smem = static_cast<std::size_t>(s.hkv) * s.d * sizeof(float);
  score_blocks_kernel<<<grid, kScoreThreads, smem, st>>>(static_cast<const std::uint16_t*>(q), centroids, s.hq, s.hkv,
                                                          s.d, nb, shared, s.dtype == DType::bf16, scores);
  check("score_blocks_kernel launch");
  const std::uint32_t lists = shared ? s.batch : s.batch * s.hkv;
  topk_select(scores, nb, 1, nb - 1, k_blocks - 2, block, lists, shared ? 1 : s.hkv, pm, topk_scratch, sm_count, idx, st);
}

void route_tokens(const AttnDims& s, const void* q, const void* k, std::uint32_t block, std::uint32_t k_blocks,
                  bool shared, const PageMap& pm, float* scores, std::uint32_t* idx, std::uint32_t* topk_scratch,
                  int sm_count, cudaStream_t st) {
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
  topk_select(scores, s.ctx, block, s.ctx - block, budget - 2 * block, 1, lists, shared ? 1 : s.hkv, pm, topk_scratch,
       sm_count, idx, st);
}

void route_tokens_lowrank(const AttnDims& s, const void* q, const float* basis, const float* pkeys, std::uint32_t r,
                          std::uint32_t block, std::uint32_t k_blocks, bool shared, const PageMap& pm, float* scores,
                          std::uint32_t* idx, std::uint32_t* topk_scratch, int sm_count, cudaStream_t st) {
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
  topk_select(scores, s.ctx, block, s.ctx - block, budget - 2 * block, 1, lists, shared ? 1 : s.hkv, pm, topk_scratch,
       sm_count, idx, st);
}

}  // namespace kvf::access::gpu
