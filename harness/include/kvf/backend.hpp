// The backend interface: the only place that knows whether work runs on a CPU or a GPU.
// Studies allocate, fill, copy and time through it; the harness flushes caches through it.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvf {

enum class MemKind {
  device,         // GPU memory (on the CPU backend: ordinary host memory, the "device" of a CPU)
  pinned_host,    // page-locked host memory (cudaHostAlloc); on the CPU backend: mlock'ed where allowed
  pageable_host,  // plain malloc'ed host memory
};
std::string_view to_string(MemKind k);

struct AllocOptions {
  bool huge_pages = true;  // host memory: 2 MiB aligned + madvise(MADV_HUGEPAGE) where the OS allows
  bool mapped = false;     // pinned host: also map into the device address space (zero-copy reads)
};

// Plain description of one allocation. Ownership lives in BufferHandle.
struct Buffer {
  void* ptr = nullptr;           // host-addressable pointer (host kinds, CPU device) or device pointer
  std::size_t bytes = 0;
  MemKind kind = MemKind::device;
  bool huge = false;             // huge pages were granted (CPU: the madvise call succeeded)
  void* device_alias = nullptr;  // mapped pinned memory: the device-side address
  template <class T> T* as() const { return static_cast<T*>(ptr); }
};

// Everything meta.json says about the device. Numbers are 0 / empty when unknown, never guessed.
struct DeviceInfo {
  std::string backend;           // "cpu" | "cuda"
  std::string name;              // CPU model name or GPU name
  std::string arch;              // "x86_64 avx512" | "sm_90"
  int compute_units = 0;         // cores or SMs
  double clock_mhz = 0;          // current/base clock
  double max_clock_mhz = 0;      // boost / max clock
  std::uint64_t memory_bytes = 0;
  std::uint64_t llc_bytes = 0;   // L3 on CPU, L2 on GPU
  std::string pcie_link;         // "Gen5 x16" where known
  std::string driver_version;
  std::string runtime_version;
  nlohmann::json extra = nlohmann::json::object();  // backend-specific facts (THP mode, ECC, ...)
  nlohmann::json to_json() const;
};

// One timed sample. clock_mhz is NaN where the backend cannot read a clock per sample.
struct Sample {
  double seconds = 0;
  double clock_mhz = std::numeric_limits<double>::quiet_NaN();
  bool throttled = false;
  int repetition = 0;  // the --benchmark_repetitions pass that took it
};

struct TimeOptions {
  // GPU: enqueue the region behind a blocking kernel so launch overhead is not timed
  // (the blocking kernel gives up after deadlock_timeout_s and the sample is an error, not a hang).
  bool hide_launch = true;
  double deadlock_timeout_s = 10.0;
  // Time `reps` back-to-back executions of the region and report the per-execution time:
  // for regions shorter than the timer's resolution.
  int reps = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" | "cuda"
  virtual const DeviceInfo& info() const = 0;

  virtual Buffer alloc(std::size_t bytes, MemKind kind, AllocOptions opts = {}) = 0;
  virtual void release(Buffer& b) noexcept = 0;
  // Fill with pattern_word(seed, i) for every 8-byte word i (a tail shorter than 8 bytes gets the
  // low bytes of its word).
  virtual void fill(const Buffer& b, std::uint64_t seed) = 0;
  // Copy bytes between any two kinds; complete when it returns.
  virtual void copy(const Buffer& dst, const Buffer& src, std::size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Runs `enqueue` (which launches the region's work on the backend's stream, or does it on the CPU)
  // and returns the elapsed time: CUDA events on GPU, steady_clock on CPU.
  virtual Sample time_region(const std::function<void()>& enqueue, const TimeOptions& opts = {}) = 0;

  // Evict the data caches (GPU: overwrite >= 2x L2; CPU: write and read >= 2x LLC).
  virtual void flush_caches() = 0;
  virtual std::size_t flush_bytes() const = 0;
};

// RAII owner of a Buffer.
class BufferHandle {
 public:
  BufferHandle() = default;
  BufferHandle(Backend& be, std::size_t bytes, MemKind kind, AllocOptions opts = {})
      : be_(&be), buf_(be.alloc(bytes, kind, opts)) {}
  BufferHandle(BufferHandle&& o) noexcept : be_(o.be_), buf_(o.buf_) { o.buf_ = {}; }
  BufferHandle& operator=(BufferHandle&& o) noexcept {
    if (this != &o) { reset(); be_ = o.be_; buf_ = o.buf_; o.buf_ = {}; }
    return *this;
  }
  BufferHandle(const BufferHandle&) = delete;
  BufferHandle& operator=(const BufferHandle&) = delete;
  ~BufferHandle() { reset(); }
  void reset() noexcept { if (be_ && buf_.ptr) be_->release(buf_); buf_ = {}; }
  const Buffer& get() const { return buf_; }
  const Buffer* operator->() const { return &buf_; }
  explicit operator bool() const { return buf_.ptr != nullptr; }

