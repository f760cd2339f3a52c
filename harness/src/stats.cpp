#include "kvf/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvf {

double quantile_sorted(std::span<const double> s, double q) {
  if (s.empty()) return std::nan("");
  if (s.size() == 1) return s[0];
  const double h = (static_cast<double>(s.size()) - 1.0) * std::clamp(q, 0.0, 1.0);
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

Summary summarize(std::span<const double> xs) {
  Summary r;
  r.n = xs.size();
  if (xs.empty()) return r;
  std::vector<double> s(xs.begin(), xs.end());
  std::sort(s.begin(), s.end());
  r.min = s.front();
  r.max = s.back();
  r.median = quantile_sorted(s, 0.5);
  r.q1 = quantile_sorted(s, 0.25);
  r.q3 = quantile_sorted(s, 0.75);
  r.mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(r.n);
  if (r.n > 1) {
    double ss = 0;
    for (double x : s) ss += (x - r.mean) * (x - r.mean);
    r.stdev = std::sqrt(ss / static_cast<double>(r.n - 1));
  }
  r.rel_stdev = r.mean > 0 ? r.stdev / r.mean : 0;
  return r;
}

StopReason should_stop(std::span<const double> xs, double elapsed_s, const StopRule& rule) {
  const auto n = static_cast<int>(xs.size());
  if (n >= rule.max_samples) return StopReason::max_samples;
  if (n < rule.min_samples) {
    // The budget cannot cut a case below min_samples unless a single sample is itself longer than the
    // whole budget (a multi-second region): then budget_min_samples (two, unless --quick) are the most we pay for.
    if (n >= std::max(2, rule.budget_min_samples) && elapsed_s >= rule.budget_s * rule.min_samples)
      return StopReason::budget;
    return StopReason::none;
  }
  const Summary s = summarize(xs);
  const double rel_err = s.mean > 0 ? s.stdev / std::sqrt(static_cast<double>(n)) / s.mean : 0;
  if (rel_err <= rule.target_rel_error) return StopReason::converged;
  if (elapsed_s >= rule.budget_s) return StopReason::budget;
  return StopReason::none;
}

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::converged: return "converged";
    case StopReason::budget: return "budget";
    case StopReason::max_samples: return "max_samples";
  }
  return "none";
}

}  // namespace kvf
