// Mann-Whitney U p-values against values computed by hand (and, where noted, published by scipy).
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "kvf/gate.hpp"

using kvf::gate::mann_whitney_u;
using kvf::gate::MwuMethod;
namespace g = kvf::gate;

// scipy.stats.mannwhitneyu docstring example (Shier 2004): males vs females, no ties, n = 5 and 4.
// U1 = R1 - 5*6/2 = 32 - 15 = 17, U2 = 20 - 17 = 3. Exact: the number of arrangements of 4 among 9
// ranks with U <= 3 is 1 + 1 + 2 + 3 = 7 of C(9,4) = 126, so p = 2 * 7/126 = 1/9.
// Asymptotic: z = (17 - 10 - 0.5) / sqrt(5*4*10/12) = 6.5 / 4.0825 = 1.5922, p = erfc(z/sqrt 2).
TEST(Mwu, ScipyDocExampleExact) {
  const std::vector<double> males{19, 22, 16, 29, 24}, females{20, 11, 17, 12};
  const auto r = mann_whitney_u(males, females);
  EXPECT_TRUE(r.exact);
  EXPECT_FALSE(r.ties);
  EXPECT_DOUBLE_EQ(r.u1, 17.0);
  EXPECT_NEAR(r.p, 1.0 / 9.0, 1e-15);  // scipy: 0.1111111111111111
}

TEST(Mwu, ScipyDocExampleAsymptotic) {
  const std::vector<double> males{19, 22, 16, 29, 24}, females{20, 11, 17, 12};
  const auto r = mann_whitney_u(males, females, MwuMethod::asymptotic);
  EXPECT_FALSE(r.exact);
  EXPECT_NEAR(r.p, 0.11134688653314041, 1e-12);  // scipy's documented value
}

// Two samples of 5 that do not overlap: only 1 of C(10,5) = 252 arrangements is as extreme on each
// side, p = 2/252 = 0.0079365 (the smallest p an n = 5 vs 5 comparison can reach).
TEST(Mwu, CompleteSeparationFiveVsFive) {
  const std::vector<double> x{1.1, 1.2, 1.3, 1.4, 1.5}, y{1.0, 0.9, 0.8, 0.7, 0.6};
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u1, 25.0);
  EXPECT_NEAR(r.p, 2.0 / 252.0, 1e-15);
  EXPECT_NEAR(mann_whitney_u(y, x).p, 2.0 / 252.0, 1e-15);  // two-sided: symmetric
  EXPECT_NEAR(kvf::gate::mwu_min_p(5, 5), 2.0 / 252.0, 1e-15);
}

// Exact branch with one small sample (n = 3 vs 20: min(n) <= 8, no ties). With y = 1..20 the x values
// 5.5, 12.5 and 18.5 get ranks 6, 14 and 21: R1 = 41, U1 = 41 - 3*4/2 = 35, U2 = 60 - 35 = 25.
// Counting the C(23,3) = 1771 arrangements, 618 have U >= 35: p = 2 * 618/1771 = 0.69791.
TEST(Mwu, ExactWithOneSmallSample) {
  const std::vector<double> x{5.5, 12.5, 18.5};
  std::vector<double> y;
  for (int i = 1; i <= 20; ++i) y.push_back(i);
  const auto r = mann_whitney_u(x, y);
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u1, 35.0);
  EXPECT_NEAR(r.p, 2.0 * 618.0 / 1771.0, 1e-14);
}

// Both samples > 8, no ties: normal approximation. n1 = 9, n2 = 10, U1 = 12, mu = 45,
// s = sqrt(9*10*20/12) = sqrt(150) = 12.2474, z = (12 - 45 + 0.5) / 12.2474 = -2.65361,
// p = erfc(2.65361 / sqrt 2) = 0.0079635.
TEST(Mwu, AsymptoticNoTies) {
  const std::vector<double> x{3.1, 4.7, 2.2, 5.9, 6.3, 1.8, 7.4, 8.8, 9.5};
  const std::vector<double> y{10.2, 2.9, 11.7, 12.4, 13.3, 5.1, 14.8, 15.6, 16.9, 17.7};
  const auto r = mann_whitney_u(x, y);
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u1, 12.0);
  EXPECT_NEAR(r.p, 0.007963489206550003, 1e-12);
}

