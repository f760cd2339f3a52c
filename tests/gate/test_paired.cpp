// The A/B mode's statistics and verdicts (issue 20) on fixed synthetic data with a known shift, the round
// order, and what the stored-baseline gate now reads from meta.json (quick runs, fault injection). No timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/gate.hpp"

namespace g = kvf::gate;

namespace {

// Round-to-round noise of a log ratio, fixed (about 1.5% spread), mean about 0.
const std::vector<double> kNoise{0.012, -0.009, 0.004, -0.015, 0.007, -0.002, 0.016, -0.011, 0.001, -0.006};

std::vector<double> shifted(double shift, const std::vector<double>& noise = kNoise) {
  std::vector<double> d;
  for (double e : noise) d.push_back(shift + e);
  return d;
}

g::CaseData sample_case(const std::string& name, double t, const std::string& backend = "cpu") {
  g::CaseData c;
  c.key.study = "stream";
  c.key.case_name = name;
  c.key.mode = "hot";
  c.backend = backend;
  c.device = "Test CPU";
  c.samples = {t * 0.99, t, t * 1.01, t * 1.002, t * 0.998};
  return c;
}

// Rounds of one case: round i's machine speed is drift[i] (both builds alike, as --ab runs them seconds apart),
// the new build is (1 + slowdown) slower, and noise[i] moves the new side a little more.
g::PairedRuns rounds(double slowdown, const std::vector<double>& drift, const std::vector<double>& noise = kNoise) {
  g::PairedRuns p;
  p.base_source = "build-a";
  p.new_source = "build-b";
  p.base_first = g::ab_order(drift.size(), 7);
  for (std::size_t i = 0; i < drift.size(); ++i) {
    g::ResultSet a, b;
    a.format = b.format = "kvf results";
    a.source = "a" + std::to_string(i);
    b.source = "b" + std::to_string(i);
    a.cases.push_back(sample_case("read", 1e-3 * drift[i]));
    b.cases.push_back(sample_case("read", 1e-3 * drift[i] * (1 + slowdown) * std::exp(noise[i % noise.size()])));
    p.base.push_back(std::move(a));
    p.cur.push_back(std::move(b));
  }
  return p;
}

// A shared machine: whole rounds 30% apart, far more than the 5% to be seen.
const std::vector<double> kDrift{1.0, 1.3, 0.8, 1.25, 0.95, 1.1, 0.7, 1.2, 1.05, 0.9};

}  // namespace

TEST(SignedRank, ExactNullDistribution) {
  // n = 3: rank sums 0..6 of the subsets of {1,2,3} have counts 1,1,1,2,1,1,1.
  EXPECT_DOUBLE_EQ(g::signed_rank_cdf(3, 2), 3.0 / 8);
  EXPECT_DOUBLE_EQ(g::signed_rank_cdf(3, 3), 5.0 / 8);
  EXPECT_DOUBLE_EQ(g::signed_rank_cdf(3, 6), 1.0);
  EXPECT_DOUBLE_EQ(g::signed_rank_cdf(3, -1), 0.0);
  // n = 10: P(W+ <= 8) = 25/1024, the two-sided 5% critical value of the tables.
  EXPECT_DOUBLE_EQ(g::signed_rank_cdf(10, 8), 25.0 / 1024);
  EXPECT_GT(g::signed_rank_cdf(10, 9), 0.025);
}

TEST(SignedRank, MatchesScipyDocumentedExample) {
  // scipy.stats.wilcoxon's documentation (Fisher's data): statistic 24, two-sided p 0.041259765625; with
  // alternative='greater' W+ = 96, p 0.0206298828125.
  const std::vector<double> d{6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75};
  const auto r = g::wilcoxon_signed_rank(d);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.n, 15u);
  EXPECT_DOUBLE_EQ(r.w_plus, 96);
  EXPECT_NEAR(r.p_two_sided, 0.041259765625, 1e-15);
  EXPECT_NEAR(r.p_greater, 0.0206298828125, 1e-15);
  EXPECT_GT(r.p_less, 0.97);
}

