// Shapes, validation, selection (dense / block / token), routing (centroids, scores), fills, the fp32
// reference and the byte and FLOP counts of the access study.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined pass-through operand inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "access.hpp"

namespace kvf::access {

float AttnShape::scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }

void validate_shape(const AttnShape& s) {
  if (s.d != 64 && s.d != 128)
    throw std::invalid_argument("head dim " + std::to_string(s.d) + ": allowed 64, 128");
  if (s.hkv == 0 || s.hq == 0 || s.hq % s.hkv)
    throw std::invalid_argument("hq " + std::to_string(s.hq) + ", hkv " + std::to_string(s.hkv) +
                                ": hq must be a non-zero multiple of hkv");
  const std::uint32_t g = s.hq / s.hkv;
  if (g > 16 || (g & (g - 1)))
    throw std::invalid_argument("group hq/hkv = " + std::to_string(g) + ": allowed 1, 2, 4, 8, 16");
  if (s.ctx == 0 || s.batch == 0)
    throw std::invalid_argument("ctx " + std::to_string(s.ctx) + ", batch " + std::to_string(s.batch) +
                                ": both must be positive");
  validate_page_tokens(s.page, s.ctx);
}

const char* to_string(Arm a) { return a == Arm::dense ? "dense" : a == Arm::block ? "block" : "token"; }
const char* to_string(Scatter s) { return s == Scatter::uniform ? "uniform" : "clustered"; }
const char* to_string(Layout l) { return l == Layout::NHD ? "NHD" : "HND"; }
const char* to_string(DType t) { return t == DType::bf16 ? "bf16" : t == DType::fp16 ? "fp16" : "fp8_e4m3"; }

std::uint32_t sparse_blocks(std::uint32_t ctx, std::uint32_t block, double keep) {
  if (!(keep > 0.0 && keep <= 1.0)) throw std::invalid_argument("keep " + std::to_string(keep) + ": must be in (0, 1]");
  if (block == 0 || ctx % block)
    throw std::invalid_argument("block " + std::to_string(block) + ": must divide the ctx (" + std::to_string(ctx) +
                                ")");
  const std::uint32_t nb = ctx / block;
  const auto k = static_cast<std::uint32_t>(std::llround(nb * keep));
  if (k < 2 || nb < 2)
    throw std::invalid_argument("budget of " + std::to_string(k) + " block(s) of " + std::to_string(block) +
                                " at ctx " + std::to_string(ctx) + " and keep " + std::to_string(keep) +
                                ": smaller than sink + latest block (2 blocks)");
  return std::min(k, nb);
}

static std::uint32_t n_lists(const AttnShape& s, bool shared) { return shared ? s.batch : s.batch * s.hkv; }

Selection select_dense(const AttnShape& s, std::uint32_t span) {
  Selection sel;
  sel.geom.span = span;
  sel.geom.n_entries = s.ctx / span;
  sel.geom.shared = true;
  sel.n_lists = s.batch;
  sel.idx.resize(std::uint64_t{sel.n_lists} * sel.geom.n_entries);
  for (std::uint32_t l = 0; l < sel.n_lists; ++l)
    std::iota(sel.idx.begin() + std::uint64_t{l} * sel.geom.n_entries,
              sel.idx.begin() + std::uint64_t{l + 1} * sel.geom.n_entries, 0u);
  return sel;
}

// The top-k selections move selection_key()s (access.hpp) and write the lists from marks in index order, without
// a sort (the attention figures' routing of a 32K-key layer: 2.25 -> 1.36 s of thread time on a 2-vCPU Zen 5 VM).
// Top `k` indices of scores[lo, hi) (ties: lower index), marked in keep[lo, hi).
static void top_k(const float* scores, std::uint32_t lo, std::uint32_t hi, std::uint32_t k, std::vector<char>& keep) {
  k = std::min<std::uint32_t>(k, hi - lo);
  if (k == 0) return;
  std::vector<std::uint64_t> keys(hi - lo);
  for (std::uint32_t i = lo; i < hi; ++i) keys[i - lo] = selection_key(scores[i], i);
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
  for (std::uint32_t j = 0; j < k; ++j) keep[selection_key_index(keys[j])] = 1;
}

