// GPU split-KV sparse decode attention of the access study (dense, block and token arms run the same
// kernel; they differ only in the selection list: entries of `span` tokens). Three kernels (AttnLoads):
// the CUDA-core kernel below with its K/V loaded straight into registers (regs) or through a shared-memory
// ring (smem), and the tensor-core kernels (mma: attn_mma_kernel for 16-bit K/V, attn_mma_fp8_kernel for fp8
// e4m3, further down).
//
// CTA = (split, kv head x head group, batch), 4 warps. A token row (d elements of 2 bytes, or 1 byte for
// fp8 e4m3) is read by d*bytes/16 lanes with one 16-byte non-coherent load each (attn_* tiling in
// access_math.hpp); each lane group holds the query heads of its CTA in fp32 registers (8 or 16
// elements per head per lane; the query is bf16 when K/V are fp8), walks U tokens per step (U
// independent 16-byte K loads and U V loads per lane), reduces the QK partial dots over its lanes with
// xor shuffles, and keeps an online softmax (log2 domain, fp32). The token loop is software-pipelined
// in the same registers: the next step's K rows are issued once this step's QK has read K, its V rows
// once this step's PV has read V, and the selection-list words two steps ahead, so loads stay in flight
// through the math and no step waits on an index load.
// The lane groups are combined through shared memory into one (m, l, acc) per query head and split.
// With one split the CTA writes the output. Otherwise each split writes its partial to the workspace
// and, with the fused merge, the last CTA of an item (batch, kv head, head group) to finish (threadfence
// + ticket) merges every split's partial and writes the output, then zeroes the ticket for the next call
// (one kernel per call, no memset: graph-safe); without it a merge kernel follows. fp32 accumulation
// throughout, except the PV of fp8 K/V: per step, f16 chains of U tokens (HFMA2 on e4m3 pairs,
// attn_fp8.hpp) folded into the fp32 accumulator. Row addresses: a per-head base plus KvLayout::token_off_u32 of the physical token (the
// paged HND layout keeps a page's heads side by side, so one head's rows are runs of P x d elements at a
// stride of P x hkv x d).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "access_gpu.hpp"
#include "attn_fp8.hpp"
#include "kvf/cuda_ptx.cuh"

namespace kvf::access::gpu {
namespace {

constexpr int kThreads = 32 * kAttnWarps;
constexpr float kLog2e = 1.4426950408889634f;

struct Args {
  std::uint32_t hq, hkv, ctx, head_groups;
  KvLayout kl;
  float qscale;  // scale * log2(e)
  SelGeom sel;
  std::uint32_t span_shift;  // log2(sel.span): spans are powers of two (no 64-bit division per token)
  SplitGeom split;
  bool fused_merge;
  std::uint32_t l2_prefetch_steps;  // AttnPlan::l2_prefetch_steps
  std::uint32_t pf_run_shift;       // log2 of the rows of one head that lie back to back at a run start
};

// Workspace: partial acc [batch][hq][split][d] (16-byte aligned rows for the merge's float4 loads),
// then (m, l) [batch][hq][split][2], then one ticket per item [batch][hkv][head group] (fused merge).
struct Workspace {
  float* acc;
  float* ml;
  unsigned* tickets;
};
Workspace carve(float* ws, const AttnDims& s, const AttnPlan& p) {
  const std::uint64_t recs = std::uint64_t{s.batch} * s.hq * p.split.n_splits;
  return {ws, ws + recs * s.d, reinterpret_cast<unsigned*>(ws + recs * (s.d + 2))};
}

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
      const float2 a = __half22float2(e4m3x2_to_h2(w[i])), b = __half22float2(e4m3x2_to_h2(w[i] >> 16));
      f[4 * i] = a.x;
      f[4 * i + 1] = a.y;
      f[4 * i + 2] = b.x;
      f[4 * i + 3] = b.y;
    }
  }
}

// 2^x in the token loop. fp8: flushed to zero below 2^-126 (one MUFU.EX2, no subnormal fix-up): it only
// drops weights the f16 PV rounds to 0 anyway (p below 2^-29 of the running max, attn_fp8.hpp).
template <bool Ftz>
__device__ __forceinline__ float loop_exp2(float x) {
  if constexpr (Ftz) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
  } else {
    return exp2f(x);
  }
}

// Asks L2 for `bytes` (a multiple of 16, 16-byte aligned) without waiting for them or holding a register:
// sm_90+ one bulk prefetch, below that one prefetch per 128-byte line.
__device__ __forceinline__ void prefetch_l2(const unsigned char* p, std::uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes) : "memory");
#else
  for (std::uint32_t o = 0; o < bytes; o += 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p + o)) : "memory");
#endif
}

// cp.async (sm_80+) and ldmatrix: kvf/cuda_ptx.cuh.
using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldsm_x4;
using ptx::ldsm_x4_trans;

// Where a CTA of the split kernels works (grid: splits x (kv heads x head groups) x batch): split sp, kv head h,
// batch b, and bq0 = b hq + its first query head (head group hg of GB heads).
struct CtaAt {
  std::uint32_t sp, h, b;
  std::uint64_t bq0;
};
template <int GB>
__device__ __forceinline__ CtaAt cta_at(const Args& a) {
  const std::uint32_t h = blockIdx.y / a.head_groups, hg = blockIdx.y % a.head_groups;
  const std::uint32_t qh0 = h * (a.hq / a.hkv) + hg * GB;
  return {blockIdx.x, h, blockIdx.z, static_cast<std::uint64_t>(blockIdx.z) * a.hq + qh0};
}

// Dynamic shared memory of the smem-ring kernels (AttnLoads::smem): the ring [S][K, V][U][kThreads] of 16-byte
// slots, reused by the epilogue after the token loop.
extern __shared__ __align__(16) uint4 attn_dyn_smem[];

template <DType T>
struct KvType {
  static constexpr int bytes = T == DType::fp8_e4m3 ? 1 : 2;
  static constexpr int per16 = 16 / bytes;                                // elements per 16-byte load
  static constexpr DType q = T == DType::fp8_e4m3 ? DType::bf16 : T;      // the query stays 16-bit
};

// Shared memory of the epilogue, in floats: the lane groups' acc, later reused by the split merge
// (weights [GB][kAttnMaxSplits], L [GB], partial sums [kThreads][4]).
template <int D, int GB, int NG>
__host__ __device__ constexpr int epilogue_floats() {
  constexpr int combine = NG * GB * D, merge = GB * static_cast<int>(kAttnMaxSplits) + (GB + 3) / 4 * 4 + 4 * kThreads;
  return combine > merge ? combine : merge;
}

