// The GPU top-k (routing_gpu.cu) emulated on the host: the multi-CTA radix select with the kernels'
// work split, thread mapping, last-CTA ticket and scans, built from the same __host__ __device__ math
// (access_math.hpp "GPU top-k"), run with the CTAs of every launch in forward, reversed and shuffled
// order, against the CPU references (topk_by_key; select_*_by_score where no -0/+0 pair ties).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "access.hpp"
#include "access_math.hpp"

using namespace kvf::access;

namespace {

enum class Order { forward, reversed, shuffled };

// Every (cta, list) of a grid in the launch order under test.
std::vector<std::pair<std::uint32_t, std::uint32_t>> cta_order(std::uint32_t ctas, std::uint32_t lists, Order o,
                                                               std::mt19937& rng) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> v;
  for (std::uint32_t l = 0; l < lists; ++l)
    for (std::uint32_t c = 0; c < ctas; ++c) v.emplace_back(c, l);
  if (o == Order::reversed) std::reverse(v.begin(), v.end());
  if (o == Order::shuffled) std::shuffle(v.begin(), v.end(), rng);
  return v;
}

// The keys one thread of a CTA reads at i (load_keys in routing_gpu.cu): ok marks [b, e).
void keys_at(const float* s, std::uint32_t i, std::uint32_t b, std::uint32_t e, std::uint32_t (&k)[kTopkItems],
             bool (&ok)[kTopkItems]) {
  for (int j = 0; j < kTopkItems; ++j) {
    ok[j] = i + j >= b && i + j < e;
    k[j] = ok[j] ? order_key(s[i + j]) : 0u;
  }
}