// The marked indices of keep[0, n), ascending, to out.
static void write_marked(const std::vector<char>& keep, std::uint32_t n, std::uint32_t* out) {
  for (std::uint32_t i = 0; i < n; ++i)
    if (keep[i]) *out++ = i;
}

std::vector<std::uint32_t> topk_by_key(const float* scores, std::uint32_t n, std::uint32_t lo, std::uint32_t hi,
                                       std::uint32_t kp) {
  if (!(lo <= hi && hi <= n) || kp > hi - lo)
    throw std::invalid_argument("topk_by_key: needs lo <= hi <= n and kp <= hi - lo");
  std::vector<std::uint32_t> ids(hi - lo);
  std::iota(ids.begin(), ids.end(), lo);
  auto better = [&](std::uint32_t a, std::uint32_t b) {
    const std::uint32_t ka = order_key(scores[a]), kb = order_key(scores[b]);
    return ka > kb || (ka == kb && a < b);
  };
  std::nth_element(ids.begin(), ids.begin() + kp, ids.end(), better);
  ids.resize(kp);
  std::sort(ids.begin(), ids.end());
  std::vector<std::uint32_t> out;
  out.reserve(lo + kp + (n - hi));
  for (std::uint32_t i = 0; i < lo; ++i) out.push_back(i);
  out.insert(out.end(), ids.begin(), ids.end());
  for (std::uint32_t i = hi; i < n; ++i) out.push_back(i);
  return out;
}

Selection select_blocks_by_score(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared,
                                 const std::vector<float>& scores) {
  const std::uint32_t nb = s.ctx / block;
  Selection sel;
  sel.geom.span = block;
  sel.geom.n_entries = k_blocks;
  sel.geom.shared = shared;
  sel.n_lists = n_lists(s, shared);
  sel.idx.resize(std::uint64_t{sel.n_lists} * k_blocks);
#pragma omp parallel for schedule(static)
  for (std::uint32_t l = 0; l < sel.n_lists; ++l) {
    std::vector<char> keep(nb, 0);
    keep[0] = keep[nb - 1] = 1;
    top_k(scores.data() + std::uint64_t{l} * nb, 1, nb - 1, k_blocks - 2, keep);
    write_marked(keep, nb, sel.idx.data() + std::uint64_t{l} * k_blocks);
  }
  return sel;
}

static Selection token_skeleton(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared) {
  Selection sel;
  sel.geom.span = 1;
  sel.geom.n_entries = k_blocks * block;
  sel.geom.shared = shared;
  sel.n_lists = n_lists(s, shared);
  sel.idx.resize(std::uint64_t{sel.n_lists} * sel.geom.n_entries);
  return sel;
}

Selection select_tokens_random(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared,
                               Scatter sc, std::uint32_t cluster_mean, std::uint64_t seed) {
  Selection sel = token_skeleton(s, block, k_blocks, shared);
  const std::uint32_t budget = sel.geom.n_entries, mid_lo = block, mid_hi = s.ctx - block;
  const std::uint32_t need = budget - 2 * block, mid_n = mid_hi - mid_lo;
  for (std::uint32_t l = 0; l < sel.n_lists; ++l) {
    std::mt19937_64 rng(seed * 1000003u + l);
    std::vector<char> taken(mid_n, 0);
    std::uint32_t got = 0;
    if (sc == Scatter::uniform || cluster_mean <= 1) {
      // Floyd's algorithm: `need` distinct values of [0, mid_n)
      for (std::uint32_t j = mid_n - need; j < mid_n; ++j) {
        const std::uint32_t t = std::uniform_int_distribution<std::uint32_t>(0, j)(rng);
        if (!taken[t]) taken[t] = 1;
        else taken[j] = 1;
      }
      got = need;
    } else {
      // Contiguous clusters of random length 1 .. 2*mean-1 at random starts, skipping taken tokens.
      std::uniform_int_distribution<std::uint32_t> start(0, mid_n - 1), len(1, 2 * cluster_mean - 1);
      while (got < need) {
        std::uint32_t t = start(rng), n = len(rng);
        for (; n && got < need && t < mid_n; ++t)
          if (!taken[t]) { taken[t] = 1; ++got; --n; }
      }
    }
    std::uint32_t* out = sel.idx.data() + std::uint64_t{l} * budget;
    std::uint32_t w = 0;
    for (std::uint32_t t = 0; t < block; ++t) out[w++] = t;
    for (std::uint32_t t = 0; t < mid_n; ++t)
      if (taken[t]) out[w++] = mid_lo + t;
    for (std::uint32_t t = mid_hi; t < s.ctx; ++t) out[w++] = t;
    (void)got;
  }
  return sel;
}

