// PM sampling: device-wide counters sampled at a fixed interval across many decode steps, with the one-pass
// "idleness_timeline" set (PM sampling cannot replay at all). Each sample becomes rows (t_start_ns, t_end_ns,
// metric values); sample timestamps are GPU timestamps in ns. Whether they share the Activity API's clock is not
// documented: clock_alignment.hpp measures it from a run's own data (kvf:clock_* rows) before the two are joined.
//
//   kvf::cupti::PmSampler pm({.interval_ns = 20000});
//   pm.start();  for (...) { step(); if (s % 64 == 0) pm.decode(); }  pm.stop();
//   pm.save(results_dir, "idleness_timeline", "idleness", case_name);
//
// GA100 has no time-based trigger: there the interval counts SYS clock cycles (interval_ns is passed as cycles;
// the timestamps per sample are exact either way). Failures as for RangeProfiler: available() false + reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvf/cupti/counters_io.hpp"
#include "kvf/cupti/metric_sets.hpp"
#include "kvf/cupti/status.hpp"

namespace kvf::cupti {

struct PmSamplerOptions {
  int device = 0;
  std::string chip;                         // empty: cuptiDeviceGetChipName
  std::string set = "idleness_timeline";
  std::vector<std::string> metrics;         // empty: the chip's default PM-sampling set
  std::uint64_t interval_ns = 20000;        // 20 us: several samples per decode step
  std::size_t hw_buffer_bytes = 256u << 20; // device-side record buffer
  // Counter-data image capacity: 4096 samples (82 ms at 20 us). The image costs ~50 KB per sample on GH100
  // (measured: 100000 samples made a 4.95 GB image and a 377 MB counters.csv per case, minutes per case), so
  // callers size the sampled span to it rather than the other way round.
  std::uint32_t max_samples = 4096;
};

class PmSampler {
 public:
  explicit PmSampler(PmSamplerOptions opts = {});
  ~PmSampler();
  PmSampler(const PmSampler&) = delete;
  PmSampler& operator=(const PmSampler&) = delete;

  bool available() const { return status_.available(); }
  const CountersStatus& status() const { return status_; }
  const std::string& chip() const { return chip_; }
  const std::vector<std::string>& metrics() const { return metrics_; }

  void start();
  // Moves records from the hardware buffer into the counter-data image; call between steps often enough that
  // the hardware buffer does not overflow. Returns false once the image is full.
  bool decode();
  void stop();  // stops sampling and decodes what is left; reads each sample's timestamps
  std::size_t samples() const { return ranges_.size(); }
  bool overflowed() const { return overflow_; }

  bool save(const std::filesystem::path& results_dir, const std::string& capture, const std::string& study,
            const std::string& case_name) const;
  std::vector<CounterRow> rows(const std::string& study, const std::string& case_name) const;

 private:
  CaptureManifest manifest(const std::string& capture, const std::string& study, const std::string& case_name) const;
  void fail(int cupti_result, const char* call);

  PmSamplerOptions opts_;
  CountersStatus status_;
  std::string chip_;
  std::vector<std::string> metrics_;
  std::vector<std::uint8_t> config_, counter_data_;
  void* object_ = nullptr;  // CUpti_PmSampling_Object*
  bool running_ = false, full_ = false, overflow_ = false;
  int trigger_mode_ = 0;
  std::vector<RangeMeta> ranges_;
};

}  // namespace kvf::cupti
