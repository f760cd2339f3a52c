// Recall, output error and needle mass of the block, token and oracle selections on planted fixtures where
// each arm's kept set is known, and the orderings that hold for any attention. Tolerances: probabilities are
// fp32 (relative 6e-8 each), sums double: recall and needle mass within 1e-6, output error within 1e-5.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "planted.hpp"

using namespace kvf::attention::quality;
using namespace kvf::attention::quality::testing;

namespace {

constexpr double kMassTol = 1e-6, kErrTol = 1e-5;

const SelectionRow& find(const SelectionFigures& f, std::uint32_t h, Arm arm, std::uint32_t block, double keep) {
  for (const SelectionRow& r : f.rows)
    if (r.head == h && r.arm == arm && r.block == block && r.keep == keep) return r;
  throw std::runtime_error("no selection row");
}

// ctx 256 in blocks of 16: the sink block scores -4, every middle block (1..14) holds one heavy token (offset 5,
// score 5) among zeros, the latest block scores 0. Every centroid of a middle block is 5/16: the block arm's
// two middle picks at keep 1/4 are the lowest-index ones (blocks 1 and 2); the token arm takes the 14 heavy
// tokens and the 18 lowest zero-score middle tokens; the oracle the 14 heavy tokens and the 50 lowest
// weight-1 tokens (it is not bound to keep the sink).
float spread_score(std::uint32_t t) {
  if (t < 16) return -4.0f;
  if (t >= 240) return 0.0f;
  return t % 16 == 5 ? 5.0f : 0.0f;
}

Planted spread_plant() {
  return plant(256, 2, false, [](std::uint32_t, std::uint32_t t) { return spread_score(t); },
               [](std::uint32_t) { return 1.0f; });
}

// Expected output error of a kept set, from the plant: o = sum w v / Z, o_kept = sum_kept w v / sum_kept w.
double planted_error(const Planted& p, std::uint32_t kv_head, const std::set<std::uint32_t>& kept) {
  std::vector<double> o(p.d, 0.0), ok(p.d, 0.0);
  double z = 0, zk = 0;
  for (std::uint32_t t = 0; t < p.ctx; ++t) {
    const double w = std::exp(double(spread_score(t)));
    z += w;
    if (kept.count(t)) zk += w;
    for (std::uint32_t j = 0; j < p.d; ++j) {
      const double x = w * p.v[(std::size_t(kv_head) * p.ctx + t) * p.d + j];
      o[j] += x;
      if (kept.count(t)) ok[j] += x;
    }
  }
  double e2 = 0, o2 = 0;
  for (std::uint32_t j = 0; j < p.d; ++j) {
    e2 += std::pow(ok[j] / zk - o[j] / z, 2);
    o2 += std::pow(o[j] / z, 2);
  }
  return std::sqrt(e2 / o2);
}

// ctx keys of pseudo-random q, k, v (xorshift from `seed`) over 8 GQA groups of 4 heads, 8 causal rows, d 32.
Planted random_plant(std::uint32_t ctx, std::uint64_t seed) {
  Planted p = plant(ctx, 8, true, [](std::uint32_t, std::uint32_t) { return 0.0f; }, [](std::uint32_t) { return 0.0f; }, 8, 2);
  p.d = 32;
  p.q.assign(std::size_t(p.hq) * p.rows * p.d, 0.0f);
  p.k.assign(std::size_t(p.hkv) * p.ctx * p.d, 0.0f);
  p.v.assign(p.k.size(), 0.0f);
  std::uint64_t x = seed;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>(static_cast<std::int64_t>(x >> 11) % 2001 - 1000) / 1000.0f;
  };
  for (float& f : p.q) f = 2.0f * next();
  for (float& f : p.k) f = next();
  for (float& f : p.v) f = next();
  return p;
}