// Host emulation of the five launches over `lists` lists of n scores each. Returns the logical entries
// (unit 1, contiguous placement) of every list, lists * (lo + kp + n - hi). `scratch` persists across
// calls like the device buffer (zeroed once) and is checked to come back zero in the histogram/ticket.
std::vector<std::uint32_t> emulate(const std::vector<float>& scores, std::uint32_t n, std::uint32_t lo,
                                   std::uint32_t hi, std::uint32_t kp, std::uint32_t lists, std::uint32_t units,
                                   Order order, std::mt19937& rng, std::vector<std::uint32_t>& scratch) {
  const TopkGrid g = kp ? make_topk_grid(lo, hi, lists, units) : TopkGrid{};
  EXPECT_LE(g.ctas, topk_max_ctas(lists, units));
  EXPECT_GE(topk_scratch_words(lists, units), std::uint64_t{lists} * (kTopkStateWords + 2ull * g.ctas));
  scratch.resize(topk_scratch_words(lists, units), 0u);
  std::uint32_t* counts = scratch.data() + std::uint64_t{lists} * kTopkStateWords;
  const std::uint32_t ne = lo + kp + (n - hi);
  std::vector<std::uint32_t> out(std::uint64_t{lists} * ne, 0xFFFFFFFFu);
  auto pass = [&](auto pass_c) {
    constexpr int P = decltype(pass_c)::value;
    constexpr std::uint32_t NB = topk_bins(P);
    constexpr int BPT = static_cast<int>(NB) / kTopkThreads;
    for (auto [c, l] : cta_order(g.ctas, lists, order, rng)) {
      std::uint32_t* st = scratch.data() + std::uint64_t{l} * kTopkStateWords;
      const float* s = scores.data() + std::uint64_t{l} * n;
      const std::uint32_t prefix = P == 0 ? 0u : st[kTopkPrefix], need = P == 0 ? kp : st[kTopkNeed];
      std::vector<std::uint32_t> hist(NB, 0);
      const std::uint32_t b = g.begin(c, lo), e = g.end(c, hi);
      for (std::uint32_t t = 0; t < kTopkThreads; ++t)
        for (std::uint32_t i = (b & ~3u) + kTopkItems * t; i < e; i += kTopkChunk) {
          std::uint32_t k[kTopkItems];
          bool ok[kTopkItems];
          keys_at(s, i, b, e, k, ok);
          for (int j = 0; j < kTopkItems; ++j)
            if (ok[j] && topk_in_prefix(k[j], prefix, P)) ++hist[topk_digit(k[j], P)];
        }
      for (std::uint32_t d = 0; d < NB; ++d) st[d] += hist[d];
      if (st[kTopkTicket]++ != g.ctas - 1) continue;
      // Last CTA: thread t holds bins NB-1 - (t*BPT + j); exclusive scan over threads of their sums.
      std::uint32_t above_t = 0;
      int picks = 0;
      for (int t = 0; t < kTopkThreads; ++t) {
        std::uint32_t above = above_t;
        for (int j = 0; j < BPT; ++j) {
          const std::uint32_t d = NB - 1u - static_cast<std::uint32_t>(t * BPT + j);
          const std::uint32_t h = st[d];
          if (topk_pick_digit(above, h, need)) {
            st[kTopkPrefix] = prefix | (d << topk_digit_shift(P));
            st[kTopkNeed] = need - above;
            ++picks;
          }
          above += h;
          above_t += h;
          st[d] = 0;
        }
      }
      EXPECT_EQ(picks, 1) << "pass " << P;
      st[kTopkTicket] = 0;
    }
  };
  if (kp) {
    pass(std::integral_constant<int, 0>{});
    pass(std::integral_constant<int, 1>{});
    pass(std::integral_constant<int, 2>{});
    for (auto [c, l] : cta_order(g.ctas, lists, order, rng)) {  // count
      const std::uint32_t T = scratch[std::uint64_t{l} * kTopkStateWords + kTopkPrefix];
      const float* s = scores.data() + std::uint64_t{l} * n;
      const std::uint32_t b = g.begin(c, lo), e = g.end(c, hi);
      std::uint32_t gt = 0, eq = 0;
      for (std::uint32_t i = b; i < e; ++i) {
        gt += order_key(s[i]) > T;
        eq += order_key(s[i]) == T;
      }
      counts[(std::uint64_t{l} * g.ctas + c) * 2] = gt;
      counts[(std::uint64_t{l} * g.ctas + c) * 2 + 1] = eq;
    }
  }
  for (auto [c, l] : cta_order(g.ctas, lists, order, rng)) {  // emit
    std::uint32_t* o = out.data() + std::uint64_t{l} * ne;
    const std::uint32_t stride = g.ctas * kTopkThreads;
    for (std::uint32_t t = 0; t < kTopkThreads; ++t) {
      for (std::uint32_t i = c * kTopkThreads + t; i < lo; i += stride) o[i] = i;
      for (std::uint32_t i = hi + c * kTopkThreads + t; i < n; i += stride) o[lo + kp + (i - hi)] = i;
    }
    if (kp == 0) continue;
    const std::uint32_t* st = scratch.data() + std::uint64_t{l} * kTopkStateWords;
    const std::uint32_t T = st[kTopkPrefix], need_eq = st[kTopkNeed];
    std::uint32_t G = 0, E = 0;
    for (std::uint32_t x = 0; x < c; ++x) {
      G += counts[(std::uint64_t{l} * g.ctas + x) * 2];
      E += counts[(std::uint64_t{l} * g.ctas + x) * 2 + 1];
    }
    const float* s = scores.data() + std::uint64_t{l} * n;
    const std::uint32_t lb = g.begin(c, lo), le = g.end(c, hi);
    for (std::uint32_t base = lb & ~3u; base < le && topk_out_pos(G, E, need_eq) < kp; base += kTopkChunk) {
      std::uint32_t excl = 0;  // the block scan of packed (gt | eq << 16), thread by thread
      for (std::uint32_t t = 0; t < kTopkThreads; ++t) {
        const std::uint32_t i = base + kTopkItems * t;
        std::uint32_t k[kTopkItems] = {0, 0, 0, 0};
        bool ok[kTopkItems] = {false, false, false, false};
        if (i < le) keys_at(s, i, lb, le, k, ok);
        std::uint32_t mg = 0, me = 0;
        for (int j = 0; j < kTopkItems; ++j) {
          mg += ok[j] && k[j] > T;
          me += ok[j] && k[j] == T;
        }
        std::uint32_t Gi = G + (excl & 0xFFFFu), Ei = E + (excl >> 16);
        for (int j = 0; j < kTopkItems; ++j) {
          if (!ok[j] || k[j] < T) continue;
          if (topk_taken(k[j], T, Ei, need_eq)) {
            const std::uint32_t pos = lo + topk_out_pos(Gi, Ei, need_eq);
            EXPECT_LT(pos, lo + kp);
            if (pos < lo + kp) o[pos] = i + j;
          }
          if (k[j] > T) ++Gi;
          else ++Ei;
        }
        excl += mg | (me << 16);
      }
      G += excl & 0xFFFFu;
      E += excl >> 16;
    }
  }
  for (std::uint32_t l = 0; l < lists; ++l)
    for (std::uint32_t w = 0; w <= kTopkTicket; ++w)
      EXPECT_EQ(scratch[std::uint64_t{l} * kTopkStateWords + w], 0u) << "scratch not left zero, list " << l;
  return out;
}

