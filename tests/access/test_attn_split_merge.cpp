// The GPU attention's split policy and split merge on the host (access_math.hpp: gpu_attn_splits,
// attn_merge_*, attn_finish): the plan's CTA counts and token coverage from 512 tokens to 256K and batch
// 1 to 64, and that partials of any split of a token set, merged as the kernel merges them (lane groups
// into a split's record, then the splits), equal one pass over the set, empty parts included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "access_math.hpp"

using namespace kvf::access;

namespace {

constexpr int kD = 8;  // dims per value row: enough to catch a per-dim mix-up

struct Partial {
  float m = kAttnEmptyM, l = 0.0f;
  float acc[kD] = {};
};

// Tokens [lo, hi) through the kernel's online softmax (fp32, log2 domain), one token per step.
Partial online(const std::vector<float>& s, const std::vector<float>& v, int lo, int hi) {
  Partial p;
  for (int t = lo; t < hi; ++t) {
    const float mx = std::fmax(p.m, s[t]);
    const float alpha = std::exp2(p.m - mx), pt = std::exp2(s[t] - mx);
    p.m = mx;
    p.l = p.l * alpha + pt;
    for (int d = 0; d < kD; ++d) p.acc[d] = std::fma(pt, v[t * kD + d], p.acc[d] * alpha);
  }
  return p;
}

// The kernel's merge of partials into one record (lane groups -> split, splits -> item).
Partial merge(const std::vector<Partial>& parts) {
  Partial r;
  const auto n = static_cast<std::uint32_t>(parts.size());
  r.m = attn_merge_max(n, [&](std::uint32_t i) { return parts[i].m; });
  for (const Partial& p : parts) {
    const float w = attn_merge_weight(p.m, r.m);
    r.l = std::fma(w, p.l, r.l);
    for (int d = 0; d < kD; ++d) r.acc[d] = std::fma(w, p.acc[d], r.acc[d]);
  }
  return r;
}

// Sorted cut points in [lo, hi], repeats allowed (empty parts), parts = cuts + 1.
std::vector<int> cuts(std::mt19937& rng, int lo, int hi, int parts) {
  std::vector<int> c(static_cast<std::size_t>(parts) + 1);
  c.front() = lo;
  c.back() = hi;
  for (int i = 1; i < parts; ++i) c[i] = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
  std::sort(c.begin() + 1, c.end() - 1);
  return c;
}

}  // namespace

TEST(AttnSplitMerge, AnySplitMergedEqualsOnePass) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = trial % 40 == 0 ? 1 : 1 + static_cast<int>(rng() % 700);
    const float spread = trial % 3 == 0 ? 200.0f : trial % 3 == 1 ? 20.0f : 1.0f;  // scores in log2 units
    std::vector<float> s(n), v(static_cast<std::size_t>(n) * kD);
    for (auto& x : s) x = spread * (static_cast<float>(rng() % 20001) / 10000.0f - 1.0f);
    for (auto& x : v) x = static_cast<float>(rng() % 20001) / 10000.0f - 1.0f;
    // One pass in double.
    const double M = *std::max_element(s.begin(), s.end());
    double L = 0.0, A[kD] = {};
    for (int t = 0; t < n; ++t) {
      const double p = std::exp2(s[t] - M);
      L += p;
      for (int d = 0; d < kD; ++d) A[d] += p * v[t * kD + d];
    }
    // Splits (some empty), each split's lane groups (some empty), merged as the kernel does.
    const int splits = 1 + static_cast<int>(rng() % 12), groups = 1 + static_cast<int>(rng() % 16);
    const std::vector<int> sc = cuts(rng, 0, n, splits);
    std::vector<Partial> records;
    for (int sp = 0; sp < splits; ++sp) {
      const std::vector<int> gc = cuts(rng, sc[sp], sc[sp + 1], groups);
      std::vector<Partial> lanes;
      for (int g = 0; g < groups; ++g) lanes.push_back(online(s, v, gc[g], gc[g + 1]));
      records.push_back(merge(lanes));
      if (sc[sp] == sc[sp + 1]) {  // an empty split's record is the empty partial
        EXPECT_EQ(records.back().m, kAttnEmptyM);
        EXPECT_EQ(records.back().l, 0.0f);
      }
    }
    std::shuffle(records.begin(), records.end(), rng);  // finishing order of the CTAs does not matter
    const Partial r = merge(records);
    EXPECT_EQ(r.m, static_cast<float>(M));
    for (int d = 0; d < kD; ++d) {
      const double want = A[d] / L;
      ASSERT_NEAR(attn_finish(r.acc[d], r.l), want, 2e-6 * (1.0 + std::fabs(want)))
          << "trial " << trial << " n " << n << " splits " << splits << " d " << d;
    }
  }
}