// The sweep over random_plant(768, ...) of the tests that hold two ways of computing it to the same figures:
// block sizes where 96 is a multiple of 48 and of 32, 48 of 16 but not of 32, at three keeps.
SelectionOptions sweep_768(std::vector<Needle> needles) {
  SelectionOptions opt;
  opt.blocks = {16, 48, 32, 96};
  opt.keeps = {0.5, 0.25, 0.125};
  opt.needles = std::move(needles);
  return opt;
}

}  // namespace

TEST(AttentionQualitySelection, RecallOrderingOracleTokenBlockOnAPlantWhereItIsKnown) {
  const Planted p = spread_plant();
  const LayerAttention a = p.view(3);
  SelectionOptions opt;
  opt.blocks = {16};
  opt.keeps = {0.25, 1.0};
  const SelectionFigures f = selection_quality(a, true_probs(a), opt);
  ASSERT_TRUE(f.skipped.empty());
  ASSERT_EQ(f.rows.size(), 2u * 3 * 4);  // combos x arms x heads
  const double e4 = std::exp(-4.0), e5 = std::exp(5.0);
  const double z = 16 * e4 + 14 * e5 + 14 * 15 + 16;
  const double block = (16 * e4 + 2 * (e5 + 15) + 16) / z;
  const double token = (16 * e4 + 16 + 14 * e5 + 18) / z;
  const double oracle = (14 * e5 + 50) / z;
  ASSERT_GT(oracle, token);
  ASSERT_GT(token, block);
  // The kept sets the plant implies, for the output error.
  std::set<std::uint32_t> bset, tset;
  for (std::uint32_t t = 0; t < 256; ++t) {
    const std::uint32_t b = t / 16;
    if (b == 0 || b == 1 || b == 2 || b == 15) bset.insert(t);
    if (b == 0 || b == 15 || spread_score(t) == 5.0f) tset.insert(t);
  }
  for (std::uint32_t t = 16, zeros = 0; zeros < 18; ++t)
    if (spread_score(t) == 0.0f) {
      tset.insert(t);
      ++zeros;
    }
  ASSERT_EQ(bset.size(), 64u);
  ASSERT_EQ(tset.size(), 64u);
  for (std::uint32_t h = 0; h < 4; ++h) {
    const SelectionRow& rb = find(f, h, Arm::block, 16, 0.25);
    const SelectionRow& rt = find(f, h, Arm::token, 16, 0.25);
    const SelectionRow& ro = find(f, h, Arm::oracle, 16, 0.25);
    EXPECT_EQ(rb.layer, 3u);
    EXPECT_EQ(rb.budget, 64u);
    EXPECT_EQ(rt.budget, 64u);
    EXPECT_EQ(ro.budget, 64u);
    EXPECT_NEAR(rb.recall, block, kMassTol) << "head " << h;
    EXPECT_NEAR(rt.recall, token, kMassTol) << "head " << h;
    EXPECT_NEAR(ro.recall, oracle, kMassTol) << "head " << h;
    EXPECT_NEAR(rb.out_error, planted_error(p, h / 2, bset), kErrTol) << "head " << h;
    EXPECT_NEAR(rt.out_error, planted_error(p, h / 2, tset), kErrTol) << "head " << h;
    for (const Arm arm : {Arm::block, Arm::token, Arm::oracle}) {
      const SelectionRow& all = find(f, h, arm, 16, 1.0);
      EXPECT_EQ(all.budget, 256u);
      EXPECT_NEAR(all.recall, 1.0, kMassTol) << to_string(arm);
      EXPECT_NEAR(all.out_error, 0.0, 1e-9) << to_string(arm);
    }
  }
}

