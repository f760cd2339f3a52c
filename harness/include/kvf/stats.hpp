// Summary statistics of raw samples and the stopping rule of the measurement loop.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

namespace kvf {

struct Summary {
  std::size_t n = 0;
  double median = 0, mean = 0, min = 0, max = 0, q1 = 0, q3 = 0;
  double stdev = 0;      // sample standard deviation (n-1)
  double rel_stdev = 0;  // stdev / mean
};

// Quantiles use linear interpolation between order statistics (Hyndman-Fan type 7, numpy's default).
double quantile_sorted(std::span<const double> sorted, double q);
Summary summarize(std::span<const double> xs);

// When to stop taking samples (defaults are documented in README "Measurement").
struct StopRule {
  int min_samples = 5;
  int max_samples = 1000;
  // Stop once the relative standard error of the mean (stdev / sqrt(n) / mean) is at or below this.
  double target_rel_error = 0.01;
  // ...or once the measured region has used this much wall time in this mode (cold or hot).
  double budget_s = 0.5;
  // The fewest samples the budget may leave a mode with before min_samples is reached (a region whose one
  // execution is longer than the budget). --quick raises it to min_samples: its budget is short (0.1 s), so on
  // a large LLC (arrays sized from it) the escape cut quick cases to 3 samples, fewer than `kvf gate` needs
  // (its default --min-samples is StopRule{}.min_samples).
  int budget_min_samples = 2;
};
// --quick's sampling budget per mode (unless --budget is given): what the studies estimate a quick case with.
inline constexpr double kQuickBudgetS = 0.1;
enum class StopReason { none, converged, budget, max_samples };
// `elapsed_s` is wall time spent in this mode so far (including flushes).
StopReason should_stop(std::span<const double> xs, double elapsed_s, const StopRule& rule);
const char* to_string(StopReason r);

}  // namespace kvf
