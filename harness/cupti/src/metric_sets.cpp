#include "kvf/cupti/metric_sets.hpp"

#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_range_profiler.h>

#include <algorithm>
#include <cstdlib>

#include "internal.hpp"
#include "kvf/errors.hpp"

namespace kvf::cupti {

using detail::c_names;
using detail::check;

const char* to_string(Profiler p) { return p == Profiler::range ? "range" : "pm_sampling"; }

const std::vector<std::string>& study_chips() {
  static const std::vector<std::string> chips = {"GA100", "GH100", "GB100"};
  return chips;
}

std::vector<std::string> supported_chips() {
  CUpti_Profiler_Host_GetSupportedChips_Params p{CUpti_Profiler_Host_GetSupportedChips_Params_STRUCT_SIZE};
  check(cuptiProfilerHostGetSupportedChips(&p), "cuptiProfilerHostGetSupportedChips");
  std::vector<std::string> out;
  for (size_t i = 0; i < p.numChips; ++i)
    if (p.ppChipNames[i]) out.emplace_back(p.ppChipNames[i]);
  return out;
}

namespace {
std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}
}  // namespace

void require_study_chip(const std::string& chip) {
  const auto& chips = study_chips();
  if (std::find(chips.begin(), chips.end(), chip) == chips.end())
    throw UsageError("--chip " + chip + ": unknown chip; allowed: " + join(chips));
}

// The sets. Names were checked with the host API of CUDA 13.0 on GA100, GH100 and GB100: all valid, one pass each
// (tests/cupti asserts it). The three chips share the names today; the per-chip switch is where a future chip
// whose metric names differ gets its own list.
std::vector<MetricSet> default_sets(const std::string& chip) {
  require_study_chip(chip);
  MetricSet range;
  range.name = "decode_idleness";
  range.profiler = Profiler::range;
  range.purpose = "per decode step (user range): the three idlenesses, DRAM, occupancy and the clock";
  range.metrics = {
      "gpu__time_duration.sum",                                          // range duration (ns)
      "sm__cycles_elapsed.avg",                                          // SM cycles in the range
      "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",             // SM idle = 100 - this (no resident warp)
      "smsp__issue_active.avg.pct_of_peak_sustained_elapsed",            // issue slots unused = 100 - this
      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", // tensor pipe idle = 100 - this
      "dram__throughput.avg.pct_of_peak_sustained_elapsed",              // HBM busy
      "sm__warps_active.avg.pct_of_peak_sustained_active",               // achieved occupancy while active
      "gpc__cycles_elapsed.avg.per_second",                              // SM (GPC) clock of the range
      "gr__cycles_active.avg.pct_of_peak_sustained_elapsed",             // graphics/compute engine busy: gaps between kernels
  };
  MetricSet pm;
  pm.name = "idleness_timeline";
  pm.profiler = Profiler::pm_sampling;
  pm.purpose = "device-wide time series across many steps (PM sampling); no warps_active: it makes the set 2 passes";
  pm.metrics = {
      "gr__cycles_active.avg.pct_of_peak_sustained_elapsed",             // engine busy: idle gaps between kernels
      "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
      "smsp__issue_active.avg.pct_of_peak_sustained_elapsed",
      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
      "dram__bytes_read.sum",
      "dram__bytes_write.sum",
      "gpc__cycles_elapsed.avg.per_second",                              // clock per sample
  };
  return {range, pm};
}

MetricSet default_set(const std::string& chip, Profiler p) {
  for (auto& s : default_sets(chip))
    if (s.profiler == p) return s;
  throw UsageError(std::string("no default ") + to_string(p) + " metric set for " + chip);
}

namespace {
CUpti_Profiler_Host_Object* host(void* p) { return static_cast<CUpti_Profiler_Host_Object*>(p); }
}  // namespace