TEST(AttentionQualitySelection, OrderingsThatHoldForAnyAttention) {
  // Pseudo-random q and k over 8 GQA groups of 4 heads, causal rows: the oracle keeps the most mass any
  // selection of its budget can, every recall is in [0, 1], keep 1 keeps everything, and a larger budget
  // of the oracle never keeps less.
  const Planted p = random_plant(512, 88172645463325252ull);
  const LayerAttention a = p.view();
  SelectionOptions opt;
  opt.blocks = {16, 32, 64};
  opt.keeps = {1.0, 0.5, 0.25};
  const SelectionFigures f = selection_quality(a, true_probs(a), opt);
  ASSERT_TRUE(f.skipped.empty());
  ASSERT_EQ(f.rows.size(), 3u * 3 * 3 * 8);
  for (const SelectionRow& r : f.rows) {
    EXPECT_GE(r.recall, 0.0);
    EXPECT_LE(r.recall, 1.0 + kMassTol);
    const double oracle = find(f, r.head, Arm::oracle, r.block, r.keep).recall;
    EXPECT_GE(oracle + kMassTol, r.recall) << to_string(r.arm) << " block " << r.block << " keep " << r.keep;
    if (r.keep == 1.0) {
      EXPECT_NEAR(r.recall, 1.0, kMassTol);
      EXPECT_NEAR(r.out_error, 0.0, 1e-9);
    } else {
      EXPECT_GE(find(f, r.head, Arm::oracle, r.block, r.keep * 2).recall + kMassTol, oracle);
    }
  }
}

TEST(AttentionQualitySelection, TokenArmFromOneWalkEqualsThePerBlockWalks) {
  // One walk of the score order cut for every block size and budget (kept = S - E_B + F_B at each cut) against
  // one walk per block size over the access study's lists: the same figures, needles included.
  const Planted p = random_plant(768, 0x9E3779B97F4A7C15ull);
  const LayerAttention a = p.view();
  const std::vector<float> probs = true_probs(a);
  const SelectionOptions opt = sweep_768({{300, 20}, {700, 60}, {3, 10}});  // the last two partly in the edge blocks
  const SelectionFigures one = selection_quality(a, probs, opt);
  kvf::attention::quality::testing::token_walk_per_block(true);
  const SelectionFigures per = selection_quality(a, probs, opt);
  kvf::attention::quality::testing::token_walk_per_block(false);
  ASSERT_EQ(one.rows.size(), per.rows.size());
  for (std::size_t i = 0; i < one.rows.size(); ++i) {
    EXPECT_NEAR(one.rows[i].recall, per.rows[i].recall, 1e-12) << i;
    EXPECT_NEAR(one.rows[i].out_error, per.rows[i].out_error, 1e-9) << i;
  }
  ASSERT_EQ(one.needles.size(), per.needles.size());
  for (std::size_t i = 0; i < one.needles.size(); ++i) {
    EXPECT_NEAR(one.needles[i].kept_mass, per.needles[i].kept_mass, 1e-12) << i;
    EXPECT_EQ(one.needles[i].all_kept, per.needles[i].all_kept) << i;
  }
}

TEST(AttentionQualitySelection, EachBlockSizeGivesTheSameFiguresInASweepAsAlone) {
  // A sweep sums each block size's blocks from a smaller block size it is a multiple of (96 from 48, 32 from 16,
  // 48 from the 16-token granules) and cuts one order of the scores at every budget of a block size; a block
  // size run alone has none of that. Every figure must agree to double rounding.
  const Planted p = random_plant(768, 0x9E3779B97F4A7C15ull);
  const LayerAttention a = p.view();
  const std::vector<float> probs = true_probs(a);
  const SelectionOptions opt = sweep_768({{300, 20}});
  const SelectionFigures all = selection_quality(a, probs, opt);
  ASSERT_EQ(all.skipped.size(), 1u);  // block 96 at keep 1/8: one block of 8, below sink + latest
  ASSERT_EQ(all.rows.size(), (4u * 3 - 1) * 3 * 8);
  std::size_t rows_alone = 0;
  for (const std::uint32_t block : opt.blocks) {
    SelectionOptions one = opt;
    one.blocks = {block};
    const SelectionFigures f = selection_quality(a, probs, one);
    rows_alone += f.rows.size();
    for (const SelectionRow& r : f.rows) {
      const SelectionRow& w = find(all, r.head, r.arm, r.block, r.keep);
      EXPECT_NEAR(w.recall, r.recall, 1e-12) << to_string(r.arm) << " block " << block << " keep " << r.keep;
      EXPECT_NEAR(w.out_error, r.out_error, 1e-9) << to_string(r.arm) << " block " << block << " keep " << r.keep;
    }
    for (const NeedleRow& n : f.needles) {
      bool found = false;
      for (const NeedleRow& m : all.needles)
        if (m.head == n.head && m.arm == n.arm && m.block == n.block && m.keep == n.keep) {
          found = true;
          EXPECT_NEAR(m.kept_mass, n.kept_mass, 1e-12);
          EXPECT_EQ(m.all_kept, n.all_kept);
        }
      EXPECT_TRUE(found);
    }
  }
  EXPECT_EQ(rows_alone, all.rows.size());
}