 private:
  Backend* be_ = nullptr;
  Buffer buf_{};
};

// Result of probing for a usable CUDA device (no exception, no crash without a driver).
struct CudaProbe {
  bool compiled = false;   // this build has the CUDA backend
  bool usable = false;     // the device is present and a context could be created
  int device_count = 0;    // GPUs the runtime sees (CUDA_VISIBLE_DEVICES applies); 0 when it cannot tell
  std::string error;       // CUDA's own error text when not usable
};
// Probes GPU `device` (an ordinal among the visible GPUs); only that device gets a context.
CudaProbe probe_cuda(int device = 0);

// --device, as kvf run and every bench take it: "cpu", a GPU ordinal among the visible GPUs (CUDA_VISIBLE_DEVICES
// applies, as it does to every CUDA program), or "all" (kvf run: each visible GPU in turn). Unset: the
// backend's default (GPU 0 under cuda).
struct DeviceChoice {
  enum class Kind { unset, cpu, gpu, all };
  Kind kind = Kind::unset;
  int ordinal = -1;  // Kind::gpu
  std::string text;  // as typed, for meta.json and messages
};
inline constexpr int kMaxDeviceOrdinal = 1023;
// Throws UsageError("--device <v>: ...allowed...") for anything else. `all` only where allowed (kvf run); a bench
// measures one device, and its message lists what it takes.
DeviceChoice parse_device(std::string_view v, bool all_allowed = true);

// One visible GPU, for `kvf run --list-devices`.
struct GpuListing {
  int ordinal = 0;
  std::string name, compute_capability, pci_bus_id;
  std::uint64_t memory_bytes = 0;
};
// The GPUs the CUDA runtime sees, without creating a context. Empty with `why_none` set when there are none
// or the build has no CUDA.
std::vector<GpuListing> list_gpus(std::string* why_none);

// choice: "auto" | "cpu" | "cuda". Throws UsageError (exit 2) for an unknown choice, for "cuda" when no usable
// GPU exists (message carries the CUDA error text and what to do), and for a device the choice cannot have
// (a GPU ordinal with cpu or without a GPU, one past the visible GPUs, "all": one device per backend).
// `note` receives the one line that says what was chosen and why.
std::unique_ptr<Backend> make_backend(std::string_view choice, std::string* note = nullptr,
                                      const DeviceChoice& device = {});
std::unique_ptr<Backend> make_cpu_backend();
// The compute capability of a CUDA device as a number (90 for arch "sm_90", 100 for "sm_100"); 0 when the
// arch is not of that form (a CPU). Read from DeviceInfo, so a planned device (--plan-device) answers too.
int compute_capability(const DeviceInfo& info);
// A backend that only describes a device, read from `path` (a results directory's meta.json, or its "device"
// object): --list --plan-device prints the cases a run would have there. It runs nothing. Throws UsageError
// naming the file and key for a missing file, malformed JSON or a field of the wrong type or range.
std::unique_ptr<Backend> make_plan_backend(const std::string& path);

}  // namespace kvf
