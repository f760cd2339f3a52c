// The `cuda` backend: device, pinned and pageable memory, pattern fill, copies, L2 flush, and timing
// with CUDA events behind a blocking kernel (launch overhead hidden, deadlocks become errors).
//
// Timing a region (time_region):
//   [blocking kernel: spins on a flag in mapped pinned memory]  <- launched first when hide_launch
//   [start event] [enqueue() x reps] [stop event]               <- queued behind it by the host
//   host sets the flag -> the queued work runs back to back -> stop is synchronized
//   [clock kernel: 1 thread, ~10 us, clock64 / globaltimer]     <- untimed, gives Sample::clock_mhz
// The blocking kernel gives up after TimeOptions::deadlock_timeout_s (read from %globaltimer) and
// raises a flag; the host then throws instead of hanging.
//
// The kernels are in backend_kernels.cu (this file is host code). Module loading: every one of them is loaded at
// construction (cudaFuncGetAttributes), and probe_cuda_impl() sets CUDA_MODULE_LOADING=EAGER unless the
// environment names a mode, so kernels of other libraries are loaded at context creation and never behind the
// blocking kernel.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "backend_kernels.hpp"
#include "cuda_backend_impl.hpp"
#include "cuda_host.hpp"
#include "kvf/backend.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"

namespace kvf {

void cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                           cudaGetErrorString(err) + ")");
}

