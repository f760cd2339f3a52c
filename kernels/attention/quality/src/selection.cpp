// Recall of attention mass, output error and needle mass under the access study's block and token
// selections and the oracle, at equal token budgets.
//
// One definition of each selection: the access study's functions are called on bf16 copies of the
// captured q and k (AttnShape batch 1, HND, unpaged: the copy of k is exactly [hkv][ctx][d]). bf16 is what the
// access study's benches route on and what a bf16 model caches, and keeping its own scorers here (instead of
// an fp32 rewrite of centroid and q . k scoring) means a change there changes these figures too. The true
// probabilities stay fp32 (true_probs): only the ranking sees bf16.
//
// Cost per (query head, row): one pass over the visible keys (dense output and granule sums of p and p v,
// the G heads of a kv head together), then per block size its block sums from a smaller block size's or the
// granules; the block arm sums its kept blocks, the token arm one walk of the score order up to the largest
// budget for every block size (each access-study list checked to be its cut of that walk; else one walk per
// block size over the lists), the oracle one walk up to the largest budget (its budgets are prefixes of one
// order). Multi-threaded over the query rows.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>

#include "access.hpp"
#include "kvf/attention/quality.hpp"
#include "kvf/host_memory.hpp"

namespace kvf::attention::quality {

namespace acc = kvf::access;

const char* to_string(Arm a) { return a == Arm::block ? "block" : a == Arm::token ? "token" : "oracle"; }

double needle_depth_pct(std::uint32_t ctx, Needle n) {
  return ctx > n.len ? 100.0 * n.pos / (ctx - n.len) : 0.0;
}

std::uint32_t needle_pos(std::uint32_t ctx, std::uint32_t len, double depth_pct) {
  if (len == 0 || len > ctx)
    throw std::invalid_argument("needle of " + std::to_string(len) + " tokens: must be in [1, ctx = " +
                                std::to_string(ctx) + "]");
  if (!(depth_pct >= 0.0 && depth_pct <= 100.0))
    throw std::invalid_argument("needle depth " + std::to_string(depth_pct) + "%: must be in [0, 100]");
  return static_cast<std::uint32_t>(std::llround(depth_pct / 100.0 * (ctx - len)));
}

namespace {

constexpr int kArms = 3;
std::atomic<bool> g_token_walk_per_block{false};  // testing::token_walk_per_block

// The access study's view of one captured layer: batch 1, bf16 K in HND order, unpaged (the bf16 copy of k is
// exactly [hkv][ctx][d]).
acc::AttnShape routing_shape(const LayerAttention& a) {
  acc::AttnShape s;
  s.batch = 1;
  s.hq = a.hq;
  s.hkv = a.hkv;
  s.d = a.d;
  s.ctx = a.ctx;
  s.dtype = acc::DType::bf16;
  s.layout = acc::Layout::HND;
  s.page = 0;
  return s;
}

// k in bf16, as the access study routes on it, written on every core.
void keys_bf16(const LayerAttention& a, std::uint16_t* out) {
  const float* k = a.k.data();
  const std::int64_t n = static_cast<std::int64_t>(a.k.size());
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = acc::f32_to_bf16(k[i]);
}

// One (block, keep) of the sweep whose budget fits.
struct Combo {
  std::uint32_t block = 0, bi = 0;  // bi: index of the block size among the distinct ones
  double keep = 0;
  std::uint32_t k_blocks = 0, budget = 0;
};

void check_options(const LayerAttention& a, const SelectionOptions& opt) {
  if (opt.blocks.empty() || opt.keeps.empty())
    throw std::invalid_argument("selection sweep without block sizes or keep fractions: at least one of each is needed");
  for (const double k : opt.keeps)
    if (!(k > 0.0 && k <= 1.0)) throw std::invalid_argument("keep " + std::to_string(k) + ": must be in (0, 1]");
  for (const std::uint32_t b : opt.blocks)
    if (b == 0 || a.ctx % b)
      throw std::invalid_argument("block " + std::to_string(b) + ": must divide the ctx (" + std::to_string(a.ctx) + ")");
  const std::uint32_t min_block = *std::min_element(opt.blocks.begin(), opt.blocks.end());
  if (a.causal && a.rows - 1 > min_block)
    throw std::invalid_argument("rows (M) " + std::to_string(a.rows) + " with block " + std::to_string(min_block) +
                                ": the keys a causal row cannot see (up to M - 1) must lie in the latest block, "
                                "which every arm keeps, so M - 1 <= the smallest block");
  for (const Needle& n : opt.needles)
    if (n.len == 0 || std::uint64_t{n.pos} + n.len > a.ctx)
      throw std::invalid_argument("needle [" + std::to_string(n.pos) + ", " + std::to_string(std::uint64_t{n.pos} + n.len) +
                                  "): must be a non-empty span of [0, ctx = " + std::to_string(a.ctx) + ")");
}

// Sums over one query row's kept tokens.
struct Kept {
  double mass = 0;
  std::vector<double> pv;      // [d]: sum p v
  std::vector<double> nmass;   // per needle: kept probability on it
  std::vector<std::uint32_t> ncount;  // per needle: kept tokens of it
  void reset() {
    mass = 0;
    std::fill(pv.begin(), pv.end(), 0.0);
    std::fill(nmass.begin(), nmass.end(), 0.0);
    std::fill(ncount.begin(), ncount.end(), 0u);
  }
};

// Per (row, combo, arm, query head): one row's figures, averaged over the rows in row order at the end (the
// same sums whichever thread took a row).
struct ArmSums {
  double recall = 0, err = 0;
};
struct NeedleSums {
  double kept = 0, all_kept = 0;
};

// Everything one layer's sweep shares.
struct Sweep {
  const LayerAttention& a;
  std::span<const float> probs;
  const SelectionOptions& opt;
  std::vector<Combo> combos;
  std::vector<std::uint32_t> blocks;  // distinct block sizes that have a combo
  std::vector<std::size_t> blocks_ascending;  // indices of blocks, smallest block first
  std::uint32_t granule = 0;          // gcd of those blocks
  std::uint32_t max_budget = 0;
  std::vector<ArmSums> sums;          // [row][combo][arm][hq]
  std::vector<NeedleSums> nsums;      // [row][combo][arm][needle][hq]
  std::vector<double> nmass;          // [row][needle][hq]: dense mass on the needle

