// Range Profiler with user ranges: one range per decode step, one pass, no replay.
//
//   kvf::cupti::RangeProfiler prof({.device = 0});        // never throws for environment problems
//   if (!prof.available()) std::fprintf(stderr, "%s\n", prof.status().reason.c_str());  // timings only
//   prof.start();
//   for (int s = 0; s < steps; ++s) {
//     kvf::NvtxRange nvtx(case_name);
//     kvf::cupti::ScopedRange r(prof, case_name + "/step" + std::to_string(s), case_name);
//     decode_step();
//   }
//   prof.stop();                                          // synchronizes, decodes
//   prof.save(results_dir, "idleness_" + case_name, "idleness", case_name);
//
// Range names: CUPTI accumulates every push of the same name into one range, so a name pushed again gets "#2",
// "#3", ... appended: one range per push. At most `max_ranges` ranges per capture; pushes beyond it are not
// profiled and counted in dropped_ranges().
//
// Failures: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, another profiler attached (nsys, ncu, DCGM: multiple subscribers,
// hardware busy), no GPU, unsupported device: available() is false, status().reason says why and what to do, and
// every call becomes a no-op. Bad input (unknown metric, a set that needs more than one pass): UsageError.
// Only one RangeProfiler per process (CUPTI allows one profiling session per context and one subscriber).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "kvf/cupti/counters_io.hpp"
#include "kvf/cupti/metric_sets.hpp"
#include "kvf/cupti/status.hpp"

namespace kvf::cupti {

struct RangeProfilerOptions {
  int device = 0;                     // CUDA device ordinal; profiles its primary context
  std::string chip;                   // empty: cuptiDeviceGetChipName
  std::string set = "decode_idleness";
  std::vector<std::string> metrics;   // empty: the chip's default range-profiler set
  std::size_t max_ranges = 1024;      // ranges (decode steps) per capture
  // Synchronize the context before each push and pop so a range holds exactly the work enqueued inside it,
  // whatever stream it went to (range boundaries travel in the command stream; a non-blocking stream could
  // otherwise straddle them). Costs one synchronization per range boundary, which a decode loop that reads its
  // sampled tokens does anyway.
  bool sync_at_boundaries = true;
};

class RangeProfiler {
 public:
  explicit RangeProfiler(RangeProfilerOptions opts = {});
  ~RangeProfiler();  // stops if running, disables profiling on the context
  RangeProfiler(const RangeProfiler&) = delete;
  RangeProfiler& operator=(const RangeProfiler&) = delete;

  bool available() const { return status_.available(); }
  const CountersStatus& status() const { return status_; }
  const std::string& chip() const { return chip_; }
  const std::vector<std::string>& metrics() const { return metrics_; }

  // Begins a capture. A start() after stop() begins a new capture (save the previous one first): the image is
  // re-initialized and range indices restart at 0.
  void start();
  // `case_name` is the cases.csv case the range belongs to (empty: the capture's case).
  void push_range(const std::string& name, const std::string& case_name = {});
  // `host_clock_mhz`: the SM clock the host read as the range closed (NaN: not read). The counters also carry
  // gpc__cycles_elapsed.avg.per_second per range.
  void pop_range(double host_clock_mhz = std::numeric_limits<double>::quiet_NaN());
  // Ends the pass, decodes into the counter-data image. Throws nothing; a CUPTI failure makes the profiler
  // unavailable with the reason.
  void stop();
  std::size_t dropped_ranges() const { return dropped_; }

  // Saves DIR/counters/<capture>.{json,config,counterdata} and chip.txt; returns false (nothing written) when no
  // data was collected.
  bool save(const std::filesystem::path& results_dir, const std::string& capture, const std::string& study,
            const std::string& case_name) const;
  // counters.csv rows of the decoded image (empty when unavailable).
  std::vector<CounterRow> rows(const std::string& study, const std::string& case_name) const;

 private:
  CaptureManifest manifest(const std::string& capture, const std::string& study, const std::string& case_name) const;
  void fail(int cupti_result, const char* call);
  bool prepare_capture();  // counter-data image + SetConfig

  RangeProfilerOptions opts_;
  CountersStatus status_;
  std::string chip_;
  std::vector<std::string> metrics_;
  std::vector<std::uint8_t> config_, counter_data_;
  void* object_ = nullptr;  // CUpti_RangeProfiler_Object*
  void* context_ = nullptr;  // CUcontext
  bool running_ = false, decoded_ = false, used_ = false;
  std::size_t depth_ = 0, dropped_ = 0, pushed_ = 0;
  std::vector<RangeMeta> ranges_;
  std::vector<bool> open_profiled_;  // per open push: whether it reached CUPTI
};

// Push on construction, pop on destruction.
class ScopedRange {
 public:
  ScopedRange(RangeProfiler& p, const std::string& name, const std::string& case_name = {}) : p_(p) {
    p_.push_range(name, case_name);
  }
  ~ScopedRange() { p_.pop_range(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  RangeProfiler& p_;
};

}  // namespace kvf::cupti
