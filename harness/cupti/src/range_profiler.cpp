#include "kvf/cupti/range_profiler.hpp"

#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "internal.hpp"
#include "kvf/errors.hpp"

namespace kvf::cupti {

namespace {
CUpti_RangeProfiler_Object* rp(void* p) { return static_cast<CUpti_RangeProfiler_Object*>(p); }
}  // namespace

void RangeProfiler::fail(int r, const char* call) {
  status_ = classify(r, call);
  std::fprintf(stderr, "kvf: counters: %s\n", status_.reason.c_str());
}

RangeProfiler::RangeProfiler(RangeProfilerOptions opts) : opts_(std::move(opts)) {
  if (opts_.max_ranges == 0) throw UsageError("RangeProfiler: max_ranges 0: must be at least 1");
  detail::CollectorKind kind{
      Profiler::range, "default set", "the idleness study requires one pass (a serving loop cannot be replayed)",
      "cuptiProfilerGetCounterAvailability", [](CUcontext ctx, std::size_t* size, std::uint8_t* image) {
        CUpti_Profiler_GetCounterAvailability_Params ap{CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
        ap.ctx = ctx;
        ap.counterAvailabilityImageSize = image ? *size : 0;
        ap.pCounterAvailabilityImage = image;
        const CUptiResult r = cuptiProfilerGetCounterAvailability(&ap);
        *size = ap.counterAvailabilityImageSize;
        return r;
      }};
  detail::CollectorSetup setup = detail::setup_collector(opts_.device, opts_.chip, opts_.metrics, opts_.set, kind);
  status_ = std::move(setup.status);
  context_ = setup.ctx;
  chip_ = std::move(setup.chip);
  metrics_ = std::move(setup.metrics);
  config_ = std::move(setup.config);
  if (!status_.available()) return;
  CUcontext ctx = setup.ctx;

  CUpti_RangeProfiler_Enable_Params ep{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
  ep.ctx = ctx;
  if (CUptiResult r = cuptiRangeProfilerEnable(&ep); r != CUPTI_SUCCESS) { fail(r, "cuptiRangeProfilerEnable"); return; }
  object_ = ep.pRangeProfilerObject;

  prepare_capture();
}

bool RangeProfiler::prepare_capture() {
  auto names = detail::c_names(metrics_);
  CUpti_RangeProfiler_GetCounterDataSize_Params sp{CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
  sp.pRangeProfilerObject = rp(object_);
  sp.pMetricNames = names.data();
  sp.numMetrics = names.size();
  sp.maxNumOfRanges = opts_.max_ranges;
  sp.maxNumRangeTreeNodes = static_cast<std::uint32_t>(opts_.max_ranges);
  if (CUptiResult r = cuptiRangeProfilerGetCounterDataSize(&sp); r != CUPTI_SUCCESS) {
    fail(r, "cuptiRangeProfilerGetCounterDataSize");
    return false;
  }
  counter_data_.assign(sp.counterDataSize, 0);
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params ip{
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  ip.pRangeProfilerObject = rp(object_);
  ip.counterDataSize = counter_data_.size();
  ip.pCounterData = counter_data_.data();
  if (CUptiResult r = cuptiRangeProfilerCounterDataImageInitialize(&ip); r != CUPTI_SUCCESS) {
    fail(r, "cuptiRangeProfilerCounterDataImageInitialize");
    return false;
  }

  CUpti_RangeProfiler_SetConfig_Params cp{CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
  cp.pRangeProfilerObject = rp(object_);
  cp.configSize = config_.size();
  cp.pConfig = config_.data();
  cp.counterDataImageSize = counter_data_.size();
  cp.pCounterDataImage = counter_data_.data();
  cp.range = CUPTI_UserRange;
  cp.replayMode = CUPTI_UserReplay;  // one pass: the single "replay" is the run itself
  cp.maxRangesPerPass = opts_.max_ranges;
  cp.numNestingLevels = 1;
  cp.minNestingLevel = 1;
  cp.passIndex = 0;
  cp.targetNestingLevel = 1;
  if (CUptiResult r = cuptiRangeProfilerSetConfig(&cp); r != CUPTI_SUCCESS) {
    fail(r, "cuptiRangeProfilerSetConfig");
    return false;
  }
  ranges_.clear();
  open_profiled_.clear();
  depth_ = pushed_ = dropped_ = 0;
  decoded_ = false;
  used_ = false;
  return true;
}

RangeProfiler::~RangeProfiler() {
  if (running_) stop();
  if (object_) {
    CUpti_RangeProfiler_Disable_Params dp{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
    dp.pRangeProfilerObject = rp(object_);
    (void)cuptiRangeProfilerDisable(&dp);
    object_ = nullptr;
  }
}

void RangeProfiler::start() {
  if (!available() || running_) return;
  if (used_ && !prepare_capture()) return;  // a new capture: fresh image, ranges restart at 0
  used_ = true;
  CUpti_RangeProfiler_Start_Params sp{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
  sp.pRangeProfilerObject = rp(object_);
  if (CUptiResult r = cuptiRangeProfilerStart(&sp); r != CUPTI_SUCCESS) return fail(r, "cuptiRangeProfilerStart");
  running_ = true;
  decoded_ = false;
}

void RangeProfiler::push_range(const std::string& name, const std::string& case_name) {
  // Only the outermost level is profiled (numNestingLevels = 1); nested pushes are accepted and ignored.
  bool profiled = false;
  if (available() && running_ && depth_ == 0) {
    if (pushed_ >= opts_.max_ranges) {
      ++dropped_;
    } else {
      // A repeated name would be accumulated into the same CUPTI range: make each push its own range.
      std::size_t same = 0;
      for (const auto& r : ranges_)
        if (r.name == name || r.name.rfind(name + "#", 0) == 0) ++same;
      RangeMeta meta;
      meta.index = ranges_.size();
      meta.name = same == 0 ? name : name + "#" + std::to_string(same + 1);
      meta.case_name = case_name;
      if (opts_.sync_at_boundaries) detail::synchronize(static_cast<CUcontext>(context_));
      CUpti_RangeProfiler_PushRange_Params pp{CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE};
      pp.pRangeProfilerObject = rp(object_);
      pp.pRangeName = meta.name.c_str();
      if (CUptiResult r = cuptiRangeProfilerPushRange(&pp); r != CUPTI_SUCCESS) {
        fail(r, "cuptiRangeProfilerPushRange");
      } else {
        ranges_.push_back(std::move(meta));
        ++pushed_;
        profiled = true;
      }
    }
  }
  open_profiled_.push_back(profiled);
  ++depth_;
}

void RangeProfiler::pop_range(double host_clock_mhz) {
  if (depth_ == 0) return;
  --depth_;
  const bool profiled = open_profiled_.back();
  open_profiled_.pop_back();
  if (!profiled || !available() || !running_) return;
  ranges_.back().host_clock_mhz = host_clock_mhz;
  if (opts_.sync_at_boundaries) detail::synchronize(static_cast<CUcontext>(context_));
  CUpti_RangeProfiler_PopRange_Params pp{CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE};
  pp.pRangeProfilerObject = rp(object_);
  if (CUptiResult r = cuptiRangeProfilerPopRange(&pp); r != CUPTI_SUCCESS) fail(r, "cuptiRangeProfilerPopRange");
}

void RangeProfiler::stop() {
  if (!running_) return;
  running_ = false;
  if (!available()) return;
  while (depth_ > 0) pop_range();
  detail::synchronize(static_cast<CUcontext>(context_));
  CUpti_RangeProfiler_Stop_Params sp{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
  sp.pRangeProfilerObject = rp(object_);
  if (CUptiResult r = cuptiRangeProfilerStop(&sp); r != CUPTI_SUCCESS) return fail(r, "cuptiRangeProfilerStop");
  if (!sp.isAllPassSubmitted) {
    status_ = {Availability::error,
               "GPU counters unavailable: CUPTI asks for another pass, but the idleness study collects in one pass"};
    std::fprintf(stderr, "kvf: counters: %s\n", status_.reason.c_str());
    return;
  }
  CUpti_RangeProfiler_DecodeData_Params dp{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
  dp.pRangeProfilerObject = rp(object_);
  if (CUptiResult r = cuptiRangeProfilerDecodeData(&dp); r != CUPTI_SUCCESS)
    return fail(r, "cuptiRangeProfilerDecodeData");
  dropped_ += dp.numOfRangeDropped;
  decoded_ = true;
}

CaptureManifest RangeProfiler::manifest(const std::string& capture, const std::string& study,
                                        const std::string& case_name) const {
  CaptureManifest m;
  m.name = capture;
  m.kind = "range";
  m.chip = chip_;
  m.study = study;
  m.case_name = case_name;
  m.set = opts_.set;
  m.metrics = metrics_;
  m.passes = 1;
  m.ranges = ranges_;
  m.extra["max_ranges"] = opts_.max_ranges;
  m.extra["dropped_ranges"] = dropped_;
  m.extra["range_mode"] = "user";
  m.extra["replay"] = "none (one pass)";
  m.extra["sync_at_boundaries"] = opts_.sync_at_boundaries;
  return m;
}

bool RangeProfiler::save(const std::filesystem::path& results_dir, const std::string& capture,
                         const std::string& study, const std::string& case_name) const {
  if (!available() || !decoded_) return false;
  save_capture(results_dir, manifest(capture, study, case_name), config_, counter_data_);
  return true;
}

std::vector<CounterRow> RangeProfiler::rows(const std::string& study, const std::string& case_name) const {
  if (!available() || !decoded_) return {};
  return evaluate_images(manifest("live", study, case_name), counter_data_);
}

}  // namespace kvf::cupti
