#include "kvf/cupti/activity.hpp"

#include <cuda_runtime.h>
#include <cupti_activity.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "internal.hpp"
#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/table.hpp"
#include "kvf/results.hpp"

namespace kvf::cupti {

WindowSummary summarize_window(std::span<const KernelRecord> kernels, std::uint64_t t0, std::uint64_t t1) {
  WindowSummary s;
  if (t1 < t0) std::swap(t0, t1);
  s.window_ns = static_cast<double>(t1 - t0);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> iv;
  for (const auto& k : kernels) {
    if (k.end_ns <= t0 || k.start_ns >= t1 || k.end_ns <= k.start_ns) continue;
    iv.emplace_back(std::max(k.start_ns, t0), std::min(k.end_ns, t1));
  }
  s.kernels = iv.size();
  if (iv.empty()) {
    s.edge_ns = s.window_ns;
    return s;
  }
  std::sort(iv.begin(), iv.end());
  std::uint64_t cur_s = iv[0].first, cur_e = iv[0].second, busy = 0, max_gap = 0;
  std::size_t gaps = 0;
  for (std::size_t i = 1; i < iv.size(); ++i) {
    if (iv[i].first > cur_e) {  // idle interval between kernels
      busy += cur_e - cur_s;
      max_gap = std::max(max_gap, iv[i].first - cur_e);
      ++gaps;
      cur_s = iv[i].first;
      cur_e = iv[i].second;
    } else {
      cur_e = std::max(cur_e, iv[i].second);
    }
  }
  busy += cur_e - cur_s;
  const std::uint64_t first = iv.front().first;
  std::uint64_t last = 0;
  for (const auto& x : iv) last = std::max(last, x.second);
  s.busy_ns = static_cast<double>(busy);
  s.span_ns = static_cast<double>(last - first);
  s.gap_ns = s.span_ns - s.busy_ns;
  s.edge_ns = s.window_ns - s.span_ns;
  s.gaps = gaps;
  s.max_gap_ns = static_cast<double>(max_gap);
  return s;
}

std::vector<CounterRow> window_rows(const WindowSummary& s, const CounterRow& key) {
  std::vector<CounterRow> rows;
  auto add = [&](const char* metric, double v, const char* unit) { rows.push_back(metric_row(key, metric, v, unit)); };
  add("kvf:kernels", static_cast<double>(s.kernels), "count");
  add("kvf:window_ns", s.window_ns, "nanosecond");
  add("kvf:busy_ns", s.busy_ns, "nanosecond");
  add("kvf:span_ns", s.span_ns, "nanosecond");
  add("kvf:gap_ns", s.gap_ns, "nanosecond");
  add("kvf:edge_ns", s.edge_ns, "nanosecond");
  add("kvf:gaps", static_cast<double>(s.gaps), "count");
  add("kvf:max_gap_ns", s.max_gap_ns, "nanosecond");
  add("kvf:busy_pct", s.busy_pct(), "percent");
  add("kvf:idle_between_kernels_pct", s.idle_between_kernels_pct(), "percent");
  return rows;
}

namespace {
const std::vector<std::string>& kernel_columns() {
  static const std::vector<std::string> c = {"start_ns", "end_ns", "device", "context", "stream", "correlation",
                                             "name"};
  return c;
}
}  // namespace

void write_kernels_csv(const std::filesystem::path& p, std::span<const KernelRecord> kernels) {
  std::ofstream out(p, std::ios::trunc);
  if (!out) throw UsageError(p.string() + ": cannot be written");
  out << csv_line(kernel_columns());
  for (const auto& k : kernels)
    out << csv_line({std::to_string(k.start_ns), std::to_string(k.end_ns), std::to_string(k.device),
                     std::to_string(k.context), std::to_string(k.stream), std::to_string(k.correlation), k.name});
  if (!out) throw UsageError(p.string() + ": write failed");
}

std::vector<KernelRecord> read_kernels_csv(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) throw UsageError(p.string() + ": missing or unreadable");
  const CsvTable t = read_csv_table(p.string());
  std::vector<KernelRecord> out;
  auto u64 = [&](std::size_t row, const char* col) -> std::uint64_t {
    const std::string& f = t.at(row, col);
    try {
      std::size_t used = 0;
      if (f.empty() || f[0] < '0' || f[0] > '9') throw std::invalid_argument(f);  // stoull wraps "-1"
      auto v = std::stoull(f, &used);
      if (used != f.size()) throw std::invalid_argument(f);
      return v;
    } catch (const std::exception&) {
      throw UsageError(p.string() + ":" + std::to_string(t.line[row]) + ": column " + col + ": '" + f +
                       "' is not a non-negative integer");
    }
  };
  for (const auto& c : kernel_columns()) (void)t.require_column(c);
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    KernelRecord k;
    k.start_ns = u64(i, "start_ns");
    k.end_ns = u64(i, "end_ns");
    k.device = static_cast<std::uint32_t>(u64(i, "device"));
    k.context = static_cast<std::uint32_t>(u64(i, "context"));
    k.stream = static_cast<std::uint32_t>(u64(i, "stream"));
    k.correlation = static_cast<std::uint32_t>(u64(i, "correlation"));
    k.name = t.at(i, "name");
    out.push_back(std::move(k));
  }
  return out;
}