TEST(AttentionQualitySelection, BudgetsBelowSinkAndLatestAreSkippedWithTheReason) {
  const Planted p = spread_plant();
  const LayerAttention a = p.view();
  SelectionOptions opt;
  opt.blocks = {16, 128};
  opt.keeps = {0.5, 1.0 / 32};
  const SelectionFigures f = selection_quality(a, true_probs(a), opt);
  // ctx 256: block 16 keep 1/32 rounds to 1 block, block 128 keep 1/32 to 0, block 128 keep 1/2 to 1.
  ASSERT_EQ(f.skipped.size(), 3u);
  for (const SkippedBudget& s : f.skipped) EXPECT_NE(s.why.find("smaller than sink + latest"), std::string::npos) << s.why;
  ASSERT_EQ(f.rows.size(), 1u * 3 * 4);  // block 16 keep 1/2 only
  for (const SelectionRow& r : f.rows) {
    EXPECT_EQ(r.block, 16u);
    EXPECT_EQ(r.keep, 0.5);
  }
}

TEST(AttentionQualityNeedle, KeptNeedleMassAtEveryDepth) {
  // A needle of 4 tokens scoring 6 among zeros, at depths 0 .. 100% of a 256-token context in blocks of 16.
  // Keep 1/8 is 2 blocks (sink + latest): block and token arms keep the needle only at depths 0 and 100;
  // keep 1/4 adds 2 blocks / 32 tokens, enough for the needle's one or two blocks and its 4 tokens; the
  // oracle keeps it at any budget of 4 or more.
  const double mass = 4 * std::exp(6.0) / (4 * std::exp(6.0) + 252);
  const double depths[] = {0, 25, 50, 75, 100};
  const std::uint32_t want_pos[] = {0, 63, 126, 189, 252};
  for (int i = 0; i < 5; ++i) {
    const std::uint32_t pos = needle_pos(256, 4, depths[i]);
    ASSERT_EQ(pos, want_pos[i]);
    const Planted p = plant(256, 2, false,
                            [pos](std::uint32_t, std::uint32_t t) { return t >= pos && t < pos + 4 ? 6.0f : 0.0f; },
                            [](std::uint32_t) { return 1.0f; });
    const LayerAttention a = p.view();
    SelectionOptions opt;
    opt.blocks = {16};
    opt.keeps = {1.0 / 8, 1.0 / 4};
    opt.needles = {{pos, 4}};
    const SelectionFigures f = selection_quality(a, true_probs(a), opt);
    ASSERT_EQ(f.needles.size(), 2u * 3 * 4);
    const bool at_end = depths[i] == 0 || depths[i] == 100;
    for (const NeedleRow& n : f.needles) {
      EXPECT_EQ(n.pos, pos);
      EXPECT_EQ(n.len, 4u);
      EXPECT_NEAR(n.depth_pct, depths[i], 1e-12);
      EXPECT_NEAR(n.mass, mass, kMassTol);
      const bool kept = n.arm == Arm::oracle || n.keep == 0.25 || at_end;
      EXPECT_NEAR(n.kept_mass, kept ? mass : 0.0, kMassTol)
          << "depth " << depths[i] << " " << to_string(n.arm) << " keep " << n.keep;
      EXPECT_EQ(n.all_kept, kept ? 1.0 : 0.0) << "depth " << depths[i] << " " << to_string(n.arm) << " keep " << n.keep;
    }
  }
}

