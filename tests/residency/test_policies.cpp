// Each policy on hand-computed traces, and lru / lru-host against a naive reference (issue 17).
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "kvf/errors.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

using test::hits;
using test::run;

TEST(ResidencyPolicies, RegistryListsBuiltinsAndRefusesUnknownNames) {
  ASSERT_GE(policy_registry().size(), 3u);
  EXPECT_EQ(policy_registry()[0].name, "lru");
  EXPECT_EQ(policy_registry()[1].name, "lru-host");
  EXPECT_EQ(policy_registry()[2].name, "oracle");
  EXPECT_TRUE(find_policy("oracle").offline);
  try {
    find_policy("lfu");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "policy lfu: expected one of lru, lru-host, oracle, cost");
  }
}

TEST(ResidencyPolicies, CapacitiesAreChecked) {
  EXPECT_THROW(run({{1}}, "lru", {0, 0}), UsageError);
  EXPECT_THROW(run({{1}}, "lru", {4, 4}), UsageError);
  EXPECT_THROW(run({{1}}, "oracle", {4, 4}), UsageError);
  EXPECT_NO_THROW(run({{1}}, "lru-host", {4, 4}));
}

// A user's policy joins through the registry; one that overfills a tier is caught.
class Hoarder final : public Policy {
 public:
  void reset(const IndexedTrace& t, const Capacity&) override { in_.assign(t.distinct, 0); }
  Tier where(BlockId b) const override { return in_[b] ? Tier::hbm : Tier::none; }
  void admit(std::size_t, std::span<const BlockId> blocks, std::size_t, Moves&) override {
    for (BlockId b : blocks) n_ += !in_[b], in_[b] = 1;
  }
  std::size_t resident(Tier t) const override { return t == Tier::hbm ? n_ : 0; }

 private:
  std::vector<std::uint8_t> in_;
  std::size_t n_ = 0;
};

TEST(ResidencyPolicies, UserPolicyIsRegisteredAndCheckedAgainstCapacity) {
  PolicyInfo info{"hoarder", "keeps everything", false, false, [] { return std::make_unique<Hoarder>(); }};
  const IndexedTrace t = index_trace(test::make_trace({{1, 2}, {1, 2}, {3}}, 4), 4);
  EXPECT_EQ(hits(simulate(t, info, {3, 0})), 2u);
  EXPECT_THROW(simulate(t, info, {2, 0}), std::logic_error);
}

TEST(ResidencyPolicies, PrefixRuleStopsAtTheFirstMissingBlock) {
  // Blocks 2 and 3 are resident when request 1 comes, but its first block 9 is not: nothing is reused.
  // Request 2 reuses 1, misses 8, and so does not reuse the resident 3.
  const Result r = run({{1, 2, 3}, {9, 2, 3}, {1, 8, 3}}, "lru", {10, 0});
  EXPECT_EQ(r.references, 9u);
  EXPECT_EQ(r.hits_hbm, 1u);
  EXPECT_EQ(r.misses, 8u);
  EXPECT_EQ(r.request_reused_tokens, (std::vector<std::int64_t>{0, 0, 4}));
  EXPECT_EQ(r.request_missed_tokens, (std::vector<std::int64_t>{12, 12, 8}));
  // Once 9 is resident too, the whole of [1, 9, 3] is reused.
  EXPECT_EQ(run({{1, 2, 3}, {9, 2, 3}, {1, 9, 3}}, "lru", {10, 0}).request_reused_tokens[2], 12);
}

TEST(ResidencyPolicies, TailFirstEviction) {
  // Capacity 3: after [1,2,3] the tail 3 is least recent, so [4] evicts 3 and [1,2,3] reuses 1 and 2.
  // (Head-first eviction would drop 1 and reuse nothing.)
  for (const char* p : {"lru", "lru-host", "oracle"}) {
    const Result r = run({{1, 2, 3}, {4}, {1, 2, 3}}, p, {3, 0});
    EXPECT_EQ(r.hits_hbm, 2u) << p;
    EXPECT_EQ(r.misses, 5u) << p;
    EXPECT_EQ(r.prefill_tokens, 20) << p;
  }
}

TEST(ResidencyPolicies, RunningRequestsBlocksAreNotEvictedForItsOwnMisses) {
  // HBM 3, host 1. [1] then [2, 3] leave HBM 2 3 1 (1 least recent). [1, 5, 6] reuses 1 and makes room by
  // demoting 3 and 2 (host keeps 2), never 1 itself: evicting it for 6 and fetching it back would count a third
  // demotion and push 2 out of host. [2] is then a host hit (demoting 6), [1] an HBM hit.
  const Result r = run({{1}, {2, 3}, {1, 5, 6}, {2}, {1}}, "lru-host", {3, 1});
  EXPECT_EQ(r.hits_hbm, 2u);
  EXPECT_EQ(r.hits_host, 1u);
  EXPECT_EQ(r.demoted(), 3u);
  EXPECT_EQ(r.promoted, 1u);
  EXPECT_EQ(r.request_reused_tokens, (std::vector<std::int64_t>{0, 0, 4, 4, 4}));
}