namespace {

using cuda_host::bytes_text;
using cuda_host::compute_mode_name;
using cuda_host::host_fill;
using cuda_host::Nvml;
using cuda_host::pcie_gen_from_speed;
using cuda_host::read_line;
using cuda_host::sysfs_pci_id;
using cuda_host::version_string;
namespace bk = backend_kernels;
using bk::BlockFlags;
using bk::ClockReading;

constexpr int kThreads = 256;
constexpr unsigned long long kClockWindowNs = 10'000;

// ------------------------------------------------------------------------------------------------
// The backend
// ------------------------------------------------------------------------------------------------

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : dev_(device) {
    try {
      init();
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~CudaBackend() override { destroy(); }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  const DeviceInfo& info() const override { return info_; }
  cudaStream_t stream() const { return stream_; }
  const cudaDeviceProp& props() const { return props_; }

  Buffer alloc(std::size_t bytes, MemKind kind, AllocOptions opts) override {
    if (bytes == 0) throw UsageError("allocation of 0 bytes: sizes must be positive");
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    Buffer b;
    b.bytes = bytes;
    b.kind = kind;
    switch (kind) {
      case MemKind::device: {
        const cudaError_t err = cudaMalloc(&b.ptr, bytes);
        if (err == cudaErrorMemoryAllocation) {
          (void)cudaGetLastError();
          std::size_t free_b = 0, total_b = 0;
          (void)cudaMemGetInfo(&free_b, &total_b);
          (void)cudaGetLastError();
          throw UsageError("cannot allocate " + bytes_text(bytes) + " of device memory on " + info_.name +
                           ": " + bytes_text(free_b) + " free of " + bytes_text(total_b));
        }
        cuda_check(err, "cudaMalloc");
        break;
      }
      case MemKind::pinned_host: {
        if (bind_pinned_ && alloc_pinned_on_node(b, bytes, opts.mapped)) break;
        const unsigned flags = cudaHostAllocPortable | (opts.mapped ? cudaHostAllocMapped : 0u);
        const cudaError_t err = cudaHostAlloc(&b.ptr, bytes, flags);
        if (err == cudaErrorMemoryAllocation) {
          (void)cudaGetLastError();
          throw UsageError("cannot allocate " + bytes_text(bytes) +
                           " of pinned host memory (cudaHostAlloc: out of memory; check ulimit -l and free RAM)");
        }
        cuda_check(err, "cudaHostAlloc");
        if (opts.mapped) {
          const cudaError_t e2 = cudaHostGetDevicePointer(&b.device_alias, b.ptr, 0);
          if (e2 != cudaSuccess) {
            (void)cudaFreeHost(b.ptr);
            cuda_check(e2, "cudaHostGetDevicePointer");
          }
        }
        break;
      }
      case MemKind::pageable_host: {
        bool advised = false;
        b.ptr = host_alloc(bytes, opts.huge_pages, &advised);
        b.huge = opts.huge_pages && advised;
        break;
      }
    }
    return b;
  }

  void release(Buffer& b) noexcept override {
    if (b.ptr) {
      (void)cudaSetDevice(dev_);
      switch (b.kind) {
        case MemKind::device: (void)cudaFree(b.ptr); break;
        case MemKind::pinned_host:
          if (registered_.erase(b.ptr)) {
            (void)cudaHostUnregister(b.ptr);
            host_free(b.ptr, b.bytes);
          } else {
            (void)cudaFreeHost(b.ptr);
          }
          break;
        case MemKind::pageable_host: host_free(b.ptr, b.bytes); break;
      }
      (void)cudaGetLastError();
    }
    b = Buffer{};
  }

  void fill(const Buffer& b, std::uint64_t seed) override {
    if (!b.ptr || b.bytes == 0) return;
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    if (b.kind != MemKind::device) {
      KVF_CUDA_CHECK(cudaStreamSynchronize(stream_));  // no GPU work may still be using it
      host_fill(b.ptr, b.bytes, seed);
      return;
    }
    const auto addr = reinterpret_cast<std::uintptr_t>(b.ptr);
    if (addr % 8 == 0) {
      const std::size_t nwords = b.bytes / 8;
      if (nwords) {
        KVF_CUDA_CHECK(bk::launch_fill_words(stream_, grid_for(nwords), kThreads, static_cast<std::uint64_t*>(b.ptr),
                                             nwords, seed));
      }
      if (const std::size_t tail = b.bytes % 8) {
        KVF_CUDA_CHECK(bk::launch_fill_bytes(stream_, 1, 32, static_cast<unsigned char*>(b.ptr) + 8 * nwords,
                                             8 * nwords, tail, seed));
      }
    } else {
      KVF_CUDA_CHECK(bk::launch_fill_bytes(stream_, grid_for(b.bytes), kThreads, static_cast<unsigned char*>(b.ptr), 0,
                                           b.bytes, seed));
    }
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy(const Buffer& dst, const Buffer& src, std::size_t bytes) override {
    if (bytes > dst.bytes || bytes > src.bytes)
      throw UsageError("copy of " + std::to_string(bytes) + " bytes: larger than the destination (" +
                       std::to_string(dst.bytes) + ") or the source (" + std::to_string(src.bytes) + ")");
    if (bytes == 0) return;
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    KVF_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDefault, stream_));
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void synchronize() override { KVF_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  Sample time_region(const std::function<void()>& enqueue, const TimeOptions& opts) override {
    const int reps = std::max(1, opts.reps);
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    // Nothing of ours may still be queued: a blocking kernel from an earlier call must have returned
    // before its flags are reset.
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream_));

    bool blocked = false;
    // Releases the blocking kernel on every path out of this function, exceptions included.
    struct Release {
      CudaBackend* self;
      bool* blocked;
      ~Release() {
        if (*blocked) {
          self->release_blocking_kernel();
          (void)cudaStreamSynchronize(self->stream_);
          (void)cudaGetLastError();
        }
      }
    } guard{this, &blocked};

    if (opts.hide_launch) {
      if (!(opts.deadlock_timeout_s > 0))
        throw UsageError("deadlock_timeout_s " + std::to_string(opts.deadlock_timeout_s) + ": must be positive");
      flags_->release = 0;
      flags_->timed_out = 0;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const auto timeout_ns = static_cast<unsigned long long>(std::min(opts.deadlock_timeout_s, 3600.0) * 1e9);
      KVF_CUDA_CHECK(bk::launch_blocking(stream_, flags_dev_, timeout_ns));
      blocked = true;
    }
    KVF_CUDA_CHECK(cudaEventRecord(start_, stream_));
    for (int r = 0; r < reps; ++r) enqueue();
    cuda_check(cudaGetLastError(), "the timed region (a launch inside enqueue())");
    KVF_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    if (blocked) {
      release_blocking_kernel();
      blocked = false;
    }
    KVF_CUDA_CHECK(cudaEventSynchronize(stop_));
    if (opts.hide_launch && flags_->timed_out) {
      char msg[512];
      std::snprintf(msg, sizeof msg,
                    "blocking kernel timed out after %g s: the host could not finish enqueueing the region "
                    "while the stream was held (a synchronizing call inside enqueue(), a kernel module loaded "
                    "lazily, or more launches than the launch queue holds with reps=%d); fix the region or "
                    "time it with hide_launch=false",
                    opts.deadlock_timeout_s, reps);
      throw std::runtime_error(msg);
    }
    float ms = 0;
    KVF_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    Sample s;
    s.seconds = static_cast<double>(ms) * 1e-3 / reps;
    s.clock_mhz = read_sm_clock_mhz();
    return s;
  }

  void flush_caches() override {
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    const std::size_t n = flush_bytes_ / sizeof(ulonglong2);
    ++flush_count_;
    KVF_CUDA_CHECK(bk::launch_flush_write(stream_, grid_for(n), kThreads, static_cast<ulonglong2*>(flush_buf_), n,
                                          0x5DEECE66Dull * flush_count_));
    // x ^ i ^ (x + i) over all i never folds to this value in practice; any value works as long as the
    // compiler cannot prove the branch dead.
    KVF_CUDA_CHECK(bk::launch_flush_read(stream_, grid_for(n), kThreads, static_cast<const ulonglong2*>(flush_buf_), n,
                                         0xFEEDFACECAFEBEEFull ^ flush_count_, flush_sink_));
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::size_t flush_bytes() const override { return flush_bytes_; }

 private:
  void init() {
    int count = 0;
    const cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess) {
      (void)cudaGetLastError();
      throw UsageError(std::string("no usable CUDA device: ") + cudaGetErrorName(cerr) + ": " +
                       cudaGetErrorString(cerr));
    }
    if (dev_ < 0 || dev_ >= count)
      throw UsageError("CUDA device " + std::to_string(dev_) + ": this machine has " + std::to_string(count) +
                       " (valid: 0.." + std::to_string(count - 1) + ")");
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    KVF_CUDA_CHECK(cudaGetDeviceProperties(&props_, dev_));
    if (!props_.canMapHostMemory)
      throw UsageError(std::string(props_.name) + " cannot map host memory, which the blocking kernel needs");
    KVF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    KVF_CUDA_CHECK(cudaEventCreate(&start_));
    KVF_CUDA_CHECK(cudaEventCreate(&stop_));

    // Host <-> device flags and the clock reading live in one mapped pinned page.
    KVF_CUDA_CHECK(cudaHostAlloc(&host_page_, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host_page_, 0, 4096);
    void* dev_page = nullptr;
    KVF_CUDA_CHECK(cudaHostGetDevicePointer(&dev_page, host_page_, 0));
    flags_ = static_cast<volatile BlockFlags*>(host_page_);
    flags_dev_ = static_cast<volatile BlockFlags*>(dev_page);
    clock_ = reinterpret_cast<volatile ClockReading*>(static_cast<char*>(host_page_) + 256);
    clock_dev_ = reinterpret_cast<ClockReading*>(static_cast<char*>(dev_page) + 256);

    // Load every kernel of the backend now: nothing may be loaded behind the blocking kernel.
    KVF_CUDA_CHECK(bk::load_backend_kernels());

    // Flush buffer: at least 2x L2, whole 2 MiB pages.
    int l2 = 0;
    KVF_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev_));
    const std::size_t want = l2 > 0 ? 2 * static_cast<std::size_t>(l2) : std::size_t{256} << 20;
    flush_bytes_ = (want + kHugePage - 1) / kHugePage * kHugePage;
    KVF_CUDA_CHECK(cudaMalloc(&flush_buf_, flush_bytes_));
    KVF_CUDA_CHECK(cudaMalloc(&flush_sink_, sizeof(unsigned long long)));

    describe(l2);
    // One untimed pass of each helper so the first sample does not pay for first use.
    flush_caches();
    (void)read_sm_clock_mhz();
  }