Selection select_tokens_by_score(const AttnShape& s, std::uint32_t block, std::uint32_t k_blocks, bool shared,
                                 const std::vector<float>& scores) {
  return std::move(select_tokens_by_score(s, block, std::vector<std::uint32_t>{k_blocks}, shared, scores)[0]);
}

std::vector<Selection> select_tokens_by_score(const AttnShape& s, std::uint32_t block,
                                              const std::vector<std::uint32_t>& k_blocks, bool shared,
                                              const std::vector<float>& scores) {
  std::vector<Selection> sels;
  for (const std::uint32_t kb : k_blocks) sels.push_back(token_skeleton(s, block, kb, shared));
  std::vector<std::size_t> asc(k_blocks.size());  // budgets ascending
  std::iota(asc.begin(), asc.end(), std::size_t{0});
  std::stable_sort(asc.begin(), asc.end(), [&](std::size_t x, std::size_t y) { return k_blocks[x] < k_blocks[y]; });
  const std::uint32_t lo = block, hi = s.ctx - block, n_lists = sels.empty() ? 0 : sels[0].n_lists;
  auto middle = [&](std::size_t i) { return std::min<std::uint32_t>(k_blocks[i] * block - 2 * block, hi - lo); };
#pragma omp parallel for schedule(static)
  for (std::uint32_t l = 0; l < n_lists; ++l) {
    const float* sc = scores.data() + std::uint64_t{l} * s.ctx;
    std::vector<std::uint64_t> keys(hi - lo);
    for (std::uint32_t i = lo; i < hi; ++i) keys[i - lo] = selection_key(sc[i], i);
    // Largest budget first, each on the prefix the previous one left: keys[0, k) is then the top k for every k.
    for (std::size_t j = asc.size(); j-- > 0;) {
      const std::uint32_t k = middle(asc[j]), end = j + 1 == asc.size() ? hi - lo : middle(asc[j + 1]);
      if (k > 0 && k < end) std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.begin() + end, std::greater<>());
    }
    std::vector<char> keep(s.ctx, 0);
    std::fill(keep.begin(), keep.begin() + block, 1);
    std::fill(keep.end() - block, keep.end(), 1);
    std::uint32_t marked = 0;
    for (const std::size_t i : asc) {
      for (const std::uint32_t k = middle(i); marked < k; ++marked) keep[selection_key_index(keys[marked])] = 1;
      write_marked(keep, s.ctx, sels[i].idx.data() + std::uint64_t{l} * sels[i].geom.n_entries);
    }
  }
  return sels;
}

// ---------------------------------------------------------------------------------------------- placement
bool valid_page_tokens(std::uint32_t page, std::uint32_t ctx) {
  return page == 0 || (!(page & (page - 1)) && page <= ctx && ctx % page == 0);
}
void validate_page_tokens(std::uint32_t page, std::uint32_t ctx) {
  if (!valid_page_tokens(page, ctx))
    throw std::invalid_argument("page of " + std::to_string(page) + " tokens at ctx " + std::to_string(ctx) +
                                ": must be 0 (unpaged) or a power of two dividing ctx");
}

static std::uint32_t batch_of_list(const AttnShape& s, const Selection& sel, std::uint32_t l) {
  return sel.geom.shared ? l : l / s.hkv;
}

