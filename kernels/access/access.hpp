// Host-side API of the access study: the gather and sparse-decode-attention problems, their CPU twins
// (all cores, AVX-512 where present, software prefetch), fp32 references, selection and routing.
// The CUDA kernels (access_gpu.hpp) take the same structs and read the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "access_math.hpp"
#include "fma_peak.hpp"

namespace kvf::access {

// ------------------------------------------------------------------------------------------------ gather
// Wrapping sum of every 8-byte word of every run (see gather_expected_run_sum). pool must hold
// pattern_word(seed, i) at word i for the reference to agree.
// How the CPU gather reads its runs: one at a time with a software prefetch ring (see gather_cpu.cpp), one at a time
// without, or two at a time (the two halves of each thread's runs, one more stream in flight per core). Which is
// fastest depends on the core and the run length: the access study times them (--prefetch auto).
enum class GatherPath { prefetch, one_stream, two_streams };
const char* gather_path_name(GatherPath p);
std::uint64_t gather_cpu(const void* pool, const GatherGeom& g, GatherPath path = GatherPath::prefetch);
std::uint64_t gather_ref(std::uint64_t seed, const GatherGeom& g);
// The same sum by a plain OpenMP loop (no intrinsics, no software prefetch): the control gather_cpu is judged
// against, in the same run.
std::uint64_t gather_plain_cpu(const void* pool, const GatherGeom& g);
// std::invalid_argument for a run size that is not a power of two in [32 B, 1 GiB], a pool that is not a
// multiple of it, a gather that is not or does not fit in the pool.
void validate_gather(const GatherGeom& g);

// --------------------------------------------------------------------------------------------- attention
struct AttnShape {
  std::uint32_t batch = 1, hq = 32, hkv = 8, d = 128, ctx = 4096;
  DType dtype = DType::bf16;  // of K and V
  Layout layout = Layout::HND;
  // Tokens per page of the physical layout (KvLayout): 0 unpaged; with a shuffled PageMap it is the map's
  // page, so a paged HND cache keeps every kv head of a page side by side, as FlashInfer's paged HND does.
  std::uint32_t page = 0;
  KvLayout kv_layout() const { return make_kv_layout(layout, hkv, d, page); }
  // The query stays 16-bit: bf16 when K/V are fp8 e4m3 (as in fp8-KV decode kernels).
  DType q_dtype() const { return dtype == DType::fp8_e4m3 ? DType::bf16 : dtype; }
  std::uint32_t group() const { return hq / hkv; }
  float scale() const;  // 1/sqrt(d)
  std::uint64_t kv_elems() const { return std::uint64_t{batch} * hkv * ctx * d; }   // per K (or V)
  std::uint64_t kv_bytes() const { return kv_elems() * dtype_bytes(dtype); }        // per K (or V)
  std::uint64_t q_elems() const { return std::uint64_t{batch} * hq * d; }
  std::uint64_t q_bytes() const { return q_elems() * dtype_bytes(q_dtype()); }
};
// std::invalid_argument: hq % hkv, head dim not 64/128, group > 16 or not a power of two, ctx or batch 0,
// page not 0 or a power of two dividing ctx.
// (fp8 e4m3 is valid here: the twin and the reference support it; whether a device has it is the
// bench's question.)
void validate_shape(const AttnShape& s);

enum class Arm { dense, block, token };
enum class Scatter { uniform, clustered };
const char* to_string(Arm);
const char* to_string(Scatter);
const char* to_string(Layout);
const char* to_string(DType);

// Selected entries of every list (SelGeom says how to read them).
struct Selection {
  SelGeom geom;
  std::vector<std::uint32_t> idx;  // n_lists * n_entries, each list in ascending logical order
  std::uint32_t n_lists = 0;
};

// Budget of the sparse arms: k_blocks = round(ctx/block * keep) blocks, token budget = k_blocks * block.
// std::invalid_argument: block not dividing ctx, keep outside (0, 1], k_blocks < 2 (sink + latest).
std::uint32_t sparse_blocks(std::uint32_t ctx, std::uint32_t block, double keep);

// Dense: every token, as entries of `span` tokens (span divides ctx).
Selection select_dense(const AttnShape& s, std::uint32_t span);
// Block arm with given per-list block scores (n_lists x nblocks): block 0 and the last block always,
// then the highest scores.
Selection select_blocks_by_score(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared,
                                 const std::vector<float>& scores);
// Token arm at the same budget: tokens of block 0 and of the last block, then budget - 2*block tokens
// from the middle, without replacement: uniform, or clustered in contiguous runs of mean `cluster_mean`.
Selection select_tokens_random(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared,
                               Scatter sc, std::uint32_t cluster_mean, std::uint64_t seed);
Selection select_tokens_by_score(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared,
                                 const std::vector<float>& scores);
// The same selection at several budgets of one block size (one Selection per entry of k_blocks, in its order),
// each equal to select_tokens_by_score at that budget: the budgets cut one order of the scores, so the keys are
// built and partitioned once per list (nested nth_element), not once per budget.
std::vector<Selection> select_tokens_by_score(const AttnShape& s, std::uint32_t block,
                                              const std::vector<std::uint32_t>& k_blocks, bool shared,
                                              const std::vector<float>& scores);

// The CPU selections' order (select_*_by_score) as one unsigned compare: larger score first, ties to the lower
// index (+0 and -0 one key, as floats compare them). nth_element moves these 8-byte keys instead of comparing
// through an index into the scores; the attention figures walk the same order (one definition).
inline std::uint64_t selection_key(float score, std::uint32_t index) {
  return std::uint64_t{order_key(score == 0.0f ? 0.0f : score)} << 32 | (0xFFFFFFFFu - index);
}
inline std::uint32_t selection_key_index(std::uint64_t key) { return 0xFFFFFFFFu - static_cast<std::uint32_t>(key); }

// The GPU top-k's contract on one list of n scores (logical entries): [0, lo) + the kp candidates of
// [lo, hi) with the largest order_key(score) (access_math.hpp: -0 below +0), ties to the lower index, in
// index order + [hi, n). Equals the top-k of select_*_by_score whenever no -0/+0 pair ties (they
// compare floats). 0 <= lo <= hi <= n, kp <= hi - lo (std::invalid_argument otherwise).
std::vector<std::uint32_t> topk_by_key(const float* scores, std::uint32_t n, std::uint32_t lo, std::uint32_t hi,
                                       std::uint32_t kp);

// Placement (PageMap, access_math.hpp). The select_* functions above return LOGICAL selections (token
// positions in logical order, what the contiguous placement reads); place() turns one into the physical
// lists every kernel and the reference read: each logical entry of span S becomes pm.entries_per(S)
// entries of pm.entry_span(S) tokens at pm.phys_entry(...), in logical order. Contiguous: a copy.
// A shuffled pm needs s.page == pm.page (std::invalid_argument otherwise: the layout and the page table
// disagree); a contiguous pm goes with any s.page (pages of the paged layout in logical order).
Selection place(const AttnShape& s, const PageMap& pm, const Selection& logical);
// Inverse of place() for checks (e.g. of lists the GPU routed): the logical selection of span
// `logical_span` whose place() is `physical`. False if no such selection exists (an entry out of range,
// or the entries of one logical entry not its consecutive logical pieces).
bool unplace(const AttnShape& s, const PageMap& pm, const Selection& physical, std::uint32_t logical_span,
             Selection& logical);
// Tokens per page against a context: 0 (contiguous) or a power of two dividing ctx, so blocks and pages nest.
bool valid_page_tokens(std::uint32_t page, std::uint32_t ctx);
void validate_page_tokens(std::uint32_t page, std::uint32_t ctx);  // std::invalid_argument unless valid

// Routing, in logical token order (a logical token's key is read from its physical row through pm).
// Centroids: mean key of each logical block, fp32 [batch][hkv][nblocks][d] ("prefill", built once).
void build_centroids(const AttnShape& s, const void* k, std::uint32_t block, std::vector<float>& cent,
                     const PageMap& pm = {});
// Block scores (n_lists x nblocks): sum over the list's query heads of q . centroid.
void score_blocks(const AttnShape& s, const void* q, const std::vector<float>& cent, std::uint32_t block,
                  bool shared, std::vector<float>& scores);
// Token scores (n_lists x ctx, logical order): sum over the list's query heads of q . k (reads every key).
void score_tokens(const AttnShape& s, const void* q, const void* k, bool shared, std::vector<float>& scores,
                  const PageMap& pm = {});

// Low-rank key proxy for token routing ("prefill", built once like the centroids). Per (batch, kv head):
// an orthonormal basis P, fp32 [d][r], of the keys' top-r principal subspace (uncentred second moment of
// at most 4096 evenly spaced logical tokens, subspace iteration), and the projected keys Kp = K P, fp32
// [batch][hkv][ctx][r] in logical token order. Proxy score of token t: (P^T qsum) . Kp[t], which reads
// r * 4 bytes per token and kv head instead of the d * 2 bytes of the key row.
struct LowRank {
  std::uint32_t r = 0;
  std::vector<float> basis;  // [batch][hkv][d][r]
  std::vector<float> keys;   // [batch][hkv][ctx][r]
};
// Ranks the proxy supports: 8, 16, 32 or 64, below the head dim d. build_lowrank throws
// std::invalid_argument for any other.
bool valid_proxy_rank(std::uint32_t r, std::uint32_t d);
void build_lowrank(const AttnShape& s, const void* k, std::uint32_t r, LowRank& lr, const PageMap& pm = {});
// Proxy token scores (n_lists x ctx, logical order): sum over the list's kv heads h of (P_h^T qsum_h) . Kp_h[t].
void score_tokens_lowrank(const AttnShape& s, const void* q, const LowRank& lr, bool shared, std::vector<float>& scores);

// Fills q (q_dtype) and k, v (dtype) with deterministic values; q scaled so softmax is not flat.
void fill_qkv(const AttnShape& s, void* q, void* k, void* v, std::uint64_t seed);

// Machine-dependent choices of the CPU twin: `automatic` is decided at run time (cpuid for the bf16 dot
// product, a short timed calibration on the first attention_cpu call for the L2 software prefetch);
// `on`/`off` force one (tests, experiments). None of them changes the result beyond fp32 summation order.
enum class CpuChoice : std::uint8_t { automatic, on, off };

// Scratch of the twin, sized once outside the timed region.
struct AttnWorkspace {
  SplitGeom split;
  std::vector<float> part;  // per (batch, hq, split): m, l, acc[d]
  int threads = 1;
  std::uint32_t heads_per_item = 1;
  std::size_t scratch_stride = 0;  // floats per thread
  std::vector<float> scratch;      // per thread: q, state, outputs, positions of one work item
  CpuChoice bf16_dot = CpuChoice::automatic;      // bf16 QK by vdpbf16ps (on: only where available)
  CpuChoice far_prefetch = CpuChoice::automatic;  // prefetcht1 2-4 chunks ahead, besides the L1 one
  // What the last attention_cpu call ran, and why (path_note: the row's note). The automatic far prefetch
  // is calibrated once per plan_cpu, at the first call with prefetch on (far_on_s/far_off_s: best times;
  // far_how: how they were timed), unless a caller timed it itself (take_far_prefetch).
  bool use_bf16_dot = false, use_far_prefetch = false, far_resolved = false;
  double far_on_s = 0, far_off_s = 0;
  std::string far_how;
  std::string path_note;
  const void* path_note_fn = nullptr;  // the item kernel and prefetch settings path_note describes
  bool path_note_prefetch = false;
  CpuChoice path_note_far = CpuChoice::automatic;
};
// Whether this build and this CPU can run the vdpbf16ps QK path (AVX512_BF16 in cpuid, and compiled in).
bool bf16_dot_available();
// Whether attention_cpu with this workspace runs its QK as vdpbf16ps (two products per fp32 lane and
// instruction): bf16 K/V, bf16_dot not off, AVX512_BF16 here, an AVX-512 kernel for this head dim and group.
bool attention_cpu_qk_dot(const AttnShape& s, const AttnWorkspace& ws);
// KV heads one work item of the CPU twin reads together: the heads whose rows share physical pages
// (NHD, paged HND: all of them, at most 16 and 64 query heads), so a core walks a page once, in
// address order; unpaged HND: 1 (each head's rows are a contiguous run of their own).
std::uint32_t heads_per_item(const AttnShape& s);
// Split-KV policy of the CPU twin (same for every arm; depends on the selected-token count only): work
// items (batch, group of heads_per_item kv heads, split).
void plan_cpu(const AttnShape& s, const Selection& sel, AttnWorkspace& ws);
// out: fp32 [batch][hq][d].
void attention_cpu(const AttnShape& s, const void* q, const void* k, const void* v, const Selection& sel,
                   AttnWorkspace& ws, float* out, bool prefetch = true);
// Whether attention_cpu's kernel for this shape has the far prefetch to choose (the AVX-512 and AVX2 loops;
// not the portable one).
bool attention_cpu_has_far_prefetch(const AttnShape& s, const AttnWorkspace& ws);
// attention_cpu with the far prefetch on and off, best of 3 rounds each (alternated, the order turned each round),
// before_run called before every run (a cache flush for a cold calibration): {on_s, off_s}, for take_far_prefetch.
// std::invalid_argument where attention_cpu_has_far_prefetch says no.
std::pair<double, double> time_far_prefetch(const AttnShape& s, const void* q, const void* k, const void* v,
                                            const Selection& sel, AttnWorkspace& ws, float* out,
                                            const std::function<void()>& before_run = {});
// The automatic far prefetch as a caller timed it on its own data (best times with it on and off; `how` the
// note says, e.g. "cold, best of 3"): on only when more than 3% faster, as attention_cpu's own calibration.
void take_far_prefetch(AttnWorkspace& ws, double on_s, double off_s, std::string how);
// fp32 reference (double accumulation of the softmax and output), straightforward two-pass softmax.
void attention_ref(const AttnShape& s, const void* q, const void* k, const void* v, const Selection& sel,
                   float* out);
// Largest |out - ref| divided by the largest |ref| (the documented tolerance applies to this).
double attention_rel_error(const float* out, const float* ref, std::size_t n);
inline constexpr double kAttnTolerance = 2e-3;  // fp32 accumulation over <= 1M tokens, fast exp2

// The control of the dense arm on the CPU: every byte of K and V read once by a plain OpenMP loop (no intrinsics,
// no software prefetch), chunk by chunk in the order the attention kernel walks them, a chunk's K and V together,
// placed by pm; no compute.
// Returns the wrapping sum of the 8-byte words, which equals kv_sum_ref. std::invalid_argument where a chunk's
// bytes are not a multiple of 8.
std::uint64_t kv_read_cpu(const AttnShape& s, const PageMap& pm, const void* k, const void* v);
std::uint64_t kv_sum_ref(const AttnShape& s, const void* k, const void* v);

// Bytes the attention reads: q + selected K and V rows (+ the index lists); flops: 4*d per (query head,
// token) for QK and PV.
double attention_bytes(const AttnShape& s, const Selection& sel);
double attention_flops(const AttnShape& s, const Selection& sel);

}  // namespace kvf::access
