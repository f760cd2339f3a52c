#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvf/stats.hpp"

using namespace kvf;

TEST(Stats, SummaryOfKnownSample) {
  const std::vector<double> xs = {4, 1, 3, 2, 5};
  const Summary s = summarize(xs);
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.q1, 2);  // type 7: 1 + 0.25*4 = index 1
  EXPECT_DOUBLE_EQ(s.q3, 4);
  EXPECT_NEAR(s.stdev, std::sqrt(2.5), 1e-12);
  EXPECT_NEAR(s.rel_stdev, std::sqrt(2.5) / 3, 1e-12);
}

TEST(Stats, QuantilesInterpolateLikeNumpy) {
  const std::vector<double> s = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.75), 3.25);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.0), 1);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 1.0), 4);
}

TEST(Stats, EmptyAndSingle) {
  EXPECT_EQ(summarize(std::vector<double>{}).n, 0u);
  const Summary one = summarize(std::vector<double>{7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.stdev, 0);
}

TEST(StopRule, WaitsForMinSamples) {
  StopRule r;
  r.min_samples = 5;
  const std::vector<double> xs = {1, 1, 1, 1};
  EXPECT_EQ(should_stop(xs, 0.01, r), StopReason::none);
}

TEST(StopRule, ConvergesOnQuietSamples) {
  StopRule r;
  r.min_samples = 5;
  r.target_rel_error = 0.01;
  const std::vector<double> xs = {1.0, 1.001, 0.999, 1.0, 1.0};
  EXPECT_EQ(should_stop(xs, 0.001, r), StopReason::converged);
}

TEST(StopRule, NoisySamplesRunUntilBudget) {
  StopRule r;
  r.min_samples = 5;
  r.target_rel_error = 0.01;
  r.budget_s = 1.0;
  const std::vector<double> xs = {1, 2, 1, 2, 1, 2};
  EXPECT_EQ(should_stop(xs, 0.5, r), StopReason::none);
  EXPECT_EQ(should_stop(xs, 1.0, r), StopReason::budget);
}

TEST(StopRule, MaxSamplesCaps) {
  StopRule r;
  r.max_samples = 6;
  const std::vector<double> xs = {1, 2, 1, 2, 1, 2};
  EXPECT_EQ(should_stop(xs, 0.0, r), StopReason::max_samples);
}

TEST(StopRule, VeryLongSamplesStopBeforeMinSamples) {
  // Two samples of 3 s each against a 0.5 s budget: paying for five would cost 15 s.
  StopRule r;
  r.min_samples = 5;
  r.budget_s = 0.5;
  const std::vector<double> xs = {3, 3.5};
  EXPECT_EQ(should_stop(xs, 6.5, r), StopReason::budget);
  EXPECT_EQ(should_stop(std::vector<double>{3}, 3, r), StopReason::none);
}

TEST(StopRule, QuickFloorKeepsWhatTheGateNeeds) {
  // --quick (budget 0.1 s) on a large LLC: samples of 0.2 s each. Before issue 20 the escape stopped at 3
  // samples, fewer than `kvf gate`'s default --min-samples; with budget_min_samples = 5 it waits for 5.
  StopRule r;
  r.budget_s = 0.1;
  const std::vector<double> three = {0.2, 0.2, 0.21};
  EXPECT_EQ(should_stop(three, 0.61, r), StopReason::budget);  // the full-run rule: two are the floor
  r.budget_min_samples = 5;
  EXPECT_EQ(should_stop(three, 0.61, r), StopReason::none);
  const std::vector<double> five = {0.2, 0.2, 0.21, 0.19, 0.25};
  EXPECT_NE(should_stop(five, 1.05, r), StopReason::none);
}
