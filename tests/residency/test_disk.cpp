// The disk tier behind the host tier (issue 17): lru-host's three LRU tiers by hand, cost's host-to-disk rule by
// hand, the refusals, and the oracle's bound at HBM + host + disk on random prefix traces.
#include <random>

#include <gtest/gtest.h>

#include "kvf/errors.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

using test::hits;

TEST(ResidencyDisk, LruHostDemotesHostEvictionsToDiskAndFetchesThemBack) {
  // 1 block per tier. [1]; [2]: 1 to host; [3]: 2 to host, 1 to disk; [1]: a disk hit, promoted; 3 goes to host
  // and 2 to disk.
  const Result r = test::run({{1}, {2}, {3}, {1}}, "lru-host", Capacity{1, 1, 1});
  EXPECT_EQ(r.hits_disk, 1u);
  EXPECT_EQ(r.hits_host + r.hits_hbm, 0u);
  EXPECT_EQ(r.to_disk, 2u);
  EXPECT_EQ(r.promoted, 1u);
  ASSERT_EQ(r.restores.size(), 1u);
  EXPECT_EQ(r.restores[0].tier, Tier::disk);
  EXPECT_EQ(r.restores[0].request, 3u);
  EXPECT_DOUBLE_EQ(r.hit_rate(), 0.25);
  // Without the disk, 1 is dropped at [3].
  EXPECT_EQ(hits(test::run({{1}, {2}, {3}, {1}}, "lru-host", Capacity{1, 1})), 0u);
}

TEST(ResidencyDisk, RefusedWithoutAHostTierOrByAPolicyWithoutOne) {
  const IndexedTrace t = index_trace(test::make_trace({{1}}, 4), 4);
  try {
    simulate(t, "lru", Capacity{2, 0, 4});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "policy lru has no disk tier: disk capacity must be 0 blocks, got 4");
  }
  try {
    simulate(t, "lru-host", Capacity{2, 0, 4});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "a disk tier of 4 blocks without a host tier: the disk tier takes the host tier's "
                           "evictions, give it a host capacity");
  }
  EXPECT_FALSE(find_policy("oracle").disk_tier);
  EXPECT_TRUE(find_policy("cost").disk_tier);
}

RestoreCosts per_token(double fetch_s, double disk_fetch_s) {
  RestoreCosts c;
  c.fetch_block_s = fetch_s;
  c.disk_fetch_form_s.fill(disk_fetch_s);
  c.prefill_s = [](std::int64_t tokens, std::int64_t) { return double(tokens); };
  return c;
}

TEST(ResidencyDisk, CostSendsAHostVictimToDiskOnlyWhenReadingItBackCostsLessThanItsPrefill) {
  // 1 block per tier, each block 4 tokens (cost 4), host fetch 1. [1]; [2]: 1 demoted (1 < 4); [3]: 2 demoted,
  // the host's lowest, 1, goes to disk when a disk read (2 s) costs less than its prefill (4 s); [1]: a disk hit.
  const auto t = index_trace(test::make_trace({{1}, {2}, {3}, {1}}, 4), 4);
  const RestoreCosts cheap = per_token(1, 2), dear = per_token(1, 5);
  const Result r = simulate(t, "cost", Capacity{1, 1, 1}, &cheap);
  EXPECT_EQ(r.hits_disk, 1u);
  EXPECT_EQ(r.to_disk, 2u);  // 1 at [3], 2 at the second [1]
  const Result d = simulate(t, "cost", Capacity{1, 1, 1}, &dear);
  EXPECT_EQ(hits(d), 0u);
  EXPECT_EQ(d.to_disk, 0u);
}

// With one form, the union of lru-host's or cost's three tiers is a policy in the README's model M at
// H + D + K blocks: the oracle there reuses at least as many blocks when no request has more than H.
TEST(ResidencyDisk, NeverBeatsTheOracleAtAllTiersOnRandomPrefixTraces) {
  std::mt19937_64 rng(31);
  const RestoreCosts c = per_token(0.5, 1.5);
  for (int round = 0; round < 40; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 100, 5, 20);
    const IndexedTrace t = index_trace(test::make_trace(reqs, 4), 4);
    const std::size_t h = t.max_request_blocks + round % 4, d = 1 + std::size_t(round % 3) * 2, k = 1 + round % 5;
    const std::size_t bound = hits(simulate(t, "oracle", Capacity{h + d + k, 0}));
    EXPECT_GE(bound, hits(simulate(t, "lru-host", Capacity{h, d, k}))) << round;
    EXPECT_GE(bound, hits(simulate(t, "cost", Capacity{h, d, k}, &c))) << round;
    // A disk tier only adds: lru-host never reuses fewer blocks with it.
    EXPECT_GE(hits(simulate(t, "lru-host", Capacity{h, d, k})), hits(simulate(t, "lru-host", Capacity{h, d}))) << round;
  }
}

}  // namespace
}  // namespace kvf::residency
