// The CPU backend: the default where no GPU is present and a real product for CPU-offload users.
// All cores through OpenMP, huge pages where the OS allows, steady_clock timing.
#include <omp.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "kvf/cpu_isa.hpp"
#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"

namespace kvf {

std::string_view to_string(MemKind k) {
  switch (k) {
    case MemKind::device: return "device";
    case MemKind::pinned_host: return "pinned_host";
    case MemKind::pageable_host: return "pageable_host";
  }
  return "?";
}

nlohmann::json DeviceInfo::to_json() const {
  return {{"backend", backend},         {"name", name},
          {"arch", arch},               {"compute_units", compute_units},
          {"clock_mhz", clock_mhz},     {"max_clock_mhz", max_clock_mhz},
          {"memory_bytes", memory_bytes}, {"llc_bytes", llc_bytes},
          {"pcie_link", pcie_link},     {"driver_version", driver_version},
          {"runtime_version", runtime_version}, {"extra", extra}};
}

namespace {

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) {
        auto v = line.substr(c + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return {};
}

double read_khz_as_mhz(const char* path) {
  std::ifstream in(path);
  double khz = 0;
  return (in >> khz) ? khz / 1000.0 : 0.0;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    info_.backend = "cpu";
    info_.name = cpuinfo_field("model name");
    if (info_.name.empty()) info_.name = "unknown CPU";
    struct utsname u {};
    ::uname(&u);
    // The ISA the kernels run (run-time dispatch, kvf/cpu_isa.hpp), which a portable build's -march is not.
    info_.arch = std::string(u.machine) + " " + dispatch_isa();
    info_.compute_units = omp_get_max_threads();
    info_.max_clock_mhz = read_khz_as_mhz("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    info_.clock_mhz = read_khz_as_mhz("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq");
    if (info_.clock_mhz == 0) {
      const auto mhz = cpuinfo_field("cpu MHz");
      if (!mhz.empty()) info_.clock_mhz = std::stod(mhz);
    }
    info_.memory_bytes = host_memory_bytes();
    const HostLlc llc = host_llc();
    info_.llc_bytes = llc.total_bytes();  // every L3 domain's: what the flush, pools and arrays must outgrow
    info_.driver_version = std::string(u.sysname) + " " + u.release;
    info_.runtime_version = "OpenMP " + std::to_string(_OPENMP);
    info_.extra = {{"thp", thp_mode()},
                   {"hardware_threads", std::thread::hardware_concurrency()},
                   {"omp_threads", omp_get_max_threads()},
                   {"compiled_isa", compiled_isa()},
                   {"dispatch_isa", dispatch_isa()},
                   {"avx512_paths", avx512_paths()},
                   {"llc_domain_bytes", llc.domain_bytes},
                   {"llc_domains", llc.domains}};
    flush_bytes_ = past_llc_bytes(info_.llc_bytes, 2, std::size_t{64} << 20, kFlushCapBytes);
  }
  ~CpuBackend() override {
    if (flush_buf_) host_free(flush_buf_, flush_bytes_);
  }

  std::string name() const override { return "cpu"; }
  const DeviceInfo& info() const override { return info_; }

  Buffer alloc(std::size_t bytes, MemKind kind, AllocOptions opts) override {
    Buffer b;
    bool advised = false;
    b.ptr = host_alloc(bytes, opts.huge_pages, &advised);
    b.bytes = bytes;
    b.kind = kind;
    b.huge = opts.huge_pages && advised && thp_mode() != "never";
    // "Pinned" on a CPU means resident: lock it where RLIMIT_MEMLOCK allows (best effort).
    if (kind == MemKind::pinned_host) (void)::mlock(b.ptr, bytes);
    if (opts.mapped) b.device_alias = b.ptr;
    return b;
  }

  void release(Buffer& b) noexcept override {
    if (!b.ptr) return;
    if (b.kind == MemKind::pinned_host) ::munlock(b.ptr, b.bytes);
    host_free(b.ptr, b.bytes);
    b = {};
  }

  void fill(const Buffer& b, std::uint64_t seed) override {
    auto* w = static_cast<std::uint64_t*>(b.ptr);
    const std::size_t words = b.bytes / 8;
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < words; ++i) w[i] = pattern_word(seed, i);
    if (const std::size_t tail = b.bytes % 8) {
      const std::uint64_t last = pattern_word(seed, words);
      std::memcpy(static_cast<char*>(b.ptr) + words * 8, &last, tail);
    }
  }

  void copy(const Buffer& dst, const Buffer& src, std::size_t bytes) override {
    if (bytes > dst.bytes || bytes > src.bytes)
      throw UsageError("copy of " + std::to_string(bytes) + " bytes exceeds a buffer (" + std::to_string(src.bytes) +
                       " -> " + std::to_string(dst.bytes) + ")");
    parallel_memcpy(dst.ptr, src.ptr, bytes);
  }

  void synchronize() override {}

  Sample time_region(const std::function<void()>& enqueue, const TimeOptions& opts) override {
    const int reps = opts.reps > 0 ? opts.reps : 1;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) enqueue();
    const auto t1 = std::chrono::steady_clock::now();
    Sample s;
    s.seconds = std::chrono::duration<double>(t1 - t0).count() / reps;
    return s;
  }

  // Reads 2x the LLC (64 MiB .. kFlushCapBytes) of a buffer written once, at first use: the read evicts the
  // case's lines (its dirty ones are written back here, untimed) and leaves only clean lines of its own, so
  // the timed sample pays no write-back for the flush. (A read-modify-write flush left up to an LLC of dirty
  // lines for the sample to write back; an unwritten buffer would read the shared zero page, caching nothing.)
  void flush_caches() override {
    const std::size_t words = flush_bytes_ / 8;
    if (!flush_buf_) {
      flush_buf_ = static_cast<std::uint64_t*>(host_alloc(flush_bytes_, true));
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < words; ++i) flush_buf_[i] = i;
    }
    std::uint64_t acc = 0;
#pragma omp parallel for schedule(static) reduction(^ : acc)
    for (std::size_t i = 0; i < words; i += 8) acc ^= flush_buf_[i];  // one word per 64-byte line
    sink_ = acc;
  }
  std::size_t flush_bytes() const override { return flush_bytes_; }

 private:
  static void parallel_memcpy(void* dst, const void* src, std::size_t bytes) {
    // Chunks of at least 1 MiB per thread; glibc memcpy picks non-temporal stores for large sizes.
    const int threads = omp_get_max_threads();
    const std::size_t chunk = std::max<std::size_t>(std::size_t{1} << 20, (bytes + threads - 1) / threads);
    const std::size_t n = (bytes + chunk - 1) / chunk;
    // One chunk: no parallel region (waking the team costs more than a 1 MiB copy, and on a shared
    // machine it can wait a whole scheduler tick for a descheduled thread).
    if (n <= 1) {
      std::memcpy(dst, src, bytes);
      return;
    }
#pragma omp parallel for schedule(static)
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t off = c * chunk, len = std::min(chunk, bytes - off);
      std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, len);
    }
  }

  DeviceInfo info_;
  std::size_t flush_bytes_ = 0;
  std::uint64_t* flush_buf_ = nullptr;
  volatile std::uint64_t sink_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace kvf