TEST(ResidencyPolicies, RequestLargerThanHbmKeepsItsFirstBlocks) {
  for (const char* p : {"lru", "lru-host", "oracle"}) {
    const Result r = run({{1, 2, 3}, {1, 2, 3}}, p, {2, 0});
    EXPECT_EQ(r.hits_hbm, 2u) << p;
    EXPECT_EQ(r.request_missed_tokens, (std::vector<std::int64_t>{12, 4})) << p;
  }
  // With a host tier the tail that does not fit is demoted, and reused from host.
  const Result h = run({{1, 2, 3}, {1, 2, 3}}, "lru-host", {2, 1});
  EXPECT_EQ(h.hits_hbm, 2u);
  EXPECT_EQ(h.hits_host, 1u);
}

TEST(ResidencyPolicies, IdRepeatedWithinARequest) {
  // Not a prefix hash, but well defined: the repeat is not reused the first time (nothing was resident before
  // the request), and the block takes one slot.
  for (const char* p : {"lru", "lru-host", "oracle"}) {
    const Result r = run({{5, 5}, {5, 5}, {6}, {5}}, p, {1, 0});
    EXPECT_EQ(r.hits_hbm, 2u) << p;
    EXPECT_EQ(r.misses, 4u) << p;
  }
}

TEST(ResidencyPolicies, LastPartialBlockCountsItsRealTokens) {
  const Result r = run({{1, 2, 3}, {1, 2, 3}, {1, 2, 4}}, "lru", {10, 0}, 4, {10, 10, 9});
  EXPECT_EQ(r.input_tokens, 29);
  EXPECT_EQ(r.request_reused_tokens, (std::vector<std::int64_t>{0, 10, 8}));
  EXPECT_EQ(r.request_missed_tokens, (std::vector<std::int64_t>{10, 0, 1}));
  EXPECT_EQ(r.prefill_tokens, 11);
  EXPECT_EQ(r.reused_tokens, 18);
}

TEST(ResidencyPolicies, LruHostDemotesPromotesAndDrops) {
  // HBM 2, host 2. Worked by hand (HBM and host most recent first):
  //  [1,2]  miss 2                         HBM 1 2   host -
  //  [3,4]  miss 2, demote 2 then 1        HBM 3 4   host 1 2
  //  [1,2]  2 host hits, demote 4 then 3   HBM 1 2   host 3 4
  //  [3,4]  2 host hits, demote 2 then 1   HBM 3 4   host 1 2
  //  [5]    miss, demote 4, drop 2         HBM 5 3   host 4 1
  //  [1,2]  1 from host, 2 missed; demote 3 (drop nothing: host 3 4), then 5 (drop 4)
  const Result r = run({{1, 2}, {3, 4}, {1, 2}, {3, 4}, {5}, {1, 2}}, "lru-host", {2, 2});
  EXPECT_EQ(r.references, 11u);
  EXPECT_EQ(r.hits_hbm, 0u);
  EXPECT_EQ(r.hits_host, 5u);
  EXPECT_EQ(r.misses, 6u);
  EXPECT_EQ(r.promoted, 5u);
  EXPECT_EQ(r.demoted(), 9u);
  EXPECT_EQ(r.request_host_blocks, (std::vector<std::uint32_t>{0, 0, 2, 2, 0, 1}));
  // Without the host tier nothing is reused.
  EXPECT_EQ(hits(run({{1, 2}, {3, 4}, {1, 2}, {3, 4}, {5}, {1, 2}}, "lru", {2, 0})), 0u);
}

TEST(ResidencyPolicies, OracleKeepsTheBlockUsedSoonest) {
  // Capacity 2: at [3] lru evicts 1 (least recent); the oracle evicts 2 (used later), so [1] hits.
  EXPECT_EQ(hits(run({{1}, {2}, {3}, {1}, {2}}, "lru", {2, 0})), 0u);
  EXPECT_EQ(hits(run({{1}, {2}, {3}, {1}, {2}}, "oracle", {2, 0})), 1u);
  // Capacity 2: 1 and 2 are both next used by the third request; the deeper 2 goes, so 1 is reused.
  EXPECT_EQ(hits(run({{1, 2}, {3}, {1, 2}}, "oracle", {2, 0})), 1u);
}

