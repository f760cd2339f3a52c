// PM-sample vs kernel-record clock check on synthetic timelines: a known offset is recovered, a shared clock is
// recognised, flat or too short series give no verdict.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "kvf/cupti/clock_alignment.hpp"

namespace kc = kvf::cupti;

namespace {
// Decode-like steps: kernels of random lengths with random idle gaps (launch gaps, host work) between them.
std::vector<kc::KernelRecord> timeline(std::uint64_t t0, std::uint64_t t1, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> len(5'000, 60'000), gap(1'000, 40'000);
  std::vector<kc::KernelRecord> ks;
  for (std::uint64_t t = t0; t < t1;) {
    kc::KernelRecord k;
    k.start_ns = t;
    k.end_ns = std::min(t1, t + len(rng));
    ks.push_back(k);
    t = k.end_ns + gap(rng);
  }
  return ks;
}
// PM samples of `interval` whose busy % is the true kernel coverage, timestamped on a clock `offset` ahead.
std::vector<kc::PmPoint> sample(const std::vector<kc::KernelRecord>& ks, double t0, double t1, double interval,
                                double offset) {
  const kc::KernelCoverage cov(ks);
  std::vector<kc::PmPoint> out;
  for (double t = t0; t + interval <= t1; t += interval) out.push_back({t + offset, t + interval + offset, cov.busy_pct(t, t + interval)});
  return out;
}
kc::KernelRecord K(std::uint64_t a, std::uint64_t b) {
  kc::KernelRecord k;
  k.start_ns = a;
  k.end_ns = b;
  return k;
}
}  // namespace

TEST(KernelCoverage, UnionAndPartialOverlap) {
  const std::vector<kc::KernelRecord> ks = {K(100, 300), K(200, 400), K(600, 700)};
  const kc::KernelCoverage cov(ks);
  EXPECT_DOUBLE_EQ(cov.busy_pct(100, 400), 100.0);
  EXPECT_DOUBLE_EQ(cov.busy_pct(0, 800), 100.0 * 400 / 800);
  EXPECT_DOUBLE_EQ(cov.busy_pct(350, 650), 100.0 * (50 + 50) / 300);
  EXPECT_DOUBLE_EQ(cov.busy_pct(400, 600), 0.0);
  EXPECT_DOUBLE_EQ(cov.first_ns(), 100);
  EXPECT_DOUBLE_EQ(cov.last_ns(), 700);
}

TEST(ClockAlignment, SharedClockGivesZeroShift) {
  const auto ks = timeline(1'000'000, 3'000'000, 1);
  const auto pm = sample(ks, 1'000'000, 3'000'000, 20'000, 0);
  const auto a = kc::align_pm_to_kernels(pm, ks, 200'000);
  EXPECT_GE(a.samples, 90u);
  EXPECT_NEAR(a.corr_at_zero, 1.0, 1e-9);
  EXPECT_NEAR(a.mae_at_zero_pct, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(a.best_shift_ns, 0.0);
  EXPECT_TRUE(a.shared_clock);
}

TEST(ClockAlignment, RecoversAKnownOffset) {
  const auto ks = timeline(1'000'000, 5'000'000, 2);
  const double offset = 85'000;  // the PM clock runs 85 us ahead
  const auto pm = sample(ks, 1'000'000, 5'000'000, 20'000, offset);
  const auto a = kc::align_pm_to_kernels(pm, ks, 200'000);
  EXPECT_NEAR(a.best_shift_ns, -offset, 5'000.0 + 1e-9);  // resolution: a quarter interval
  EXPECT_GT(a.corr_best, 0.9);
  EXPECT_LT(a.corr_at_zero, 0.8);
  EXPECT_FALSE(a.shared_clock);
}

TEST(ClockAlignment, FlatOrShortSeriesGiveNoVerdict) {
  // One kernel covering everything: every sample 100 % busy, no variation to align on.
  const std::vector<kc::KernelRecord> one = {K(0, 1'000'000)};
  const auto flat = sample(one, 0, 1'000'000, 20'000, 0);
  const auto a = kc::align_pm_to_kernels(flat, one, 100'000);
  EXPECT_TRUE(std::isnan(a.corr_at_zero));
  EXPECT_FALSE(a.shared_clock);
  // Fewer than 8 samples inside the kernel span.
  const auto ks = timeline(0, 100'000, 3);
  const auto few = sample(ks, 0, 100'000, 20'000, 0);
  EXPECT_FALSE(kc::align_pm_to_kernels(few, ks, 40'000).shared_clock);
  // Disjoint time bases (no sample inside the records' span): nothing to say.
  const auto far = sample(ks, 0, 100'000, 5'000, 1e12);
  const auto b = kc::align_pm_to_kernels(far, ks, 40'000);
  EXPECT_EQ(b.samples, 0u);
  EXPECT_FALSE(b.shared_clock);
}

TEST(ClockAlignment, DirectoryCheckPairsPmWithActivityOfTheSameCase) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvf_clock_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(kc::counters_dir(dir));
  const auto ks = timeline(1'000'000, 3'000'000, 4);
  kc::write_kernels_csv(kc::counters_dir(dir) / "activity_c.kernels.csv", ks);
  kc::CaptureManifest pm, act, other;
  pm.name = "pm_c"; pm.kind = "pm_sampling"; pm.study = "idleness"; pm.case_name = "c"; pm.chip = "GH100";
  act.name = "activity_c"; act.kind = "activity"; act.study = "idleness"; act.case_name = "c";
  other = pm; other.name = "pm_other"; other.case_name = "other";  // no activity capture: no rows
  std::vector<kc::CounterRow> rows;
  for (const auto& p : sample(ks, 1'000'000, 3'000'000, 20'000, 0)) {
    kc::CounterRow r;
    r.capture = "pm_c";
    r.metric = kc::kGrActiveMetric;
    r.t_start_ns = p.t_start_ns;
    r.t_end_ns = p.t_end_ns;
    r.value = p.busy_pct;
    rows.push_back(r);
  }
  const auto out = kc::clock_check_rows(dir, {pm, act, other}, rows);
  ASSERT_EQ(out.size(), 6u);
  for (const auto& r : out) {
    EXPECT_EQ(r.capture, "pm_c");
    EXPECT_EQ(r.case_name, "c");
    EXPECT_EQ(r.range, "clock_check");
    if (r.metric == "kvf:clock_shared") {
      EXPECT_EQ(r.value, 1.0);
    }
    if (r.metric == "kvf:clock_best_shift_ns") {
      EXPECT_EQ(r.value, 0.0);
    }
  }
  fs::remove_all(dir);
}
