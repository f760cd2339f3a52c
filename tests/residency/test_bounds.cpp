// Bounds the policies must respect (issue 17): unbounded capacity reuses every block seen before; the oracle
// reuses at least as many blocks as lru (and at HBM + host capacity, as lru-host), and exactly as many as an
// exhaustive search over every eviction choice on small traces.
#include <bit>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

using test::hits;

TEST(ResidencyBounds, UnboundedCapacityReusesEveryRepeat) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 20; ++round) {
    const IndexedTrace t = index_trace(test::make_trace(test::random_prefix_trace(rng, 300, 4, 10), 4), 4);
    const std::size_t repeats = t.references() - t.distinct;
    for (const char* p : {"lru", "oracle"}) EXPECT_EQ(hits(simulate(t, p, {t.distinct, 0})), repeats) << p;
    const Result h = simulate(t, "lru-host", {t.max_request_blocks, t.distinct});
    EXPECT_EQ(hits(h), repeats);
  }
}

TEST(ResidencyBounds, OracleNeverReusesLessThanLruOnRandomPrefixTraces) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 100; ++round) {
    const IndexedTrace t = index_trace(test::make_trace(test::random_prefix_trace(rng, 300, 4, 10), 4), 4);
    ASSERT_EQ(t.prefix_violations, 0u);
    const std::size_t hbm = t.max_request_blocks + rng() % (t.distinct - t.max_request_blocks + 1);
    const std::size_t host = rng() % t.distinct;
    const std::size_t oracle = hits(simulate(t, "oracle", {hbm, 0}));
    EXPECT_GE(oracle, hits(simulate(t, "lru", {hbm, 0}))) << round;
    EXPECT_GE(hits(simulate(t, "oracle", {hbm + host, 0})), hits(simulate(t, "lru-host", {hbm, host}))) << round;
  }
}

// Every lazy eviction choice (evict exactly what the request's new blocks need, only blocks of other requests),
// searched exhaustively with memoization; at most 64 distinct blocks.
std::size_t best_hits(const IndexedTrace& t, std::size_t capacity, std::size_t r, std::uint64_t resident,
                      std::map<std::pair<std::size_t, std::uint64_t>, std::size_t>& memo) {
  if (r == t.requests()) return 0;
  const auto key = std::make_pair(r, resident);
  if (const auto it = memo.find(key); it != memo.end()) return it->second;
  const auto blocks = t.request(r);
  std::size_t h = 0;
  while (h < blocks.size() && (resident >> blocks[h] & 1)) ++h;
  std::uint64_t mine = 0;
  for (BlockId b : blocks) mine |= std::uint64_t{1} << b;
  const std::uint64_t others = resident & ~mine;
  const std::size_t total = static_cast<std::size_t>(std::popcount(resident | mine));
  const int evict = total > capacity ? static_cast<int>(total - capacity) : 0;
  std::size_t best = 0;
  for (std::uint64_t gone = others;; gone = (gone - 1) & others) {  // every subset of `others`
    if (std::popcount(gone) == evict)
      best = std::max(best, best_hits(t, capacity, r + 1, (others & ~gone) | mine, memo));
    if (gone == 0) break;
  }
  return memo[key] = h + best;
}

TEST(ResidencyBounds, OracleEqualsExhaustiveSearchOnSmallPrefixTraces) {
  std::mt19937_64 rng(23);
  int compared = 0;
  for (int round = 0; round < 200; ++round) {
    const IndexedTrace t = index_trace(test::make_trace(test::random_prefix_trace(rng, 9, 2, 25), 4), 4);
    if (t.distinct > 16 || t.distinct <= t.max_request_blocks) continue;
    const std::size_t cap = t.max_request_blocks + rng() % (t.distinct - t.max_request_blocks);
    std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> memo;
    EXPECT_EQ(hits(simulate(t, "oracle", {cap, 0})), best_hits(t, cap, 0, 0, memo)) << round;
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

TEST(ResidencyBounds, SharedMooncakeTrace) {
  const auto path = test::shared_trace();
  if (path.empty()) GTEST_SKIP() << "not available: " << KVF_RESIDENCY_TRACE << " is absent in this checkout";
  const IndexedTrace t = index_trace(read_mooncake_jsonl(path, kMooncakeBlockTokens), kMooncakeBlockTokens);
  ASSERT_EQ(t.max_request_blocks, 374u);
  const std::size_t repeats = 121877 - 43924;
  EXPECT_EQ(hits(simulate(t, "lru", {t.distinct, 0})), repeats);
  EXPECT_EQ(hits(simulate(t, "oracle", {t.distinct, 0})), repeats);
  EXPECT_EQ(hits(simulate(t, "lru-host", {t.max_request_blocks, t.distinct})), repeats);
  for (const std::size_t hbm : {374u, 1000u, 4000u, 16000u}) {
    const Result lru = simulate(t, "lru", {hbm, 0});
    const Result oracle = simulate(t, "oracle", {hbm, 0});
    EXPECT_GE(hits(oracle), hits(lru)) << hbm;
    EXPECT_EQ(lru.prefill_tokens + lru.reused_tokens, lru.input_tokens);
    EXPECT_GE(hits(simulate(t, "oracle", {hbm + 8000, 0})), hits(simulate(t, "lru-host", {hbm, 8000}))) << hbm;
  }
}

}  // namespace
}  // namespace kvf::residency
