// The `cost` policy (GreedyDual-Size-Frequency over HBM and host, issue 17) on hand-made costs: choices computed
// by hand, the demote/drop rule, prefix handling, refusal without costs, capacities, and the oracle's bound.
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "kvf/errors.hpp"
#include "kvf/residency/synth.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

using test::hits;

constexpr BlockId kNoParent = ~BlockId{0};

// Prefill time = tokens (seconds), no prefix term: a block's cost is its token count.
RestoreCosts per_token(double fetch_block_s) {
  RestoreCosts c;
  c.fetch_block_s = fetch_block_s;
  c.prefill_s = [](std::int64_t tokens, std::int64_t) { return double(tokens); };
  return c;
}

// The shape of the model's prefill (linear in tokens, plus attention over the prefix), with made-up constants.
RestoreCosts attention_shaped() {
  RestoreCosts c;
  c.fetch_block_s = 1e-3;
  c.prefill_s = [](std::int64_t tokens, std::int64_t prefix) {
    return 1e-5 * double(tokens) + 1e-10 * double(tokens) * double(tokens + 2 * prefix);
  };
  return c;
}

Result run_cost(const std::vector<std::vector<std::uint64_t>>& requests, Capacity cap, const RestoreCosts& c,
                const std::vector<std::int64_t>& lengths = {}, int block_tokens = 4) {
  return simulate(index_trace(test::make_trace(requests, block_tokens, lengths), block_tokens), "cost", cap, &c);
}

TEST(ResidencyCostPolicy, RegisteredWithAHostTierAndRefusesToRunWithoutCosts) {
  const PolicyInfo& p = find_policy("cost");
  EXPECT_TRUE(p.host_tier);
  EXPECT_FALSE(p.offline);
  const IndexedTrace t = index_trace(test::make_trace({{1}}, 4), 4);
  try {
    simulate(t, "cost", {2, 0});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "policy cost: needs a cost model (prefill and host fetch times) and was given none");
  }
}

TEST(ResidencyCostPolicy, AFrequentExpensiveBlockSurvivesWhereLruEvictsIt) {
  // HBM 2 blocks, no host; block costs = tokens: id 1 holds 4 tokens, id 2 one, id 3 four.
  // cost: [1] H=4; [2] H=1; [3] evicts 2 (H 1, L=1), H3 = 1+4 = 5; [1] hit, f=2: H = 1+2x4 = 9; [2] evicts 3.
  // lru: [3] evicts 1 (least recent), [1] evicts 2, [2] misses: no hit at all.
  const std::vector<std::vector<std::uint64_t>> reqs = {{1}, {2}, {3}, {1}, {2}};
  const std::vector<std::int64_t> lengths = {4, 1, 4, 4, 1};
  const RestoreCosts c = per_token(100);
  const Result cost = run_cost(reqs, {2, 0}, c, lengths);
  EXPECT_EQ(cost.hits_hbm, 1u);
  EXPECT_EQ(cost.request_reused_tokens, (std::vector<std::int64_t>{0, 0, 0, 4, 0}));
  EXPECT_EQ(hits(test::run(reqs, "lru", {2, 0}, 4, lengths)), 0u);
}