TEST(SignedRank, AllPositiveGivesTheSmallestP) {
  const auto r = g::wilcoxon_signed_rank(shifted(0.05));
  EXPECT_DOUBLE_EQ(r.p_greater, 1.0 / 1024);
  EXPECT_DOUBLE_EQ(r.p_less, 1.0);
  EXPECT_DOUBLE_EQ(r.p_two_sided, 2.0 / 1024);
}

TEST(SignedRank, ZerosDroppedTiesGoNormal) {
  const std::vector<double> with_zeros{0, 0, 1, 2, 3};
  const auto z = g::wilcoxon_signed_rank(with_zeros);
  EXPECT_EQ(z.n, 3u);
  EXPECT_DOUBLE_EQ(z.p_greater, 1.0 / 8);
  // Ties among |d|: the normal approximation with the tie correction (scipy's, no continuity correction).
  // |d| ranks: 1,1,1 -> 2; 2,2,2 -> 5; 3 -> 7; W+ = 2+2+5+5+5+7 = 26 (the -1 is the third 1).
  const std::vector<double> tied{1, 1, -1, 2, 2, 2, 3};
  const auto t = g::wilcoxon_signed_rank(tied);
  EXPECT_FALSE(t.exact);
  EXPECT_DOUBLE_EQ(t.w_plus, 26);
  const double var = 7.0 * 8 * 15 / 24 - (24.0 + 24.0) / 48;  // 35 - 1
  EXPECT_NEAR(t.p_greater, 0.5 * std::erfc((26 - 14) / std::sqrt(var) / std::sqrt(2.0)), 1e-12);
  const std::vector<double> zeros{0, 0, 0};
  EXPECT_DOUBLE_EQ(g::wilcoxon_signed_rank(zeros).p_two_sided, 1.0);
}

TEST(HodgesLehmann, EstimateAndIntervalFromWalshAverages) {
  const std::vector<double> three{1, 2, 3};  // Walsh: 1, 1.5, 2, 2, 2.5, 3
  EXPECT_DOUBLE_EQ(g::hodges_lehmann(three, 0.05).estimate, 2.0);
  EXPECT_TRUE(std::isinf(g::hodges_lehmann(three, 0.05).hi));  // 3 values cannot give 95%
  std::vector<double> ten;
  for (int i = 1; i <= 10; ++i) ten.push_back(i);
  const auto e = g::hodges_lehmann(ten, 0.05);
  std::vector<double> walsh;
  for (int i = 1; i <= 10; ++i)
    for (int j = i; j <= 10; ++j) walsh.push_back(0.5 * (i + j));
  std::sort(walsh.begin(), walsh.end());
  EXPECT_DOUBLE_EQ(e.estimate, 5.5);
  EXPECT_DOUBLE_EQ(e.lo, walsh[8]);   // t = 8: the 9th Walsh average
  EXPECT_DOUBLE_EQ(e.hi, walsh[46]);  // and the 47th of 55
  // n = 6 at 95%: P(W+ <= 0) = 1/64 <= 0.025, so the interval is [min, max].
  const std::vector<double> six{1, 2, 3, 4, 5, 6};
  EXPECT_DOUBLE_EQ(g::hodges_lehmann(six, 0.05).lo, 1);
  EXPECT_DOUBLE_EQ(g::hodges_lehmann(six, 0.05).hi, 6);
}

TEST(HodgesLehmann, RecoversAKnownShift) {
  const auto e = g::hodges_lehmann(shifted(std::log(1.05)), 0.05);
  EXPECT_NEAR(std::expm1(e.estimate), 0.05, 0.005);
  EXPECT_LT(e.lo, std::log(1.05));
  EXPECT_GT(e.hi, std::log(1.05));
  EXPECT_GT(e.lo, 0);  // the shift is clear of zero
}