  void destroy() noexcept {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    if (flush_buf_) (void)cudaFree(flush_buf_);
    if (flush_sink_) (void)cudaFree(flush_sink_);
    if (host_page_) (void)cudaFreeHost(host_page_);
    if (start_) (void)cudaEventDestroy(start_);
    if (stop_) (void)cudaEventDestroy(stop_);
    if (stream_) (void)cudaStreamDestroy(stream_);
    flush_buf_ = nullptr;
    flush_sink_ = nullptr;
    host_page_ = nullptr;
    start_ = stop_ = nullptr;
    stream_ = nullptr;
    (void)cudaGetLastError();
  }

  // Pinned memory on the GPU's NUMA node: mmap, mbind (preferred node) + first touch, cudaHostRegister. False
  // (nothing held) when the kernel or the driver refuses, after saying so once: the caller uses cudaHostAlloc.
  bool alloc_pinned_on_node(Buffer& b, std::size_t bytes, bool mapped) {
    void* p = host_alloc(bytes, false);
    std::string why;
    auto give_up = [&](const std::string& reason) {
      host_free(p, bytes);
      // Every later pinned buffer takes cudaHostAlloc; the device info says so from now on, stderr at once.
      bind_pinned_ = false;
      info_.extra["pinned_placement"] = "cudaHostAlloc (binding to the GPU's NUMA node " +
                                        std::to_string(gpu_numa_node_) + " failed: " + reason + ")";
      std::fprintf(stderr, "kvf: pinned memory not placed on the GPU's NUMA node %d (%s): cudaHostAlloc instead\n",
                   gpu_numa_node_, reason.c_str());
      return false;
    };
    if (!bind_to_node(p, bytes, gpu_numa_node_, &why)) return give_up(why);
    const unsigned flags = cudaHostRegisterPortable | (mapped ? cudaHostRegisterMapped : 0u);
    const cudaError_t err = cudaHostRegister(p, bytes, flags);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return give_up(std::string("cudaHostRegister: ") + cudaGetErrorName(err));
    }
    b.ptr = p;
    if (mapped) {
      const cudaError_t e2 = cudaHostGetDevicePointer(&b.device_alias, p, 0);
      if (e2 != cudaSuccess) {
        (void)cudaHostUnregister(p);
        host_free(p, bytes);
        b.ptr = nullptr;
        cuda_check(e2, "cudaHostGetDevicePointer");
      }
    }
    registered_.insert(p);
    return true;
  }

  void release_blocking_kernel() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    flags_->release = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  // SM clock of one SM right now, in MHz (NaN when the timer gave no reading).
  double read_sm_clock_mhz() {
    clock_->ok = 0;
    KVF_CUDA_CHECK(bk::launch_clock(stream_, clock_dev_, kClockWindowNs));
    KVF_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!clock_->ok || clock_->ns == 0) return std::numeric_limits<double>::quiet_NaN();
    return static_cast<double>(clock_->cycles) * 1e3 / static_cast<double>(clock_->ns);
  }

  unsigned grid_for(std::size_t items) const {
    const std::size_t full = static_cast<std::size_t>(std::max(1, props_.multiProcessorCount)) * 4;
    const std::size_t need = (items + kThreads - 1) / kThreads;
    return static_cast<unsigned>(std::max<std::size_t>(1, std::min(full, need)));
  }

  void describe(int l2) {
    DeviceInfo& d = info_;
    d.backend = "cuda";
    d.name = props_.name;
    d.arch = "sm_" + std::to_string(props_.major) + std::to_string(props_.minor);
    d.compute_units = props_.multiProcessorCount;
    d.memory_bytes = props_.totalGlobalMem;
    d.llc_bytes = l2 > 0 ? static_cast<std::uint64_t>(l2) : 0;
    auto attr = [&](cudaDeviceAttr a) {
      int v = 0;
      if (cudaDeviceGetAttribute(&v, a, dev_) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
      }
      return v;
    };
    // cudaDevAttrClockRate: the peak SM clock in kHz (cudaDeviceProp::clockRate is gone in CUDA 13).
    if (const int khz = attr(cudaDevAttrClockRate); khz > 0) d.max_clock_mhz = khz / 1000.0;
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    (void)cudaGetLastError();
    d.runtime_version = version_string(rt);

    auto& x = d.extra;
    x["device_ordinal"] = dev_;
    x["compute_capability"] = std::to_string(props_.major) + "." + std::to_string(props_.minor);
    x["ecc"] = props_.ECCEnabled != 0;
    x["memory_bus_width_bits"] = props_.memoryBusWidth;
    if (const int mkhz = attr(cudaDevAttrMemoryClockRate); mkhz > 0) x["memory_clock_mhz"] = mkhz / 1000.0;
    x["compute_mode"] = compute_mode_name(attr(cudaDevAttrComputeMode));
    x["max_threads_per_sm"] = props_.maxThreadsPerMultiProcessor;
    x["shared_mem_per_sm_bytes"] = props_.sharedMemPerMultiprocessor;
    x["l2_persisting_max_bytes"] = props_.persistingL2CacheMaxSize;
    x["async_copy_engines"] = props_.asyncEngineCount;
    x["cuda_driver_api"] = version_string(drv);
    x["flush_bytes"] = flush_bytes_;
    const char* ml = std::getenv("CUDA_MODULE_LOADING");
    x["cuda_module_loading"] = ml ? ml : "unset (driver default: lazy)";

    char bus[64] = {};
    std::string bus_id, sysfs_id;  // CUDA's spelling (NVML takes it) and sysfs's
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev_) == cudaSuccess) x["pci_bus_id"] = sysfs_id = sysfs_pci_id(bus_id = bus);
    (void)cudaGetLastError();
    // Pinned host buffers go on the GPU's NUMA node where the machine has several (a copy from the far socket
    // crosses the inter-socket link and measures it, not PCIe); one node or an unknown node: first touch.
    gpu_numa_node_ = pci_numa_node(sysfs_id);
    const int nodes = numa_nodes_online();
    x["gpu_numa_node"] = gpu_numa_node_;
    x["numa_nodes"] = nodes;
    bind_pinned_ = nodes > 1 && gpu_numa_node_ >= 0;
    x["pinned_placement"] = bind_pinned_ ? "on the GPU's NUMA node " + std::to_string(gpu_numa_node_) +
                                               " (mbind MPOL_PREFERRED, first touch, then cudaHostRegister)"
                                         : nodes > 1 ? std::string("GPU's NUMA node unknown: first touch (cudaHostAlloc)")
                                                     : std::string("one NUMA node: cudaHostAlloc");

    Nvml nvml;
    x["nvml"] = nvml.ok();
    Nvml::Device h = (nvml.ok() && !bus_id.empty()) ? nvml.device(bus_id) : nullptr;
    if (h) {
      // clock_mhz: the applications (target) SM clock; the instantaneous clock of an idle GPU says
      // nothing about the clock under load, so it goes to extra only.
      if (const unsigned app = nvml.app_clock(h, Nvml::kClockSm)) d.clock_mhz = app;
      if (const unsigned now = nvml.clock(h, Nvml::kClockSm)) x["sm_clock_at_start_mhz"] = now;
      if (const unsigned mx = nvml.max_clock(h, Nvml::kClockSm)) {
        x["sm_clock_max_nvml_mhz"] = mx;
        if (d.max_clock_mhz == 0) d.max_clock_mhz = mx;
      }
      const unsigned gen = nvml.link_gen(h), width = nvml.link_width(h);
      if (gen && width) d.pcie_link = "Gen" + std::to_string(gen) + " x" + std::to_string(width);
      const unsigned mgen = nvml.max_link_gen(h), mwidth = nvml.max_link_width(h);
      if (mgen && mwidth) x["pcie_link_max"] = "Gen" + std::to_string(mgen) + " x" + std::to_string(mwidth);
    }
    if (d.pcie_link.empty() && !sysfs_id.empty()) {
      const std::string base = "/sys/bus/pci/devices/" + sysfs_id + "/";
      const std::string gen = pcie_gen_from_speed(read_line(base + "current_link_speed"));
      const std::string width = read_line(base + "current_link_width");
      if (!gen.empty() && !width.empty() && std::atoi(width.c_str()) > 0)
        d.pcie_link = gen + " x" + std::to_string(std::atoi(width.c_str()));
      const std::string mgen = pcie_gen_from_speed(read_line(base + "max_link_speed"));
      const std::string mwidth = read_line(base + "max_link_width");
      if (!mgen.empty() && !mwidth.empty() && std::atoi(mwidth.c_str()) > 0 && !x.contains("pcie_link_max"))
        x["pcie_link_max"] = mgen + " x" + std::to_string(std::atoi(mwidth.c_str()));
    }
    const std::string nvml_driver = nvml.ok() ? nvml.driver_version() : std::string();
    d.driver_version = !nvml_driver.empty() ? nvml_driver : version_string(drv);
  }

  int dev_ = 0;
  cudaDeviceProp props_{};
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* host_page_ = nullptr;
  volatile BlockFlags* flags_ = nullptr;
  volatile BlockFlags* flags_dev_ = nullptr;
  volatile ClockReading* clock_ = nullptr;
  ClockReading* clock_dev_ = nullptr;
  void* flush_buf_ = nullptr;
  unsigned long long* flush_sink_ = nullptr;
  std::size_t flush_bytes_ = 0;
  unsigned long long flush_count_ = 0;
  int gpu_numa_node_ = -1;
  bool bind_pinned_ = false;
  std::set<void*> registered_;  // pinned buffers made by alloc_pinned_on_node (freed by unregister + munmap)
};

CudaBackend& as_cuda(Backend& be) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  if (!c) throw UsageError("backend '" + be.name() + "' is not the CUDA backend (this code needs --backend cuda)");
  return *c;
}

}  // namespace

cudaStream_t cuda_stream(Backend& be) { return as_cuda(be).stream(); }
const cudaDeviceProp& cuda_props(Backend& be) { return as_cuda(be).props(); }

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

// probe_cuda_impl and list_gpus_impl: cuda_devices.cpp.

}  // namespace kvf