std::vector<std::uint32_t> reference(const std::vector<float>& scores, std::uint32_t n, std::uint32_t lo,
                                     std::uint32_t hi, std::uint32_t kp, std::uint32_t lists) {
  std::vector<std::uint32_t> r;
  for (std::uint32_t l = 0; l < lists; ++l) {
    const auto x = topk_by_key(scores.data() + std::uint64_t{l} * n, n, lo, hi, kp);
    r.insert(r.end(), x.begin(), x.end());
  }
  return r;
}

// Emulation in every CTA order against the reference; one scratch reused across orders (as on the GPU).
void check_all_orders(const std::vector<float>& scores, std::uint32_t n, std::uint32_t lo, std::uint32_t hi,
                      std::uint32_t kp, std::uint32_t lists, std::uint32_t units, const char* what) {
  const auto ref = reference(scores, n, lo, hi, kp, lists);
  std::mt19937 rng(n * 31 + kp);
  std::vector<std::uint32_t> scratch;
  for (Order o : {Order::forward, Order::reversed, Order::shuffled, Order::shuffled}) {
    const auto got = emulate(scores, n, lo, hi, kp, lists, units, o, rng, scratch);
    ASSERT_EQ(got, ref) << what << " n=" << n << " lo=" << lo << " hi=" << hi << " kp=" << kp << " lists=" << lists
                        << " units=" << units << " order=" << static_cast<int>(o);
  }
}

