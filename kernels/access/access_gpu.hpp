// CUDA kernels of the access study (defined in access_gpu.cu; only in builds with KVF_HAVE_CUDA).
// They take the same geometry structs as the CPU twins (access_math.hpp) and read the same bytes.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "access_math.hpp"

namespace kvf::access::gpu {

// Gather: *sum (zeroed before) receives the wrapping sum of every 8-byte word of every run; equals
// gather_ref(). 16-byte loads; runs >= 512 B are read by whole warps, shorter runs by lane groups.
void gather(const void* pool, const GatherGeom& g, unsigned long long* sum, int sm_count, cudaStream_t s);

// Split-KV decode attention (K/V bf16, fp16, or fp8 e4m3 with a bf16 query: sm_89+). One CTA =
// (split, kv head x head group, batch); 4 warps; a token row is read by d*bytes/16 lanes with 16-byte
// loads, 2 to 4 rows of K and V per lane group per step, later steps' loads in flight during this one's math
// (AttnLoads). Same plan (split policy,
// gpu_attn_splits) for every arm: it depends on the selected-token count only.
// Merge of the splits' partials: AttnMerge::fused (one kernel per call; the last CTA of each item
// merges, through a ticket per item kept in the workspace, which must be ZEROED ONCE before the first
// call; every call leaves it zero, so calls can be repeated and captured in a CUDA graph; one call at a
// time per workspace) or AttnMerge::kernel (a merge kernel follows; no zeroing needed). With one split
// the split kernel writes the output either way.
enum class AttnMerge { kernel, fused };
// The kernel, named by how K/V rows reach the math (results/gpu/H200-2026-11-27 measured all three):
//   best (the default): mma, the fastest for every K/V type measured (H200, 2026-11-27: bf16 and fp8);
//     plan_attention resolves it.
//   mma: QK and PV on tensor cores (mma.sync m16n8k16, the CTA's query heads as rows), K/V
//     through a warp-private cp.async ring and ldmatrix; on the H200 0.97-1.45x smem's speed (median 1.12x; the
//     token arm at large budgets slightly slower), 1.8x where few CTAs run. fp8 e4m3 (sm_89+): each lane converts
//     its own fragment bytes to f16 instead of ldmatrix (attn_fp8.hpp); on the H200 1.07-1.24x smem's speed
//     (dense 4K-256K, results/gpu/H200-2026-11-27b).
//   smem: CUDA-core math, K/V cp.async'd into a ring of shared-memory stages, ring_stages - 1 steps in flight per
//     CTA (sm_80+; each thread reads back only its own slots); on the H200 0.99-1.19x regs' speed, 1.37-1.45x
//     where few CTAs run.
//   regs: CUDA-core math, 16-byte loads straight into registers, the next step's issued during this step's
//     math (at most one step in flight per CTA): the kernel of the H100 runs, kept as the control.
enum class AttnLoads { regs, smem, mma, best };
// best as a kernel: mma for every K/V type (attn_mma_kernel for 16-bit, attn_mma_fp8_kernel for fp8); other values
// as they are. Kept a function of the type: a part where another kernel wins gets its own case here.
inline AttnLoads resolve_loads(AttnLoads l, DType) { return l == AttnLoads::best ? AttnLoads::mma : l; }
inline const char* to_string(AttnLoads l) {
  return l == AttnLoads::regs ? "regs" : l == AttnLoads::smem ? "smem" : l == AttnLoads::mma ? "mma" : "best";
}
struct AttnPlan {
  SplitGeom split;
  std::uint32_t head_groups = 1;     // CTAs per kv head along the query-head group (group > 8: 2 or more)
  std::uint32_t heads_per_cta = 1;   // query heads per CTA (<= 8)
  AttnMerge merge = AttnMerge::kernel;
  AttnLoads loads = AttnLoads::best;  // resolve_loads() by plan_attention (never best in a plan it returns) and attention()
  std::uint32_t ring_stages = 0;  // smem and mma: stages of the ring (0: regs)
  std::uint32_t ctas_per_sm = 0;  // CTAs per SM the split policy planned with (launch bounds; smem: occupancy)
  // L2 prefetch distance in token steps (0: none): the CTA's first kStep threads ask L2 for the K and V rows
  // of the step this many ahead (sm_90+: one bulk prefetch per row; sm_80: prefetch.global.L2 per 128-byte
  // line), so the step's own loads find them in L2. At most kAttnMaxPrefetchSteps; regs and smem only (attention()
  // refuses it with mma).
  std::uint32_t l2_prefetch_steps = 0;
};
struct AttnDims {
  std::uint32_t batch, hq, hkv, d, ctx;
  DType dtype;
  Layout layout;
  float scale;
  std::uint32_t page = 0;  // tokens per page of the physical layout (AttnShape::page; 0 unpaged)
};
// Throws std::invalid_argument for shapes the kernels do not instantiate (d not 64/128, group > 16...).
// fixed_splits > 0: that many splits per item (gpu_attn_fixed_splits, at most kAttnMaxSplits) instead of the
// wave-aware policy, to measure the fixed cost against the steps per CTA.
// loads: AttnLoads; with smem the policy plans the CTAs per SM the device reports for the ring's shared memory
// (sets the kernel's shared-memory attributes once per device: plan before any stream capture).
AttnPlan plan_attention(const AttnDims& s, const SelGeom& sel, int sm_count, AttnMerge merge = AttnMerge::kernel,
                        std::uint32_t fixed_splits = 0, AttnLoads loads = AttnLoads::best);
// Floats of scratch: per (batch, query head, split) acc[d] and (m, l); with the fused merge then one
// 32-bit ticket per (batch, kv head, head group).
std::size_t attention_workspace_floats(const AttnDims& s, const AttnPlan& p);
// out: fp32 [batch][hq][d]. idx: the selection lists on the device.
void attention(const AttnDims& s, const void* q, const void* k, const void* v, const SelGeom& sel,
               const std::uint32_t* idx, const AttnPlan& p, float* workspace, float* out, cudaStream_t st);

// Deterministic fill, the same values as kvf::access::fill_qkv on the host (bf16/fp16/fp8 e4m3 K/V).
void fill_qkv(const AttnDims& s, void* q, void* k, void* v, std::uint64_t seed, cudaStream_t st);

// Routing on the device, output ready for attention(): scores in logical order (fp32, lists x n) then
// an exact top-k per list with the CPU twin's rule (score descending, ties to the lower logical index;
// sink and latest forced), emitted in ascending logical order and translated to physical entries through
// the page map exactly as kvf::access::place() does on the host (each logical entry of span S becomes
// pm.entries_per(S) entries of pm.entry_span(S) tokens; contiguous pm: the logical entries).
// The top-k is a multi-CTA radix select (3 digit passes + count + emit, 5 launches on the caller's
// stream; access_math.hpp "GPU top-k"): topk_scratch holds topk_scratch_bytes(lists, sm_count) bytes,
// zeroed once before its first use (each call leaves it reusable), sm_count the same in every call;
// one call at a time per scratch buffer. lists = batch (shared) or batch * hkv (per_head).
// Block arm: n = ctx/block, centroids fp32 [batch][hkv][n][d] of the logical blocks (built at
// "prefill"); idx holds k_blocks * pm.entries_per(block) entries per list. Token arm: n = ctx, scores
// against every key (logical token t read from its physical row), k_blocks * block entries per list.
std::size_t topk_scratch_bytes(std::uint32_t lists, int sm_count);
// The CTAs per list a call runs (candidates [lo, hi), kp of them taken; kp == 0: one CTA, emission only).
TopkGrid topk_grid(std::uint32_t lo, std::uint32_t hi, std::uint32_t kp, std::uint32_t lists, int sm_count);
// The top-k alone (route_* call it after their scores): out[list] = [0, lo) + the top kp of scores[lo, hi)
// of each of `lists` lists of n scores (topk_by_key's contract) + [hi, n), each logical entry i of `unit`
// tokens as pm.entries_per(unit) physical entries of batch list / lists_per_batch. std::invalid_argument
// unless lo <= hi <= n, kp <= hi - lo, 1 <= lists <= 65535 and (kp > 0) a scratch.
void topk_select(const float* scores, std::uint32_t n, std::uint32_t lo, std::uint32_t hi, std::uint32_t kp,
                 std::uint32_t unit, std::uint32_t lists, std::uint32_t lists_per_batch, const PageMap& pm,
                 std::uint32_t* scratch, int sm_count, std::uint32_t* out, cudaStream_t st);
void route_blocks(const AttnDims& s, const void* q, const float* centroids, std::uint32_t block,
                  std::uint32_t k_blocks, bool shared, const PageMap& pm, float* scores, std::uint32_t* idx,
                  std::uint32_t* topk_scratch, int sm_count, cudaStream_t st);
void route_tokens(const AttnDims& s, const void* q, const void* k, std::uint32_t block, std::uint32_t k_blocks,
                  bool shared, const PageMap& pm, float* scores, std::uint32_t* idx, std::uint32_t* topk_scratch,
                  int sm_count, cudaStream_t st);
// Token arm through the low-rank key proxy (kvf::access::build_lowrank): basis fp32 [batch][hkv][d][r],
// projected keys fp32 [batch][hkv][ctx][r] in logical order, r in {8, 16, 32, 64}; scores
// (P_h^T qsum_h) . Kp_h[t], then the same top-k and emission as route_tokens.
void route_tokens_lowrank(const AttnDims& s, const void* q, const float* basis, const float* pkeys, std::uint32_t r,
                          std::uint32_t block, std::uint32_t k_blocks, bool shared, const PageMap& pm, float* scores,
                          std::uint32_t* idx, std::uint32_t* topk_scratch, int sm_count, cudaStream_t st);

}  // namespace kvf::access::gpu
#endif
