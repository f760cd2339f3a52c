// The measurement loop: warm-up, then samples until the stop rule holds. Cold samples flush the
// caches before each sample (untimed); hot samples do not. Every raw sample is kept.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kvf/backend.hpp"
#include "kvf/stats.hpp"

namespace kvf {

struct MeasureConfig {
  int warmup = 2;  // untimed executions before the first sample of each mode
  StopRule stop{};
  // A GPU sample whose SM clock is below this fraction of the device's max clock is flagged
  // throttled (nvbench uses 0.75).
  double throttle_fraction = 0.75;
};

struct Measurement {
  std::vector<Sample> samples;
  StopReason stop = StopReason::none;
  int throttled = 0;
};

// Test-only fault injection (bench --inject-slowdown): `region`, then a busy wait of `fraction` times the time it
// took, so whatever times the call (the cpu backend's clock around it) sees a true slowdown of that fraction.
std::function<void()> slowed_region(std::function<void()> region, double fraction);

// mode: "cold" or "hot". before_sample runs untimed before each sample (after the flush when cold).
Measurement measure(Backend& be, const std::string& mode, const MeasureConfig& cfg,
                    const std::function<void()>& region, const TimeOptions& topts,
                    const std::function<void()>& before_sample = {});

}  // namespace kvf