TEST(AttnSplitMerge, EmptyPartialsComposeAndFinishToZero) {
  const Partial e;
  const Partial r = merge({e, e, e});
  EXPECT_EQ(r.m, kAttnEmptyM);
  EXPECT_EQ(r.l, 0.0f);
  for (float a : r.acc) EXPECT_EQ(attn_finish(a, r.l), 0.0f);
  // An empty partial weighs nothing beside a real one, whatever its position.
  std::vector<float> s = {3.0f, -1.0f}, v(2 * kD, 0.5f);
  v[3] = -2.0f;
  const Partial one = online(s, v, 0, 2);
  for (const auto& parts : {std::vector<Partial>{e, one}, std::vector<Partial>{one, e}, std::vector<Partial>{e, one, e}}) {
    const Partial m = merge(parts);
    EXPECT_EQ(m.m, one.m);
    EXPECT_EQ(m.l, one.l);
    for (int d = 0; d < kD; ++d) EXPECT_EQ(m.acc[d], one.acc[d]);
  }
}

// The plan the GPU kernel gets (plan_attention: quantum = tokens per CTA step x unroll, waves = CTAs
// per SM its launch bounds guarantee), for bf16/fp8 d128 hkv 8 on 132 SMs.
TEST(AttnSplitMerge, GpuSplitPlanFillsTheDeviceAndCoversOnce) {
  constexpr std::uint32_t units = 132;
  struct Kind {
    std::uint64_t quantum;
    std::uint32_t waves;
  };
  // bf16 4 heads/CTA (8 tokens x U 3, 3 CTAs/SM); 1 head (8 x 4, 4); 8 heads (8 x 2, 2); fp8 4 heads (16 x 4, 2).
  for (const Kind k : {Kind{24, 3}, Kind{32, 4}, Kind{16, 2}, Kind{64, 2}}) {
    for (std::uint64_t n : {512ull, 513ull, 1000ull, 1024ull, 4096ull, 16384ull, 65536ull, 131072ull, 262144ull}) {
      for (std::uint64_t batch : {1ull, 2ull, 8ull, 32ull, 64ull}) {
        const std::uint64_t items = batch * 8;
        const SplitGeom g = gpu_attn_splits(n, items, units, k.waves, k.quantum);
        ASSERT_GE(g.n_splits, 1u);
        ASSERT_LE(g.n_splits, kAttnMaxSplits);
        ASSERT_EQ(g.chunk % k.quantum, 0u);
        std::uint64_t covered = 0;
        for (std::uint32_t i = 0; i < g.n_splits; ++i) {
          ASSERT_EQ(g.begin(i), covered);
          ASSERT_GT(g.end(i), g.begin(i)) << "empty split";
          covered = g.end(i);
        }
        ASSERT_EQ(covered, n);
        const std::uint64_t ctas = items * g.n_splits, slots = std::uint64_t{units} * k.waves;
        const std::uint64_t steps = (n + k.quantum - 1) / k.quantum;
        // The chosen split count costs within 3% of the best count (brute force over 1..64 here), and
        // no more than the policy it replaced (ceil(slots / items) splits, chunk rounded up afterwards).
        const std::uint64_t cost = gpu_attn_makespan_steps(steps, g.n_splits, items, slots);
        std::uint64_t least = cost;
        for (std::uint64_t ns = 1; ns <= std::min<std::uint64_t>(steps, kAttnMaxSplits); ++ns)
          least = std::min(least, gpu_attn_makespan_steps(steps, ns, items, slots));
        EXPECT_LE(cost * 100, least * 103) << n << " b" << batch;
        SplitGeom old = make_splits(n, items, units, k.waves, k.quantum, k.quantum);
        if (old.n_splits > kAttnMaxSplits) old = make_splits(n, 1, kAttnMaxSplits, 1, k.quantum, k.quantum);
        EXPECT_LE(cost * 100, gpu_attn_makespan_steps(steps, old.n_splits, items, slots) * 103) << n << " b" << batch;
        // Split work never spills a nearly empty last wave (the former policy's 4 CTAs on 396 slots):
        // with several splits, the grid fits one wave or its last wave is more than half full.
        if (g.n_splits > 1 && ctas > slots) {
          EXPECT_GT(2 * (ctas - (ctas - 1) / slots * slots), slots) << n << " b" << batch;
        }
      }
    }
  }
  // The H100 case of 2026-11-26: bf16 d128 hkv8 batch 1 (3 CTAs/SM, 24-token steps, 396 slots) from 64K
  // up got 400 CTAs from the former policy; now one wave.
  for (std::uint64_t n : {65536ull, 131072ull, 262144ull}) EXPECT_LE(8u * gpu_attn_splits(n, 8, units, 3, 24).n_splits, 396u);
  // The makespan model: waves x (steps per split + overhead).
  EXPECT_EQ(gpu_attn_makespan_steps(2731, 50, 8, 396), 2u * (55 + kAttnCtaOverheadSteps));
  EXPECT_EQ(gpu_attn_makespan_steps(2731, 49, 8, 396), 1u * (56 + kAttnCtaOverheadSteps));
  // Batch 1, 512 selected tokens, bf16 4 heads/CTA: 22 splits of one step each, 176 CTAs (the
  // two-kernel plan had 4 splits of 4 steps: 32 CTAs).
  const SplitGeom s512 = gpu_attn_splits(512, 8, units, 3, 24);
  EXPECT_EQ(s512.n_splits, 22u);
  EXPECT_EQ(s512.chunk, 24u);
  // Batch 1, 4K dense: every CTA walks at most 4 steps.
  EXPECT_LE(gpu_attn_splits(4096, 8, units, 3, 24).chunk, 4u * 24);
  // One item (batch 1, one kv head) at long context is capped at kAttnMaxSplits splits (the merging
  // CTA's read), not the 396 the device would take.
  // (the fewest splits within 3% of the cost at 64: 63).
  const SplitGeom one = gpu_attn_splits(262144, 1, units, 3, 32);
  EXPECT_LE(one.n_splits, kAttnMaxSplits);
  EXPECT_GE(one.n_splits * 100, kAttnMaxSplits * 97);
}