TEST(ResidencyCostPolicy, DemotesOnlyWhatCostsMoreThanAFetchAndDropsHostsLowestWhenFull) {
  // HBM 1, host 1, fetch 2 s, cost = tokens. [1] (4 tokens) H=4. [2] (1 token): 1 goes (L=4), 4 > 2: demoted;
  // H2 = 5. [3]: 2 goes (L=5), 1 <= 2: dropped; H3 = 9. [1]: host hit, promoted, f=2: H = 5+8 = 13; 3 goes (L=9),
  // demoted to the free host slot. [2]: miss; 1 goes (L=13), host full with 3 (9 < 13): 3 dropped, 1 demoted.
  // [3]: miss.
  const Result r = run_cost({{1}, {2}, {3}, {1}, {2}, {3}}, {1, 1}, per_token(2), {4, 1, 4, 4, 1, 4});
  EXPECT_EQ(r.hits_hbm, 0u);
  EXPECT_EQ(r.hits_host, 1u);
  EXPECT_EQ(r.request_host_blocks, (std::vector<std::uint32_t>{0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(r.demoted(), 3u);
  EXPECT_EQ(r.promoted, 1u);
}

TEST(ResidencyCostPolicy, WithoutHostItOnlyEvicts) {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 30; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 60, 5, 30);
    const IndexedTrace t = index_trace(test::make_trace(reqs, 4), 4);
    const RestoreCosts c = attention_shaped();
    const Result r = simulate(t, "cost", {t.max_request_blocks + round % 7, 0}, &c);
    EXPECT_EQ(r.hits_host, 0u) << round;
    EXPECT_EQ(r.demoted(), 0u) << round;
    EXPECT_EQ(r.promoted, 0u) << round;
  }
}

// Drives the policy by hand so a test can look at where blocks are between requests.
struct Driver {
  IndexedTrace trace;
  std::unique_ptr<Policy> p = find_policy("cost").make();
  Driver(const std::vector<std::vector<std::uint64_t>>& reqs, Capacity cap, const RestoreCosts& c)
      : trace(index_trace(test::make_trace(reqs, 4), 4)) {
    p->set_costs(&c);
    p->reset(trace, cap);
  }
  void admit(std::size_t r) {
    const auto blocks = trace.request(r);
    std::size_t hit = 0;
    while (hit < blocks.size() && p->where(blocks[hit]) != Tier::none) ++hit;
    Moves m;
    p->admit(r, blocks, hit, m);
  }
};

TEST(ResidencyCostPolicy, AChildNeverOutranksItsParentAndDroppingAParentDropsItsDescendants) {
  // Costs: a first block 1 s, any deeper block 10 s; fetch 2 s. HBM 2, host 2. [1,2]: H1 = 1, H2 = min(10, 1) = 1
  // (clamped to the parent). [3] needs a slot: the tie goes to the deeper 2, which costs 10 > 2: demoted.
  // [4] needs a slot: 1 (H 1, cost 1 <= 2) is dropped, and with it its host-resident child 2, which the prefix
  // rule could not reuse without 1.
  RestoreCosts c;
  c.fetch_block_s = 2;
  c.prefill_s = [](std::int64_t, std::int64_t prefix) { return prefix == 0 ? 1.0 : 10.0; };
  Driver d({{1, 2}, {3}, {4}}, {2, 2}, c);
  const BlockId one = d.trace.request(0)[0], two = d.trace.request(0)[1];
  d.admit(0);
  d.admit(1);
  EXPECT_EQ(d.p->where(one), Tier::hbm);
  EXPECT_EQ(d.p->where(two), Tier::host);
  d.admit(2);
  EXPECT_EQ(d.p->where(one), Tier::none);
  EXPECT_EQ(d.p->where(two), Tier::none);
  EXPECT_EQ(d.p->resident(Tier::host), 0u);
  EXPECT_EQ(d.p->resident(Tier::hbm), 2u);
}

// Every resident block's parent (its predecessor in the request that last admitted it) is resident too.
TEST(ResidencyCostPolicy, ResidentSetStaysClosedUnderPrefixesAndWithinCapacity) {
  std::mt19937_64 rng(5);
  const RestoreCosts c = attention_shaped();
  for (int round = 0; round < 40; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 80, 4, 25);
    const Capacity cap{std::size_t(4 + round % 6), std::size_t(round % 5) * 3};
    Driver d(reqs, cap, c);
    std::vector<BlockId> parent(d.trace.distinct, kNoParent);
    for (std::size_t r = 0; r < d.trace.requests(); ++r) {
      d.admit(r);
      const auto blocks = d.trace.request(r);
      for (std::size_t j = 1; j < blocks.size(); ++j) parent[blocks[j]] = blocks[j - 1];
      for (BlockId b = 0; b < d.trace.distinct; ++b) {
        if (d.p->where(b) == Tier::none || parent[b] == kNoParent) continue;
        ASSERT_NE(d.p->where(parent[b]), Tier::none) << "round " << round << " request " << r << " block " << b;
      }
      ASSERT_LE(d.p->resident(Tier::hbm), cap.hbm_blocks);
      ASSERT_LE(d.p->resident(Tier::host), cap.host_blocks);
    }
  }
}

// The union of `cost`'s tiers is a policy of the README's model M at H + D blocks (all of a request's blocks
// enter HBM, only other requests' blocks leave the union), so the oracle at H + D reuses at least as many blocks
// when no request has more than H blocks. The comparison with lru-host is printed, not asserted.
void check_bound(const IndexedTrace& t, std::size_t hbm, std::size_t host, const RestoreCosts& c, const char* what) {
  ASSERT_LE(t.max_request_blocks, hbm);
  const Result cost = simulate(t, "cost", {hbm, host}, &c);
  EXPECT_GE(hits(simulate(t, "oracle", {hbm + host, 0})), hits(cost)) << what << " " << hbm << "+" << host;
  const Result lh = simulate(t, "lru-host", {hbm, host});
  std::printf("%s at %zu+%zu blocks: cost %zu hits (%zu HBM), lru-host %zu (%zu HBM)\n", what, hbm, host, hits(cost),
              cost.hits_hbm, hits(lh), lh.hits_hbm);
}

TEST(ResidencyCostPolicy, NeverBeatsTheOracleAtHbmPlusHostOnRandomPrefixTraces) {
  std::mt19937_64 rng(99);
  const RestoreCosts c = attention_shaped();
  for (int round = 0; round < 40; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 100, 5, 20);
    const IndexedTrace t = index_trace(test::make_trace(reqs, 4), 4);
    const std::size_t hbm = t.max_request_blocks + round % 5, host = std::size_t(round % 4) * 4;
    const Result cost = simulate(t, "cost", {hbm, host}, &c);
    EXPECT_GE(hits(simulate(t, "oracle", {hbm + host, 0})), hits(cost)) << round;
  }
}

TEST(ResidencyCostPolicy, NeverBeatsTheOracleOnGeneratedTraces) {
  const RestoreCosts c = attention_shaped();
  for (std::uint64_t seed : {1u, 2u}) {
    SynthSpec s;
    s.seed = seed;
    s.requests = 1500;
    const IndexedTrace t = index_trace(generate_trace(s), s.block_tokens);
    for (std::size_t hbm : {1000u, 4000u}) check_bound(t, std::max(hbm, t.max_request_blocks), 4000, c, "synthetic");
  }
}

TEST(ResidencyCostPolicy, NeverBeatsTheOracleOnTheCommittedTrace) {
  const auto path = test::shared_trace();
  if (path.empty()) GTEST_SKIP() << "not available: " << KVF_RESIDENCY_TRACE << " is absent in this checkout";
  const IndexedTrace t = index_trace(read_mooncake_jsonl(path.string(), kMooncakeBlockTokens), kMooncakeBlockTokens);
  ASSERT_EQ(t.prefix_violations, 0u);
  const RestoreCosts c = attention_shaped();
  for (std::size_t hbm : {500u, 4000u}) {
    check_bound(t, std::max(hbm, t.max_request_blocks), 0, c, "committed");
    check_bound(t, std::max(hbm, t.max_request_blocks), 8000, c, "committed");
  }
}

}  // namespace
}  // namespace kvf::residency