// Ties force the normal approximation even for small samples, with the tie correction.
// x = {1,2,2,3,4,5,5,6,7,8}, y = {2,3,5,5,9,10,11,12,13}: pooled tie groups 2 (x3), 3 (x2), 5 (x4),
// so sum(t^3 - t) = 24 + 6 + 60 = 90. Average ranks give R1 = 77.5, U1 = 77.5 - 55 = 22.5, mu = 45,
// s = sqrt(10*9/12 * (20 - 90/(19*18))) = sqrt(7.5 * 19.73684) = 12.16661,
// z = (22.5 - 45 + 0.5) / 12.16661 = -1.80823, p = erfc(1.80823 / sqrt 2) = 0.070571.
TEST(Mwu, TiesUseCorrectedNormalApproximation) {
  const std::vector<double> x{1, 2, 2, 3, 4, 5, 5, 6, 7, 8}, y{2, 3, 5, 5, 9, 10, 11, 12, 13};
  const auto r = mann_whitney_u(x, y);
  EXPECT_FALSE(r.exact);
  EXPECT_TRUE(r.ties);
  EXPECT_DOUBLE_EQ(r.u1, 22.5);
  EXPECT_NEAR(r.p, 0.07057100573123702, 1e-12);
}

// Identical runs: every value tied across the two samples, U1 = mu, p = 1.
TEST(Mwu, IdenticalSamplesGiveOne) {
  const std::vector<double> x{1.0, 1.1, 0.9, 1.05, 0.95, 1.02};
  const auto r = mann_whitney_u(x, x);
  EXPECT_NEAR(r.p, 1.0, 1e-12);
  const std::vector<double> c{2.0, 2.0, 2.0, 2.0, 2.0};
  EXPECT_EQ(mann_whitney_u(c, c).p, 1.0);  // zero variance: scipy gives NaN, we give 1
}

// The exact CDF from the Gaussian binomial against direct counts: for n1 = n2 = 3 the 20 arrangements
// have U = 0,1,2,2,3,3,3,4,4,4,5,5,5,6,6,6,7,7,8,9 -> P(U <= 2) = 4/20, P(U <= 4) = 10/20.
TEST(Mwu, ExactCdfSmall) {
  EXPECT_NEAR(kvf::gate::mwu_exact_cdf(3, 3, 0), 1.0 / 20, 1e-15);
  EXPECT_NEAR(kvf::gate::mwu_exact_cdf(3, 3, 2), 4.0 / 20, 1e-15);
  EXPECT_NEAR(kvf::gate::mwu_exact_cdf(3, 3, 4), 10.0 / 20, 1e-15);
  EXPECT_NEAR(kvf::gate::mwu_exact_cdf(3, 3, 9), 1.0, 1e-15);
  // A large one stays a probability and symmetric: P(U <= k) + P(U <= mn - k - 1) = 1.
  const double a = kvf::gate::mwu_exact_cdf(8, 2000, 7000), b = kvf::gate::mwu_exact_cdf(8, 2000, 16000 - 7001);
  EXPECT_NEAR(a + b, 1.0, 1e-12);
}

// Student's t against tabulated values (scipy.stats.t.sf / isf give the same to the digits shown).
TEST(GateStudentT, TailAndQuantileMatchTables) {
  EXPECT_NEAR(g::student_t_sf(0.0, 3), 0.5, 1e-15);
  EXPECT_NEAR(g::student_t_sf(1.0, 1), 0.25, 1e-12);  // Cauchy: 1/2 - atan(1)/pi
  EXPECT_NEAR(g::student_t_sf(2.0, 5), 0.050969739414929, 1e-10);
  EXPECT_NEAR(g::student_t_sf(-2.0, 5), 1 - 0.050969739414929, 1e-10);
  EXPECT_NEAR(g::student_t_isf(0.025, 2), 4.302652729911275, 1e-8);
  EXPECT_NEAR(g::student_t_isf(0.025, 4), 2.776445105197799, 1e-8);
  EXPECT_NEAR(g::student_t_isf(0.01, 10), 2.763769458112696, 1e-8);
  EXPECT_NEAR(g::student_t_isf(0.05, 1000), 1.646379615, 1e-6);  // near the normal's 1.645
  EXPECT_NEAR(g::student_t_isf(0.975, 2), -4.302652729911275, 1e-8);
  for (double df : {1.0, 2.0, 4.0, 9.0})
    for (double p : {0.4, 0.05, 1e-3, 1e-6})
      EXPECT_NEAR(g::student_t_sf(g::student_t_isf(p, df), df), p, p * 1e-6) << df << " " << p;
  EXPECT_THROW(g::student_t_sf(1, 0), std::invalid_argument);
  EXPECT_THROW(g::student_t_isf(0, 3), std::invalid_argument);
}