Selection place(const AttnShape& s, const PageMap& pm, const Selection& logical) {
  if (!pm.contiguous() && s.page != pm.page)
    throw std::invalid_argument("place: the layout's page (" + std::to_string(s.page) + ") is not the page map's (" +
                                std::to_string(pm.page) + ")");
  if (pm.contiguous()) return logical;
  const std::uint32_t span = logical.geom.span, per = pm.entries_per(span);
  Selection out;
  out.geom = logical.geom;
  out.geom.span = pm.entry_span(span);
  out.geom.n_entries = logical.geom.n_entries * per;
  out.n_lists = logical.n_lists;
  out.idx.resize(std::uint64_t{out.n_lists} * out.geom.n_entries);
#pragma omp parallel for schedule(static)
  for (std::uint32_t l = 0; l < out.n_lists; ++l) {
    const std::uint32_t b = batch_of_list(s, logical, l);
    const std::uint32_t* in = logical.idx.data() + std::uint64_t{l} * logical.geom.n_entries;
    std::uint32_t* o = out.idx.data() + std::uint64_t{l} * out.geom.n_entries;
    for (std::uint32_t e = 0; e < logical.geom.n_entries; ++e)
      for (std::uint32_t r = 0; r < per; ++r) o[std::uint64_t{e} * per + r] = pm.phys_entry(b, in[e], span, r);
  }
  return out;
}

bool unplace(const AttnShape& s, const PageMap& pm, const Selection& physical, std::uint32_t logical_span,
             Selection& logical) {
  const std::uint32_t es = pm.entry_span(logical_span), per = pm.entries_per(logical_span);
  if (physical.geom.span != es || physical.geom.n_entries % per) return false;
  logical = Selection{};
  logical.geom = physical.geom;
  logical.geom.span = logical_span;
  logical.geom.n_entries = physical.geom.n_entries / per;
  logical.n_lists = physical.n_lists;
  logical.idx.resize(std::uint64_t{logical.n_lists} * logical.geom.n_entries);
  if (pm.contiguous()) {
    logical.idx = physical.idx;
    for (const auto e : physical.idx)
      if (std::uint64_t{e} * es >= s.ctx) return false;
    return true;
  }
  // Inverse page table of each batch: physical page -> logical page.
  std::vector<std::vector<std::uint32_t>> inv(s.batch, std::vector<std::uint32_t>(pm.n_pages));
  for (std::uint32_t b = 0; b < s.batch; ++b)
    for (std::uint32_t p = 0; p < pm.n_pages; ++p) inv[b][pm.phys_page(b, p)] = p;
  for (std::uint32_t l = 0; l < logical.n_lists; ++l) {
    const std::uint32_t b = batch_of_list(s, physical, l);
    const std::uint32_t* in = physical.idx.data() + std::uint64_t{l} * physical.geom.n_entries;
    std::uint32_t* o = logical.idx.data() + std::uint64_t{l} * logical.geom.n_entries;
    for (std::uint32_t e = 0; e < logical.geom.n_entries; ++e) {
      const std::uint64_t pt = std::uint64_t{in[std::uint64_t{e} * per]} * es;  // physical first token
      if (pt >= s.ctx) return false;
      const std::uint64_t lt = std::uint64_t{inv[b][pt / pm.page]} * pm.page + pt % pm.page;
      if (lt % logical_span) return false;
      o[e] = static_cast<std::uint32_t>(lt / logical_span);
      for (std::uint32_t r = 1; r < per; ++r)
        if (in[std::uint64_t{e} * per + r] != pm.phys_entry(b, o[e], logical_span, r)) return false;
    }
  }
  return true;
}

// ------------------------------------------------------------------------------------------------ routing
static inline float elem_of(DType t, const void* p, std::uint64_t i) {
  if (t == DType::fp8_e4m3) return e4m3_to_f32(static_cast<const std::uint8_t*>(p)[i]);
  const std::uint16_t h = static_cast<const std::uint16_t*>(p)[i];
  return t == DType::bf16 ? bf16_to_f32(h) : fp16_to_f32(h);
}
// Element i of K or V.
static inline float elem(const AttnShape& s, const void* p, std::uint64_t i) { return elem_of(s.dtype, p, i); }
// Element i of q.
static inline float qelem(const AttnShape& s, const void* p, std::uint64_t i) { return elem_of(s.q_dtype(), p, i); }

// dot(qsum, row) over d elements of a K row (element offset r).
static inline float dot_row(const AttnShape& s, const float* qs, const void* k, std::uint64_t r) {
#if defined(__AVX512F__)
  if (s.dtype != DType::fp8_e4m3) {
    const std::uint16_t* row = static_cast<const std::uint16_t*>(k) + r;
    __m512 a = _mm512_setzero_ps();
    for (std::uint32_t j = 0; j < s.d; j += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j));
      const __m512 kv = s.dtype == DType::bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                                               : _mm512_cvtph_ps(h);
      a = _mm512_fmadd_ps(kv, _mm512_loadu_ps(qs + j), a);
    }
    return _mm512_reduce_add_ps(a);
  }