TEST(Detectable, SmallestShiftThatClearsTheLevel) {
  const double s = g::detectable_shift(kNoise, 0.01);
  ASSERT_TRUE(std::isfinite(s));
  EXPECT_GT(s, 0);
  EXPECT_LT(s, 0.05);  // 1.5% noise over 10 rounds sees well under 5%
  const double hl = g::hodges_lehmann(kNoise, 0.5).estimate;
  auto p_at = [&](double shift) {
    std::vector<double> d;
    for (double x : kNoise) d.push_back(x - hl + shift);
    return g::wilcoxon_signed_rank(d).p_greater;
  };
  EXPECT_LT(p_at(s), 0.01);
  EXPECT_GE(p_at(s * 0.98), 0.01);
  // Noisier rounds need a larger shift; five rounds cannot reach 1/64 at all (their smallest p is 1/32).
  std::vector<double> wide;
  for (double x : kNoise) wide.push_back(4 * x);
  EXPECT_GT(g::detectable_shift(wide, 0.01), s);
  const std::vector<double> five(kNoise.begin(), kNoise.begin() + 5);
  EXPECT_TRUE(std::isinf(g::detectable_shift(five, 1.0 / 64)));
  EXPECT_TRUE(std::isfinite(g::detectable_shift(five, 0.05)));
}

TEST(Holm, StepDownAdjustment) {
  const std::vector<double> p{0.01, 0.04, 0.03};
  const auto a = g::holm_adjust(p);
  EXPECT_DOUBLE_EQ(a[0], 0.03);
  EXPECT_DOUBLE_EQ(a[1], 0.06);  // 0.04 * 1, raised to the 0.06 before it
  EXPECT_DOUBLE_EQ(a[2], 0.06);
  EXPECT_DOUBLE_EQ(g::holm_adjust(std::vector<double>{0.9, 0.8})[0], 1.0);
}

TEST(AbOrder, BalancedPairsDrawnFromTheSeed) {
  for (std::size_t n : {2u, 3u, 10u, 11u}) {
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      const auto o = g::ab_order(n, seed);
      ASSERT_EQ(o.size(), n);
      for (std::size_t i = 0; i + 1 < n; i += 2) EXPECT_NE(o[i], o[i + 1]) << "pair " << i << " seed " << seed;
      EXPECT_EQ(o, g::ab_order(n, seed));  // the seed reproduces the order
    }
  }
  std::set<std::vector<bool>> seen;
  for (std::uint64_t seed = 0; seed < 64; ++seed) seen.insert(g::ab_order(10, seed));
  EXPECT_GT(seen.size(), 20u);  // 32 orders are possible; a fixed pattern would give 1
}

TEST(PairedGate, FivePercentSlowdownUnderThirtyPercentDriftFails) {
  g::GateOptions o;
  o.threshold = 0.04;  // the estimate must pass it: a 5% slowdown against a 5% threshold is a coin toss
  const auto r = g::run_paired_gate(rounds(0.05, kDrift), o);
  ASSERT_EQ(r.cases.size(), 1u);
  const auto& c = r.cases[0];
  EXPECT_EQ(c.verdict, g::Verdict::slower) << c.note;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NEAR(c.change, 0.05, 0.006);
  EXPECT_LE(c.ci_lo, 0.05);
  EXPECT_GE(c.ci_hi, 0.05);
  EXPECT_DOUBLE_EQ(c.p, 1.0 / 1024);
  EXPECT_EQ(c.round_ratios.size(), 10u);
  EXPECT_LT(c.detectable, 0.05);
  EXPECT_TRUE(r.paired);
  EXPECT_EQ(r.rounds, 10u);
  EXPECT_NE(g::format_markdown(r, o).find("new/base per round"), std::string::npos);
  EXPECT_NE(g::format_csv(r).find("round_ratios"), std::string::npos);
  // The stored-baseline comparison of the same samples cannot: the drift swamps the slowdown.
  auto runs = rounds(0.05, kDrift);
  g::ResultSet base = g::merge_runs({runs.base.begin(), runs.base.end()});
  EXPECT_NE(g::run_gate(base, runs.cur[0], o).cases[0].verdict, g::Verdict::slower);
}

TEST(PairedGate, IdenticalBuildsPass) {
  const auto r = g::run_paired_gate(rounds(0.0, kDrift), g::GateOptions{});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.cases[0].verdict, g::Verdict::same) << r.cases[0].note;
  EXPECT_NEAR(r.cases[0].change, 0.0, 0.006);
}