// The reference: the recency order written out whole. After a request, HBM is the request's blocks in order
// followed by the rest of HBM, cut at the capacity; what is cut goes to the front of host, cut at its capacity;
// what host cuts goes to the front of disk (when there is one), cut at its capacity.
struct NaiveTiers {
  std::vector<std::uint64_t> hbm, host, disk;
  std::size_t hits_hbm = 0, hits_host = 0, hits_disk = 0, demoted = 0, promoted = 0, to_disk = 0;
  std::vector<std::int64_t> reused;

  static bool in(const std::vector<std::uint64_t>& v, std::uint64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  }
  void request(const std::vector<std::uint64_t>& ids, const Capacity& cap, int bt) {
    std::size_t h = 0;
    while (h < ids.size() && (in(hbm, ids[h]) || in(host, ids[h]) || in(disk, ids[h]))) {
      if (in(host, ids[h])) ++hits_host, ++promoted;
      else if (in(disk, ids[h])) ++hits_disk, ++promoted;
      else ++hits_hbm;
      ++h;
    }
    reused.push_back(static_cast<std::int64_t>(h) * bt);
    std::vector<std::uint64_t> new_hbm = ids;
    for (auto x : hbm)
      if (!in(ids, x)) new_hbm.push_back(x);
    std::vector<std::uint64_t> new_host;
    if (new_hbm.size() > cap.hbm_blocks) {
      new_host.assign(new_hbm.begin() + static_cast<std::ptrdiff_t>(cap.hbm_blocks), new_hbm.end());
      new_hbm.resize(cap.hbm_blocks);
    }
    if (cap.host_blocks == 0) new_host.clear();
    demoted += new_host.size();
    for (auto x : host)
      if (!in(ids, x)) new_host.push_back(x);
    std::vector<std::uint64_t> new_disk;
    if (new_host.size() > cap.host_blocks) {
      if (cap.disk_blocks > 0) new_disk.assign(new_host.begin() + static_cast<std::ptrdiff_t>(cap.host_blocks), new_host.end());
      new_host.resize(cap.host_blocks);
    }
    to_disk += new_disk.size();
    for (auto x : disk)
      if (!in(ids, x)) new_disk.push_back(x);
    if (new_disk.size() > cap.disk_blocks) new_disk.resize(cap.disk_blocks);
    hbm = std::move(new_hbm);
    host = std::move(new_host);
    disk = std::move(new_disk);
  }
};

// Random requests over a small id space, not prefix-consistent, some longer than HBM, no id twice in one.
std::vector<std::vector<std::uint64_t>> random_requests(std::mt19937_64& rng, int n, int ids, int max_len) {
  std::vector<std::vector<std::uint64_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(ids));
    for (int k = 0; k < ids; ++k) all[static_cast<std::size_t>(k)] = static_cast<std::uint64_t>(k);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(1 + rng() % static_cast<std::uint64_t>(max_len));
    out.push_back(all);
  }
  return out;
}

TEST(ResidencyPolicies, LruAndLruHostEqualANaiveReferenceOnRandomTraces) {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 300; ++round) {
    const auto reqs = random_requests(rng, 60, 14, 6);
    Capacity cap{1 + rng() % 10, round % 3 == 0 ? 0 : rng() % 8};
    if (cap.host_blocks > 0 && round % 2) cap.disk_blocks = 1 + rng() % 8;
    NaiveTiers naive;
    for (const auto& r : reqs) naive.request(r, cap, 4);
    const Result host = run(reqs, "lru-host", cap);
    EXPECT_EQ(host.hits_hbm, naive.hits_hbm) << round;
    EXPECT_EQ(host.hits_host, naive.hits_host) << round;
    EXPECT_EQ(host.hits_disk, naive.hits_disk) << round;
    EXPECT_EQ(host.to_disk, naive.to_disk) << round;
    EXPECT_EQ(host.demoted(), naive.demoted) << round;
    EXPECT_EQ(host.promoted, naive.promoted) << round;
    EXPECT_EQ(host.request_reused_tokens, naive.reused) << round;
    if (cap.host_blocks == 0) {
      const Result lru = run(reqs, "lru", cap);
      EXPECT_EQ(lru.hits_hbm, naive.hits_hbm) << round;
      EXPECT_EQ(naive.hits_host, 0u);
      EXPECT_EQ(lru.request_reused_tokens, naive.reused) << round;
    }
  }
}

TEST(ResidencyPolicies, LruHostWithoutHostTierEqualsLru) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 50; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 200, 5, 20);
    const Capacity cap{1 + rng() % 40, 0};
    const Result a = run(reqs, "lru", cap), b = run(reqs, "lru-host", cap);
    EXPECT_EQ(a.hits_hbm, b.hits_hbm) << round;
    EXPECT_EQ(b.hits_host, 0u);
    EXPECT_EQ(b.demoted(), 0u);
    EXPECT_EQ(a.request_missed_tokens, b.request_missed_tokens) << round;
  }
}

}  // namespace
}  // namespace kvf::residency
