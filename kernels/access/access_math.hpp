// Index, layout and partition math of the access study, shared by the CUDA kernels, the CPU twin and
// the fp32 reference (so the three read exactly the same bytes). Everything here is __host__ __device__
// and unit-tested on the CPU (tests/access/test_access_math.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvf/bf16.hpp"
#include "kvf/pattern.hpp"  // KVF_HD, pattern_word

namespace kvf::access {

// ---------------------------------------------------------------------------------------------------
// Random run placement without replacement: a keyed bijection on [0, n).
// perm_pow2 is a bijection on k-bit integers (add key, odd multiply, xorshift, each invertible mod
// 2^k); perm_n walks the cycle until the value falls below n (a bijection on [0, n) because it is the
// induced permutation of a bijection on the superset). Expected walk length < 2 since 2^k < 2n.
// ---------------------------------------------------------------------------------------------------
KVF_HD std::uint32_t ceil_log2_u64(std::uint64_t n) {
  std::uint32_t k = 0;
  while ((std::uint64_t{1} << k) < n) ++k;
  return k;
}

KVF_HD std::uint64_t perm_pow2(std::uint64_t x, std::uint32_t k, std::uint64_t key) {
  if (k == 0) return 0;
  const std::uint64_t mask = (k >= 64) ? ~std::uint64_t{0} : ((std::uint64_t{1} << k) - 1);
  const std::uint32_t s = k / 2 + 1;  // shift < k keeps x ^= x >> s invertible
  x = (x + key * 0xD6E8FEB86659FD93ull) & mask;  // key picks which window of inputs is used
  x = (x * 0x9E3779B97F4A7C15ull) & mask;
  x ^= x >> s;
  x = (x * 0xBF58476D1CE4E5B9ull + (key >> 7)) & mask;
  x ^= x >> s;
  x = (x * 0x94D049BB133111EBull) & mask;
  x ^= x >> s;
  return x;
}

// Bijection on [0, n): i -> distinct slot. n > 0; k = ceil_log2_u64(n).
KVF_HD std::uint64_t perm_n(std::uint64_t i, std::uint64_t n, std::uint32_t k, std::uint64_t key) {
  std::uint64_t y = perm_pow2(i, k, key);
  while (y >= n) y = perm_pow2(y, k, key);
  return y;
}

// The gather problem: read `total_bytes` as runs of `run_bytes` from a pool of `pool_bytes`.
// Run r (0 <= r < nruns) starts at byte run_offset(r). Sequential: run r starts at r * run_bytes.
struct GatherGeom {
  std::uint64_t pool_bytes = 0;
  std::uint64_t run_bytes = 0;
  std::uint64_t total_bytes = 0;  // multiple of run_bytes, <= pool_bytes
  std::uint64_t key = 0;          // seed of the placement
  bool sequential = false;