TEST(PairedGate, SignificantButSmallerThanThresholdIsSame) {
  std::vector<double> quiet;
  for (double e : kNoise) quiet.push_back(e / 10);  // 0.15% noise
  const auto r = g::run_paired_gate(rounds(0.01, kDrift, quiet), g::GateOptions{});
  EXPECT_EQ(r.cases[0].verdict, g::Verdict::same);
  EXPECT_NE(r.cases[0].note.find("within the threshold"), std::string::npos) << r.cases[0].note;
  EXPECT_EQ(r.exit_code, 0);
}

// Five rounds, all +0.1%: significant (p = 1/32), its interval unbounded; far within a 5% threshold, it must not
// fail the build (it did when the rule held the interval's end against the threshold).
TEST(PairedGate, ASmallSignificantChangeWithAnUnboundedIntervalDoesNotFail) {
  const auto r = g::run_paired_gate(rounds(0.001, {1.0, 1.1, 0.9, 1.05, 0.95}, {0.0}), g::GateOptions{});
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_NE(r.cases[0].verdict, g::Verdict::slower) << r.cases[0].note;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NEAR(r.cases[0].change, 0.001, 1e-9);
}

// A case the base build measured and the new build skips in every round is lost, as in the stored mode: MISSING,
// and --fail-on-missing fails it (it was SKIPPED and passed).
TEST(PairedGate, ACaseTheNewBuildSkipsIsMissing) {
  auto runs = rounds(0.0, kDrift);
  for (auto* side : {&runs.base, &runs.cur})  // a second case both measure: a gate needs one to compare
    for (auto& rs : *side) rs.cases.push_back(sample_case("write", 2e-3));
  for (auto& rs : runs.cur) {
    rs.cases[0].skipped = true;
    rs.cases[0].samples.clear();
    rs.cases[0].note = "skipped: this build cannot run it";
  }
  g::GateOptions o;
  const auto r = g::run_paired_gate(runs, o);
  const auto read =
      std::find_if(r.cases.begin(), r.cases.end(), [](const auto& c) { return c.key.case_name == "read"; });
  ASSERT_NE(read, r.cases.end());
  EXPECT_EQ(read->verdict, g::Verdict::missing);
  EXPECT_EQ(read->note, "measured by the base build, skipped by the new one: skipped: this build cannot run it");
  EXPECT_EQ(r.exit_code, 0);
  o.fail_on_missing = true;
  EXPECT_EQ(g::run_paired_gate(runs, o).exit_code, 1);
  // Skipped by both builds: nothing was lost.
  for (auto& rs : runs.base) {
    rs.cases[0].skipped = true;
    rs.cases[0].samples.clear();
  }
  for (const auto& c : g::run_paired_gate(runs, o).cases)
    if (c.key.case_name == "read") EXPECT_EQ(c.verdict, g::Verdict::skipped);
}

TEST(PairedGate, TooFewRoundsForPowerIsNoisyNotPass) {
  const auto r = g::run_paired_gate(rounds(0.0, {1.0, 1.2, 0.9}), g::GateOptions{});
  EXPECT_EQ(r.cases[0].verdict, g::Verdict::noisy);
  EXPECT_TRUE(std::isinf(r.cases[0].detectable));
  EXPECT_NE(r.cases[0].note.find("give more --rounds"), std::string::npos) << r.cases[0].note;
}

TEST(PairedGate, BadInput) {
  EXPECT_THROW(g::run_paired_gate(rounds(0.0, {1.0}), g::GateOptions{}), kvf::UsageError);  // rounds < 2
  auto other_backend = rounds(0.0, kDrift);
  for (auto& rs : other_backend.cur) rs.cases[0].backend = "cuda";
  try {
    g::run_paired_gate(other_backend, g::GateOptions{});
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("different backends"), std::string::npos) << e.what();
  }
  auto gap = rounds(0.0, kDrift);
  gap.cur[3].cases.clear();  // the case is missing from one round: not compared, and nothing else is
  EXPECT_THROW(g::run_paired_gate(gap, g::GateOptions{}), kvf::UsageError);
  gap.cur[3].cases.push_back(sample_case("write", 1e-3));
  for (auto& rs : gap.base) rs.cases.push_back(sample_case("write", 1e-3));
  for (auto& rs : gap.cur)
    if (rs.cases.size() == 1 && rs.cases[0].key.case_name == "read") rs.cases.push_back(sample_case("write", 1e-3));
  const auto r = g::run_paired_gate(gap, g::GateOptions{});
  EXPECT_EQ(r.count(g::Verdict::skipped), 1u);
}