// The last CTA of an item: out[g][:] = sum_s w_gs acc_s[g][:] / sum_s w_gs l_gs, w_gs = 2^(m_gs - M_g).
// Partials are read through L2 (__ldcg: other SMs wrote them in this kernel). The acc sum runs over
// float4 columns, the splits shared among threads when the columns are fewer than the threads, with 8
// loads in flight per thread (the merge reads ns x GB x d floats and sits on the kernel's tail).
template <int D, int GB>
__device__ void merge_splits(const Workspace w, std::uint64_t bq0, std::uint32_t ns, float* __restrict__ out,
                             float* smem) {
  float* sw = smem;                                  // [GB][kAttnMaxSplits]
  float* sl = smem + GB * kAttnMaxSplits;            // [GB]
  float4* part = reinterpret_cast<float4*>(sl + (GB + 3) / 4 * 4);  // [kThreads], 16-byte aligned
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int g = warp; g < GB; g += kAttnWarps) {
    const float* ml = w.ml + (bq0 + g) * ns * 2;
    float M = kAttnEmptyM;
    for (std::uint32_t s = lane; s < ns; s += 32) M = fmaxf(M, __ldcg(ml + 2 * s));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float L = 0.0f;
    for (std::uint32_t s = lane; s < ns; s += 32) {
      const float wt = attn_merge_weight(__ldcg(ml + 2 * s), M);
      sw[g * kAttnMaxSplits + s] = wt;
      L = fmaf(wt, __ldcg(ml + 2 * s + 1), L);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    if (lane == 0) sl[g] = L;
  }
  __syncthreads();
  constexpr int C4 = GB * D / 4;                      // float4 columns of the item's heads
  constexpr int TC = C4 < kThreads ? C4 : kThreads;   // threads per slice of splits
  constexpr int CPT = C4 / TC;                        // columns per thread
  constexpr int R = kThreads / TC;                    // slices of splits
  const int slice = threadIdx.x / TC;
  float4 a[CPT];
#pragma unroll
  for (int j = 0; j < CPT; ++j) a[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
  for (std::uint32_t s = slice; s < ns; s += R) {
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int c = threadIdx.x % TC + j * TC, g = 4 * c / D, d = 4 * c % D;
      const float wt = sw[g * kAttnMaxSplits + s];
      const float4 x = __ldcg(reinterpret_cast<const float4*>(w.acc + ((bq0 + g) * ns + s) * D + d));
      a[j].x = fmaf(wt, x.x, a[j].x);
      a[j].y = fmaf(wt, x.y, a[j].y);
      a[j].z = fmaf(wt, x.z, a[j].z);
      a[j].w = fmaf(wt, x.w, a[j].w);
    }
  }
  if constexpr (R > 1) {
    part[threadIdx.x] = a[0];
    __syncthreads();
    if (slice != 0) return;
    for (int r = 1; r < R; ++r) {
      const float4 x = part[threadIdx.x + r * TC];
      a[0].x += x.x;
      a[0].y += x.y;
      a[0].z += x.z;
      a[0].w += x.w;
    }
  }
#pragma unroll
  for (int j = 0; j < CPT; ++j) {
    const int c = threadIdx.x % TC + j * TC, g = 4 * c / D, d = 4 * c % D;
    const float L = sl[g];
    *reinterpret_cast<float4*>(out + (bq0 + g) * D + d) =
        make_float4(attn_finish(a[j].x, L), attn_finish(a[j].y, L), attn_finish(a[j].z, L), attn_finish(a[j].w, L));
  }
}

// CTAs per SM the register cap guarantees (launch bounds); the split policy plans this many per SM, so
// every CTA of a full grid is resident at once (no second partial wave).
__host__ __device__ constexpr int min_ctas_per_sm(int gb, DType t) {
  // Register caps (65536 / (128 x CTAs)) under which each (heads, unroll) of dispatch_gb is spill-free.
  if (t == DType::fp8_e4m3) return gb <= 2 ? 3 : 2;
  return gb <= 2 ? 4 : gb == 4 ? 3 : 2;
}

// Stages of the smem ring: a stage holds one step's K and V rows (2 x U x 16 bytes per thread), and S - 1
// steps are in flight while one is computed. The register pipeline keeps at most one step (2 x U x 2 KiB per
// CTA) in flight, and it read about 3 TB/s on the H100 and on the H200 alike (results/gpu/H200-2026-11-27):
// not bound by either memory. With few CTAs the bytes in flight set its pace (the ring made a step 1.45x
// faster there); on a full grid, the SM's issue rate (attn_mma_kernel). S is the least that keeps 64 KiB in flight per SM at
// the CTAs per SM the launch bounds plan, between 2 and 4.
__host__ __device__ constexpr int ring_stages(int u, int ctas) {
  const int stage = 2 * u * kThreads * 16, want = 64 * 1024;
  const int st = 1 + (want + stage * ctas - 1) / (stage * ctas);
  return st < 2 ? 2 : st > 4 ? 4 : st;
}
// Dynamic shared memory of a ring kernel: the ring, or the epilogue's buffer where that is larger.
template <int D, int GB, int U, DType T, int S>
constexpr int ring_smem_bytes() {
  constexpr int ring = S * 2 * U * kThreads * 16;
  constexpr int epi = 4 * epilogue_floats<D, GB, attn_tokens_per_cta(D, KvType<T>::bytes)>();
  return ring > epi ? ring : epi;
}

// The end of a CTA: its lane groups' (m, l, acc) combined into one partial per query head, written as
// the output (one split) or as the split's record; with the fused merge the CTA that takes the item's
// last ticket merges every split's record.
// The NG partials (m, l, acc) per query head that the CTA's lane groups (or warps) left in shared memory
// (sm_m, sm_l [NG][GB]; smem as acc [NG][GB][D]) combined (groups without tokens: m = kAttnEmptyM, weight 0)
// and written as the output (one split) or as the split's record; with the fused merge the CTA that takes
// the item's last ticket merges every split's record.
template <int D, int GB, int NG>
__device__ __forceinline__ void cta_combine(const float (*sm_m)[GB], const float (*sm_l)[GB], float* smem,
                                            const Args& a, const Workspace& w, std::uint64_t bq0, std::uint32_t b,
                                            std::uint32_t sp, float* __restrict__ out) {
  const float(*sm_acc)[GB][D] = reinterpret_cast<const float(*)[GB][D]>(smem);
  __syncthreads();
  const std::uint32_t ns = a.split.n_splits;
  for (int e = threadIdx.x; e < GB * D; e += kThreads) {
    const int g = e / D, d = e % D;
    const float M = attn_merge_max(NG, [&](std::uint32_t n) { return sm_m[n][g]; });
    float L = 0.0f, A = 0.0f;
    for (int n = 0; n < NG; ++n) {
      const float wt = attn_merge_weight(sm_m[n][g], M);
      L = fmaf(wt, sm_l[n][g], L);
      A = fmaf(wt, sm_acc[n][g][d], A);
    }
    if (ns == 1) {
      out[(bq0 + g) * D + d] = attn_finish(A, L);
      continue;
    }
    const std::uint64_t rec = (bq0 + g) * ns + sp;
    w.acc[rec * D + d] = A;
    if (d == 0) {
      w.ml[2 * rec] = M;
      w.ml[2 * rec + 1] = L;
    }
  }
  if (ns == 1 || !a.fused_merge) return;
  // Fused merge: every thread's partial is visible device-wide before its CTA takes a ticket; the CTA
  // that takes the last one sees every split's partial.
  __threadfence();
  __syncthreads();
  __shared__ bool sm_last;
  if (threadIdx.x == 0) {
    unsigned* ticket = w.tickets + static_cast<std::uint64_t>(b) * gridDim.y + blockIdx.y;
    sm_last = atomicAdd(ticket, 1u) == ns - 1;
    if (sm_last) *ticket = 0u;  // every CTA of the item has taken its ticket: zero for the next call
  }
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  merge_splits<D, GB>(w, bq0, ns, out, smem);
}

template <int D, int GB, int NG, int EPL>
__device__ __forceinline__ void cta_epilogue(const float (&m)[GB], const float (&l)[GB], const float (&acc)[GB][EPL],
                                             int grp, int sub, const Args& a, const Workspace& w, std::uint64_t bq0,
                                             std::uint32_t b, std::uint32_t sp, float* __restrict__ out,
                                             float* smem) {  // epilogue_floats<D, GB, NG>(), 16-byte aligned
  __shared__ float sm_m[NG][GB], sm_l[NG][GB];
  float(*sm_acc)[GB][D] = reinterpret_cast<float(*)[GB][D]>(smem);
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
  cta_combine<D, GB, NG>(sm_m, sm_l, smem, a, w, bq0, b, sp, out);
}