// ---- the tracer: CUPTI hands buffers to C callbacks, which append to the one live tracer's store ----
namespace {
std::mutex g_mu;
std::vector<KernelRecord> g_pending;  // records delivered since the last flush()
std::size_t g_dropped = 0;
std::atomic<bool> g_alive{false};
constexpr std::size_t kBufferBytes = 4u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t /*size*/, size_t valid) {
  std::vector<KernelRecord> got;
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    KernelRecord r;
    r.start_ns = k->start;
    r.end_ns = k->end;
    r.device = k->deviceId;
    r.context = k->contextId;
    r.stream = k->streamId;
    r.correlation = k->correlationId;
    if (k->name) r.name = k->name;
    got.push_back(std::move(r));
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_alive.load()) return;
  g_pending.insert(g_pending.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  g_dropped += dropped;
}
}  // namespace

KernelTracer::KernelTracer() {
  bool expected = false;
  if (!g_alive.compare_exchange_strong(expected, true)) {
    status_ = {Availability::error, "kernel tracing unavailable: another KernelTracer is alive in this process"};
    return;
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    status_ = {Availability::no_gpu, std::string("kernel tracing unavailable: no usable GPU (") +
                                         (e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device") + ")"};
    g_alive = false;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_pending.clear();
    g_dropped = 0;
  }
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    status_ = classify(r, "cuptiActivityEnable(CONCURRENT_KERNEL)");
    std::fprintf(stderr, "kvf: counters: %s\n", status_.reason.c_str());
    g_alive = false;
    return;
  }
  status_.availability = Availability::available;
}

KernelTracer::~KernelTracer() {
  if (!available()) return;
  (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::lock_guard<std::mutex> lock(g_mu);
  g_pending.clear();
  g_alive = false;
}

std::uint64_t KernelTracer::now_ns() const {
  uint64_t t = 0;
  if (cuptiGetTimestamp(&t) != CUPTI_SUCCESS) return 0;
  return t;
}

void KernelTracer::begin_window(const std::string& name, const std::string& case_name) {
  if (!available()) return;
  if (window_open_) end_window();
  RangeMeta w;
  w.index = windows_.size();
  w.name = name;
  w.case_name = case_name;
  w.t_start_ns = static_cast<double>(now_ns());
  windows_.push_back(std::move(w));
  window_open_ = true;
}

void KernelTracer::end_window() {
  if (!available() || !window_open_) return;
  windows_.back().t_end_ns = static_cast<double>(now_ns());
  window_open_ = false;
}

const std::vector<KernelRecord>& KernelTracer::flush() {
  if (!available()) return kernels_;
  (void)cuptiActivityFlushAll(0);
  std::lock_guard<std::mutex> lock(g_mu);
  kernels_.insert(kernels_.end(), std::make_move_iterator(g_pending.begin()), std::make_move_iterator(g_pending.end()));
  g_pending.clear();
  std::sort(kernels_.begin(), kernels_.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return kernels_;
}

std::size_t KernelTracer::dropped_records() const {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_dropped;
}

CaptureManifest KernelTracer::manifest(const std::string& capture, const std::string& study,
                                       const std::string& case_name) const {
  CaptureManifest m;
  m.name = capture;
  m.kind = "activity";
  m.study = study;
  m.case_name = case_name;
  m.set = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL";
  m.ranges = windows_;
  m.extra["kernels"] = kernels_.size();
  m.extra["dropped_records"] = dropped_records();
  m.extra["clock"] = "cuptiGetTimestamp (ns)";
  return m;
}

bool KernelTracer::save(const std::filesystem::path& results_dir, const std::string& capture,
                        const std::string& study, const std::string& case_name) {
  if (!available()) return false;
  flush();
  const auto dir = counters_dir(results_dir);
  make_directory(dir, "");
  write_kernels_csv(dir / (capture + ".kernels.csv"), kernels_);
  save_capture(results_dir, manifest(capture, study, case_name), {}, {});
  return true;
}

std::vector<CounterRow> KernelTracer::rows(const std::string& study, const std::string& case_name) {
  if (!available()) return {};
  flush();
  std::vector<CounterRow> out;
  for (const auto& w : windows_) {
    if (!(w.t_end_ns >= w.t_start_ns)) continue;
    CounterRow key;
    key.study = study;
    key.case_name = w.case_name.empty() ? case_name : w.case_name;
    key.source = "activity";
    key.capture = "live";
    key.range_index = static_cast<long>(w.index);
    key.range = w.name;
    key.t_start_ns = w.t_start_ns;
    key.t_end_ns = w.t_end_ns;
    auto r = window_rows(summarize_window(kernels_, static_cast<std::uint64_t>(w.t_start_ns),
                                          static_cast<std::uint64_t>(w.t_end_ns)),
                         key);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

}  // namespace kvf::cupti