HostSession::HostSession(const std::string& chip, Profiler p, const std::vector<std::uint8_t>& avail)
    : chip_(chip), profiler_(p) {
  CUpti_Profiler_Host_Initialize_Params ip{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  ip.profilerType = p == Profiler::range ? CUPTI_PROFILER_TYPE_RANGE_PROFILER : CUPTI_PROFILER_TYPE_PM_SAMPLING;
  ip.pChipName = chip_.c_str();
  ip.pCounterAvailabilityImage = avail.empty() ? nullptr : avail.data();
  CUptiResult r = cuptiProfilerHostInitialize(&ip);
  if (r == CUPTI_ERROR_INVALID_CHIP_NAME)
    throw UsageError("chip " + chip + ": not known to this CUPTI's profiler host API (" + result_name(r) + ")");
  check(r, "cuptiProfilerHostInitialize");
  obj_ = ip.pHostObject;
}

HostSession::~HostSession() {
  if (!obj_) return;
  CUpti_Profiler_Host_Deinitialize_Params dp{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
  dp.pHostObject = host(obj_);
  (void)cuptiProfilerHostDeinitialize(&dp);
}

HostSession::MetricInfo HostSession::metric_info(const std::string& metric) const {
  MetricInfo mi;
  CUpti_Profiler_Host_GetMetricProperties_Params pp{CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE};
  pp.pHostObject = host(obj_);
  pp.pMetricName = metric.c_str();
  CUptiResult r = cuptiProfilerHostGetMetricProperties(&pp);
  if (r != CUPTI_SUCCESS) {
    mi.error = result_name(r);
    return mi;
  }
  mi.valid = true;
  if (pp.pDescription) mi.description = pp.pDescription;
  if (pp.pHwUnit) mi.hw_unit = pp.pHwUnit;
  if (pp.pDimUnit) mi.dim_unit = pp.pDimUnit;
  return mi;
}

std::vector<std::uint8_t> HostSession::config_image(const std::vector<std::string>& metrics) {
  if (configured_) throw CuptiError(CUPTI_ERROR_INVALID_OPERATION, "HostSession::config_image: called twice");
  for (const auto& m : metrics) {
    auto mi = metric_info(m);
    if (!mi.valid)
      throw UsageError("metric " + m + ": unknown for " + chip_ + " (" + to_string(profiler_) + " profiler, " +
                       mi.error + ")");
  }
  auto names = c_names(metrics);
  CUpti_Profiler_Host_ConfigAddMetrics_Params ap{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  ap.pHostObject = host(obj_);
  ap.ppMetricNames = names.data();
  ap.numMetrics = names.size();
  check(cuptiProfilerHostConfigAddMetrics(&ap), "cuptiProfilerHostConfigAddMetrics");
  configured_ = true;
  CUpti_Profiler_Host_GetConfigImageSize_Params sp{CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  sp.pHostObject = host(obj_);
  check(cuptiProfilerHostGetConfigImageSize(&sp), "cuptiProfilerHostGetConfigImageSize");
  std::vector<std::uint8_t> img(sp.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params gp{CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  gp.pHostObject = host(obj_);
  gp.configImageSize = img.size();
  gp.pConfigImage = img.data();
  check(cuptiProfilerHostGetConfigImage(&gp), "cuptiProfilerHostGetConfigImage");
  return img;
}

std::vector<double> HostSession::evaluate(const std::vector<std::uint8_t>& counter_data, std::size_t range_index,
                                          const std::vector<std::string>& metrics) const {
  auto names = c_names(metrics);
  std::vector<double> values(metrics.size(), 0.0);
  CUpti_Profiler_Host_EvaluateToGpuValues_Params ep{CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
  ep.pHostObject = host(obj_);
  ep.pCounterDataImage = counter_data.data();
  ep.counterDataImageSize = counter_data.size();
  ep.rangeIndex = range_index;
  ep.ppMetricNames = names.data();
  ep.numMetrics = names.size();
  ep.pMetricValues = values.data();
  check(cuptiProfilerHostEvaluateToGpuValues(&ep), "cuptiProfilerHostEvaluateToGpuValues");
  return values;
}

std::size_t num_passes(const std::vector<std::uint8_t>& config_image) {
  std::vector<std::uint8_t> copy = config_image;  // the API takes a non-const pointer
  CUpti_Profiler_Host_GetNumOfPasses_Params np{CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  np.configImageSize = copy.size();
  np.pConfigImage = copy.data();
  check(cuptiProfilerHostGetNumOfPasses(&np), "cuptiProfilerHostGetNumOfPasses");
  return np.numOfPasses;
}

std::size_t num_ranges(const std::vector<std::uint8_t>& counter_data, Profiler p) {
  if (p == Profiler::range) {
    CUpti_RangeProfiler_GetCounterDataInfo_Params ip{CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    ip.pCounterDataImage = counter_data.data();
    ip.counterDataImageSize = counter_data.size();
    check(cuptiRangeProfilerGetCounterDataInfo(&ip), "cuptiRangeProfilerGetCounterDataInfo");
    return ip.numTotalRanges;
  }
  CUpti_PmSampling_GetCounterDataInfo_Params ip{CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE};
  ip.pCounterDataImage = counter_data.data();
  ip.counterDataImageSize = counter_data.size();
  check(cuptiPmSamplingGetCounterDataInfo(&ip), "cuptiPmSamplingGetCounterDataInfo");
  return ip.numCompletedSamples;
}

std::string range_name(const std::vector<std::uint8_t>& counter_data, std::size_t range_index) {
  CUpti_Profiler_Host_GetRangeName_Params rp{CUpti_Profiler_Host_GetRangeName_Params_STRUCT_SIZE};
  rp.pCounterDataImage = counter_data.data();
  rp.counterDataImageSize = counter_data.size();
  rp.rangeIndex = range_index;
  rp.delimiter = "/";
  check(cuptiProfilerHostGetRangeName(&rp), "cuptiProfilerHostGetRangeName");
  std::string name = rp.pRangeName ? rp.pRangeName : "";
  // The header says CUPTI allocates the name and the caller frees it.
  std::free(const_cast<char*>(rp.pRangeName));
  return name;
}

std::string SetCheck::problem() const {
  if (ok()) return {};
  if (!valid) {
    std::vector<std::string> bad;
    for (const auto& m : metrics)
      if (!m.valid) bad.push_back(m.name + " (" + m.error + ")");
    if (bad.empty()) return "metric set '" + set.name + "' cannot be configured on " + chip;
    return "metric set '" + set.name + "': unknown on " + chip + " (" + to_string(set.profiler) +
           " profiler): " + join(bad);
  }
  return "metric set '" + set.name + "' needs " + std::to_string(passes) + " passes on " + chip + " (" +
         to_string(set.profiler) + " profiler); the idleness study requires one pass (a serving loop cannot be "
         "replayed)";
}

SetCheck check_set(const std::string& chip, const MetricSet& set) {
  SetCheck sc;
  sc.chip = chip;
  sc.set = set;
  {
    HostSession hs(chip, set.profiler);  // UsageError for an unknown chip
    bool all = !set.metrics.empty();
    for (const auto& m : set.metrics) {
      auto mi = hs.metric_info(m);
      MetricCheck mc{m, mi.valid, mi.dim_unit, mi.description, mi.error};
      all = all && mi.valid;
      sc.metrics.push_back(std::move(mc));
    }
    if (!all) return sc;
    try {
      sc.config_image = hs.config_image(set.metrics);
    } catch (const CuptiError& e) {
      // Known names that still cannot be scheduled together: find the ones that fail alone.
      for (auto& mc : sc.metrics) {
        try {
          HostSession one(chip, set.profiler);
          (void)one.config_image({mc.name});
        } catch (const std::exception& e1) {
          mc.valid = false;
          mc.error = e1.what();
        }
      }
      return sc;
    }
  }
  sc.passes = num_passes(sc.config_image);
  sc.valid = true;
  return sc;
}

}  // namespace kvf::cupti