TEST(AttentionQualityNeedle, PartlyKeptNeedleCountsOnlyItsKeptTokens) {
  // Needle [24, 40) of 16 tokens straddles blocks 1 and 2, its tokens in block 1 score 6 and in block 2
  // score 5, with a distractor block 9 scoring 7 everywhere: at keep 3/16 (3 blocks of 16, one middle
  // pick) the block arm keeps block 9, the token arm the 16 distractor tokens: neither keeps any of the
  // needle, the oracle (48 tokens) keeps it all.
  const Planted p = plant(
      256, 1, false,
      [](std::uint32_t, std::uint32_t t) {
        if (t >= 24 && t < 32) return 6.0f;
        if (t >= 32 && t < 40) return 5.0f;
        return t / 16 == 9 ? 7.0f : 0.0f;
      },
      [](std::uint32_t) { return 1.0f; });
  const LayerAttention a = p.view();
  SelectionOptions opt;
  opt.blocks = {16};
  opt.keeps = {3.0 / 16, 4.0 / 16};
  opt.needles = {{24, 16}};
  const SelectionFigures f = selection_quality(a, true_probs(a), opt);
  const double z = 8 * std::exp(6.0) + 8 * std::exp(5.0) + 16 * std::exp(7.0) + 224;
  for (const NeedleRow& n : f.needles) {
    if (n.keep == 3.0 / 16) {
      EXPECT_NEAR(n.kept_mass, n.arm == Arm::oracle ? n.mass : 0.0, kMassTol) << to_string(n.arm);
    } else if (n.arm == Arm::block) {
      // One more middle block: block 1 (centroid 6/2 = 3) before block 2 (5/2): half the needle's tokens.
      EXPECT_NEAR(n.kept_mass, 8 * std::exp(6.0) / z, kMassTol);
      EXPECT_EQ(n.all_kept, 0.0);
    } else {
      // 16 more tokens: the needle's 16 (scores 6 and 5) over the zeros.
      EXPECT_NEAR(n.kept_mass, n.mass, kMassTol) << to_string(n.arm);
      EXPECT_EQ(n.all_kept, 1.0);
    }
    EXPECT_NEAR(n.mass, (8 * std::exp(6.0) + 8 * std::exp(5.0)) / z, kMassTol);
  }
}

TEST(AttentionQualitySelection, SameFiguresForAnyThreadCount) {
  // Threads take query rows (or, when there are more threads than rows, shares of the (row, kv head) pairs) and
  // the means are summed in row order: one thread, two, and more threads than rows give equal bits.
  const Planted p = plant(
      256, 6, true, [](std::uint32_t kh, std::uint32_t t) { return static_cast<float>((t * 13 + kh * 7) % 9) - 4.0f; },
      [](std::uint32_t h) { return 0.5f + 0.25f * h; });
  const LayerAttention a = p.view();
  SelectionOptions opt;
  opt.blocks = {16, 64};
  opt.keeps = {0.5, 0.25};
  opt.needles = {{100, 8}};
  const std::vector<float> probs = true_probs(a);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const SelectionFigures one = selection_quality(a, probs, opt);
  for (const int n : {2, static_cast<int>(a.rows) + 1, 13}) {
    omp_set_num_threads(n);
    const SelectionFigures two = selection_quality(a, probs, opt);
    ASSERT_EQ(one.rows.size(), two.rows.size());
    for (std::size_t i = 0; i < one.rows.size(); ++i) {
      EXPECT_EQ(one.rows[i].recall, two.rows[i].recall) << n << " threads, row " << i;
      EXPECT_EQ(one.rows[i].out_error, two.rows[i].out_error) << n << " threads, row " << i;
    }
    ASSERT_EQ(one.needles.size(), two.needles.size());
    for (std::size_t i = 0; i < one.needles.size(); ++i)
      EXPECT_EQ(one.needles[i].kept_mass, two.needles[i].kept_mass) << n << " threads, needle row " << i;
  }
  omp_set_num_threads(threads);
}