// S = 0: the register pipeline; S >= 2: the smem ring of S stages (cp.async; attn_dyn_smem holds
// ring_smem_bytes<D, GB, U, T, S>()).
template <int D, int GB, int U, DType T, int S>
__device__ __forceinline__ void attn_split_body(const std::uint16_t* __restrict__ q, const unsigned char* __restrict__ k,
                                                const unsigned char* __restrict__ v,
                                                const std::uint32_t* __restrict__ idx, const Args& a,
                                                const Workspace& w, float* __restrict__ out) {
  constexpr int EB = KvType<T>::bytes;
  constexpr int EPL = KvType<T>::per16;  // elements per lane
  constexpr int LT = attn_lanes_per_token(D, EB);
  constexpr int TPC = attn_tokens_per_cta(D, EB);
  constexpr int NG = TPC;  // lane groups per CTA
  constexpr std::uint32_t kStep = static_cast<std::uint32_t>(TPC) * U;
  const int grp = attn_group_of_thread(D, threadIdx.x, EB);
  const int sub = attn_sub_of_thread(D, threadIdx.x, EB);
  const auto [sp, h, b, bq0] = cta_at<GB>(a);

  constexpr bool kF8 = T == DType::fp8_e4m3;
  constexpr bool kRing = S > 0;
  float qf[GB][EPL];
  auto load_q = [&] {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      const uint4* qrow = reinterpret_cast<const uint4*>(q + (bq0 + g) * D + sub * EPL);
#pragma unroll
      for (int c = 0; c < EPL / 8; ++c) cvt16B<KvType<T>::q>(__ldg(qrow + c), &qf[g][8 * c]);
#pragma unroll
      for (int j = 0; j < EPL; ++j) qf[g][j] *= a.qscale;
    }
  };
  if constexpr (!kRing) load_q();
  const std::uint64_t row0 = a.kl.head_base(b, h, a.ctx) * EB + static_cast<std::uint64_t>(sub) * 16;
  const unsigned char* kb = k + row0;
  const unsigned char* vb = v + row0;
  const std::uint32_t* list = idx + a.sel.list_offset(b, h, a.hkv);
  const std::uint32_t t0 = static_cast<std::uint32_t>(a.split.begin(sp)), t1 = static_cast<std::uint32_t>(a.split.end(sp));
  const std::uint32_t in_span = (1u << a.span_shift) - 1u;

  float m[GB], l[GB], acc[GB][EPL];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = kAttnEmptyM;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) acc[g][j] = 0.0f;
  }

  // Software pipeline without a second register buffer: the K rows of step i+1 are issued as soon as the
  // QK of step i has consumed K (so they are in flight during its softmax and PV), the V rows of step
  // i+1 as soon as its PV has consumed V (in flight during the next QK), and the selection-list words of
  // step i+2 right after, so no step waits on an index load.
  std::uint32_t ent[U], ent_next[U];  // the first step's, then the next step's
  auto load_entries = [&](std::uint32_t base, std::uint32_t* e) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::uint32_t t = base + static_cast<std::uint32_t>(u * TPC + grp);
      e[u] = t < t1 ? __ldg(list + (t >> a.span_shift)) : 0u;
    }
  };
  // Byte offset of the row of lane group token u of the step at `base` (physical token -> KvLayout::
  // token_off: paged HND keeps the pages of every head side by side); rows past the split read nothing.
  auto row_off = [&](std::uint32_t base, int u, const std::uint32_t* e, bool& ok) {
    const std::uint32_t t = base + static_cast<std::uint32_t>(u * TPC + grp);
    ok = t < t1;
    const std::uint32_t n = ok ? (e[u] << a.span_shift) + (t & in_span) : 0u;
    return a.kl.token_off_u32(n) * EB;  // fits_u32() checked at launch
  };
  auto load_rows = [&](const unsigned char* base_ptr, std::uint32_t base, const std::uint32_t* e, uint4* r) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      bool ok;
      const std::uint64_t off = row_off(base, u, e, ok);
      r[u] = ok ? __ldg(reinterpret_cast<const uint4*>(base_ptr + off)) : make_uint4(0, 0, 0, 0);
    }
  };
  // L2 prefetch (AttnPlan::l2_prefetch_steps = P > 0): thread x < kStep looks at token x of the step P
  // ahead; where a run of back-to-back rows starts there (2^pf_run_shift rows: a page or entry of one head in
  // HND, one row in NHD) it asks L2 for the whole run of K and of V, one request each. Its selection-list
  // word is loaded just before (no register carried across steps: the 128-register variants have none to
  // spare); a list line covers 32 entries, so that load mostly hits L1 and stalls only the first warp, briefly.
  const std::uint32_t pf = a.l2_prefetch_steps;
  const bool pf_thread = pf > 0 && threadIdx.x < kStep;
  constexpr std::uint32_t kRowBytes = D * EB;
  // Row addresses from the kernel parameters (constant bank), not from kb/vb: no registers held across the
  // loop for them (the 128-register variants have none to spare).
  auto prefetch_run_at = [&](std::uint32_t t) {
    if (t >= t1 || (t & ((1u << a.pf_run_shift) - 1u))) return;
    const std::uint32_t e = __ldg(list + (t >> a.span_shift));
    const std::uint32_t rows = min(1u << a.pf_run_shift, t1 - t);
    const std::uint64_t off = (a.kl.head_base(b, h, a.ctx) + a.kl.token_off_u32((e << a.span_shift) + (t & in_span))) * EB;
    prefetch_l2(k + off, rows * kRowBytes);
    prefetch_l2(v + off, rows * kRowBytes);
  };
  if (pf_thread)
    for (std::uint32_t s = 1; s < pf; ++s) prefetch_run_at(t0 + s * kStep + threadIdx.x);
  // Registers: this step's rows (the register pipeline carries the next step's in them through the math).
  uint4 kr[U], vr[U];
  // The smem ring (S > 0): every thread copies its own 16-byte slots and reads only those back, so
  // cp.async.wait_group alone orders them (no barrier in the loop); a slot is refilled one step after its rows
  // were read into registers and used.
  uint4* const ring = attn_dyn_smem + threadIdx.x;
  auto slot = [&](int stage, int kv, int u) { return ring + ((stage * 2 + kv) * U + u) * kThreads; };
  auto issue_step = [&](int stage, std::uint32_t base, const std::uint32_t* e) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      bool ok;
      const std::uint64_t off = row_off(base, u, e, ok);
      cp_async16(slot(stage, 0, u), kb + off, ok);
      cp_async16(slot(stage, 1, u), vb + off, ok);
    }
    cp_async_commit();  // one group per step, empty rows included, so that the group count stays S - 1 ahead
  };
  int rd = 0, wr = kRing ? S - 1 : 0;  // ring: the stage of this step, and of the step S - 1 ahead
  if constexpr (kRing) {
    // The list words of the first S steps in one round trip, then S - 1 steps of rows in flight.
    std::uint32_t e0[kRing ? S : 1][U];
#pragma unroll
    for (int st = 0; st < S; ++st) load_entries(t0 + st * kStep, e0[st]);
#pragma unroll
    for (int st = 0; st + 1 < S; ++st) issue_step(st, t0 + st * kStep, e0[st]);
#pragma unroll
    for (int u = 0; u < U; ++u) ent_next[u] = e0[S - 1][u];
    load_q();
  } else {
    load_entries(t0, ent);
    load_rows(kb, t0, ent, kr);
    load_rows(vb, t0, ent, vr);
    load_entries(t0 + kStep, ent_next);
  }
  for (std::uint32_t base = t0; base < t1; base += kStep) {
    if (pf_thread) prefetch_run_at(base + pf * kStep + threadIdx.x);
    if constexpr (kRing) {
      // The slot refilled now was read last step: acc depends on every row read there, so computing it first
      // keeps the refill behind those reads at the PTX level too.
      asm volatile("" ::"f"(acc[0][0]));
      issue_step(wr, base + (S - 1) * kStep, ent_next);
      load_entries(base + S * kStep, ent_next);
      cp_async_wait<kRing ? S - 1 : 0>();  // this step's group has landed
#pragma unroll
      for (int u = 0; u < U; ++u) kr[u] = *slot(rd, 0, u);
    }
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) ok[u] = base + static_cast<std::uint32_t>(u * TPC + grp) < t1;
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
    if constexpr (!kRing) load_rows(kb, base + kStep, ent_next, kr);
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int g = 0; g < GB; ++g)
#pragma unroll
        for (int o = LT / 2; o > 0; o >>= 1) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
    // Online softmax over the U tokens at once: one rescale per step (fp8: folded into the PV's FMA).
    float alpha[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = ok[u] ? fmaxf(mx, s[u][g]) : mx;
      alpha[g] = loop_exp2<kF8>(m[g] - mx);
      m[g] = mx;
      l[g] *= alpha[g];
      if constexpr (!kF8)
#pragma unroll
        for (int j = 0; j < EPL; ++j) acc[g][j] *= alpha[g];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = ok[u] ? loop_exp2<kF8>(s[u][g] - mx) : 0.0f;
        s[u][g] = kF8 ? p * kFp8PScale : p;  // now p (fp8: scaled for the f16 PV; l carries the same scale)
      }
    }
    if constexpr (kRing)
