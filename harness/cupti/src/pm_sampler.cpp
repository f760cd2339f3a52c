#include "kvf/cupti/pm_sampler.hpp"

#include <cupti_pmsampling.h>

#include <algorithm>
#include <cstdio>

#include "internal.hpp"
#include "kvf/errors.hpp"

namespace kvf::cupti {

namespace {
CUpti_PmSampling_Object* pm(void* p) { return static_cast<CUpti_PmSampling_Object*>(p); }
}  // namespace

void PmSampler::fail(int r, const char* call) {
  status_ = classify(r, call);
  std::fprintf(stderr, "kvf: counters: %s\n", status_.reason.c_str());
}

PmSampler::PmSampler(PmSamplerOptions opts) : opts_(std::move(opts)) {
  if (opts_.interval_ns == 0) throw UsageError("PmSampler: interval 0: must be at least 1 ns");
  if (opts_.max_samples == 0) throw UsageError("PmSampler: max_samples 0: must be at least 1");
  const int device = opts_.device;
  detail::CollectorKind kind{
      Profiler::pm_sampling, "default PM-sampling set", "PM sampling collects in one pass only",
      "cuptiPmSamplingGetCounterAvailability", [device](CUcontext, std::size_t* size, std::uint8_t* image) {
        CUpti_PmSampling_GetCounterAvailability_Params ap{CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE};
        ap.deviceIndex = static_cast<size_t>(device);
        ap.counterAvailabilityImageSize = image ? *size : 0;
        ap.pCounterAvailabilityImage = image;
        const CUptiResult r = cuptiPmSamplingGetCounterAvailability(&ap);
        *size = ap.counterAvailabilityImageSize;
        return r;
      }};
  detail::CollectorSetup setup = detail::setup_collector(opts_.device, opts_.chip, opts_.metrics, opts_.set, kind);
  status_ = std::move(setup.status);
  chip_ = std::move(setup.chip);
  metrics_ = std::move(setup.metrics);
  config_ = std::move(setup.config);
  if (!status_.available()) return;

  CUpti_PmSampling_Enable_Params ep{CUpti_PmSampling_Enable_Params_STRUCT_SIZE};
  ep.deviceIndex = static_cast<size_t>(opts_.device);
  if (CUptiResult r = cuptiPmSamplingEnable(&ep); r != CUPTI_SUCCESS) { fail(r, "cuptiPmSamplingEnable"); return; }
  object_ = ep.pPmSamplingObject;

  auto names = detail::c_names(metrics_);
  CUpti_PmSampling_GetCounterDataSize_Params sp{CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE};
  sp.pPmSamplingObject = pm(object_);
  sp.pMetricNames = names.data();
  sp.numMetrics = names.size();
  sp.maxSamples = opts_.max_samples;
  if (CUptiResult r = cuptiPmSamplingGetCounterDataSize(&sp); r != CUPTI_SUCCESS) {
    fail(r, "cuptiPmSamplingGetCounterDataSize");
    return;
  }
  counter_data_.assign(sp.counterDataSize, 0);
  CUpti_PmSampling_CounterDataImage_Initialize_Params ip{CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  ip.pPmSamplingObject = pm(object_);
  ip.counterDataSize = counter_data_.size();
  ip.pCounterData = counter_data_.data();
  if (CUptiResult r = cuptiPmSamplingCounterDataImageInitialize(&ip); r != CUPTI_SUCCESS) {
    fail(r, "cuptiPmSamplingCounterDataImageInitialize");
    return;
  }

  CUpti_PmSampling_SetConfig_Params cp{CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE};
  cp.pPmSamplingObject = pm(object_);
  cp.configSize = config_.size();
  cp.pConfig = config_.data();
  cp.hardwareBufferSize = opts_.hw_buffer_bytes;
  cp.samplingInterval = opts_.interval_ns;
  // GA100 (and Turing) have only the SYS-clock trigger; later chips sample on a fixed-frequency timer.
  const bool sysclk = chip_ == "GA100" || chip_.rfind("TU", 0) == 0;
  cp.triggerMode = sysclk ? CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL
                          : CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
  trigger_mode_ = static_cast<int>(cp.triggerMode);
  cp.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;  // overflow is reported
  if (CUptiResult r = cuptiPmSamplingSetConfig(&cp); r != CUPTI_SUCCESS) { fail(r, "cuptiPmSamplingSetConfig"); return; }
}

PmSampler::~PmSampler() {
  if (running_) stop();
  if (object_) {
    CUpti_PmSampling_Disable_Params dp{CUpti_PmSampling_Disable_Params_STRUCT_SIZE};
    dp.pPmSamplingObject = pm(object_);
    (void)cuptiPmSamplingDisable(&dp);
    object_ = nullptr;
  }
}

void PmSampler::start() {
  if (!available() || running_) return;
  CUpti_PmSampling_Start_Params sp{CUpti_PmSampling_Start_Params_STRUCT_SIZE};
  sp.pPmSamplingObject = pm(object_);
  if (CUptiResult r = cuptiPmSamplingStart(&sp); r != CUPTI_SUCCESS) return fail(r, "cuptiPmSamplingStart");
  running_ = true;
}

bool PmSampler::decode() {
  if (!available() || !object_ || full_) return false;
  CUpti_PmSampling_DecodeData_Params dp{CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE};
  dp.pPmSamplingObject = pm(object_);
  dp.pCounterDataImage = counter_data_.data();
  dp.counterDataImageSize = counter_data_.size();
  CUptiResult r = cuptiPmSamplingDecodeData(&dp);
  if (r == CUPTI_ERROR_OUT_OF_MEMORY) {  // hardware buffer overflow: keep what was decoded
    overflow_ = true;
    return true;
  }
  if (r != CUPTI_SUCCESS) {
    fail(r, "cuptiPmSamplingDecodeData");
    return false;
  }
  if (dp.overflow) overflow_ = true;
  if (dp.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL) full_ = true;
  return !full_;
}

void PmSampler::stop() {
  if (!running_) return;
  running_ = false;
  if (!available()) return;
  CUpti_PmSampling_Stop_Params sp{CUpti_PmSampling_Stop_Params_STRUCT_SIZE};
  sp.pPmSamplingObject = pm(object_);
  if (CUptiResult r = cuptiPmSamplingStop(&sp); r != CUPTI_SUCCESS) return fail(r, "cuptiPmSamplingStop");
  decode();
  if (!available()) return;
  if (overflow_)
    std::fprintf(stderr, "kvf: counters: PM sampling hardware buffer overflowed: samples were lost (decode more "
                         "often, or raise the interval or the buffer)\n");
  CUpti_PmSampling_GetCounterDataInfo_Params ip{CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE};
  ip.pCounterDataImage = counter_data_.data();
  ip.counterDataImageSize = counter_data_.size();
  if (CUptiResult r = cuptiPmSamplingGetCounterDataInfo(&ip); r != CUPTI_SUCCESS)
    return fail(r, "cuptiPmSamplingGetCounterDataInfo");
  ranges_.clear();
  for (std::size_t i = 0; i < ip.numCompletedSamples; ++i) {
    CUpti_PmSampling_CounterData_GetSampleInfo_Params si{CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE};
    si.pPmSamplingObject = pm(object_);
    si.pCounterDataImage = counter_data_.data();
    si.counterDataImageSize = counter_data_.size();
    si.sampleIndex = i;
    if (CUptiResult r = cuptiPmSamplingCounterDataGetSampleInfo(&si); r != CUPTI_SUCCESS)
      return fail(r, "cuptiPmSamplingCounterDataGetSampleInfo");
    RangeMeta m;
    m.index = i;
    m.name = "sample";
    m.t_start_ns = static_cast<double>(si.startTimestamp);
    m.t_end_ns = static_cast<double>(si.endTimestamp);
    ranges_.push_back(m);
  }
}

CaptureManifest PmSampler::manifest(const std::string& capture, const std::string& study,
                                    const std::string& case_name) const {
  CaptureManifest m;
  m.name = capture;
  m.kind = "pm_sampling";
  m.chip = chip_;
  m.study = study;
  m.case_name = case_name;
  m.set = opts_.set;
  m.metrics = metrics_;
  m.passes = 1;
  m.ranges = ranges_;
  m.extra["interval"] = opts_.interval_ns;
  m.extra["interval_unit"] = trigger_mode_ == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL ? "sysclk_cycles" : "ns";
  m.extra["hw_buffer_bytes"] = opts_.hw_buffer_bytes;
  m.extra["max_samples"] = opts_.max_samples;
  m.extra["overflow"] = overflow_;
  m.extra["counter_data_full"] = full_;
  return m;
}

bool PmSampler::save(const std::filesystem::path& results_dir, const std::string& capture, const std::string& study,
                     const std::string& case_name) const {
  if (!available() || ranges_.empty()) return false;
  save_capture(results_dir, manifest(capture, study, case_name), config_, counter_data_);
  return true;
}

std::vector<CounterRow> PmSampler::rows(const std::string& study, const std::string& case_name) const {
  if (!available() || ranges_.empty()) return {};
  return evaluate_images(manifest("live", study, case_name), counter_data_);
}

}  // namespace kvf::cupti
