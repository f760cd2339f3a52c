// The FMA peak the attention rows' arithmetic floor is stated against: its chains compute exactly what a scalar
// replay of the same recurrence computes (so the timed loop does the work it is credited with), and the rate it
// reports is positive and below what any core could issue.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "access.hpp"
#include "kvf/cpu_isa.hpp"

namespace ka = kvf::access;

namespace {
// Exact for the FMA kernels; the generic loop is either contracted into FMAs or rounded twice, depending on the
// baseline and the compiler, so either replay is accepted for it.
void expect_replayed(const ka::FmaChains& f) {
  for (std::uint64_t iters : {0u, 1u, 7u, 1000u}) {
    const double got = ka::run_fma_chains(f, iters);
    const double fused = ka::fma_chains_ref(f, iters, true), twice = ka::fma_chains_ref(f, iters, false);
    if (std::string(f.isa).find("generic") == std::string::npos)
      EXPECT_EQ(got, fused) << f.isa << ", " << iters << " steps";
    else
      EXPECT_TRUE(got == fused || got == twice) << f.isa << ", " << iters << " steps: " << got << " vs " << fused
                                                << " / " << twice;
  }
}
}  // namespace

TEST(FmaPeak, ChainsOfThisCpuMatchTheScalarReplay) { expect_replayed(ka::fma_chains_for_this_cpu()); }

TEST(FmaPeak, GenericChainsMatchTheScalarReplay) { expect_replayed(ka::fma_chains_generic()); }

TEST(FmaPeak, ChainsFollowTheDispatch) {
  const std::string isa = ka::fma_chains_for_this_cpu().isa;
  if (kvf::cpu_avx512()) EXPECT_EQ(isa.rfind("avx512", 0), 0u) << isa;
  else EXPECT_EQ(isa.find("avx512"), std::string::npos) << isa;
}

TEST(FmaPeak, RateIsPositiveAndBelowWhatACoreCanIssue) {
  const ka::FmaPeak p = ka::cpu_fma_peak(1, 0.005, 2);
  const ka::FmaChains f = ka::fma_chains_for_this_cpu();
  EXPECT_EQ(p.isa, f.isa);
  EXPECT_EQ(p.threads, 1);
  EXPECT_GT(p.flops_per_s, 0);
  // 6 GHz x 4 FMA pipes x lanes x 2 flops: more than any core issues (two or fewer FMA pipes at <= 6 GHz today).
  EXPECT_LT(p.flops_per_s, 6e9 * 4 * f.lanes * 2) << p.isa;
  std::printf("fp32 FMA peak, 1 thread, %s: %.1f GFLOP/s\n", p.isa.c_str(), p.flops_per_s / 1e9);
}

TEST(FmaPeak, RefusesNonPositiveArguments) {
  EXPECT_THROW(ka::cpu_fma_peak(0), std::invalid_argument);
  EXPECT_THROW(ka::cpu_fma_peak(1, 0), std::invalid_argument);
  EXPECT_THROW(ka::cpu_fma_peak(1, 0.01, 0), std::invalid_argument);
}
