// Do the PM sampler's timestamps and the Activity API's kernel timestamps share one clock?
//
// CUPTI documents both as GPU timestamps in ns but does not promise one time base, and the idleness timeline joins
// them (which kernel ran during which PM sample). Instead of assuming, this checks it from the data of one run in
// which both were collected over the same steps: the PM metric gr__cycles_active (graphics engine busy, %) of a
// sample should equal the share of the sample covered by kernel records. For shifts s in [-max_shift, max_shift]
// added to the PM timestamps, it computes the correlation between the two series and their mean absolute difference;
// the shift with the highest correlation is the estimated offset. With a shared clock the best shift is near 0 (within
// a sample interval) and the correlation high; otherwise the join must apply the offset or not be made.
// Pure arithmetic (no CUPTI): unit-tested on synthetic timelines.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <vector>

#include "kvf/cupti/activity.hpp"

namespace kvf::cupti {

struct PmPoint {
  double t_start_ns = 0, t_end_ns = 0;
  double busy_pct = 0;  // gr__cycles_active.avg.pct_of_peak_sustained_elapsed of the sample
};

struct ClockAlignment {
  std::size_t samples = 0;          // PM samples inside the kernel records' span at shift 0
  double corr_at_zero = std::numeric_limits<double>::quiet_NaN();
  double mae_at_zero_pct = std::numeric_limits<double>::quiet_NaN();  // mean |busy_pct - kernel share %|
  double best_shift_ns = std::numeric_limits<double>::quiet_NaN();    // add to PM timestamps
  double corr_best = std::numeric_limits<double>::quiet_NaN();
  double mae_best_pct = std::numeric_limits<double>::quiet_NaN();
  // A shared clock: enough samples, best shift within one median sample interval, correlation >= 0.8 at zero.
  bool shared_clock = false;
};

// Percent of [t0, t1] covered by the union of kernel intervals (concurrent kernels count once).
class KernelCoverage {
 public:
  explicit KernelCoverage(std::span<const KernelRecord> kernels);
  double busy_pct(double t0_ns, double t1_ns) const;
  double first_ns() const { return starts_.empty() ? 0 : starts_.front(); }
  double last_ns() const { return ends_.empty() ? 0 : ends_.back(); }

 private:
  double busy_before(double t) const;     // busy ns in (-inf, t]
  std::vector<double> starts_, ends_;     // disjoint, sorted union intervals
  std::vector<double> cum_;               // busy ns before interval i
};

// step_ns: shift resolution (0: a quarter of the median sample interval). Needs >= 8 samples inside the kernel span
// with some variation on both sides; otherwise the figures stay NaN and shared_clock false.
ClockAlignment align_pm_to_kernels(std::span<const PmPoint> samples, std::span<const KernelRecord> kernels,
                                   double max_shift_ns, double step_ns = 0);

// The check over a results directory: each PM-sampling capture is paired with the activity capture recorded during
// it ("activity_" + its name; the idleness study runs a KernelTracer through its PM phase), else with any activity
// capture of the same study and case whose kernels overlap the samples; rows with source "pm_sampling", range
// "clock_check" and metrics kvf:clock_samples, kvf:clock_corr_at_zero, kvf:clock_mae_at_zero_pct,
// kvf:clock_best_shift_ns, kvf:clock_corr_best, kvf:clock_shared (1 or 0). No pair, or a pair recorded at different
// times (no sample inside the kernel span): no rows. `rows` are the evaluated rows holding the PM samples.
inline constexpr const char* kGrActiveMetric = "gr__cycles_active.avg.pct_of_peak_sustained_elapsed";
std::vector<CounterRow> clock_check_rows(const std::filesystem::path& results_dir,
                                         const std::vector<CaptureManifest>& manifests,
                                         const std::vector<CounterRow>& rows);

}  // namespace kvf::cupti