// Each selected token of every split is visited once by the kernel's (step, unroll, lane group) walk.
TEST(AttnSplitMerge, GpuSplitWalkVisitsEachTokenOnce) {
  for (auto [d, eb, U] : {std::tuple{128, 2, 3}, std::tuple{128, 2, 4}, std::tuple{64, 2, 2}, std::tuple{128, 1, 4}}) {
    const int tpc = attn_tokens_per_cta(d, eb);
    const std::uint64_t quantum = static_cast<std::uint64_t>(tpc) * U;
    for (std::uint64_t n : {512ull, 777ull, 4096ull}) {
      const SplitGeom g = gpu_attn_splits(n, 8, 132, 3, quantum);
      std::vector<int> hits(n, 0);
      for (std::uint32_t sp = 0; sp < g.n_splits; ++sp)
        for (std::uint64_t base = g.begin(sp); base < g.end(sp); base += quantum)
          for (int u = 0; u < U; ++u)
            for (int grp = 0; grp < tpc; ++grp) {
              const std::uint64_t t = attn_token_of(d, base, u, grp, eb);
              if (t < g.end(sp)) ++hits[t];
            }
      for (std::uint64_t t = 0; t < n; ++t) ASSERT_EQ(hits[t], 1) << "d " << d << " U " << U << " n " << n << " t " << t;
    }
  }
}

// --attn-splits: a fixed split count covers every token once in whole steps, no split empty, as many splits as
// asked unless there are fewer steps.
TEST(AttnSplitPolicy, FixedSplitsCoverEveryTokenInWholeSteps) {
  for (std::uint64_t n : {1ull, 23ull, 24ull, 512ull, 4096ull, 65536ull, 262144ull})
    for (std::uint32_t ns : {0u, 1u, 2u, 7u, 43u, 64u}) {
      const std::uint64_t q = 24;
      const SplitGeom g = gpu_attn_fixed_splits(n, ns, q);
      const std::uint64_t steps = (n + q - 1) / q;
      EXPECT_EQ(g.chunk % q, 0u) << n << " " << ns;
      EXPECT_LE(g.n_splits, std::max<std::uint32_t>(ns, 1u)) << n << " " << ns;
      EXPECT_GE(g.n_splits, std::min<std::uint64_t>(std::max<std::uint32_t>(ns, 1u), steps) / 2) << n << " " << ns;
      std::uint64_t covered = 0;
      for (std::uint32_t s = 0; s < g.n_splits; ++s) {
        EXPECT_EQ(g.begin(s), covered) << n << " " << ns << " split " << s;
        EXPECT_GT(g.end(s), g.begin(s)) << n << " " << ns << " split " << s;
        covered = g.end(s);
      }
      EXPECT_EQ(covered, n) << n << " " << ns;
    }
  EXPECT_EQ(gpu_attn_fixed_splits(4096, 43, 24).n_splits, 43u);  // 171 steps: 4 per split, the last shorter
  EXPECT_EQ(gpu_attn_fixed_splits(4096, 43, 24).chunk, 96u);
  EXPECT_EQ(gpu_attn_fixed_splits(96, 8, 24).n_splits, 4u);       // 4 steps: 4 splits, not 8
}