#pragma unroll
      for (int u = 0; u < U; ++u) vr[u] = *slot(rd, 1, u);
    if constexpr (kF8) {
#pragma unroll
      for (int g = 0; g < GB; ++g)
#pragma unroll
        for (int u = 0; u < U; ++u) l[g] += s[u][g];
      std::uint32_t vw[U][4];
      __half2 ph[U][GB];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        vw[u][0] = vr[u].x;
        vw[u][1] = vr[u].y;
        vw[u][2] = vr[u].z;
        vw[u][3] = vr[u].w;
#pragma unroll
        for (int g = 0; g < GB; ++g) ph[u][g] = __float2half2_rn(s[u][g]);
      }
      fp8_pv_step<U, GB>(vw, ph, alpha, acc);
    } else {
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
    if constexpr (kRing) {
      rd = rd + 1 == S ? 0 : rd + 1;
      wr = wr + 1 == S ? 0 : wr + 1;
    } else {
      load_rows(vb, base + kStep, ent_next, vr);
      load_entries(base + 2 * kStep, ent_next);
    }
  }

  if constexpr (kRing) {
    // The epilogue reuses the ring: every thread's copies (the zero-filled ones past the split too) land first.
    cp_async_wait<0>();
    __syncthreads();
    cta_epilogue<D, GB, NG, EPL>(m, l, acc, grp, sub, a, w, bq0, b, sp, out, reinterpret_cast<float*>(attn_dyn_smem));
  } else {
    __shared__ __align__(16) float epi[epilogue_floats<D, GB, NG>()];
    cta_epilogue<D, GB, NG, EPL>(m, l, acc, grp, sub, a, w, bq0, b, sp, out, epi);
  }
}

// fp8 K/V needs the e4m3 conversion instructions of sm_89 and newer, and the study refuses fp8 below that before
// anything launches (studies/access/study.cpp). Below sm_89 the fp8 kernels are therefore a trap, not a
// software-emulated copy nothing runs: that copy tripled the file's sm_80 device compile (10 s -> 32 s).
template <int D, int GB, int U, DType T, int S>
__global__ void __launch_bounds__(kThreads, min_ctas_per_sm(GB, T)) attn_split_kernel(const std::uint16_t* __restrict__ q,
                                                              const unsigned char* __restrict__ k,
                                                              const unsigned char* __restrict__ v,
                                                              const std::uint32_t* __restrict__ idx, const Args a,
                                                              const Workspace w, float* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  if constexpr (T == DType::fp8_e4m3) {
    __trap();
  } else
#endif
  {
    attn_split_body<D, GB, U, T, S>(q, k, v, idx, a, w, out);
  }
}

// ---------------------------------------------------------------------------------------------------
// Tensor-core variant (AttnLoads::mma; 16-bit K/V, sm_80+). The CTA's query heads (GB <= 8) are the rows of
// the A operand of mma.sync m16n8k16 (rows GB..15 zero); each warp walks its own tiles of 16 tokens (tile
// j of the split goes to warp j % 4): S = Q K^T as 2 n-tiles of 8 tokens x D/16 k-steps, the online
// softmax on S in registers, then O += P V as D/8 n-tiles of one k-step with P (the S fragments, rounded
// to the input type; bf16 as hi + lo, so P keeps 16 bits of mantissa) as the A operand. K and V tiles
// reach shared memory through a warp-private cp.async ring of kMmaStages tiles, 16-byte chunks XOR-swizzled
// by row (ldmatrix reads 8 rows of one chunk column without bank conflicts); ldmatrix (K) and
// ldmatrix.trans (V) load the B operands. The warps' partials are combined by cta_combine (NG = 4 warps).
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16/.f16): lane = 4 g + t; A regs: (row g, k 2t..2t+1),
// (row g+8, k 2t..), (row g, k 2t+8..), (row g+8, k 2t+8..); B regs: (k 2t..2t+1, n g), (k 2t+8.., n g);
// C: (row g, n 2t, 2t+1), (row g+8, n 2t, 2t+1).
constexpr int kMmaTile = 16;  // tokens per warp tile
constexpr int kMmaStages = 3;

// Dynamic shared memory of a tensor-core kernel: the warps' rings [warp][stage][K, V][16 rows][D] of EB-byte
// elements (MmaWarpRing), reused by the epilogue for the warps' acc (cta_combine).
template <int D, int GB, int EB, int S>
__host__ __device__ constexpr int mma_smem_bytes() {
  constexpr int ring = kAttnWarps * S * 2 * kMmaTile * D * EB;
  constexpr int epi = 4 * kAttnWarps * GB * D;
  return ring > epi ? ring : epi;
}

template <DType T>
__device__ __forceinline__ void mma16816(float (&c)[4], unsigned a0, unsigned a2, unsigned b0, unsigned b1) {
  // Rows g + 8 of A are zero (at most 8 heads): their registers are 0.
  if constexpr (T == DType::bf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}
// Two floats as one register of the input type (x in the low half: the lower k or n index).
template <DType T>
__device__ __forceinline__ unsigned pack2(float x, float y) {
  if constexpr (T == DType::bf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const unsigned*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const unsigned*>(&h);
  }
}
template <DType T>
__device__ __forceinline__ float2 unpack2(unsigned u) {
  if constexpr (T == DType::bf16) return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xFFFF0000u));
  else return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

// One warp's walk of its split's 16-token tiles (tile i of the warp starts at t0 + (warp + 4 i) 16) through a
// warp-private cp.async ring of S stages that brings each tile's K and V rows into shared memory, the list words of
// each tile loaded one tile ahead of its copies: what both tensor-core kernels share. EB bytes per element;
// ChunkAt{}(r, c): the byte offset in a tile of 16-byte chunk c of row r (each kernel's swizzle).
template <int D, int EB, int S, class ChunkAt>
struct MmaWarpRing {
  static constexpr int CH = D * EB / 16;          // 16-byte chunks per row
  static constexpr int CPL = kMmaTile * CH / 32;  // chunks per lane per K (or V) tile
  static constexpr int kTileBytes = kMmaTile * D * EB;
  int warp, lane;
  const unsigned char* kb;
  const unsigned char* vb;
  const std::uint32_t* list;
  std::uint32_t t0, t1, in_span, my_tiles;
  unsigned char* ring;
  std::uint32_t ent[CPL];
  int rd = 0, wr = S - 1;  // the stage read by this tile's math, the stage refilled