#endif
  float a = 0;
  for (std::uint32_t j = 0; j < s.d; ++j) a += qs[j] * elem(s, k, r + j);
  return a;
}

// c[0, d) += row r (element offset) of K, widened: the dtype chosen once per row, not per element (the
// attention figures build centroids of five block sizes for each of 32 layers).
static void add_row(DType t, const void* k, std::uint64_t r, std::uint32_t d, float* c) {
  if (t == DType::fp8_e4m3) {
    const std::uint8_t* row = static_cast<const std::uint8_t*>(k) + r;
    for (std::uint32_t i = 0; i < d; ++i) c[i] += e4m3_to_f32(row[i]);
    return;
  }
  const std::uint16_t* row = static_cast<const std::uint16_t*>(k) + r;
  if (t == DType::bf16)
    for (std::uint32_t i = 0; i < d; ++i) c[i] += bf16_to_f32(row[i]);
  else
    for (std::uint32_t i = 0; i < d; ++i) c[i] += fp16_to_f32(row[i]);
}

void build_centroids(const AttnShape& s, const void* k, std::uint32_t block, std::vector<float>& cent,
                     const PageMap& pm) {
  const std::uint32_t nb = s.ctx / block;
  cent.assign(std::uint64_t{s.batch} * s.hkv * nb * s.d, 0.0f);
  const KvLayout kl = s.kv_layout();
#pragma omp parallel for collapse(2) schedule(static)
  for (std::uint32_t bh = 0; bh < s.batch * s.hkv; ++bh)
    for (std::uint32_t j = 0; j < nb; ++j) {
      const std::uint32_t b = bh / s.hkv, h = bh % s.hkv;
      float* c = cent.data() + (std::uint64_t{bh} * nb + j) * s.d;
      for (std::uint32_t t = j * block; t < (j + 1) * block; ++t)
        add_row(s.dtype, k, kl.row(b, pm.phys_token(b, t), h, s.ctx), s.d, c);
      for (std::uint32_t d = 0; d < s.d; ++d) c[d] /= static_cast<float>(block);
    }
}

// Sum of the query heads of kv head h of batch b, as fp32 [d].
static void q_sum(const AttnShape& s, const void* q, std::uint32_t b, std::uint32_t h, float* out) {
  const std::uint32_t G = s.group();
  for (std::uint32_t d = 0; d < s.d; ++d) {
    float a = 0;
    for (std::uint32_t g = 0; g < G; ++g) a += qelem(s, q, (std::uint64_t{b} * s.hq + h * G + g) * s.d + d);
    out[d] = a;
  }
}

void score_blocks(const AttnShape& s, const void* q, const std::vector<float>& cent, std::uint32_t block,
                  bool shared, std::vector<float>& scores) {
  const std::uint32_t nb = s.ctx / block, nl = n_lists(s, shared);
  scores.assign(std::uint64_t{nl} * nb, 0.0f);
#pragma omp parallel for schedule(static)
  for (std::uint32_t bh = 0; bh < s.batch * s.hkv; ++bh) {
    const std::uint32_t b = bh / s.hkv, h = bh % s.hkv;
    float qs[128];
    q_sum(s, q, b, h, qs);
    float* out = scores.data() + std::uint64_t{shared ? b : bh} * nb;
    for (std::uint32_t j = 0; j < nb; ++j) {
      const float* c = cent.data() + (std::uint64_t{bh} * nb + j) * s.d;
      float a = 0;
#pragma omp simd reduction(+ : a)
      for (std::uint32_t d = 0; d < s.d; ++d) a += qs[d] * c[d];
      if (shared) {
#pragma omp atomic
        out[j] += a;
      } else {
        out[j] = a;
      }
    }
  }
}

