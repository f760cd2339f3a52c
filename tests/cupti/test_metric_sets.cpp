// The idleness study's metric sets against the CUPTI Profiler Host API, which needs no GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "kvf/cupti/metric_sets.hpp"
#include "kvf/errors.hpp"

namespace kc = kvf::cupti;

class StudyChip : public ::testing::TestWithParam<std::string> {};

TEST_P(StudyChip, HostApiSupportsChip) {
  const auto chips = kc::supported_chips();
  EXPECT_NE(std::find(chips.begin(), chips.end(), GetParam()), chips.end());
}

TEST_P(StudyChip, EveryDefaultSetValidAndOnePass) {
  const auto sets = kc::default_sets(GetParam());
  ASSERT_EQ(sets.size(), 2u);
  for (const auto& set : sets) {
    const auto check = kc::check_set(GetParam(), set);
    for (const auto& m : check.metrics) EXPECT_TRUE(m.valid) << set.name << ": " << m.name << " " << m.error;
    EXPECT_TRUE(check.valid) << check.problem();
    EXPECT_EQ(check.passes, 1u) << set.name << " on " << GetParam();
    EXPECT_TRUE(check.ok()) << check.problem();
    EXPECT_FALSE(check.config_image.empty());
  }
}

TEST_P(StudyChip, ThreeIdlenessesInBothSets) {
  for (const auto& set : kc::default_sets(GetParam())) {
    for (const char* m : {"sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
                          "smsp__issue_active.avg.pct_of_peak_sustained_elapsed",
                          "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                          "gpc__cycles_elapsed.avg.per_second"})
      EXPECT_NE(std::find(set.metrics.begin(), set.metrics.end(), m), set.metrics.end()) << set.name << " lacks " << m;
  }
}

TEST_P(StudyChip, UnknownMetricReportedInvalidByName) {
  kc::MetricSet set = kc::default_set(GetParam(), kc::Profiler::range);
  set.metrics.push_back("bogus__metric.sum");
  const auto check = kc::check_set(GetParam(), set);
  EXPECT_FALSE(check.valid);
  EXPECT_FALSE(check.ok());
  ASSERT_FALSE(check.metrics.empty());
  EXPECT_FALSE(check.metrics.back().valid);
  EXPECT_TRUE(check.metrics.front().valid);
  EXPECT_NE(check.problem().find("bogus__metric.sum"), std::string::npos) << check.problem();
}

TEST_P(StudyChip, MultiPassSetIsRejected) {
  // sm__throughput needs several passes (5 on GA100, 8 on GH100): never acceptable in a serving loop.
  kc::MetricSet set{"custom", kc::Profiler::range, "", {"sm__throughput.avg.pct_of_peak_sustained_elapsed"}, true};
  const auto check = kc::check_set(GetParam(), set);
  EXPECT_TRUE(check.valid);
  EXPECT_GT(check.passes, 1u);
  EXPECT_FALSE(check.ok());
  EXPECT_NE(check.problem().find("one pass"), std::string::npos) << check.problem();
}

TEST_P(StudyChip, PmSamplingWarpsActiveWouldNeedTwoPasses) {
  // Why the PM-sampling set has no sm__warps_active: adding it makes the set two passes.
  kc::MetricSet set = kc::default_set(GetParam(), kc::Profiler::pm_sampling);
  set.metrics.push_back("sm__warps_active.avg.pct_of_peak_sustained_active");
  const auto check = kc::check_set(GetParam(), set);
  EXPECT_TRUE(check.valid);
  EXPECT_EQ(check.passes, 2u);
}

INSTANTIATE_TEST_SUITE_P(Chips, StudyChip, ::testing::Values("GA100", "GH100", "GB100"));

TEST(MetricSets, UnknownChipIsUsageError) {
  EXPECT_THROW(kc::default_sets("XX100"), kvf::UsageError);
  EXPECT_THROW(kc::require_study_chip("GH200"), kvf::UsageError);
  kc::MetricSet set{"x", kc::Profiler::range, "", {"gpu__time_duration.sum"}, true};
  EXPECT_THROW(kc::check_set("XX100", set), kvf::UsageError);
}

TEST(MetricSets, ConfigImageNamesUnknownMetric) {
  kc::HostSession hs("GH100", kc::Profiler::range);
  try {
    (void)hs.config_image({"gpu__time_duration.sum", "nope__x.avg"});
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("nope__x.avg"), std::string::npos) << e.what();
  }
}

TEST(MetricSets, MetricInfoHasUnits) {
  kc::HostSession hs("GH100", kc::Profiler::range);
  EXPECT_EQ(hs.metric_info("gpu__time_duration.sum").dim_unit, "nanosecond");
  EXPECT_EQ(hs.metric_info("sm__cycles_active.avg.pct_of_peak_sustained_elapsed").dim_unit, "percent");
  EXPECT_FALSE(hs.metric_info("bogus__metric.sum").valid);
}