// What needle decoding applies in every layer (kept_at_prefill_end): on the spread plant at block 16, keep 1/4, the
// block arm keeps blocks 0, 1, 2 and the latest; the token arm blocks 0 and latest, the 14 heavy tokens and 18
// more; keep 1 keeps every key; the oracle is refused (no cache can hold it).
TEST(AttentionQualityDecode, KeptAtPrefillEndIsTheArmsSelectionPerKvHead) {
  const Planted p = spread_plant();
  const LayerAttention a = p.view();
  const auto block = kept_at_prefill_end(a, Arm::block, 16, 0.25);
  ASSERT_EQ(block.size(), 2u);
  for (const auto& kept : block) {
    std::vector<std::int32_t> want;
    for (std::int32_t t = 0; t < 48; ++t) want.push_back(t);
    for (std::int32_t t = 240; t < 256; ++t) want.push_back(t);
    EXPECT_EQ(kept, want);
  }
  const auto token = kept_at_prefill_end(a, Arm::token, 16, 0.25);
  ASSERT_EQ(token.size(), 2u);
  for (const auto& kept : token) {
    ASSERT_EQ(kept.size(), 64u);
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    const std::set<std::int32_t> s(kept.begin(), kept.end());
    EXPECT_EQ(s.size(), 64u);
    for (std::int32_t t = 0; t < 256; ++t)
      if (t < 16 || t >= 240 || (t % 16 == 5)) {
        EXPECT_TRUE(s.count(t)) << "token " << t;
      }
  }
  for (const Arm arm : {Arm::block, Arm::token})
    for (const auto& kept : kept_at_prefill_end(a, arm, 16, 1.0)) EXPECT_EQ(kept.size(), 256u);
  EXPECT_THROW(kept_at_prefill_end(a, Arm::oracle, 16, 0.25), std::invalid_argument);
  EXPECT_THROW(kept_at_prefill_end(a, Arm::block, 48, 0.25), std::invalid_argument);
  EXPECT_THROW(kept_at_prefill_end(a, Arm::block, 128, 0.25), std::invalid_argument);  // 1 block < sink + latest
}

// One router answering a budget sweep in mixed order (block sizes interleaved, token after block, a repeat) gives
// exactly what a fresh kept_at_prefill_end gives for each: scores cached per block size, token scores shared.
TEST(AttentionQualityDecode, PrefillEndRouterEqualsFreshRoutingInAnyOrder) {
  const Planted p = spread_plant();
  const LayerAttention a = p.view();
  struct Ask {
    Arm arm;
    std::uint32_t block;
    double keep;
  };
  const Ask asks[] = {{Arm::block, 16, 0.25}, {Arm::token, 16, 0.25}, {Arm::block, 32, 0.5},  {Arm::token, 32, 0.5},
                      {Arm::block, 16, 0.5},  {Arm::token, 64, 0.5},  {Arm::block, 64, 0.75}, {Arm::block, 16, 0.25}};
  PrefillEndRouter router(a);
  std::set<std::vector<std::vector<std::int32_t>>> distinct;
  for (const Ask& q : asks) {
    const auto got = router.kept(q.arm, q.block, q.keep);
    EXPECT_EQ(got, kept_at_prefill_end(a, q.arm, q.block, q.keep)) << to_string(q.arm) << " B" << q.block << " keep " << q.keep;
    distinct.insert(got);
  }
  EXPECT_GE(distinct.size(), 6u);  // the asks differ, so a cache keyed wrongly would show
  EXPECT_THROW(router.kept(Arm::oracle, 16, 0.25), std::invalid_argument);
  EXPECT_THROW(router.kept(Arm::block, 48, 0.25), std::invalid_argument);
}