  KVF_HD std::uint64_t nruns() const { return total_bytes / run_bytes; }
  KVF_HD std::uint64_t nslots() const { return pool_bytes / run_bytes; }
  KVF_HD std::uint32_t slot_bits() const { return ceil_log2_u64(nslots()); }
  KVF_HD std::uint64_t run_offset(std::uint64_t r, std::uint32_t k) const {
    return sequential ? r * run_bytes : perm_n(r, nslots(), k, key) * run_bytes;
  }
};

// GPU decomposition of a gather into 16-byte vectors: vector v lies in run v >> vshift (vshift =
// log2(run_bytes / 16)) at 16-byte slot v & (2^vshift - 1). Returns its byte offset in the pool.
KVF_HD std::uint32_t gather_vshift(std::uint64_t run_bytes) {
  std::uint32_t s = 0;
  while ((std::uint64_t{16} << s) < run_bytes) ++s;
  return s;
}
KVF_HD std::uint64_t gather_vec_offset(const GatherGeom& g, std::uint32_t k, std::uint32_t vshift, std::uint64_t v) {
  return g.run_offset(v >> vshift, k) + (v & ((std::uint64_t{1} << vshift) - 1)) * 16;
}

// Checksum of a gather: wrapping 64-bit sum of every 8-byte word read. Order-independent (so any
// parallel split gives the same value) and a run read twice or missed changes it.
// Reference without touching memory: the pool holds pattern_word(seed, word index).
KVF_HD std::uint64_t gather_expected_run_sum(std::uint64_t seed, std::uint64_t byte_off, std::uint64_t run_bytes) {
  std::uint64_t s = 0;
  const std::uint64_t w0 = byte_off / 8, nw = run_bytes / 8;
  for (std::uint64_t w = 0; w < nw; ++w) s += pattern_word(seed, w0 + w);
  return s;
}

// ---------------------------------------------------------------------------------------------------
// KV layouts, per batch region of N tokens (physical token n, kv head h, dims contiguous):
//   NHD            [batch][token][kv_head][dim]; a page of P tokens is P*H*D contiguous elements
//                  whatever P (page-major by construction: vLLM's and FlashInfer's NHD paged layout).
//   HND, unpaged   [batch][kv_head][token][dim] (page 0): one contiguous [N][D] run per (batch, kv head).
//   HND, paged     [batch][page][kv_head][P][dim] (page P, a power of two): FlashInfer's paged HND, a page
//                  holds every kv head side by side (one run of P*H*D elements), one head's slice of it
//                  is P*D. P == N is the unpaged layout.
// row(b, n, h) = head_base(b, h) + token_off(n): the token offset is the same for every head and batch,
// so kernels compute it once per selected token and add a per-head base.
// ---------------------------------------------------------------------------------------------------
enum class Layout : int { NHD = 0, HND = 1 };

struct KvLayout {
  Layout layout = Layout::HND;
  std::uint64_t H = 1, D = 1;
  bool paged = false;  // HND only (NHD is page-major whatever the page)
  // token_off(n) = (n >> page_shift) * page_elems + (n & in_page) * tok_elems, one branch-free form for
  // every layout (unpaged: page_shift 63, so the page term is 0 and in_page keeps every bit).
  std::uint32_t page_shift = 63;
  std::uint64_t in_page = ~std::uint64_t{0};
  std::uint64_t page_elems = 0;  // elements from one page of a head to the next
  std::uint64_t tok_elems = 1;   // elements from one token to the next within a page
  // Element offset of (batch b, kv head h, token 0) in a cache of N tokens per batch.
  KVF_HD std::uint64_t head_base(std::uint64_t b, std::uint64_t h, std::uint64_t N) const {
    if (layout == Layout::NHD) return (b * N * H + h) * D;
    if (!paged) return (b * H + h) * N * D;
    return b * N * H * D + (h << page_shift) * D;
  }
  // Element offset of physical token n from head_base.
  KVF_HD std::uint64_t token_off(std::uint64_t n) const {
    return (n >> page_shift) * page_elems + (n & in_page) * tok_elems;
  }
  // The same for a 32-bit token index with 32x32->64-bit products (one wide multiply-add each on a
  // GPU, and fewer live registers than 64-bit operands); exact when fits_u32().
  KVF_HD bool fits_u32() const { return page_elems < (std::uint64_t{1} << 32) && tok_elems < (std::uint64_t{1} << 32); }
  KVF_HD std::uint64_t token_off_u32(std::uint32_t n) const {
    const std::uint32_t pg = page_shift >= 32 ? 0u : n >> page_shift;
    return std::uint64_t{pg} * static_cast<std::uint32_t>(page_elems) +
           std::uint64_t{n & static_cast<std::uint32_t>(in_page)} * static_cast<std::uint32_t>(tok_elems);
  }
  KVF_HD std::uint64_t row(std::uint64_t b, std::uint64_t n, std::uint64_t h, std::uint64_t N) const {
    return head_base(b, h, N) + token_off(n);
  }
};
// page: tokens per page of the physical layout, 0 (unpaged) or a power of two (validate_shape checks it).
KVF_HD KvLayout make_kv_layout(Layout l, std::uint64_t H, std::uint64_t D, std::uint32_t page) {
  KvLayout k;
  k.layout = l;
  k.H = H;
  k.D = D;
  k.paged = l == Layout::HND && page != 0;
  k.tok_elems = l == Layout::NHD ? H * D : D;
  if (k.paged) {
    k.page_shift = 0;
    while ((std::uint64_t{1} << k.page_shift) < page) ++k.page_shift;
    k.in_page = (std::uint64_t{1} << k.page_shift) - 1;
    k.page_elems = (H << k.page_shift) * D;
  }
  return k;
}
// Element index of (b, physical token n, head h, dim 0).
KVF_HD std::uint64_t kv_row(Layout l, std::uint64_t b, std::uint64_t n, std::uint64_t h, std::uint64_t N,
                            std::uint64_t H, std::uint64_t D, std::uint32_t page = 0) {
  return make_kv_layout(l, H, D, page).row(b, n, h, N);
}

// ---------------------------------------------------------------------------------------------------
// Selection: every arm attends over a list of entries; entry e covers tokens idx[e]*span .. +span-1.
// dense: span = dense span, idx = 0..ctx/span-1; block: span = block size, idx = selected blocks;
// token: span = 1, idx = selected token positions. Entries are physical (see PageMap below): in logical
// order, which is ascending physical order only with the contiguous placement.
// A selection list is per (batch, kv head) ("per_head") or per batch shared by every kv head ("shared").
// ---------------------------------------------------------------------------------------------------
struct SelGeom {
  std::uint32_t n_entries = 0;  // entries per list
  std::uint32_t span = 1;       // tokens per entry
  bool shared = false;          // one list per batch instead of one per (batch, kv head)
  KVF_HD std::uint64_t list_offset(std::uint64_t b, std::uint64_t h, std::uint64_t Hkv) const {
    return (shared ? b : b * Hkv + h) * n_entries;
  }
  KVF_HD std::uint64_t n_tokens() const { return std::uint64_t{n_entries} * span; }
  // Flattened selected-token number t (0 <= t < n_tokens) -> token position.
  KVF_HD std::uint64_t token(const std::uint32_t* list, std::uint64_t t) const {
    return std::uint64_t{list[t / span]} * span + t % span;
  }
};

// ---------------------------------------------------------------------------------------------------
// Physical placement of the KV cache (paged). Logical token t of batch b lives at physical position
// phys_token(b, t) of the same batch region (KvLayout maps a physical token to its address; the paged
// HND layout puts every kv head of a physical page side by side):
// pages of `page` tokens, logical page p -> physical page slot phys_page(b, p), a keyed bijection on
// [0, n_pages) (the page table: one per sequence, shared by its kv heads, as in vLLM and FlashInfer).
// page == 0 is the contiguous placement (physical == logical).
// Selection lists hold PHYSICAL entries: a logical entry of span S (dense 256, block B, token 1) becomes
// S / entry_span(S) physical entries of entry_span(S) = min(S, page) tokens (S and page powers of two,
// so one divides the other), in logical order; the kernels' address math (SelGeom::token) is unchanged.
// ---------------------------------------------------------------------------------------------------
struct PageMap {
  std::uint32_t page = 0;     // tokens per page; 0: contiguous placement
  std::uint32_t n_pages = 0;  // pages per region (ctx / page)
  std::uint32_t bits = 0;     // ceil_log2(n_pages)
  std::uint64_t key = 0;      // seed of the page tables
  KVF_HD bool contiguous() const { return page == 0; }
  KVF_HD std::uint64_t batch_key(std::uint64_t b) const { return key + (b + 1) * 0x9E3779B97F4A7C15ull; }
  KVF_HD std::uint32_t phys_page(std::uint64_t b, std::uint32_t p) const {
    return contiguous() ? p : static_cast<std::uint32_t>(perm_n(p, n_pages, bits, batch_key(b)));
  }
  KVF_HD std::uint64_t phys_token(std::uint64_t b, std::uint64_t t) const {
    return contiguous() ? t : std::uint64_t{phys_page(b, static_cast<std::uint32_t>(t / page))} * page + t % page;
  }
  // Tokens per physical entry for logical entries of `span` tokens.
  KVF_HD std::uint32_t entry_span(std::uint32_t span) const { return contiguous() || span <= page ? span : page; }
  KVF_HD std::uint32_t entries_per(std::uint32_t span) const { return span / entry_span(span); }
  // Physical entry r (0 <= r < entries_per(span)) of logical entry e of `span` tokens, batch b.
  KVF_HD std::uint32_t phys_entry(std::uint64_t b, std::uint64_t e, std::uint32_t span, std::uint32_t r) const {
    const std::uint32_t es = entry_span(span);
    return static_cast<std::uint32_t>(phys_token(b, e * span + std::uint64_t{r} * es) / es);
  }
};
// page 0: contiguous. Otherwise page must divide ctx (the bench checks it is a power of two).
KVF_HD PageMap make_page_map(std::uint32_t ctx, std::uint32_t page, std::uint64_t key) {
  PageMap m;
  if (page == 0) return m;
  m.page = page;
  m.n_pages = ctx / page;
  m.bits = ceil_log2_u64(m.n_pages);
  m.key = key;
  return m;
}

// Split-KV partition, identical in every arm (it depends only on the selected-token count):
// split s of n_splits covers selected tokens [begin(s), end(s)); chunks are multiples of `quantum`.
struct SplitGeom {
  std::uint64_t n_tokens = 0;
  std::uint32_t n_splits = 1;
  std::uint64_t chunk = 0;
  KVF_HD std::uint64_t begin(std::uint32_t s) const {
    const std::uint64_t x = std::uint64_t{s} * chunk;
    return x < n_tokens ? x : n_tokens;
  }
  KVF_HD std::uint64_t end(std::uint32_t s) const {
    const std::uint64_t x = (std::uint64_t{s} + 1) * chunk;
    return x < n_tokens ? x : n_tokens;
  }
};

// Policy: enough work items (batch * kv heads * splits) to give every compute unit `waves` items,
// but no split shorter than min_chunk tokens. Chunk rounded up to `quantum`.
KVF_HD SplitGeom make_splits(std::uint64_t n_tokens, std::uint64_t items_without_split, std::uint32_t units,
                             std::uint32_t waves, std::uint64_t min_chunk, std::uint64_t quantum) {
  SplitGeom g;
  g.n_tokens = n_tokens;
  std::uint64_t want = (std::uint64_t{units} * waves + items_without_split - 1) / items_without_split;
  if (want < 1) want = 1;
  std::uint64_t max_by_len = (n_tokens + min_chunk - 1) / min_chunk;
  if (max_by_len < 1) max_by_len = 1;
  std::uint64_t ns = want < max_by_len ? want : max_by_len;
  std::uint64_t chunk = (n_tokens + ns - 1) / ns;
  chunk = (chunk + quantum - 1) / quantum * quantum;
  if (chunk == 0) chunk = quantum;
  g.chunk = chunk;
  g.n_splits = static_cast<std::uint32_t>((n_tokens + chunk - 1) / chunk);
  if (g.n_splits == 0) g.n_splits = 1;
  return g;
}

// GPU split policy, by wave quantization: a grid of items x n_splits CTAs on `units` SMs holding
// `ctas_per_sm` each (the kernel's launch bounds guarantee that many resident) runs in
// ceil(CTAs / slots) waves, each as long as one CTA: its split's serial steps (`quantum` tokens = one
// unrolled step) plus kAttnCtaOverheadSteps for its prologue and epilogue (query and first list loads,
// the partial record, the ticket). The policy takes the split count with the least waves x CTA length,
// ties to fewer splits (less merge work), at most kAttnMaxSplits per item, because the one CTA that
// merges an item reads every split's partial (kAttnMaxSplits x heads x d floats from L2). The policy it
// replaced asked for ceil(slots / items) splits and rounded the chunk up afterwards, which can exceed the
// slots by up to one item's splits: on the H100 (results/gpu/H100-2026-11-26) bf16 d128 hkv8 batch 1 got
// 400 CTAs on 396 slots from 64K up, 4 CTAs in a second wave, and dense 64K took 148 us against 61 us at
// 32K (392 CTAs, one wave). The overhead is read off the same run's batch-1 sparse rows: CTAs of 1, 4 and
// 7 steps took 10.9, 16.2 and 21.1 us, ~1.7 us per step over a ~9 us per-launch floor; a CTA's own
// prologue and epilogue (a few dependent memory round trips) is taken as 3 steps.
inline constexpr std::uint32_t kAttnMaxSplits = 64;
// GPU attention: the farthest L2 prefetch distance, in token steps (gpu::AttnPlan::l2_prefetch_steps).
inline constexpr std::uint32_t kAttnMaxPrefetchSteps = 8;
inline constexpr std::uint64_t kAttnCtaOverheadSteps = 3;
// The geometry of a split count: splits of whole steps of `quantum` tokens, as even as that allows; fewer than
// asked when there are fewer steps than splits (no split is empty). n_splits 0 counts as 1. Used for the count
// the policy below picks, and for a count given instead of it (the access study's --attn-splits, to read the
// fixed cost against the steps per CTA).
KVF_HD SplitGeom gpu_attn_fixed_splits(std::uint64_t n_tokens, std::uint32_t n_splits, std::uint64_t quantum) {
  if (quantum == 0) quantum = 1;
  const std::uint64_t steps = (n_tokens + quantum - 1) / quantum;
  const std::uint64_t ns = n_splits == 0 ? 1 : n_splits;
  const std::uint64_t per_split = steps == 0 ? 1 : (steps + ns - 1) / ns;
  SplitGeom g;
  g.n_tokens = n_tokens;
  g.chunk = per_split * quantum;
  g.n_splits = static_cast<std::uint32_t>((n_tokens + g.chunk - 1) / g.chunk);
  if (g.n_splits == 0) g.n_splits = 1;
  return g;
}
// waves x (steps per split + overhead): the cost gpu_attn_splits minimises over the split count.
KVF_HD std::uint64_t gpu_attn_makespan_steps(std::uint64_t steps, std::uint64_t n_splits, std::uint64_t items,
                                             std::uint64_t slots) {
  const std::uint64_t per_split = steps == 0 ? 1 : (steps + n_splits - 1) / n_splits;
  const std::uint64_t used = steps == 0 ? 1 : (steps + per_split - 1) / per_split;  // splits after rounding
  return (items * used + slots - 1) / slots * (per_split + kAttnCtaOverheadSteps);
}
KVF_HD SplitGeom gpu_attn_splits(std::uint64_t n_tokens, std::uint64_t items, std::uint32_t units,
                                 std::uint32_t ctas_per_sm, std::uint64_t quantum) {
  if (quantum == 0) quantum = 1;
  if (items == 0) items = 1;
  std::uint64_t slots = std::uint64_t{units} * ctas_per_sm;
  if (slots == 0) slots = 1;
  const std::uint64_t steps = (n_tokens + quantum - 1) / quantum;
  const std::uint64_t most = steps < kAttnMaxSplits ? (steps == 0 ? 1 : steps) : kAttnMaxSplits;
  std::uint64_t least = gpu_attn_makespan_steps(steps, 1, items, slots);
  for (std::uint64_t ns = 2; ns <= most; ++ns) {
    const std::uint64_t t = gpu_attn_makespan_steps(steps, ns, items, slots);
    if (t < least) least = t;
  }
  // The fewest splits within 3% of the least cost: the model does not resolve finer than that.
  std::uint64_t best_ns = 1;
  while (best_ns < most && gpu_attn_makespan_steps(steps, best_ns, items, slots) * 100 > least * 103) ++best_ns;
  return gpu_attn_fixed_splits(n_tokens, static_cast<std::uint32_t>(best_ns), quantum);
}


// ---------------------------------------------------------------------------------------------------
// Merging split-KV partials (online softmax, log2 domain). The partial of a token set for one query
// head is (m, l, acc[d]): m the largest score (kAttnEmptyM for an empty set), l = sum 2^(s - m),
// acc = sum 2^(s - m) v. Partials of disjoint sets merge with weights 2^(m_i - M), M = max m_i: an
// empty partial (kAttnEmptyM, 0, 0) weighs 2^(-1e30 - M) = 0 beside a non-empty one, and all-empty
// partials merge to (kAttnEmptyM, 0, 0) again (weight 1 times zeros), so emptiness composes. The GPU
// kernel merges its lane groups, then its splits, with these; the host test checks that any split of a
// token set, merged in any grouping, equals one pass (tests/access/test_access_math.cpp).
// ---------------------------------------------------------------------------------------------------
inline constexpr float kAttnEmptyM = -1.0e30f;
template <class MOf>
KVF_HD float attn_merge_max(std::uint32_t n, MOf m_of) {
  float M = kAttnEmptyM;
  for (std::uint32_t i = 0; i < n; ++i) M = fmaxf(M, m_of(i));
  return M;
}
KVF_HD float attn_merge_weight(float m_part, float m_all) { return exp2f(m_part - m_all); }
// Output of a merged partial; 0 for an empty token set (never NaN).
KVF_HD float attn_finish(float acc, float l) { return l > 0.0f ? acc / l : 0.0f; }

// GPU attention tiling: a token row of d elements of eb bytes is read by d*eb/16 lanes (16 bytes, i.e.
// 16/eb elements, each), so a warp covers 32/(d*eb/16) tokens and a CTA of kAttnWarps warps covers
// tokens_per_cta() per step; a lane group `grp` (0 <= grp < tokens_per_cta) handles token
// base + u * tokens_per_cta + grp of unrolled step u. Each selected token of a split is visited exactly
// once (tests/access/test_access_math.cpp).
inline constexpr int kAttnWarps = 4;
KVF_HD constexpr int attn_lanes_per_token(int d, int eb = 2) { return d * eb / 16; }
KVF_HD constexpr int attn_tokens_per_warp(int d, int eb = 2) { return 32 / attn_lanes_per_token(d, eb); }
KVF_HD constexpr int attn_tokens_per_cta(int d, int eb = 2) { return kAttnWarps * attn_tokens_per_warp(d, eb); }
KVF_HD int attn_group_of_thread(int d, int thread, int eb = 2) {
  return (thread / 32) * attn_tokens_per_warp(d, eb) + (thread % 32) / attn_lanes_per_token(d, eb);
}
KVF_HD int attn_sub_of_thread(int d, int thread, int eb = 2) { return (thread % 32) % attn_lanes_per_token(d, eb); }
KVF_HD std::uint64_t attn_token_of(int d, std::uint64_t base, int u, int grp, int eb = 2) {
  return base + static_cast<std::uint64_t>(u) * attn_tokens_per_cta(d, eb) + grp;
}

// ---------------------------------------------------------------------------------------------------
// 16-bit floats as raw bits (the same conversions on host and device; round to nearest even).
// ---------------------------------------------------------------------------------------------------
enum class DType : int { bf16 = 0, fp16 = 1, fp8_e4m3 = 2 };
KVF_HD std::uint32_t dtype_bytes(DType t) { return t == DType::fp8_e4m3 ? 1u : 2u; }

// f32 <-> bits and bf16 conversions: the harness's, shared with every other study.
using ::kvf::bf16_to_f32;
using ::kvf::bits_from_f32;
using ::kvf::f32_from_bits;
using ::kvf::f32_to_bf16;
KVF_HD float fp16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (std::uint32_t{h} & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7F800000u | (man << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}
KVF_HD std::uint16_t f32_to_fp16(float f) {
  std::uint32_t u = bits_from_f32(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  if (u >= 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7C00u | (u > 0x7F800000u ? 0x200u : 0u));
  if (u >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (u < 0x38800000u) {                                                    // below 2^-14: subnormal or 0
    float a = f32_from_bits(u);
    float q = a * 16777216.0f;  // units of 2^-24, exact for these magnitudes
    // round half to even
    std::uint32_t r = static_cast<std::uint32_t>(q);
    float frac = q - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t e = ((u >> 23) - 112u) << 10, m = (u >> 13) & 0x3FFu;
  std::uint32_t h = e | m;
  const std::uint32_t rest = u & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
// fp8 e4m3 (OCP "fn" variant: no infinities, 0x7F/0xFF NaN, max 448).
KVF_HD float e4m3_to_f32(std::uint8_t v) {
  const std::uint32_t sign = (v & 0x80u) ? 1u : 0u;
  const std::uint32_t exp = (v >> 3) & 0xFu, man = v & 0x7u;
  float r;
  if (exp == 0) r = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
  else if (exp == 15 && man == 7) r = f32_from_bits(0x7FC00000u);
  else r = f32_from_bits(((exp + 120u) << 23) | (man << 20));
  return sign ? -r : r;
}
// f32 -> e4m3, round to nearest even, saturating to +-448 (the usual "satfinite" KV quantization).
KVF_HD std::uint8_t f32_to_e4m3(float f) {
  std::uint32_t u = bits_from_f32(f);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return 0x7F;                                       // NaN
  if (u >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7E);   // >= 448 (and inf): saturate
  if (u < 0x3C800000u) {                                                  // below 2^-6: subnormal, units of 2^-9
    const float q = f32_from_bits(u) * 512.0f;                            // exact (power-of-two scale)
    std::uint32_t r = static_cast<std::uint32_t>(q);
    const float frac = q - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;                  // r == 8 is 2^-6: the smallest normal
    return static_cast<std::uint8_t>(sign | r);
  }
  std::uint32_t h = (((u >> 23) - 120u) << 3) | ((u >> 20) & 7u);
  const std::uint32_t rest = u & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (h & 1u))) ++h;
  if (h > 0x7Eu) h = 0x7Eu;  // rounding up past 448 saturates
  return static_cast<std::uint8_t>(sign | h);
}

// Order-preserving map of a float to a 32-bit key (larger float -> larger key; -0 < +0), used by the
// GPU top-k's bitwise threshold search (routing_gpu.cu).
KVF_HD std::uint32_t order_key(float f) {
  const std::uint32_t u = bits_from_f32(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// ---------------------------------------------------------------------------------------------------
// GPU top-k as a multi-CTA radix select (routing_gpu.cu), the math the kernels and the host emulation
// (tests/access/test_topk_radix.cpp) share. A list has n scores; candidates are [lo, hi); the top kp of
// them by order_key (ties to the lower index) are wanted, emitted in index order.
// T = the kp-th largest candidate key is found most significant digit first, 3 digits of 11/11/10
// bits: pass p histograms the digit of the candidates whose higher digits equal the prefix fixed so far,
// then the digit d with  above(d) < need <= above(d) + hist[d]  (above(d): keys in the pass's higher
// bins) joins the prefix and need -= above(d). After the last pass T is exact and need_eq = need: the
// number of keys == T to take (the first need_eq in index order), kp - need_eq keys are > T.
// Emission: candidate i (key > T, or == T and E(i) < need_eq) goes to output position
// G(i) + min(E(i), need_eq), G(i) / E(i) the candidates > T / == T before i in index order.
// Work split: CTA c of a list covers the aligned slice [(c0 + c) * per, (c0 + c + 1) * per) of [0, n)
// intersected with [lo, hi) (per a multiple of kTopkChunk, so 16-byte loads stay aligned).
// ---------------------------------------------------------------------------------------------------
inline constexpr int kTopkPasses = 3;
inline constexpr int kTopkThreads = 256;                  // threads per CTA of the top-k kernels
inline constexpr int kTopkItems = 4;                      // consecutive keys per thread per chunk (a float4)
inline constexpr std::uint32_t kTopkChunk = kTopkThreads * kTopkItems;  // keys per CTA step
inline constexpr std::uint32_t kTopkMaxBins = 2048;
inline constexpr std::uint32_t kTopkCtasPerUnit = 2;      // CTAs per SM aimed for over all lists
KVF_HD constexpr std::uint32_t topk_digit_bits(int pass) { return pass == 2 ? 10u : 11u; }
KVF_HD constexpr std::uint32_t topk_digit_shift(int pass) { return pass == 0 ? 21u : pass == 1 ? 10u : 0u; }
KVF_HD constexpr std::uint32_t topk_bins(int pass) { return 1u << topk_digit_bits(pass); }
KVF_HD constexpr std::uint32_t topk_digit(std::uint32_t key, int pass) {
  return (key >> topk_digit_shift(pass)) & (topk_bins(pass) - 1u);
}
// Whether key's digits above pass `pass` equal those of prefix (always for pass 0).
KVF_HD constexpr bool topk_in_prefix(std::uint32_t key, std::uint32_t prefix, int pass) {
  return pass == 0 || ((key ^ prefix) >> (topk_digit_shift(pass) + topk_digit_bits(pass))) == 0u;
}
// Bin walk of the last CTA of a pass, bins in descending digit order: `above` keys lie in higher bins,
// `here` in this one; true for the one bin holding the need-th largest (1 <= need <= total).
KVF_HD constexpr bool topk_pick_digit(std::uint32_t above, std::uint32_t here, std::uint32_t need) {
  return above < need && need <= above + here;
}
// Emission: whether candidate with key `key` and G / E keys > T / == T before it is taken, and where.
KVF_HD constexpr std::uint32_t topk_out_pos(std::uint32_t G, std::uint32_t E, std::uint32_t need_eq) {
  return G + (E < need_eq ? E : need_eq);
}
KVF_HD constexpr bool topk_taken(std::uint32_t key, std::uint32_t T, std::uint32_t E, std::uint32_t need_eq) {
  return key > T || (key == T && E < need_eq);
}

// CTAs per list and slice length for n scores with candidates [lo, hi) (lo < hi <= n), `lists` lists,
// `units` SMs: about kTopkCtasPerUnit * units CTAs over all lists, slices of whole chunks.
struct TopkGrid {
  std::uint32_t per = kTopkChunk;  // keys per slice (multiple of kTopkChunk)
  std::uint32_t c0 = 0;            // first slice touching [lo, hi)
  std::uint32_t ctas = 1;          // slices touching [lo, hi): CTAs per list
  KVF_HD std::uint32_t begin(std::uint32_t c, std::uint32_t lo) const {
    const std::uint32_t b = (c0 + c) * per;
    return b > lo ? b : lo;
  }
  KVF_HD std::uint32_t end(std::uint32_t c, std::uint32_t hi) const {
    const std::uint64_t e = std::uint64_t{c0 + c + 1} * per;
    return e < hi ? static_cast<std::uint32_t>(e) : hi;
  }
};
// Upper bound of TopkGrid::ctas for any n, lo, hi (scratch sizing): the wanted count + 1 straddled slice.
KVF_HD std::uint32_t topk_wanted_ctas(std::uint32_t lists, std::uint32_t units) {
  const std::uint32_t l = lists ? lists : 1u, u = units ? units : 1u;
  const std::uint32_t w = (kTopkCtasPerUnit * u + l - 1) / l;
  return w ? w : 1u;
}
KVF_HD std::uint32_t topk_max_ctas(std::uint32_t lists, std::uint32_t units) { return topk_wanted_ctas(lists, units) + 1; }
KVF_HD TopkGrid make_topk_grid(std::uint32_t lo, std::uint32_t hi, std::uint32_t lists, std::uint32_t units) {
  TopkGrid g;
  const std::uint32_t m = hi - lo, want = topk_wanted_ctas(lists, units);
  std::uint32_t per = (m + want - 1) / want;
  per = (per + kTopkChunk - 1) / kTopkChunk * kTopkChunk;
  if (per == 0) per = kTopkChunk;
  g.per = per;
  g.c0 = lo / per;
  g.ctas = (hi - 1) / per - g.c0 + 1;
  return g;
}
// Per-list scratch words: the histogram of the current pass (zero between passes), a CTA ticket, and
// the state the last CTA of a pass leaves for the next launch (prefix / T, need / need_eq).
inline constexpr std::uint32_t kTopkTicket = kTopkMaxBins, kTopkPrefix = kTopkMaxBins + 1,
                               kTopkNeed = kTopkMaxBins + 2, kTopkStateWords = kTopkMaxBins + 4;
// Scratch of the GPU top-k in 32-bit words: per list the state above, then per (list, CTA) the counts
// {> T, == T} of its slice. Zeroed once before first use; every call leaves the histograms and
// tickets zero again.
KVF_HD std::uint64_t topk_scratch_words(std::uint32_t lists, std::uint32_t units) {
  return std::uint64_t{lists} * (kTopkStateWords + 2ull * topk_max_ctas(lists, units));
}

// Deterministic KV / q values: uniform-ish in [-1, 1) from the fill pattern (same on host and device).
KVF_HD float pattern_unit(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(static_cast<std::int64_t>(pattern_word(seed, i)) >> 40) * (1.0f / 8388608.0f);
}

}  // namespace kvf::access