  __device__ __forceinline__ MmaWarpRing(const Args& a, const unsigned char* k, const unsigned char* v,
                                         const std::uint32_t* idx, std::uint32_t b, std::uint32_t h, std::uint32_t sp)
      : warp(static_cast<int>(threadIdx.x / 32)), lane(static_cast<int>(threadIdx.x % 32)) {
    kb = k + a.kl.head_base(b, h, a.ctx) * EB;
    vb = v + a.kl.head_base(b, h, a.ctx) * EB;
    list = idx + a.sel.list_offset(b, h, a.hkv);
    t0 = static_cast<std::uint32_t>(a.split.begin(sp));
    t1 = static_cast<std::uint32_t>(a.split.end(sp));
    in_span = (1u << a.span_shift) - 1u;
    const std::uint32_t n_tiles = (t1 - t0 + kMmaTile - 1) / kMmaTile;
    my_tiles = n_tiles > static_cast<std::uint32_t>(warp) ? (n_tiles - warp + kAttnWarps - 1) / kAttnWarps : 0u;
    ring = reinterpret_cast<unsigned char*>(attn_dyn_smem) + warp * S * 2 * kTileBytes;
  }
  __device__ __forceinline__ std::uint32_t tile_base(std::uint32_t i) const {
    return t0 + (warp + i * kAttnWarps) * kMmaTile;
  }
  // The lane's chunks of a tile: q = lane + 32 j -> row q / CH, chunk q % CH.
  __device__ __forceinline__ void load_entries(const Args& a, std::uint32_t i) {
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
      const std::uint32_t tok = tile_base(i) + static_cast<std::uint32_t>((lane + 32 * j) / CH);
      ent[j] = i < my_tiles && tok < t1 ? __ldg(list + (tok >> a.span_shift)) : 0u;
    }
  }
  __device__ __forceinline__ void issue_tile(const Args& a, int stage, std::uint32_t i) {
    unsigned char* kt = ring + stage * 2 * kTileBytes;
    unsigned char* vt = kt + kTileBytes;
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
      const int qi = lane + 32 * j, r = qi / CH, c = qi % CH;
      const std::uint32_t tok = tile_base(i) + static_cast<std::uint32_t>(r);
      const bool ok = i < my_tiles && tok < t1;
      const std::uint32_t n = ok ? (ent[j] << a.span_shift) + (tok & in_span) : 0u;
      const std::uint64_t off = static_cast<std::uint64_t>(a.kl.token_off_u32(n)) * EB + c * 16;
      cp_async16(reinterpret_cast<uint4*>(kt + ChunkAt{}(r, c)), kb + off, ok);
      cp_async16(reinterpret_cast<uint4*>(vt + ChunkAt{}(r, c)), vb + off, ok);
    }
    cp_async_commit();
  }
  // The ring's first S - 1 tiles in flight.
  __device__ __forceinline__ void prologue(const Args& a) {
    load_entries(a, 0);
#pragma unroll
    for (int st = 0; st + 1 < S; ++st) {
      issue_tile(a, st, static_cast<std::uint32_t>(st));
      load_entries(a, static_cast<std::uint32_t>(st + 1));
    }
  }
  // Before tile i's math: the stage tile i - 1 used refilled with tile i + S - 1, then tile i landed; returns its K
  // tile (its V tile follows).
  __device__ __forceinline__ const unsigned char* wait_tile(const Args& a, std::uint32_t i) {
    __syncwarp();  // every lane's reads of the stage refilled now (tile i - 1) are done
    issue_tile(a, wr, i + S - 1);
    load_entries(a, i + S);
    cp_async_wait<S - 1>();
    __syncwarp();  // every lane's copies of tile i are visible to the warp
    return ring + rd * 2 * kTileBytes;
  }
  __device__ __forceinline__ void next_tile() {
    rd = rd + 1 == S ? 0 : rd + 1;
    wr = wr + 1 == S ? 0 : wr + 1;
  }
};

// The online softmax of row g over one tile's S fragments (this lane: tokens 8 jn + 2 t + e of the tile at base):
// tokens from t1 on masked, the rest scaled, the running max m kept over the row's 4 lanes, p = 2^(s - m + PExp)
// (PExp: P's power-of-two scale), l and the accumulators rescaled.
template <int PExp, int NT>
__device__ __forceinline__ void mma_tile_softmax(float (&s)[2][4], float (&p)[2][2], float& m, float& l,
                                                 float (&acc)[NT][4], std::uint32_t base, std::uint32_t t1,
                                                 float scale) {
  const int t = static_cast<int>(threadIdx.x % 4);
  float mx = m;
#pragma unroll
  for (int jn = 0; jn < 2; ++jn)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool ok = base + static_cast<std::uint32_t>(8 * jn + 2 * t + e) < t1;
      s[jn][e] = ok ? s[jn][e] * scale : kAttnEmptyM;
      mx = fmaxf(mx, s[jn][e]);
    }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float alpha = exp2f(m - mx);
  m = mx;
#pragma unroll
  for (int jn = 0; jn < 2; ++jn)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (PExp == 0) p[jn][e] = s[jn][e] == kAttnEmptyM ? 0.0f : exp2f(s[jn][e] - mx);
      else p[jn][e] = s[jn][e] == kAttnEmptyM ? 0.0f : exp2f(s[jn][e] - mx + static_cast<float>(PExp));
    }
  l = l * alpha + (p[0][0] + p[0][1]) + (p[1][0] + p[1][1]);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    acc[nt][0] *= alpha;
    acc[nt][1] *= alpha;
  }
}

// The end of both tensor-core kernels: l summed over the row's 4 lanes, the warps' partials into shared memory (the
// ring is free once every copy has landed), then combined (cta_combine). acc[nt] holds (row g, dims
// DimOf{}(nt, 2t), DimOf{}(nt, 2t + 1)) in [0], [1].
template <int D, int GB, int NT, class DimOf>
__device__ __forceinline__ void mma_epilogue(float m, float l, const float (&acc)[NT][4], const Args& a,
                                             const Workspace& w, std::uint64_t bq0, std::uint32_t b, std::uint32_t sp,
                                             float* __restrict__ out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  cp_async_wait<0>();
  __syncthreads();
  __shared__ float sm_m[kAttnWarps][GB], sm_l[kAttnWarps][GB];
  float* smem = reinterpret_cast<float*>(attn_dyn_smem);
  float(*sm_acc)[GB][D] = reinterpret_cast<float(*)[GB][D]>(smem);
  if (g < GB) {
    if (t == 0) {
      sm_m[warp][g] = m;
      sm_l[warp][g] = l;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      sm_acc[warp][g][DimOf{}(nt, 2 * t)] = acc[nt][0];
      sm_acc[warp][g][DimOf{}(nt, 2 * t + 1)] = acc[nt][1];
    }
  }
  cta_combine<D, GB, kAttnWarps>(sm_m, sm_l, smem, a, w, bq0, b, sp, out);
}

// The 16-bit tiles: chunk c of row r at chunk c ^ (r & 7) of that row (ldmatrix reads 8 rows of one chunk column
// without bank conflicts); the output dims in order.
template <int D>
struct MmaChunk16 {
  __device__ __forceinline__ int operator()(int r, int c) const { return (r * (D / 8) + (c ^ (r & 7))) * 16; }
};
struct MmaDimInOrder {
  __device__ __forceinline__ int operator()(int nt, int col) const { return 8 * nt + col; }
};