// ---------------------------------------------------------------------------------------------
// What the stored-baseline gate reads from meta.json

TEST(RunSettings, QuickMinSamplesBudgetAndInjection) {
  const auto meta = nlohmann::json::parse(R"({
    "kvf_run": {"quick": true},
    "studies": {
      "stream": {"measure": {"min_samples": 5, "budget_s": 0.1, "quick": true},
                 "fault_injection": {"case_regex": "read/.*/hot", "fraction": 0.05}},
      "access": {"measure": {"min_samples": 3, "budget_s": 0.5}, "fault_injection": null}}})");
  g::ResultSet rs;
  g::read_run_settings(meta, rs);
  EXPECT_TRUE(rs.quick);
  EXPECT_EQ(rs.run_min_samples, 3);
  EXPECT_DOUBLE_EQ(rs.run_budget_s, 0.5);
  ASSERT_EQ(rs.fault_injection.size(), 1u);
  EXPECT_NE(rs.fault_injection[0].find("stream: read/.*/hot=0.05"), std::string::npos) << rs.fault_injection[0];
}

TEST(RunSettings, InjectedResultsAreRefusedUnlessAllowed) {
  g::ResultSet a, b;
  a.format = b.format = "kvf results";
  a.source = "base";
  b.source = "injected";
  a.cases.push_back(sample_case("read", 1e-3));
  b.cases.push_back(sample_case("read", 1.05e-3));
  b.fault_injection.push_back("stream: read=0.05");
  try {
    g::run_gate(a, b, g::GateOptions{});
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--current injected: carries a test-only fault injection"), std::string::npos)
        << e.what();
  }
  g::GateOptions allow;
  allow.allow_fault_injection = true;
  const auto r = g::run_gate(a, b, allow);
  EXPECT_TRUE(std::any_of(r.warnings.begin(), r.warnings.end(),
                          [](const std::string& w) { return w.find("not a measurement") != std::string::npos; }));
}

// The remedy for too few samples fits how the run was made.
TEST(RunSettings, TooFewSamplesRemedyFollowsTheRun) {
  auto refusal = [](const g::ResultSet& cur, int gate_min_samples = g::GateOptions{}.min_samples) {
    g::ResultSet base;
    base.format = "kvf results";
    base.cases.push_back(sample_case("read", 1e-3));
    base.cases[0].samples.resize(60, 1e-3);
    g::GateOptions o;
    o.min_samples = gate_min_samples;
    try {
      g::run_gate(base, cur, o);
    } catch (const kvf::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  g::ResultSet cur;
  cur.format = "kvf results";
  cur.cases.push_back(sample_case("read", 1e-3));
  cur.cases[0].samples.resize(3);
  cur.quick = true;
  EXPECT_NE(refusal(cur).find("a --quick run of this kvf takes at least 5"), std::string::npos) << refusal(cur);
  cur.run_min_samples = 3;
  EXPECT_NE(refusal(cur).find("-- --min-samples 5"), std::string::npos) << refusal(cur);
  // The default recorded in meta.json is no flag the user gave: the remedy raises it, never "without it".
  cur.run_min_samples = 5;
  const std::string def = refusal(cur, 50);
  EXPECT_NE(def.find("the run took at least 5 per case and mode (the default --min-samples): rerun kvf run with -- "
                     "--min-samples 50"), std::string::npos) << def;
  cur.quick = false;
  cur.run_min_samples = 5;
  cur.run_budget_s = 0.5;
  EXPECT_NE(refusal(cur).find("-- --budget S"), std::string::npos) << refusal(cur);
  EXPECT_EQ(g::GateOptions{}.min_samples, kvf::StopRule{}.min_samples);
}