// Token by token within runs of one page (one page-table lookup per run, not per token and head), every kv
// head of a run before the next run: a thread reads whole pages, in one parallel region for all heads. Heads
// were the outer loop with the page table walked per token and head (and again for the prefetch): token routing
// alone at 64K took 19.9 ms on a 2-vCPU Zen 5 VM, 8.3-8.9 ms so. A shared list adds the heads in head order.
void score_tokens(const AttnShape& s, const void* q, const void* k, bool shared, std::vector<float>& scores,
                  const PageMap& pm) {
  const std::uint32_t nl = n_lists(s, shared), nbh = s.batch * s.hkv;
  scores.assign(std::uint64_t{nl} * s.ctx, 0.0f);
  const KvLayout kl = s.kv_layout();
  std::vector<float> qs(std::uint64_t{nbh} * s.d);
  for (std::uint32_t bh = 0; bh < nbh; ++bh) q_sum(s, q, bh / s.hkv, bh % s.hkv, qs.data() + std::uint64_t{bh} * s.d);
  const std::uint32_t run = pm.contiguous() ? 64 : pm.page;
  const std::uint64_t runs = (s.ctx + run - 1) / run;
#pragma omp parallel for schedule(static)
  for (std::uint64_t u = 0; u < s.batch * runs; ++u) {
    const std::uint32_t b = static_cast<std::uint32_t>(u / runs);
    const std::uint32_t t0 = static_cast<std::uint32_t>(u % runs) * run, n = std::min(run, s.ctx - t0);
    const std::uint64_t p0 = pm.phys_token(b, t0);  // the run's tokens are p0 .. p0 + n - 1
    if (u + 2 < s.batch * runs) {  // the run after next, every line of its rows: pages are in random order
      const std::uint32_t b2 = static_cast<std::uint32_t>((u + 2) / runs), t2 = static_cast<std::uint32_t>((u + 2) % runs) * run;
      const std::uint64_t p2 = pm.phys_token(b2, t2), row_bytes = s.d * dtype_bytes(s.dtype);
      for (std::uint32_t h = 0; h < s.hkv; ++h)
        for (std::uint32_t i = 0; i < std::min(run, s.ctx - t2); ++i) {
          const char* r = static_cast<const char*>(k) + kl.row(b2, p2 + i, h, s.ctx) * dtype_bytes(s.dtype);
          for (std::uint64_t x = 0; x < row_bytes; x += 64) __builtin_prefetch(r + x, 0, 0);
        }
    }
    for (std::uint32_t h = 0; h < s.hkv; ++h) {
      const float* qh = qs.data() + (std::uint64_t{b} * s.hkv + h) * s.d;
      float* out = scores.data() + std::uint64_t{shared ? b : b * s.hkv + h} * s.ctx + t0;
      for (std::uint32_t i = 0; i < n; ++i) {
        const float a = dot_row(s, qh, k, kl.row(b, p0 + i, h, s.ctx));
        if (shared) out[i] += a;
        else out[i] = a;
      }
    }
  }
}

// -------------------------------------------------------------------------------------- low-rank proxy
bool valid_proxy_rank(std::uint32_t r, std::uint32_t d) { return (r == 8 || r == 16 || r == 32 || r == 64) && r < d; }