template <int D, int GB, DType T>
__global__ void __launch_bounds__(kThreads, 2) attn_mma_kernel(const std::uint16_t* __restrict__ q,
                                                               const unsigned char* __restrict__ k,
                                                               const unsigned char* __restrict__ v,
                                                               const std::uint32_t* __restrict__ idx, const Args a,
                                                               const Workspace w, float* __restrict__ out) {
  static_assert(T != DType::fp8_e4m3 && GB <= 8, "mma: 16-bit K/V, at most 8 heads per CTA");
  constexpr int KS = D / 16;  // k-steps of QK
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto [sp, h, b, bq0] = cta_at<GB>(a);
  MmaWarpRing<D, 2, kMmaStages, MmaChunk16<D>> ring(a, k, v, idx, b, h, sp);
  ring.prologue(a);
  // The query heads as A fragments (unscaled 16-bit; the scale is applied to S in fp32).
  unsigned qa[KS][2];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    const std::uint16_t* qr = q + (bq0 + (g < GB ? g : 0)) * D + ks * 16 + 2 * t;
    qa[ks][0] = g < GB ? __ldg(reinterpret_cast<const unsigned*>(qr)) : 0u;
    qa[ks][1] = g < GB ? __ldg(reinterpret_cast<const unsigned*>(qr + 8)) : 0u;
  }
  float m = kAttnEmptyM, l = 0.0f;  // row g's running max (the same in its 4 lanes) and this lane's share of l
  float acc[2 * KS][4];             // O: n-tile nt holds (row g, d 8 nt + 2t, +1) in [0], [1]; rows g + 8 unused
#pragma unroll
  for (int nt = 0; nt < 2 * KS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;

  for (std::uint32_t i = 0; i < ring.my_tiles; ++i) {
    const unsigned char* kt = ring.wait_tile(a, i);
    const unsigned char* vt = kt + ring.kTileBytes;
    // S = Q K^T: n-tile jn = tokens 8 jn .. 8 jn + 7 of the tile.
    float s[2][4];
#pragma unroll
    for (int jn = 0; jn < 2; ++jn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[jn][e] = 0.0f;
#pragma unroll
      for (int kp = 0; kp < KS / 2; ++kp) {
        // Matrices: rows = tokens 8 jn + (lane & 7), chunks 4 kp + (lane >> 3): k-step 2 kp (lo, hi), 2 kp + 1.
        unsigned bm[4];
        const int r = 8 * jn + (lane & 7), c = 4 * kp + (lane >> 3);
        ldsm_x4(bm, kt + MmaChunk16<D>{}(r, c));
        mma16816<T>(s[jn], qa[2 * kp][0], qa[2 * kp][1], bm[0], bm[1]);
        mma16816<T>(s[jn], qa[2 * kp + 1][0], qa[2 * kp + 1][1], bm[2], bm[3]);
      }
    }
    float p[2][2];
    mma_tile_softmax<0>(s, p, m, l, acc, ring.tile_base(i), ring.t1, a.qscale);
    // P as the A operand (k = the tile's 16 tokens): (row g, tokens 2t..) = n-tile 0, (row g, 8 + 2t..) = n-tile 1.
    const unsigned pa0 = pack2<T>(p[0][0], p[0][1]), pa2 = pack2<T>(p[1][0], p[1][1]);
    unsigned pl0 = 0u, pl2 = 0u;  // bf16: the rounding residue of P, a second pass (P = hi + lo)
    if constexpr (T == DType::bf16) {
      const float2 h0 = unpack2<T>(pa0), h2 = unpack2<T>(pa2);
      pl0 = pack2<T>(p[0][0] - h0.x, p[0][1] - h0.y);
      pl2 = pack2<T>(p[1][0] - h2.x, p[1][1] - h2.y);
    }
#pragma unroll
    for (int np = 0; np < KS; ++np) {
      // Matrices: rows = tokens (lane & 7) + 8 ((lane >> 3) & 1), chunks 2 np + (lane >> 4) (.trans: k = token).
      unsigned bm[4];
      const int r = (lane & 7) + 8 * ((lane >> 3) & 1), c = 2 * np + (lane >> 4);
      ldsm_x4_trans(bm, vt + MmaChunk16<D>{}(r, c));
      mma16816<T>(acc[2 * np], pa0, pa2, bm[0], bm[1]);
      mma16816<T>(acc[2 * np + 1], pa0, pa2, bm[2], bm[3]);
      if constexpr (T == DType::bf16) {
        mma16816<T>(acc[2 * np], pl0, pl2, bm[0], bm[1]);
        mma16816<T>(acc[2 * np + 1], pl0, pl2, bm[2], bm[3]);
      }
    }
    ring.next_tile();
  }
  mma_epilogue<D, GB, 2 * KS, MmaDimInOrder>(m, l, acc, a, w, bq0, b, sp, out);
}

// fp8 e4m3 K/V on tensor cores (AttnLoads::mma, sm_89+): attn_mma_kernel's walk, ring and softmax with the
// fragments of attn_fp8.hpp (each lane reads and converts its own fragment bytes; no ldmatrix), f16 operands
// and fp32 accumulators. A tile is half the bytes of a 16-bit one, so the ring has kMmaFp8Stages stages: the
// same bytes in flight per warp as the 16-bit kernel's three. Below sm_89 a trap, as attn_split_kernel's fp8.
constexpr int kMmaFp8Stages = 5;

// fp8 tiles: attn_fp8.hpp's slot swizzle; the output dims in fp8_v_dim's order.
template <int D>
struct MmaChunkFp8 {
  __device__ __forceinline__ int operator()(int r, int c) const { return fp8_tile_offset<D>(r, 16 * c); }
};
template <int D>
struct MmaDimFp8 {
  __device__ __forceinline__ int operator()(int nt, int col) const { return fp8_v_dim<D>(nt, col); }
};

