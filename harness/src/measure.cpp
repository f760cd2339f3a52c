#include "kvf/measure.hpp"

#include <chrono>
#include <cmath>

namespace kvf {

std::function<void()> slowed_region(std::function<void()> region, double fraction) {
  return [region = std::move(region), fraction] {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    region();
    const auto ran = clock::now() - t0;
    // A spin, not a sleep: a sleep's wake-up latency would add more than the fraction to short regions.
    const auto until = t0 + ran + std::chrono::duration_cast<clock::duration>(ran * fraction);
    while (clock::now() < until) {
    }
  };
}

Measurement measure(Backend& be, const std::string& mode, const MeasureConfig& cfg,
                    const std::function<void()>& region, const TimeOptions& topts,
                    const std::function<void()>& before_sample) {
  const bool cold = mode == "cold";
  // Warm-up: code, page tables, GPU module loading and clocks; never recorded.
  for (int i = 0; i < cfg.warmup; ++i) {
    if (before_sample) before_sample();
    if (cold) be.flush_caches();
    (void)be.time_region(region, topts);
  }
  const double max_clock = be.info().max_clock_mhz;
  Measurement m;
  std::vector<double> kept;  // unthrottled sample times, what the stop rule and the summary see
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    if (before_sample) before_sample();
    if (cold) be.flush_caches();
    Sample s = be.time_region(region, topts);
    if (std::isfinite(s.clock_mhz) && max_clock > 0 && s.clock_mhz < cfg.throttle_fraction * max_clock) {
      s.throttled = true;
      ++m.throttled;
    } else {
      kept.push_back(s.seconds);
    }
    m.samples.push_back(s);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // A device that throttles every sample must still end: count all samples against the budget.
    const StopReason r = should_stop(kept, elapsed, cfg.stop);
    if (r != StopReason::none) {
      m.stop = r;
      break;
    }
    if (static_cast<int>(m.samples.size()) >= cfg.stop.max_samples ||
        (kept.empty() && elapsed >= cfg.stop.budget_s)) {
      m.stop = static_cast<int>(m.samples.size()) >= cfg.stop.max_samples ? StopReason::max_samples
                                                                          : StopReason::budget;
      break;
    }
  }
  return m;
}

}  // namespace kvf
