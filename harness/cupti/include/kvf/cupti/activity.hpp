// Activity API kernel records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL): where the GPU idles *between* kernels
// (launch gaps, host work, synchronization) as opposed to *inside* kernels (the counters' idleness).
//
// For a window [t0, t1] (GPU ns, e.g. one decode step):
//   busy_ns   length of the union of kernel intervals clipped to the window (concurrent kernels count once)
//   span_ns   last kernel end - first kernel start within the window
//   gap_ns    span_ns - busy_ns: idle time between the step's kernels
//   edge_ns   window - span_ns: idle before the first and after the last kernel of the window
//   gaps, max_gap_ns  count and longest of the idle intervals between kernels
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kvf/cupti/counters_io.hpp"
#include "kvf/cupti/status.hpp"

namespace kvf::cupti {

struct KernelRecord {
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t device = 0, context = 0, stream = 0, correlation = 0;
  std::string name;
};

struct WindowSummary {
  std::size_t kernels = 0;  // kernels overlapping the window
  double window_ns = 0, busy_ns = 0, span_ns = 0, gap_ns = 0, edge_ns = 0, max_gap_ns = 0;
  std::size_t gaps = 0;
  double idle_between_kernels_pct() const { return span_ns > 0 ? 100.0 * gap_ns / span_ns : 0.0; }
  double busy_pct() const { return window_ns > 0 ? 100.0 * busy_ns / window_ns : 0.0; }
};
// Pure function (no CUPTI): testable anywhere.
WindowSummary summarize_window(std::span<const KernelRecord> kernels, std::uint64_t t0_ns, std::uint64_t t1_ns);
// Window rows (source "activity", metrics kvf:kernels, kvf:busy_ns, kvf:span_ns, kvf:gap_ns, kvf:edge_ns,
// kvf:max_gap_ns, kvf:gaps, kvf:busy_pct, kvf:idle_between_kernels_pct).
std::vector<CounterRow> window_rows(const WindowSummary& s, const CounterRow& key);

std::vector<KernelRecord> read_kernels_csv(const std::filesystem::path& p);  // UsageError naming the file
void write_kernels_csv(const std::filesystem::path& p, std::span<const KernelRecord> kernels);

// Collects kernel records for this process. Only one tracer may be alive at a time. Never throws for
// environment problems: available() false with the reason.
class KernelTracer {
 public:
  KernelTracer();
  ~KernelTracer();  // flushes and disables the activity kind
  KernelTracer(const KernelTracer&) = delete;
  KernelTracer& operator=(const KernelTracer&) = delete;

  bool available() const { return status_.available(); }
  const CountersStatus& status() const { return status_; }

  // GPU timestamp (cuptiGetTimestamp), the clock kernel records use.
  std::uint64_t now_ns() const;
  // Windows: synchronize the device before end_window() when the window must contain the step's kernels.
  void begin_window(const std::string& name, const std::string& case_name = {});
  void end_window();
  // Delivers buffered records (cuptiActivityFlushAll) and returns all records so far.
  const std::vector<KernelRecord>& flush();
  std::size_t dropped_records() const;

  bool save(const std::filesystem::path& results_dir, const std::string& capture, const std::string& study,
            const std::string& case_name);
  std::vector<CounterRow> rows(const std::string& study, const std::string& case_name);

 private:
  CaptureManifest manifest(const std::string& capture, const std::string& study, const std::string& case_name) const;
  CountersStatus status_;
  std::vector<KernelRecord> kernels_;
  std::vector<RangeMeta> windows_;
  bool window_open_ = false;
};

}  // namespace kvf::cupti
