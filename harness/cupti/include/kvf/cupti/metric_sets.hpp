// The idleness study's metric sets and the CUPTI Profiler Host API around them. Everything here works on a
// machine without a GPU: the host API knows each supported chip's metrics from the chip name alone.
//
// "Idle" means three different things; the sets measure all three per range / per sample:
//   SM idle (no resident warp)   100 - sm__cycles_active.avg.pct_of_peak_sustained_elapsed  (memory waits count as active)
//   issue slots unused           100 - smsp__issue_active.avg.pct_of_peak_sustained_elapsed
//   tensor pipe idle             100 - sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed
// Every set must fit one pass: a serving loop cannot be replayed (no kernel replay: it needs auto ranges and
// serializes; no application/user replay: the loop is not deterministic). sm__throughput needs 5 passes on GA100
// and 8 on GH100 and is not in any set.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::cupti {

enum class Profiler { range, pm_sampling };
const char* to_string(Profiler p);  // "range" | "pm_sampling"

// The chips the study defines sets for (the CUPTI host API accepts these names with no GPU present).
const std::vector<std::string>& study_chips();  // GA100, GH100, GB100
// Every chip name this CUPTI's host API supports (cuptiProfilerHostGetSupportedChips).
std::vector<std::string> supported_chips();
// Throws UsageError("--chip XX100: unknown chip; allowed: GA100, GH100, GB100") for a chip without study sets.
void require_study_chip(const std::string& chip);

struct MetricSet {
  std::string name;      // "decode_idleness" (range profiler) | "idleness_timeline" (PM sampling)
  Profiler profiler = Profiler::range;
  std::string purpose;   // one line
  std::vector<std::string> metrics;
  bool one_pass = true;  // required to fit one pass
};

// The study's default sets for a chip: one range-profiler set and one PM-sampling set.
std::vector<MetricSet> default_sets(const std::string& chip);
MetricSet default_set(const std::string& chip, Profiler p);

// RAII owner of a CUpti_Profiler_Host_Object for one chip and profiler kind.
class HostSession {
 public:
  // Throws UsageError for a chip the host API does not know, CuptiError for other failures.
  // counter_availability: image from the device (cuptiProfilerGetCounterAvailability /
  // cuptiPmSamplingGetCounterAvailability); empty on a machine without a GPU.
  HostSession(const std::string& chip, Profiler p, const std::vector<std::uint8_t>& counter_availability = {});
  ~HostSession();
  HostSession(const HostSession&) = delete;
  HostSession& operator=(const HostSession&) = delete;

  const std::string& chip() const { return chip_; }
  Profiler profiler() const { return profiler_; }

  struct MetricInfo {
    bool valid = false;
    std::string description, hw_unit, dim_unit;  // from cuptiProfilerHostGetMetricProperties
    std::string error;                           // CUPTI result name when invalid
  };
  MetricInfo metric_info(const std::string& metric) const;
  // Adds the metrics to a fresh configuration and returns its config image. Throws UsageError naming the first
  // metric the chip does not know.
  std::vector<std::uint8_t> config_image(const std::vector<std::string>& metrics);
  // Values of `metrics` for one range (range profiler) or one sample (PM sampling) of a decoded counter-data image.
  std::vector<double> evaluate(const std::vector<std::uint8_t>& counter_data, std::size_t range_index,
                               const std::vector<std::string>& metrics) const;

 private:
  void* obj_ = nullptr;  // CUpti_Profiler_Host_Object*
  std::string chip_;
  Profiler profiler_;
  bool configured_ = false;
};

std::size_t num_passes(const std::vector<std::uint8_t>& config_image);
// Ranges (range profiler) or completed samples (PM sampling) stored in a counter-data image.
std::size_t num_ranges(const std::vector<std::uint8_t>& counter_data, Profiler p);
// The name of a range of a range-profiler image ("outer/inner" for nested ranges).
std::string range_name(const std::vector<std::uint8_t>& counter_data, std::size_t range_index);

struct MetricCheck {
  std::string name;
  bool valid = false;
  std::string unit;         // dimension unit ("percent", "nanosecond", ...)
  std::string description;
  std::string error;
};

struct SetCheck {
  std::string chip;
  MetricSet set;
  std::vector<MetricCheck> metrics;
  bool valid = false;        // every metric known and the config image built
  std::size_t passes = 0;    // 0 when not valid
  std::vector<std::uint8_t> config_image;
  bool ok() const { return valid && (!set.one_pass || passes == 1); }
  // One line saying what is wrong (empty when ok()).
  std::string problem() const;
};

// Validates a set for a chip with the host API: each metric known, config image, pass count.
// Throws UsageError for an unknown chip; never for an unknown metric (reported in the result).
SetCheck check_set(const std::string& chip, const MetricSet& set);

}  // namespace kvf::cupti