template <int D, int GB>
__global__ void __launch_bounds__(kThreads, 2) attn_mma_fp8_kernel(const std::uint16_t* __restrict__ q,
                                                                   const unsigned char* __restrict__ k,
                                                                   const unsigned char* __restrict__ v,
                                                                   const std::uint32_t* __restrict__ idx, const Args a,
                                                                   const Workspace w, float* __restrict__ out) {
  static_assert(GB <= 8 && kMmaTile == kFp8MmaTileRows, "mma fp8: at most 8 heads per CTA");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  __trap();
#else
  constexpr int KP = D / 32;  // k-step pairs of QK
  constexpr int NT = D / 8;   // n-tiles of PV
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto [sp, h, b, bq0] = cta_at<GB>(a);
  MmaWarpRing<D, 1, kMmaFp8Stages, MmaChunkFp8<D>> ring(a, k, v, idx, b, h, sp);
  ring.prologue(a);
  // The query heads as f16 A fragments in fp8_q_dim's order, row g scaled by 2^qe (exact; the quad's max).
  const std::uint16_t* qrow = q + (bq0 + (g < GB ? g : 0)) * D;
  float qv[KP][2][2][2];
  float amax = 0.0f;
#pragma unroll
  for (int kp = 0; kp < KP; ++kp)
#pragma unroll
    for (int hs = 0; hs < 2; ++hs)
#pragma unroll
      for (int reg = 0; reg < 2; ++reg) {
        const unsigned u = g < GB ? __ldg(reinterpret_cast<const unsigned*>(qrow + fp8_q_dim(kp, hs, reg, t, 0))) : 0u;
        qv[kp][hs][reg][0] = __uint_as_float(u << 16);  // bf16 query (AttnShape::q_dtype)
        qv[kp][hs][reg][1] = __uint_as_float(u & 0xFFFF0000u);
        amax = fmaxf(amax, fmaxf(fabsf(qv[kp][hs][reg][0]), fabsf(qv[kp][hs][reg][1])));
      }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const int qe = fp8_q_exponent(amax);
  const float qmul = ldexpf(1.0f, qe);
  const float sscale = a.qscale * ldexpf(1.0f, -qe);  // S = (Q 2^qe) K^T 2^-qe
  unsigned qa[KP][2][2];
#pragma unroll
  for (int kp = 0; kp < KP; ++kp)
#pragma unroll
    for (int hs = 0; hs < 2; ++hs)
#pragma unroll
      for (int reg = 0; reg < 2; ++reg)
        qa[kp][hs][reg] = pack2<DType::fp16>(qv[kp][hs][reg][0] * qmul, qv[kp][hs][reg][1] * qmul);
  float m = kAttnEmptyM, l = 0.0f;
  float acc[NT][4];  // n-tile nt: (row g, dims fp8_v_dim(nt, 2t), fp8_v_dim(nt, 2t + 1)) in [0], [1]
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;

  for (std::uint32_t i = 0; i < ring.my_tiles; ++i) {
    const unsigned char* kt = ring.wait_tile(a, i);
    const unsigned char* vt = kt + ring.kTileBytes;
    float s[2][4];
#pragma unroll
    for (int jn = 0; jn < 2; ++jn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[jn][e] = 0.0f;
#pragma unroll
      for (int kp = 0; kp < KP; ++kp) {
        std::uint32_t bk[2][2];
        fp8_k_frags<D>(kt, jn, kp, lane, bk);
        mma16816<DType::fp16>(s[jn], qa[kp][0][0], qa[kp][0][1], bk[0][0], bk[0][1]);
        mma16816<DType::fp16>(s[jn], qa[kp][1][0], qa[kp][1][1], bk[1][0], bk[1][1]);
      }
    }
    // p scaled by kFp8PScale = 2^4 (l too): f16 keeps full precision down to 2^-18 of the running max.
    static_assert(kFp8PScale == 16.0f, "P's scale is 2^4");
    float p[2][2];
    mma_tile_softmax<4>(s, p, m, l, acc, ring.tile_base(i), ring.t1, sscale);
    const unsigned pa0 = pack2<DType::fp16>(p[0][0], p[0][1]), pa2 = pack2<DType::fp16>(p[1][0], p[1][1]);
    std::uint32_t vrows[4][D / 32];
    fp8_v_rows<D>(vt, lane, vrows);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      mma16816<DType::fp16>(acc[nt], pa0, pa2, fp8_v_frag<D>(vrows, nt, 0), fp8_v_frag<D>(vrows, nt, 1));
    ring.next_tile();
  }
  mma_epilogue<D, GB, NT, MmaDimFp8<D>>(m, l, acc, a, w, bq0, b, sp, out);
#endif
}

// Merge of the unfused path: out[bq][d] = sum_s 2^(m_s - M) acc_s[d] / sum_s 2^(m_s - M) l_s. One CTA
// per (batch, query head).
__global__ void attn_merge_kernel(const Workspace w, std::uint32_t ns, std::uint32_t D, float* __restrict__ out) {
  const std::uint64_t bq = blockIdx.x;
  const float* ml = w.ml + bq * ns * 2;
  const float M = attn_merge_max(ns, [&](std::uint32_t s) { return ml[2 * s]; });
  for (std::uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
    float L = 0.0f, A = 0.0f;
    for (std::uint32_t s = 0; s < ns; ++s) {
      const float wt = attn_merge_weight(ml[2 * s], M);
      L = fmaf(wt, ml[2 * s + 1], L);
      A = fmaf(wt, w.acc[(bq * ns + s) * D + d], A);
    }
    out[bq * D + d] = attn_finish(A, L);
  }
}

// Unroll (token rows in flight per lane group) and heads per CTA, chosen so ptxas reports no spills on
// sm_80, sm_90 and sm_100 under the launch bounds (the pipelined loop keeps the next step's K rows live
// through the PV): 16-bit K/V: 1 or 2 heads -> 4 rows, 4 heads -> 3, 8 heads -> 2; fp8 K/V (16 elements
// per lane): at most 4 heads per CTA, 4 rows each.
constexpr int unroll_for(std::uint32_t gb, DType t) { return gb == 8 ? 2 : gb == 4 && t != DType::fp8_e4m3 ? 3 : 4; }

using SplitKernel = void (*)(const std::uint16_t*, const unsigned char*, const unsigned char*, const std::uint32_t*,
                             Args, Workspace, float*);
struct KernelPick {
  SplitKernel fn;
  int smem_bytes;  // dynamic shared memory (0: the register pipeline)
  int stages;      // ring stages (0: the register pipeline)
};

template <int N>
using IntC = std::integral_constant<int, N>;

// The instantiation for (D, T, heads per CTA, loads).
template <int D, DType T>
KernelPick pick_kernel(std::uint32_t gb, AttnLoads loads) {
  auto pick = [&](auto gbc, auto uc) -> KernelPick {
    constexpr int GB = decltype(gbc)::value, U = decltype(uc)::value;
    constexpr int S = ring_stages(U, min_ctas_per_sm(GB, T));
    if (loads == AttnLoads::mma) {
      if constexpr (T == DType::fp8_e4m3)
        return {attn_mma_fp8_kernel<D, GB>, mma_smem_bytes<D, GB, 1, kMmaFp8Stages>(), kMmaFp8Stages};
      else return {attn_mma_kernel<D, GB, T>, mma_smem_bytes<D, GB, 2, kMmaStages>(), kMmaStages};
    }
    if (loads == AttnLoads::smem) return {attn_split_kernel<D, GB, U, T, S>, ring_smem_bytes<D, GB, U, T, S>(), S};
    return {attn_split_kernel<D, GB, U, T, 0>, 0, 0};
  };
  switch (gb) {
    case 1: return pick(IntC<1>{}, IntC<4>{});
    case 2: return pick(IntC<2>{}, IntC<4>{});
    case 4: return pick(IntC<4>{}, IntC<unroll_for(4, T)>{});
    case 8:
      if constexpr (T != DType::fp8_e4m3) return pick(IntC<8>{}, IntC<2>{});
      [[fallthrough]];
    default: throw std::invalid_argument("gpu::attention: unsupported heads per CTA");
  }
}

// The kernel of (K/V type, head dim, heads per CTA, loads); best resolved here, so a plan made without
// plan_attention runs the same kernel as one made with it.
KernelPick kernel_for(const AttnDims& s, std::uint32_t gb, AttnLoads loads) {
  loads = resolve_loads(loads, s.dtype);
  const bool d128 = s.d == 128;
  switch (s.dtype) {
    case DType::bf16: return d128 ? pick_kernel<128, DType::bf16>(gb, loads) : pick_kernel<64, DType::bf16>(gb, loads);
    case DType::fp16: return d128 ? pick_kernel<128, DType::fp16>(gb, loads) : pick_kernel<64, DType::fp16>(gb, loads);
    case DType::fp8_e4m3:
      return d128 ? pick_kernel<128, DType::fp8_e4m3>(gb, loads) : pick_kernel<64, DType::fp8_e4m3>(gb, loads);
  }
  throw std::invalid_argument("gpu::attention: unsupported K/V type");
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("gpu::attention: ") + what + ": " + cudaGetErrorString(e));
}