  std::size_t at(std::uint32_t r, std::size_t c, int arm, std::uint32_t h) const {
    return ((r * combos.size() + c) * kArms + arm) * a.hq + h;
  }
  std::size_t nat(std::uint32_t r, std::size_t c, int arm, std::size_t n, std::uint32_t h) const {
    return (((r * combos.size() + c) * kArms + arm) * opt.needles.size() + n) * a.hq + h;
  }
  std::size_t mat(std::uint32_t r, std::size_t n, std::uint32_t h) const {
    return (r * opt.needles.size() + n) * a.hq + h;
  }
};

// Per-thread scratch of one (query head, row); the row's selections are the thread's (select_row).
struct HeadScratch {
  std::uint32_t row = 0;
  const std::vector<acc::Selection>* bsel = nullptr;  // [combo], one list per kv head
  const std::vector<acc::Selection>* tsel = nullptr;
  std::vector<double> dense;                    // [d]
  std::vector<double> gm, gpv;                  // granules: [ng], [ng][d]
  std::vector<std::vector<double>> bm, bpv;     // per block size: [nb], [nb][d]
  std::vector<std::uint64_t> keys;              // oracle: selection_key(p, position), cut at the budgets
  std::vector<char> kept_block;                 // [nb] of the block arm's current list
  Kept kept;
};

void add_token(const Sweep& sw, const float* p, const float* vh, std::uint32_t t, Kept& k) {
  const double pt = p[t];
  if (pt == 0.0) return;  // masked or underflowed: adds nothing (and needle counts below use the list)
  k.mass += pt;
  const float* vr = vh + std::uint64_t{t} * sw.a.d;
  for (std::uint32_t j = 0; j < sw.a.d; ++j) k.pv[j] += pt * vr[j];
}

// The V row of a token a walk adds a few tokens later, asked for now: the token and oracle walks visit rows out
// of order (the oracle's) or with gaps (a token list), where the hardware prefetchers do not follow and every row
// waited for memory (the walks were latency-bound: most of their time on the row's first load).
constexpr std::uint32_t kPrefetchTokens = 8;
inline void prefetch_row(const Sweep& sw, const float* vh, std::uint32_t t) {
  const char* row = reinterpret_cast<const char*>(vh + std::uint64_t{t} * sw.a.d);
  for (std::uint32_t b = 0; b < sw.a.d * sizeof(float); b += 64) __builtin_prefetch(row + b);
}

void add_needles_of_token(const Sweep& sw, const float* p, std::uint32_t t, Kept& k) {
  for (std::size_t n = 0; n < sw.opt.needles.size(); ++n) {
    const Needle& nd = sw.opt.needles[n];
    if (t >= nd.pos && t < nd.pos + nd.len) {
      k.nmass[n] += p[t];
      ++k.ncount[n];
    }
  }
}

// Adds one row's figures of a kept set to the sums: recall, output error, needle mass.
void finish(Sweep& sw, const HeadScratch& hs, std::size_t c, int arm, std::uint32_t h) {
  const Kept& k = hs.kept;
  const std::uint32_t D = sw.a.d;
  double err = NAN;
  if (k.mass > 0.0) {
    double e2 = 0, o2 = 0;
    for (std::uint32_t j = 0; j < D; ++j) {
      const double diff = k.pv[j] / k.mass - hs.dense[j];
      e2 += diff * diff;
      o2 += hs.dense[j] * hs.dense[j];
    }
    err = o2 > 0.0 ? std::sqrt(e2 / o2) : std::sqrt(e2);
  }
  ArmSums& s = sw.sums[sw.at(hs.row, c, arm, h)];
  s.recall += k.mass;
  s.err += err;
  for (std::size_t n = 0; n < sw.opt.needles.size(); ++n) {
    NeedleSums& ns = sw.nsums[sw.nat(hs.row, c, arm, n, h)];
    ns.kept += k.nmass[n];
    ns.all_kept += k.ncount[n] == sw.opt.needles[n].len ? 1.0 : 0.0;
  }
}

// From one head's granule sums: the dense output and the block sums of every block size.
void head_sums(const Sweep& sw, HeadScratch& hs) {
  const std::uint32_t D = sw.a.d, g = sw.granule;
  // Each block size's sums from the largest smaller one it is a multiple of (else the granules), each block
  // written once: not zero-filled first and then accumulated from the granules, once per block size.
  hs.bm.resize(sw.blocks.size());
  hs.bpv.resize(sw.blocks.size());
  for (const std::size_t bi : sw.blocks_ascending) {
    const std::uint32_t block = sw.blocks[bi], nb = sw.a.ctx / block;
    const double* src_m = hs.gm.data();
    const double* src_pv = hs.gpv.data();
    std::uint32_t src = g;
    for (const std::size_t bj : sw.blocks_ascending) {
      if (sw.blocks[bj] >= block) break;
      if (block % sw.blocks[bj] == 0) {
        src = sw.blocks[bj];
        src_m = hs.bm[bj].data();
        src_pv = hs.bpv[bj].data();
      }
    }
    const std::uint32_t per = block / src;
    hs.bm[bi].resize(nb);
    hs.bpv[bi].resize(std::size_t(nb) * D);
    for (std::uint32_t b = 0; b < nb; ++b) {
      double* bp = hs.bpv[bi].data() + std::size_t(b) * D;
      std::copy_n(src_pv + std::size_t(b) * per * D, D, bp);
      double m = src_m[std::size_t(b) * per];
      for (std::uint32_t i = 1; i < per; ++i) {
        m += src_m[std::size_t(b) * per + i];
        const double* sp = src_pv + (std::size_t(b) * per + i) * D;
        for (std::uint32_t j = 0; j < D; ++j) bp[j] += sp[j];
      }
      hs.bm[bi][b] = m;
    }
  }
  // o = sum p v / sum p: normalized by its own mass like o_kept, so keeping every key gives o_kept = o to
  // double rounding, not to the fp32 rounding of the probabilities' sum (or a hook's 1e-3 slack). Summed over
  // the largest blocks (the fewest rows).
  const std::size_t big = sw.blocks_ascending.back();
  hs.dense.assign(D, 0.0);
  double total = 0;
  for (std::uint32_t b = 0; b < sw.a.ctx / sw.blocks[big]; ++b) {
    total += hs.bm[big][b];
    for (std::uint32_t j = 0; j < D; ++j) hs.dense[j] += hs.bpv[big][std::size_t(b) * D + j];
  }
  if (total > 0.0)
    for (std::uint32_t j = 0; j < D; ++j) hs.dense[j] /= total;
}

// Granule sums of p and p v of the G query heads of one kv head for one row: each V row is read once for
// the G heads (the pass is bound by reading V: 4 MiB per kv head at 8K keys, more than a core's L2).
void group_sums(const Sweep& sw, const float* const* ps, const float* vh, std::uint32_t vis,
                std::vector<HeadScratch>& hs) {
  const std::uint32_t D = sw.a.d, g = sw.granule, ng = sw.a.ctx / g;
  for (HeadScratch& x : hs) {
    x.gm.resize(ng);
    x.gpv.resize(std::size_t(ng) * D);
  }
  // Granule by granule, each zeroed as it is reached (in L1), not the whole [ng][d] array first: that was a
  // memset of 2 MiB per head (at 32K keys) before every pass, one of the figures' largest memsets.
  for (std::uint32_t i = 0; i < ng; ++i) {
    for (HeadScratch& x : hs) {
      x.gm[i] = 0.0;
      std::fill_n(x.gpv.data() + std::size_t(i) * D, D, 0.0);
    }
    for (std::uint32_t t = i * g; t < std::min(vis, (i + 1) * g); ++t) {
      const float* vr = vh + std::uint64_t{t} * D;
      for (std::size_t x = 0; x < hs.size(); ++x) {
        const double pt = ps[x][t];
        if (pt == 0.0) continue;
        double* gp = hs[x].gpv.data() + std::size_t(i) * D;
        hs[x].gm[i] += pt;
        for (std::uint32_t j = 0; j < D; ++j) gp[j] += pt * vr[j];
      }
    }
  }
  for (HeadScratch& x : hs) head_sums(sw, x);
}

// Block arm: the kept blocks' sums; needle tokens counted by their block.
void eval_block(Sweep& sw, const float* p, std::size_t c, std::uint32_t h, HeadScratch& hs) {
  const Combo& cb = sw.combos[c];
  const std::uint32_t D = sw.a.d, nb = sw.a.ctx / cb.block, l = h / sw.a.group();
  const std::uint32_t* ids = (*hs.bsel)[c].idx.data() + std::uint64_t{l} * cb.k_blocks;
  Kept& k = hs.kept;
  k.reset();
  hs.kept_block.assign(nb, 0);
  for (std::uint32_t e = 0; e < cb.k_blocks; ++e) {
    const std::uint32_t j = ids[e];
    hs.kept_block[j] = 1;
    k.mass += hs.bm[cb.bi][j];
    const double* bp = hs.bpv[cb.bi].data() + std::size_t(j) * D;
    for (std::uint32_t x = 0; x < D; ++x) k.pv[x] += bp[x];
  }
  for (std::size_t n = 0; n < sw.opt.needles.size(); ++n) {
    const Needle& nd = sw.opt.needles[n];
    for (std::uint32_t t = nd.pos; t < nd.pos + nd.len; ++t)
      if (hs.kept_block[t / cb.block]) {
        k.nmass[n] += p[t];
        ++k.ncount[n];
      }
  }
  finish(sw, hs, c, static_cast<int>(Arm::block), h);
}

// Token arm: the access study's token lists of this head's kv head for one block size, budgets ascending.
// At one block size the lists nest (the same forced blocks, and the top-k of one total order: score, then
// the lower position), so each list adds only the tokens its predecessor lacks: the sums over the kept
// tokens cost the largest budget once instead of every budget. A list that does not contain its predecessor
// (the access study's top-k changed its order) is summed from scratch: the figures never rest on the nesting.
// The G heads of one kv head share its lists: each kept V row is read once for all of them.
void eval_token(Sweep& sw, const float* const* ps, const float* vh, const std::vector<std::size_t>& combos,
                std::uint32_t h0, std::vector<HeadScratch>& hs) {
  const std::uint32_t l = h0 / sw.a.group();
  auto add = [&](std::uint32_t t) {
    for (std::size_t x = 0; x < hs.size(); ++x) {
      add_token(sw, ps[x], vh, t, hs[x].kept);
      add_needles_of_token(sw, ps[x], t, hs[x].kept);
    }
  };
  const std::uint32_t* prev = nullptr;
  std::uint32_t prev_n = 0;
  for (HeadScratch& x : hs) x.kept.reset();
  for (const std::size_t c : combos) {
    const std::uint32_t n = sw.combos[c].budget;
    const std::uint32_t* ids = (*hs[0].tsel)[c].idx.data() + std::uint64_t{l} * n;
    std::uint32_t i = 0, j = 0;
    bool nested = prev != nullptr;
    for (; nested && j < n; ++j) {  // merge walk of two ascending lists
      if (j + kPrefetchTokens < n) prefetch_row(sw, vh, ids[j + kPrefetchTokens]);
      if (i < prev_n && prev[i] == ids[j]) {
        ++i;
        continue;
      }
      if (i < prev_n && prev[i] < ids[j]) nested = false;  // prev[i] is not in this list
      else add(ids[j]);
    }
    if (!nested || i < prev_n) {
      for (HeadScratch& x : hs) x.kept.reset();
      for (j = 0; j < n; ++j) {
        if (j + kPrefetchTokens < n) prefetch_row(sw, vh, ids[j + kPrefetchTokens]);
        add(ids[j]);
      }
    }
    for (std::size_t x = 0; x < hs.size(); ++x) finish(sw, hs[x], c, static_cast<int>(Arm::token), h0 + x);
    prev = ids;
    prev_n = n;
  }
}

// Kept sums combine linearly: a kept set's sums from those of sets it is made of.
void kept_add(Kept& k, const Kept& o, double sign) {
  k.mass += sign * o.mass;
  for (std::size_t j = 0; j < k.pv.size(); ++j) k.pv[j] += sign * o.pv[j];
  for (std::size_t n = 0; n < k.nmass.size(); ++n) {
    k.nmass[n] += sign * o.nmass[n];
    k.ncount[n] = sign > 0 ? k.ncount[n] + o.ncount[n] : k.ncount[n] - o.ncount[n];
  }
}

// Scratch of the one-walk token arm (per thread).
struct TokenWalk {
  std::vector<std::uint64_t> keys;          // selection_key(score, position), the walked prefix sorted
  std::vector<std::uint32_t> pos;           // [ctx]: a token's place in the walk, UINT32_MAX past it
  std::vector<std::pair<std::uint32_t, std::size_t>> events;  // (cut, combo), ascending: a cut is the walk
                                                              // position whose prefix holds the combo's middle
  std::vector<std::vector<Kept>> edge_walked, edge_all;       // [block index][head]: E_B (edge tokens walked), F_B
  std::vector<std::vector<Kept>> snap;                        // [combo][head]
  std::vector<Kept> sum;                                      // [head]: S, every token walked
};

Kept kept_like(const Kept& k) {
  Kept z;
  z.pv.assign(k.pv.size(), 0.0);
  z.nmass.assign(k.nmass.size(), 0.0);
  z.ncount.assign(k.ncount.size(), 0u);
  return z;
}

// Token arm, every block size in one walk. A token list of block size B and budget b is the sink and latest
// blocks (the edge: t < B or t >= ctx - B) and the first b - 2B middle tokens of ONE order of the scores (the
// access study's: score descending, then the lower position), so walking that order once and cutting it where
// each list's middle count is reached gives every list: kept = S - E_B + F_B at the cut (S: every token walked,
// E_B: the edge tokens of B walked, F_B: all of B's edge). One walk of up to the largest budget instead of one per
// block size. The figures still rest on the access study's lists, not on this reading of them: each list must be
// exactly its cut (its edge tokens all there, its middle tokens all before the cut, as many as the cut holds),
// else false and the per-block walks run instead.
bool eval_token_one_walk(Sweep& sw, const float* const* ps, const float* vh, const float* scores,
                         const std::vector<std::vector<std::size_t>>& by_block, std::uint32_t h0,
                         std::vector<HeadScratch>& hs, TokenWalk& tw) {
  const std::uint32_t N = sw.a.ctx, l = h0 / sw.a.group();
  const std::uint32_t W = std::min(N, sw.max_budget);
  tw.keys.resize(N);
  for (std::uint32_t t = 0; t < N; ++t)
    tw.keys[t] = acc::selection_key(scores[t], t);
  if (W < N) std::nth_element(tw.keys.begin(), tw.keys.begin() + (W - 1), tw.keys.end(), std::greater<>());
  std::sort(tw.keys.begin(), tw.keys.begin() + W, std::greater<>());
  auto token_at = [&](std::uint32_t i) { return acc::selection_key_index(tw.keys[i]); };
  tw.pos.assign(N, UINT32_MAX);
  for (std::uint32_t i = 0; i < W; ++i) tw.pos[token_at(i)] = i;
  // The cuts, from the middle counts along the walk, and each list checked against its cut.
  tw.events.clear();
  for (const std::vector<std::size_t>& combos : by_block) {
    const std::uint32_t B = sw.combos[combos.front()].block;
    std::uint32_t middle = 0, i = 0;
    for (const std::size_t c : combos) {  // budgets ascending
      const std::uint32_t want = sw.combos[c].budget - 2 * B;
      for (; middle < want && i < W; ++i) {
        const std::uint32_t t = token_at(i);
        if (t >= B && t < N - B) ++middle;
      }
      if (middle < want) return false;
      const std::uint32_t n = sw.combos[c].budget;
      const std::uint32_t* ids = (*hs[0].tsel)[c].idx.data() + std::uint64_t{l} * n;
      std::uint32_t edge = 0, inside = 0;
      for (std::uint32_t j = 0; j < n; ++j) {
        const std::uint32_t t = ids[j];
        if (t < B || t >= N - B) ++edge;
        else if (tw.pos[t] < i) ++inside;
      }
      if (edge != 2 * B || inside != want) return false;
      tw.events.emplace_back(i, c);
    }
  }
  std::sort(tw.events.begin(), tw.events.end());
  // The sums: S along the walk, E_B for the edge tokens walked, F_B over every edge token.
  const std::size_t G = hs.size(), nbs = sw.blocks.size();
  const Kept zero = kept_like(hs[0].kept);
  tw.sum.assign(G, zero);
  tw.edge_walked.assign(nbs, std::vector<Kept>(G, zero));
  tw.edge_all.assign(nbs, std::vector<Kept>(G, zero));
  tw.snap.resize(sw.combos.size());
  const std::uint32_t Bmax = sw.blocks[sw.blocks_ascending.back()];
  auto add_edge = [&](std::vector<std::vector<Kept>>& into, std::uint32_t t) {
    for (std::size_t bi = 0; bi < nbs; ++bi) {
      const std::uint32_t B = sw.blocks[bi];
      if (t < B || t >= N - B)
        for (std::size_t x = 0; x < G; ++x) {
          add_token(sw, ps[x], vh, t, into[bi][x]);
          add_needles_of_token(sw, ps[x], t, into[bi][x]);
        }
    }
  };
  for (std::uint32_t t = 0; t < std::min(Bmax, N); ++t) add_edge(tw.edge_all, t);
  for (std::uint32_t t = std::max(Bmax, N - Bmax); t < N; ++t) add_edge(tw.edge_all, t);
  std::size_t e = 0;
  auto take_events = [&](std::uint32_t i) {
    for (; e < tw.events.size() && tw.events[e].first == i; ++e) {
      const std::size_t c = tw.events[e].second;
      tw.snap[c].assign(tw.sum.begin(), tw.sum.end());
      for (std::size_t x = 0; x < G; ++x) {
        kept_add(tw.snap[c][x], tw.edge_walked[sw.combos[c].bi][x], -1.0);
        kept_add(tw.snap[c][x], tw.edge_all[sw.combos[c].bi][x], +1.0);
      }
    }
  };
  for (std::uint32_t i = 0; i < W && e < tw.events.size(); ++i) {
    take_events(i);
    if (e == tw.events.size()) break;
    if (i + kPrefetchTokens < W) prefetch_row(sw, vh, token_at(i + kPrefetchTokens));
    const std::uint32_t t = token_at(i);
    for (std::size_t x = 0; x < G; ++x) {
      add_token(sw, ps[x], vh, t, tw.sum[x]);
      add_needles_of_token(sw, ps[x], t, tw.sum[x]);
    }
    if (t < Bmax || t >= N - Bmax) add_edge(tw.edge_walked, t);
  }
  take_events(W);
  for (const std::vector<std::size_t>& combos : by_block)
    for (const std::size_t c : combos)
      for (std::size_t x = 0; x < G; ++x) {
        std::swap(hs[x].kept, tw.snap[c][x]);
        finish(sw, hs[x], c, static_cast<int>(Arm::token), h0 + static_cast<std::uint32_t>(x));
        std::swap(hs[x].kept, tw.snap[c][x]);
      }
  return true;
}

// Oracle: every budget is a prefix of one order (true probability descending, then position ascending), so
// the budgets, ascending, cut that order into segments and each combo adds its segment to the previous one's
// sums. The segments come from nested nth_element calls on selection_key(p, position), largest budget
// first (each on the prefix the previous one left), in about N + 2 * max_budget moves instead of a partial sort
// of the whole order through an index (3.6x less thread time at 32K keys).
void eval_oracle(Sweep& sw, const float* p, const float* vh, std::uint32_t h, HeadScratch& hs,
                 const std::vector<std::size_t>& by_budget) {
  const std::uint32_t N = sw.a.ctx;
  hs.keys.resize(N);
  for (std::uint32_t t = 0; t < N; ++t) hs.keys[t] = acc::selection_key(p[t], t);
  for (auto c = by_budget.rbegin(); c != by_budget.rend(); ++c) {
    const std::uint32_t budget = sw.combos[*c].budget;
    const std::uint32_t end = c == by_budget.rbegin() ? N : sw.combos[*(c - 1)].budget;
    if (budget < end) std::nth_element(hs.keys.begin(), hs.keys.begin() + (budget - 1), hs.keys.begin() + end, std::greater<>());
  }
  hs.kept.reset();
  std::uint32_t done = 0;
  for (const std::size_t c : by_budget) {
    for (; done < sw.combos[c].budget; ++done) {
      if (done + kPrefetchTokens < sw.max_budget)
        prefetch_row(sw, vh, acc::selection_key_index(hs.keys[done + kPrefetchTokens]));
      const std::uint32_t t = acc::selection_key_index(hs.keys[done]);
      add_token(sw, p, vh, t, hs.kept);
      add_needles_of_token(sw, p, t, hs.kept);
    }
    finish(sw, hs, c, static_cast<int>(Arm::oracle), h);
  }
}

// The access study's selections of query row r for every combo (one list per kv head); the token lists of one
// block size in one call (its budgets cut one order: by_block holds each block size's combos).
void select_row(const Sweep& sw, const acc::AttnShape& s, const kvf::HostArray<std::uint16_t>& kbf,
                const std::vector<std::vector<float>>& cent, const std::vector<std::vector<std::size_t>>& by_block,
                std::uint32_t r, std::vector<acc::Selection>& bsel, std::vector<acc::Selection>& tsel,
                std::vector<float>& tscore) {
  const LayerAttention& a = sw.a;
  std::vector<std::uint16_t> qbf(std::size_t(a.hq) * a.d);  // [hq][d]: this row of every query head
  for (std::uint32_t h = 0; h < a.hq; ++h)
    for (std::uint32_t j = 0; j < a.d; ++j)
      qbf[std::size_t(h) * a.d + j] = acc::f32_to_bf16(a.q[(std::uint64_t{h} * a.rows + r) * a.d + j]);
  std::vector<float> bscore;
  acc::score_tokens(s, qbf.data(), kbf.data(), false, tscore);
  std::vector<std::uint32_t> k_blocks;
  for (const std::vector<std::size_t>& combos : by_block) {
    const Combo& first = sw.combos[combos.front()];
    acc::score_blocks(s, qbf.data(), cent[first.bi], first.block, false, bscore);
    k_blocks.clear();
    for (const std::size_t c : combos) {
      bsel[c] = acc::select_blocks_by_score(s, first.block, sw.combos[c].k_blocks, false, bscore);
      k_blocks.push_back(sw.combos[c].k_blocks);
    }
    std::vector<acc::Selection> lists = acc::select_tokens_by_score(s, first.block, k_blocks, false, tscore);
    for (std::size_t i = 0; i < combos.size(); ++i) tsel[combos[i]] = std::move(lists[i]);
  }
}

void plan(Sweep& sw, SelectionFigures& out) {
  const LayerAttention& a = sw.a;
  for (const std::uint32_t b : sw.opt.blocks) {
    if (std::find(sw.blocks.begin(), sw.blocks.end(), b) != sw.blocks.end()) continue;  // a repeated block
    bool any = false;
    for (const double keep : sw.opt.keeps) {
      try {
        const std::uint32_t kb = acc::sparse_blocks(a.ctx, b, keep);
        sw.combos.push_back({b, static_cast<std::uint32_t>(sw.blocks.size()), keep, kb, kb * b});
        sw.max_budget = std::max(sw.max_budget, kb * b);
        any = true;
      } catch (const std::invalid_argument& e) {  // keep and block were checked: only the budget is left
        out.skipped.push_back({b, keep, e.what()});
      }
    }
    if (any) {
      sw.blocks.push_back(b);
      sw.granule = std::gcd(sw.granule, b);
    }
  }
}

// Means over the rows, summed in row order.
void collect(const Sweep& sw, SelectionFigures& out) {
  const LayerAttention& a = sw.a;
  const std::size_t nn = sw.opt.needles.size();
  for (std::size_t c = 0; c < sw.combos.size(); ++c) {
    const Combo& cb = sw.combos[c];
    for (int arm = 0; arm < kArms; ++arm)
      for (std::uint32_t h = 0; h < a.hq; ++h) {
        ArmSums s;
        for (std::uint32_t r = 0; r < a.rows; ++r) {
          s.recall += sw.sums[sw.at(r, c, arm, h)].recall;
          s.err += sw.sums[sw.at(r, c, arm, h)].err;
        }
        out.rows.push_back({a.layer, h, static_cast<Arm>(arm), cb.block, cb.keep, cb.budget, s.recall / a.rows,
                            s.err / a.rows});
        for (std::size_t n = 0; n < nn; ++n) {
          const Needle& nd = sw.opt.needles[n];
          NeedleSums ns;
          double mass = 0;
          for (std::uint32_t r = 0; r < a.rows; ++r) {
            ns.kept += sw.nsums[sw.nat(r, c, arm, n, h)].kept;
            ns.all_kept += sw.nsums[sw.nat(r, c, arm, n, h)].all_kept;
            mass += sw.nmass[sw.mat(r, n, h)];
          }
          out.needles.push_back({a.layer, h, nd.pos, nd.len, needle_depth_pct(a.ctx, nd), static_cast<Arm>(arm),
                                 cb.block, cb.keep, cb.budget, mass / a.rows, ns.kept / a.rows, ns.all_kept / a.rows});
        }
      }
  }
}

}  // namespace

void testing::token_walk_per_block(bool on) { g_token_walk_per_block = on; }

SelectionFigures selection_quality(const LayerAttention& a, std::span<const float> probs,
                                   const SelectionOptions& opt) {
  validate(a);
  if (probs.size() != std::uint64_t{a.hq} * a.rows * a.ctx)
    throw std::invalid_argument("probabilities hold " + std::to_string(probs.size()) + " floats: hq*rows*ctx = " +
                                std::to_string(std::uint64_t{a.hq} * a.rows * a.ctx) + " expected");
  check_options(a, opt);
  SelectionFigures out;
  Sweep sw{a, probs, opt};
  plan(sw, out);
  if (sw.combos.empty()) return out;
  sw.blocks_ascending.resize(sw.blocks.size());
  std::iota(sw.blocks_ascending.begin(), sw.blocks_ascending.end(), std::size_t{0});
  std::sort(sw.blocks_ascending.begin(), sw.blocks_ascending.end(),
            [&](std::size_t x, std::size_t y) { return sw.blocks[x] < sw.blocks[y]; });
  const std::size_t nc = sw.combos.size(), nn = opt.needles.size();
  const std::uint32_t R = a.rows;
  sw.sums.assign(R * nc * kArms * a.hq, {});
  sw.nsums.assign(R * nc * kArms * nn * a.hq, {});
  sw.nmass.assign(R * nn * a.hq, 0.0);
  std::vector<std::size_t> by_budget(nc);
  std::iota(by_budget.begin(), by_budget.end(), std::size_t{0});
  std::stable_sort(by_budget.begin(), by_budget.end(),
                   [&](std::size_t x, std::size_t y) { return sw.combos[x].budget < sw.combos[y].budget; });
  std::vector<std::vector<std::size_t>> by_block(sw.blocks.size());  // per block size, budgets ascending
  for (const std::size_t c : by_budget) by_block[sw.combos[c].bi].push_back(c);

  const acc::AttnShape s = routing_shape(a);
  // 64 MiB at 32K keys and Llama-3.1-8B's shapes: not zero-filled, each core faulting in what it writes (a
  // vector's serial zero-fill and page faults took 0.25 s per layer on one core, most of the figures' serial part).
  kvf::HostArray<std::uint16_t> kbf(a.k.size());
  keys_bf16(a, kbf.data());
  std::vector<std::vector<float>> cent(sw.blocks.size());
  for (std::size_t bi = 0; bi < sw.blocks.size(); ++bi) acc::build_centroids(s, kbf.data(), sw.blocks[bi], cent[bi]);

  // Tasks are (query row, kv head) pairs, a row's routing and selections (the access study's functions, whose
  // own parallel loops run on one thread inside this region) made once by each thread that takes one of its
  // pairs. Up to one thread per row, whole rows (dynamic); with more threads than rows (a GPU host's cores and
  // M = 16), each thread a contiguous share of the pairs, so at most two rows' routing per thread and every core
  // busy. Parallel regions per row and per selection call cost more than the work at small shapes and stall
  // whenever a core is shared: measured 3.2 s against 29 ms single-threaded for a 512-key test layer on a 2-core
  // VM under load.
  const std::uint32_t G = a.group(), D = a.d, N = a.ctx;
#pragma omp parallel
  {
    std::vector<acc::Selection> bsel(nc), tsel(nc);
    std::vector<float> tscore;  // [hkv][ctx]: the row's token scores, one list per kv head
    TokenWalk walk;
    std::vector<HeadScratch> hs(G);
    std::vector<const float*> ps(G);
    for (HeadScratch& x : hs) {
      x.bsel = &bsel;
      x.tsel = &tsel;
      x.kept.pv.assign(D, 0.0);
      x.kept.nmass.assign(nn, 0.0);
      x.kept.ncount.assign(nn, 0u);
    }
    std::uint32_t routed = UINT32_MAX;  // the row bsel, tsel and tscore hold
    auto pair = [&](std::uint32_t r, std::uint32_t l) {
      if (routed != r) {
        select_row(sw, s, kbf, cent, by_block, r, bsel, tsel, tscore);
        routed = r;
      }
      const std::uint32_t vis = a.visible(r);
      const float* vh = a.v.data() + std::uint64_t{l} * N * D;
      for (std::uint32_t x = 0; x < G; ++x) {
        const std::uint32_t h = l * G + x;
        hs[x].row = r;
        ps[x] = probs.data() + (std::uint64_t{h} * R + r) * N;
        for (std::size_t n = 0; n < nn; ++n)
          for (std::uint32_t t = opt.needles[n].pos; t < opt.needles[n].pos + opt.needles[n].len; ++t)
            sw.nmass[sw.mat(r, n, h)] += ps[x][t];
      }
      group_sums(sw, ps.data(), vh, vis, hs);
      for (std::uint32_t x = 0; x < G; ++x)
        for (std::size_t c = 0; c < nc; ++c) eval_block(sw, ps[x], c, l * G + x, hs[x]);
      if (g_token_walk_per_block ||
          !eval_token_one_walk(sw, ps.data(), vh, tscore.data() + std::uint64_t{l} * N, by_block, l * G, hs, walk))
        for (const std::vector<std::size_t>& combos : by_block) eval_token(sw, ps.data(), vh, combos, l * G, hs);
      for (std::uint32_t x = 0; x < G; ++x) eval_oracle(sw, ps[x], vh, l * G + x, hs[x], by_budget);
    };
    const std::uint32_t threads = static_cast<std::uint32_t>(omp_get_num_threads());
    if (threads <= R) {
#pragma omp for schedule(dynamic)
      for (std::uint32_t r = 0; r < R; ++r)
        for (std::uint32_t l = 0; l < a.hkv; ++l) pair(r, l);
    } else {
      const std::uint64_t pairs = std::uint64_t{R} * a.hkv, me = static_cast<std::uint64_t>(omp_get_thread_num());
      for (std::uint64_t i = me * pairs / threads; i < (me + 1) * pairs / threads; ++i)
        pair(static_cast<std::uint32_t>(i / a.hkv), static_cast<std::uint32_t>(i % a.hkv));
    }
  }
  collect(sw, out);
  return out;
}

PrefillEndRouter::PrefillEndRouter(const LayerAttention& a) : a_(a) {
  validate(a);
  kbf_.resize(a.k.size());
  keys_bf16(a, kbf_.data());
  qbf_.resize(std::size_t(a.hq) * a.d);
  const std::uint32_t r = a.rows - 1;
  for (std::uint32_t h = 0; h < a.hq; ++h)
    for (std::uint32_t j = 0; j < a.d; ++j)
      qbf_[std::size_t(h) * a.d + j] = acc::f32_to_bf16(a.q[(std::uint64_t{h} * a.rows + r) * a.d + j]);
}

std::vector<std::vector<std::int32_t>> PrefillEndRouter::kept(Arm arm, std::uint32_t block, double keep) {
  const LayerAttention& a = a_;
  if (arm == Arm::oracle)
    throw std::invalid_argument("the oracle arm is not a cache policy (it reads every query head's true probabilities): "
                                "decoding takes block or token");
  if (block == 0 || a.ctx % block)
    throw std::invalid_argument("block " + std::to_string(block) + ": must divide the ctx (" + std::to_string(a.ctx) + ")");
  const std::uint32_t k_blocks = acc::sparse_blocks(a.ctx, block, keep);
  const acc::AttnShape s = routing_shape(a);
  acc::Selection sel;
  if (arm == Arm::block) {
    auto it = block_scores_.find(block);
    if (it == block_scores_.end()) {
      std::vector<float> cent, scores;
      acc::build_centroids(s, kbf_.data(), block, cent);
      acc::score_blocks(s, qbf_.data(), cent, block, false, scores);
      it = block_scores_.emplace(block, std::move(scores)).first;
    }
    sel = acc::select_blocks_by_score(s, block, k_blocks, false, it->second);
  } else {
    if (token_scores_.empty()) acc::score_tokens(s, qbf_.data(), kbf_.data(), false, token_scores_);
    sel = acc::select_tokens_by_score(s, block, k_blocks, false, token_scores_);
  }
  std::vector<std::vector<std::int32_t>> kept(a.hkv);
  for (std::uint32_t l = 0; l < a.hkv; ++l) {
    const std::uint32_t* list = sel.idx.data() + sel.geom.list_offset(0, l, a.hkv);
    for (std::uint64_t t = 0; t < sel.geom.n_tokens(); ++t)
      kept[l].push_back(static_cast<std::int32_t>(sel.geom.token(list, t)));
    std::sort(kept[l].begin(), kept[l].end());
  }
  return kept;
}

std::vector<std::vector<std::int32_t>> kept_at_prefill_end(const LayerAttention& a, Arm arm, std::uint32_t block,
                                                           double keep) {
  return PrefillEndRouter(a).kept(arm, block, keep);
}

LayerFigures layer_figures(const LayerAttention& a, const QualityOptions& opt) {
  // Given probabilities are checked once, here, and read in place (not copied); the figures below see the
  // layer without them, so each one's own validate() checks the shapes only.
  validate(a);
  std::vector<float> computed;
  if (a.probs.empty()) computed = true_probs(a);
  const std::span<const float> p = a.probs.empty() ? std::span<const float>(computed) : a.probs;
  LayerAttention checked = a;
  checked.probs = {};
  LayerFigures f;
  f.locality = locality(checked, p, opt.sink, opt.windows, opt.per_row);
  f.entropy = entropy(checked, p, opt.per_row);
  f.layer_entropy = layer_entropy(f.entropy);
  f.selection = selection_quality(checked, p, opt.selection);
  return f;
}

}  // namespace kvf::attention::quality