void build_lowrank(const AttnShape& s, const void* k, std::uint32_t r, LowRank& lr, const PageMap& pm) {
  if (!valid_proxy_rank(r, s.d))
    throw std::invalid_argument("proxy rank " + std::to_string(r) + ": allowed 8, 16, 32, 64 (below the head dim " +
                                std::to_string(s.d) + ")");
  const std::uint32_t D = s.d, nbh = s.batch * s.hkv;
  lr.r = r;
  lr.basis.assign(std::uint64_t{nbh} * D * r, 0.0f);
  lr.keys.assign(std::uint64_t{nbh} * s.ctx * r, 0.0f);
  const std::uint32_t stride = std::max<std::uint32_t>(1, s.ctx / 4096);
  const KvLayout kl = s.kv_layout();
#pragma omp parallel for schedule(dynamic)
  for (std::uint32_t bh = 0; bh < nbh; ++bh) {
    const std::uint32_t b = bh / s.hkv, h = bh % s.hkv;
    // Second moment C = sum k k^T over the sampled tokens (double).
    std::vector<double> C(std::uint64_t{D} * D, 0.0);
    std::vector<double> row(D);
    for (std::uint32_t t = 0; t < s.ctx; t += stride) {
      const std::uint64_t off = kl.row(b, pm.phys_token(b, t), h, s.ctx);
      for (std::uint32_t i = 0; i < D; ++i) row[i] = elem(s, k, off + i);
      for (std::uint32_t i = 0; i < D; ++i)
        for (std::uint32_t j = i; j < D; ++j) C[std::uint64_t{i} * D + j] += row[i] * row[j];
    }
    for (std::uint32_t i = 0; i < D; ++i)
      for (std::uint32_t j = 0; j < i; ++j) C[std::uint64_t{i} * D + j] = C[std::uint64_t{j} * D + i];
    // Subspace iteration: Q <- orth(C Q), Q [D][r] (column-major in Qc[c][i]), deterministic start.
    std::vector<double> Q(std::uint64_t{r} * D), Z(std::uint64_t{r} * D);
    for (std::uint32_t c = 0; c < r; ++c)
      for (std::uint32_t i = 0; i < D; ++i) Q[std::uint64_t{c} * D + i] = pattern_unit(bh * 131 + c, i) + (i == c);
    auto orth = [&](std::vector<double>& M) {  // modified Gram-Schmidt on the r columns
      for (std::uint32_t c = 0; c < r; ++c) {
        double* v = M.data() + std::uint64_t{c} * D;
        for (std::uint32_t p = 0; p < c; ++p) {
          const double* u = M.data() + std::uint64_t{p} * D;
          double dot = 0;
          for (std::uint32_t i = 0; i < D; ++i) dot += u[i] * v[i];
          for (std::uint32_t i = 0; i < D; ++i) v[i] -= dot * u[i];
        }
        double n = 0;
        for (std::uint32_t i = 0; i < D; ++i) n += v[i] * v[i];
        n = n > 0 ? 1.0 / std::sqrt(n) : 0.0;
        for (std::uint32_t i = 0; i < D; ++i) v[i] *= n;
      }
    };
    orth(Q);
    for (int it = 0; it < 12; ++it) {
      for (std::uint32_t c = 0; c < r; ++c)
        for (std::uint32_t i = 0; i < D; ++i) {
          double a = 0;
          for (std::uint32_t j = 0; j < D; ++j) a += C[std::uint64_t{i} * D + j] * Q[std::uint64_t{c} * D + j];
          Z[std::uint64_t{c} * D + i] = a;
        }
      orth(Z);
      Q.swap(Z);
    }
    float* P = lr.basis.data() + std::uint64_t{bh} * D * r;
    for (std::uint32_t i = 0; i < D; ++i)
      for (std::uint32_t c = 0; c < r; ++c) P[std::uint64_t{i} * r + c] = static_cast<float>(Q[std::uint64_t{c} * D + i]);
    // Projected keys, logical order.
    float* kp = lr.keys.data() + std::uint64_t{bh} * s.ctx * r;
    std::vector<float> kr(D);
    for (std::uint32_t t = 0; t < s.ctx; ++t) {
      const std::uint64_t off = kl.row(b, pm.phys_token(b, t), h, s.ctx);
      for (std::uint32_t i = 0; i < D; ++i) kr[i] = elem(s, k, off + i);
      float* o = kp + std::uint64_t{t} * r;
      for (std::uint32_t c = 0; c < r; ++c) o[c] = 0.0f;
      for (std::uint32_t i = 0; i < D; ++i)
        for (std::uint32_t c = 0; c < r; ++c) o[c] += kr[i] * P[std::uint64_t{i} * r + c];
    }
  }
}

void score_tokens_lowrank(const AttnShape& s, const void* q, const LowRank& lr, bool shared,
                          std::vector<float>& scores) {
  const std::uint32_t nl = n_lists(s, shared), r = lr.r, D = s.d;
  scores.assign(std::uint64_t{nl} * s.ctx, 0.0f);
  for (std::uint32_t bh = 0; bh < s.batch * s.hkv; ++bh) {
    const std::uint32_t b = bh / s.hkv, h = bh % s.hkv;
    float qs[128], qp[64];
    q_sum(s, q, b, h, qs);
    const float* P = lr.basis.data() + std::uint64_t{bh} * D * r;
    for (std::uint32_t c = 0; c < r; ++c) qp[c] = 0.0f;
    for (std::uint32_t i = 0; i < D; ++i)
      for (std::uint32_t c = 0; c < r; ++c) qp[c] += qs[i] * P[std::uint64_t{i} * r + c];
    const float* kp = lr.keys.data() + std::uint64_t{bh} * s.ctx * r;
    float* out = scores.data() + std::uint64_t{shared ? b : bh} * s.ctx;
#pragma omp parallel for schedule(static)
    for (std::uint32_t t = 0; t < s.ctx; ++t) {
      const float* row = kp + std::uint64_t{t} * r;
      float a = 0;
#pragma omp simd reduction(+ : a)
      for (std::uint32_t c = 0; c < r; ++c) a += qp[c] * row[c];
      if (shared) out[t] += a;  // heads run one after another: no race
      else out[t] = a;
    }
  }
}