// A ring kernel's opt-in to dynamic shared memory above the 48 KiB default, and to the largest shared-memory
// carveout (its planned CTAs per SM need it; the driver's default may pick a smaller one): once per kernel and
// device, at plan time, so never inside a stream capture.
void prepare_kernel(const KernelPick& kp) {
  if (kp.smem_bytes == 0) return;
  int dev = 0;
  cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
  static std::mutex mu;
  static std::set<std::pair<int, SplitKernel>> done;
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count({dev, kp.fn})) return;
  const void* fn = reinterpret_cast<const void*>(kp.fn);
  cuda_ok(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, kp.smem_bytes),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  cuda_ok(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
          "cudaFuncSetAttribute(PreferredSharedMemoryCarveout)");
  done.insert({dev, kp.fn});
}

std::uint32_t max_heads_per_cta(DType t) { return t == DType::fp8_e4m3 ? 4u : 8u; }


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

AttnPlan plan_attention(const AttnDims& s, const SelGeom& sel, int sm_count, AttnMerge merge, std::uint32_t fixed_splits,
                        AttnLoads loads) {
  if (s.d != 64 && s.d != 128) throw std::invalid_argument("gpu::attention: head dim must be 64 or 128");
  if (s.hkv == 0 || s.hq % s.hkv) throw std::invalid_argument("gpu::attention: hq must be a multiple of hkv");
  const std::uint32_t G = s.hq / s.hkv;
  if (G == 0 || G > 16 || (G & (G - 1))) throw std::invalid_argument("gpu::attention: group must be 1, 2, 4, 8, 16");
  if (s.dtype == DType::fp8_e4m3) {
    // Below sm_89 the fp8 kernels are a trap (attn_split_kernel): say so here, before anything launches.
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major * 10 + minor < 89)
      throw std::invalid_argument("gpu::attention: fp8_e4m3 K/V needs sm_89 or newer (this device is sm_" +
                                  std::to_string(major * 10 + minor) + ")");
  }
  AttnPlan p;
  const std::uint32_t hmax = max_heads_per_cta(s.dtype);
  p.heads_per_cta = G > hmax ? hmax : G;
  p.head_groups = G / p.heads_per_cta;
  p.merge = merge;
  loads = resolve_loads(loads, s.dtype);
  p.loads = loads;
  // CTAs per SM: the launch bounds' guarantee; a ring kernel also needs its shared memory, which a smaller
  // GPU (sm_80: 164 KiB per SM, sm_86: 100 KiB) may hold fewer times: the occupancy the device reports.
  const KernelPick kp = kernel_for(s, p.heads_per_cta, loads);
  p.ring_stages = static_cast<std::uint32_t>(kp.stages);
  int ctas = loads == AttnLoads::mma ? 2 : min_ctas_per_sm(static_cast<int>(p.heads_per_cta), s.dtype);  // launch bounds
  if (kp.smem_bytes) {
    prepare_kernel(kp);
    int n = 0;
    cuda_ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, reinterpret_cast<const void*>(kp.fn), kThreads,
                                                          static_cast<std::size_t>(kp.smem_bytes)),
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    if (n < 1)
      throw std::invalid_argument("gpu::attention: the smem loads need " + std::to_string(kp.smem_bytes) +
                                  " bytes of shared memory per CTA, more than this device gives one CTA");
    ctas = std::min(ctas, n);
  }
  p.ctas_per_sm = static_cast<std::uint32_t>(ctas);
  const std::uint64_t quantum =
      loads == AttnLoads::mma
          ? std::uint64_t{kMmaTile} * kAttnWarps  // one tile per warp
          : static_cast<std::uint64_t>(attn_tokens_per_cta(static_cast<int>(s.d), static_cast<int>(dtype_bytes(s.dtype)))) *
                unroll_for(p.heads_per_cta, s.dtype);
  if (fixed_splits > kAttnMaxSplits)
    throw std::invalid_argument("gpu::attention: " + std::to_string(fixed_splits) + " splits: at most " +
                                std::to_string(kAttnMaxSplits));
  p.split = fixed_splits
                ? gpu_attn_fixed_splits(sel.n_tokens(), fixed_splits, quantum)
                : gpu_attn_splits(sel.n_tokens(), static_cast<std::uint64_t>(s.batch) * s.hkv * p.head_groups,
                                  static_cast<std::uint32_t>(sm_count > 0 ? sm_count : 1),
                                  p.ctas_per_sm, quantum);
  return p;
}

std::size_t attention_workspace_floats(const AttnDims& s, const AttnPlan& p) {
  const std::size_t recs = static_cast<std::size_t>(s.batch) * s.hq * p.split.n_splits;
  const std::size_t tickets = p.merge == AttnMerge::fused ? static_cast<std::size_t>(s.batch) * s.hkv * p.head_groups : 0;
  return recs * (s.d + 2) + tickets;
}

void attention(const AttnDims& s, const void* q, const void* k, const void* v, const SelGeom& sel,
               const std::uint32_t* idx, const AttnPlan& p, float* workspace, float* out, cudaStream_t st) {
  if (sel.span == 0 || (sel.span & (sel.span - 1))) throw std::invalid_argument("gpu::attention: span must be a power of two");
  std::uint32_t shift = 0;
  while ((1u << shift) < sel.span) ++shift;
  if (s.page && ((s.page & (s.page - 1)) || s.ctx % s.page))
    throw std::invalid_argument("gpu::attention: page must be 0 or a power of two dividing the context");
  Args a{s.hq,  s.hkv, s.ctx, p.head_groups, make_kv_layout(s.layout, s.hkv, s.d, s.page), s.scale * kLog2e, sel, shift,
         p.split, p.merge == AttnMerge::fused, p.l2_prefetch_steps, 0};
  // Rows of one head back to back from a run start: within one selection entry, and within one page (HND);
  // NHD interleaves the heads, so one row.
  const std::uint32_t run = a.kl.tok_elems != s.d ? 1u : s.page ? std::min(sel.span, s.page) : sel.span;
  while ((2u << a.pf_run_shift) <= run) ++a.pf_run_shift;
  if (!a.kl.fits_u32()) throw std::invalid_argument("gpu::attention: a page of this layout exceeds 2^32 elements");
  if (p.l2_prefetch_steps > 0 && resolve_loads(p.loads, s.dtype) == AttnLoads::mma)
    throw std::invalid_argument("gpu::attention: the mma kernel has no L2 prefetch (l2_prefetch_steps " +
                                std::to_string(p.l2_prefetch_steps) + "); regs or smem have it");
  if (p.l2_prefetch_steps > kAttnMaxPrefetchSteps)
    throw std::invalid_argument("gpu::attention: l2_prefetch_steps " + std::to_string(p.l2_prefetch_steps) +
                                " exceeds " + std::to_string(kAttnMaxPrefetchSteps));
  if (p.merge == AttnMerge::fused && p.split.n_splits > kAttnMaxSplits)
    throw std::invalid_argument("gpu::attention: the fused merge takes at most kAttnMaxSplits splits");
  const Workspace w = carve(workspace, s, p);
  const KernelPick kp = kernel_for(s, p.heads_per_cta, p.loads);
  prepare_kernel(kp);  // done at plan time already: a set lookup here
  const dim3 grid(p.split.n_splits, s.hkv * p.head_groups, s.batch);
  kp.fn<<<grid, kThreads, static_cast<std::size_t>(kp.smem_bytes), st>>>(
      static_cast<const std::uint16_t*>(q), static_cast<const unsigned char*>(k), static_cast<const unsigned char*>(v),
      idx, a, w, out);
  check_launch("attn_split_kernel launch");
  if (p.split.n_splits == 1 || p.merge == AttnMerge::fused) return;
  attn_merge_kernel<<<s.batch * s.hq, s.d, 0, st>>>(w, p.split.n_splits, s.d, out);
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