std::vector<float> random_scores(std::size_t m, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(m);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(TopkRadix, DigitsCoverTheKeyOnce) {
  std::uint32_t bits = 0;
  for (int p = 0; p < kTopkPasses; ++p) {
    EXPECT_LE(topk_bins(p), kTopkMaxBins);
    EXPECT_EQ(topk_bins(p) % kTopkThreads, 0u);
    bits += topk_digit_bits(p);
    if (p + 1 < kTopkPasses) {
      EXPECT_EQ(topk_digit_shift(p), topk_digit_shift(p + 1) + topk_digit_bits(p + 1));
    }
  }
  EXPECT_EQ(bits, 32u);
  EXPECT_EQ(topk_digit_shift(kTopkPasses - 1), 0u);
  const std::uint32_t key = 0xDEADBEEFu;
  std::uint32_t back = 0;
  for (int p = 0; p < kTopkPasses; ++p) back |= topk_digit(key, p) << topk_digit_shift(p);
  EXPECT_EQ(back, key);
  EXPECT_TRUE(topk_in_prefix(0x12345678u, 0x12300000u, 1));   // top 11 bits equal
  EXPECT_FALSE(topk_in_prefix(0x12345678u, 0x12500000u, 1));
  EXPECT_TRUE(topk_in_prefix(0x12345678u, 0x12345400u, 2));   // top 22 bits equal
  EXPECT_FALSE(topk_in_prefix(0x12345678u, 0x12345000u, 2));
  EXPECT_TRUE(topk_in_prefix(0u, 0xFFFFFFFFu, 0));
}

TEST(TopkRadix, PickDigitAndPositions) {
  // bins (descending) 3, 0, 5, 2: need 1..3 in the first, 4..8 in the third, 9..10 in the fourth.
  const std::uint32_t h[4] = {3, 0, 5, 2};
  for (std::uint32_t need = 1; need <= 10; ++need) {
    int picked = -1, count = 0;
    std::uint32_t above = 0;
    for (int j = 0; j < 4; ++j) {
      if (topk_pick_digit(above, h[j], need)) { picked = j; ++count; }
      above += h[j];
    }
    EXPECT_EQ(count, 1);
    EXPECT_EQ(picked, need <= 3 ? 0 : need <= 8 ? 2 : 3);
  }
  EXPECT_EQ(topk_out_pos(5, 2, 3), 7u);
  EXPECT_EQ(topk_out_pos(5, 9, 3), 8u);
  EXPECT_TRUE(topk_taken(10, 7, 100, 0));
  EXPECT_TRUE(topk_taken(7, 7, 2, 3));
  EXPECT_FALSE(topk_taken(7, 7, 3, 3));
  EXPECT_FALSE(topk_taken(6, 7, 0, 3));
}

TEST(TopkRadix, GridSlicesTileTheCandidatesAligned) {
  for (std::uint32_t units : {1u, 8u, 132u, 148u})
    for (std::uint32_t lists : {1u, 8u, 64u, 512u})
      for (auto [lo, hi] : {std::pair{0u, 1u}, std::pair{1u, 63u}, std::pair{64u, 65472u}, std::pair{3u, 5000u},
                            std::pair{1024u, 1048576u - 1024u}, std::pair{7u, 8u}}) {
        const TopkGrid g = make_topk_grid(lo, hi, lists, units);
        ASSERT_EQ(g.per % kTopkChunk, 0u);
        ASSERT_LE(g.ctas, topk_max_ctas(lists, units));
        std::uint32_t next = lo;
        for (std::uint32_t c = 0; c < g.ctas; ++c) {
          ASSERT_EQ(g.begin(c, lo), next) << "gap or overlap at CTA " << c;
          ASSERT_LT(g.begin(c, lo), g.end(c, hi)) << "empty slice " << c;
          ASSERT_EQ((g.c0 + c) * g.per % 4, 0u);
          next = g.end(c, hi);
        }
        ASSERT_EQ(next, hi);
      }
}

TEST(TopkRadix, RandomScoresMatchTheReferenceInAnyCtaOrder) {
  struct C { std::uint32_t n, lo, hi, kp, lists, units; };
  for (const C& c : {C{65536, 64, 65472, 8192 - 128, 1, 132}, C{65536, 64, 65472, 8192 - 128, 8, 132},
                     C{10007, 13, 9990, 1234, 3, 16}, C{5000, 1, 4999, 600, 2, 64}, C{4096, 0, 4096, 1, 2, 8},
                     C{3000, 5, 2900, 2895, 2, 8}, C{3000, 5, 2900, 0, 2, 8}, C{1000, 1, 999, 997, 1, 4}}) {
    const auto s = random_scores(std::size_t{c.n} * c.lists, c.n + c.kp);
    check_all_orders(s, c.n, c.lo, c.hi, c.kp, c.lists, c.units, "random");
  }
}

TEST(TopkRadix, HeavyTiesTakeTheFirstInIndexOrder) {
  const std::uint32_t n = 20000, lists = 2;
  std::mt19937 rng(7);
  // Few distinct values: every threshold lands inside a large run of equal keys.
  std::vector<float> s(std::size_t{n} * lists);
  for (auto& x : s) x = static_cast<float>(static_cast<int>(rng() % 5) - 2) * 0.5f;
  for (std::uint32_t kp : {1u, 100u, 4000u, 7999u, 8000u, 12345u, 19000u})
    check_all_orders(s, n, 32, n - 32, kp, lists, 16, "five values");
  // All equal.
  std::vector<float> eq(std::size_t{n} * lists, 0.25f);
  for (std::uint32_t kp : {1u, 777u, 9000u, n - 64})
    check_all_orders(eq, n, 32, n - 32, kp, lists, 16, "all equal");
}

TEST(TopkRadix, SignedZerosOrderMinusBelowPlus) {
  const std::uint32_t n = 6000;
  std::mt19937 rng(11);
  std::vector<float> s(n);
  for (auto& x : s) x = (rng() % 3 == 0) ? -0.0f : (rng() % 2 ? 0.0f : -1.0f);
  for (std::uint32_t kp : {10u, 1500u, 2500u, 4000u}) check_all_orders(s, n, 16, n - 16, kp, 1, 8, "signed zeros");
  // The reference itself: every +0 before any -0 when both are needed.
  const auto r = topk_by_key(s.data(), n, 0, n, 2500);
  std::uint32_t pz = 0, mz = 0, taken_pz = 0;
  for (std::uint32_t i = 0; i < n; ++i) pz += s[i] == 0.0f && !std::signbit(s[i]);
  for (auto i : r) {
    taken_pz += s[i] == 0.0f && !std::signbit(s[i]);
    mz += s[i] == 0.0f && std::signbit(s[i]);
  }
  ASSERT_GT(mz, 0u);
  EXPECT_EQ(taken_pz, pz);
}

TEST(TopkRadix, ExtremeKeysInfinitiesAndDenormals) {
  const std::uint32_t n = 4100;
  auto s = random_scores(n, 5, 1e-3f);
  s[100] = INFINITY;
  s[101] = -INFINITY;
  s[200] = 1e-42f;  // denormal
  s[201] = -1e-42f;
  s[300] = 3.4e38f;
  s[301] = -3.4e38f;
  for (std::uint32_t kp : {1u, 2u, 3u, 2000u, 4096u}) check_all_orders(s, n, 2, n - 2, kp, 1, 4, "extremes");
}

TEST(TopkRadix, MatchesTheRoutingSelections) {
  // The study's CPU selections (select_*_by_score, float compare) on tie-free random scores, through the
  // same (lo, hi, kp) the GPU routing passes.
  AttnShape sh;
  sh.ctx = 8192;
  sh.hkv = 4;
  sh.hq = 16;
  const std::uint32_t block = 64, kb = 16, lists = sh.batch * sh.hkv;
  const auto tok = random_scores(std::size_t{lists} * sh.ctx, 99);
  const Selection ts = select_tokens_by_score(sh, block, kb, false, tok);
  std::mt19937 rng(1);
  std::vector<std::uint32_t> scratch;
  EXPECT_EQ(emulate(tok, sh.ctx, block, sh.ctx - block, kb * block - 2 * block, lists, 132, Order::shuffled, rng,
                    scratch),
            ts.idx);
  const std::uint32_t nb = sh.ctx / block;
  const auto blk = random_scores(std::size_t{lists} * nb, 98);
  const Selection bs = select_blocks_by_score(sh, block, kb, false, blk);
  EXPECT_EQ(emulate(blk, nb, 1, nb - 1, kb - 2, lists, 132, Order::reversed, rng, scratch), bs.idx);
}

TEST(TopkRadix, ReferenceRejectsBadRanges) {
  std::vector<float> s(10, 1.0f);
  EXPECT_THROW(topk_by_key(s.data(), 10, 5, 4, 0), std::invalid_argument);
  EXPECT_THROW(topk_by_key(s.data(), 10, 0, 11, 0), std::invalid_argument);
  EXPECT_THROW(topk_by_key(s.data(), 10, 2, 8, 7), std::invalid_argument);
  EXPECT_EQ(topk_by_key(s.data(), 10, 2, 8, 0), (std::vector<std::uint32_t>{0, 1, 8, 9}));
  EXPECT_EQ(topk_by_key(s.data(), 10, 2, 8, 6), (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}