// -------------------------------------------------------------------------------------------------- fills
void fill_qkv(const AttnShape& s, void* q, void* k, void* v, std::uint64_t seed) {
  auto put = [](DType t, void* p, std::uint64_t n, std::uint64_t sd, float mul) {
#pragma omp parallel for schedule(static)
    for (std::uint64_t i = 0; i < n; ++i) {
      const float x = pattern_unit(sd, i) * mul;
      if (t == DType::fp8_e4m3) static_cast<std::uint8_t*>(p)[i] = f32_to_e4m3(x);
      else static_cast<std::uint16_t*>(p)[i] = t == DType::bf16 ? f32_to_bf16(x) : f32_to_fp16(x);
    }
  };
  put(s.q_dtype(), q, s.q_elems(), seed * 3 + 1, 4.0f);
  put(s.dtype, k, s.kv_elems(), seed * 3 + 2, 1.0f);
  put(s.dtype, v, s.kv_elems(), seed * 3 + 3, 1.0f);
}

// ---------------------------------------------------------------------------------------------- reference
void attention_ref(const AttnShape& s, const void* q, const void* k, const void* v, const Selection& sel,
                   float* out) {
  const std::uint32_t G = s.group(), D = s.d;
  const std::uint64_t n = sel.geom.n_tokens();
  const float scale = s.scale();
  const KvLayout kl = s.kv_layout();
#pragma omp parallel for schedule(dynamic)
  for (std::uint64_t bq = 0; bq < std::uint64_t{s.batch} * s.hq; ++bq) {
    const std::uint64_t b = bq / s.hq, hq = bq % s.hq, h = hq / G;
    const std::uint32_t* list = sel.idx.data() + sel.geom.list_offset(b, h, s.hkv);
    std::vector<float> qf(D), sc(n);
    for (std::uint32_t d = 0; d < D; ++d) qf[d] = qelem(s, q, bq * D + d);
    double mx = -1e300;
    for (std::uint64_t t = 0; t < n; ++t) {
      const std::uint64_t r = kl.row(b, sel.geom.token(list, t), h, s.ctx);
      float a = 0;
      for (std::uint32_t d = 0; d < D; ++d) a += qf[d] * elem(s, k, r + d);
      sc[t] = a * scale;
      mx = std::max<double>(mx, sc[t]);
    }
    std::vector<double> o(D, 0.0);
    double l = 0;
    for (std::uint64_t t = 0; t < n; ++t) {
      const double p = std::exp(static_cast<double>(sc[t]) - mx);
      l += p;
      const std::uint64_t r = kl.row(b, sel.geom.token(list, t), h, s.ctx);
      for (std::uint32_t d = 0; d < D; ++d) o[d] += p * elem(s, v, r + d);
    }
    for (std::uint32_t d = 0; d < D; ++d) out[bq * D + d] = static_cast<float>(o[d] / l);
  }
}

double attention_rel_error(const float* out, const float* ref, std::size_t n) {
  double e = 0, m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(out[i]) - ref[i]);
    if (!(d <= e)) e = d;  // NaN propagates
    m = std::max(m, std::fabs(static_cast<double>(ref[i])));
  }
  return m > 0 ? e / m : e;
}

double attention_bytes(const AttnShape& s, const Selection& sel) {
  const double rows = static_cast<double>(s.batch) * s.hkv * sel.geom.n_tokens();
  return 2.0 * rows * s.d * dtype_bytes(s.dtype) + static_cast<double>(s.q_bytes()) +
         static_cast<double>(sel.idx.size()) * 4.0;
}
double attention_flops(const AttnShape& s, const Selection& sel) {
  return 4.0 * s.batch * s.hq * static_cast<double>(sel.geom.n_tokens()) * s.d;
}

}  // namespace kvf::access
