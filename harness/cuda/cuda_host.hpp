// Private to the harness: host-side helpers of the CUDA backend (harness/cuda/cuda_backend.cpp, its kernels in backend_kernels.cu) that need no
// device code: texts, the host pattern fill, PCIe link facts from sysfs, and NVML loaded at run time.
#pragma once
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvf::cuda_host {

std::string version_string(int v);  // 13000 -> "13.0", 12080 -> "12.8"; "" for 0
std::string bytes_text(std::size_t b);  // "1073741824 bytes (1.00 GiB)"
// pattern_word(seed, i) into word i of a host buffer (any alignment), split over threads.
void host_fill(void* ptr, std::size_t bytes, std::uint64_t seed);
std::string pcie_gen_from_speed(const std::string& speed);  // "32.0 GT/s PCIe" -> "Gen5"; "" when unknown
std::string read_line(const std::string& path);             // the first line of a file; "" when unreadable
// CUDA's PCI bus id ("0000:65:00.0") as sysfs spells it: lower-case hex, a 4-digit domain.
std::string sysfs_pci_id(const std::string& cuda_bus_id);
std::string compute_mode_name(int cuda_compute_mode);  // "default", "prohibited", "exclusive_process", "unknown"

// NVML, loaded at run time when the driver provides it. Declarations follow nvml.h (not shipped in
// this toolkit); only calls whose ABI has been stable since NVML 10 are used.
class Nvml {
 public:
  using Device = void*;
  Nvml() {
    lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    init_ = sym<int (*)()>("nvmlInit_v2");
    shutdown_ = sym<int (*)()>("nvmlShutdown");
    if (!init_ || !shutdown_ || init_() != 0) {
      ::dlclose(lib_);
      lib_ = nullptr;
      return;
    }
    by_bus_ = sym<int (*)(const char*, Device*)>("nvmlDeviceGetHandleByPciBusId_v2");
    clock_ = sym<int (*)(Device, int, unsigned*)>("nvmlDeviceGetClockInfo");
    max_clock_ = sym<int (*)(Device, int, unsigned*)>("nvmlDeviceGetMaxClockInfo");
    app_clock_ = sym<int (*)(Device, int, unsigned*)>("nvmlDeviceGetApplicationsClock");
    link_gen_ = sym<int (*)(Device, unsigned*)>("nvmlDeviceGetCurrPcieLinkGeneration");
    link_width_ = sym<int (*)(Device, unsigned*)>("nvmlDeviceGetCurrPcieLinkWidth");
    max_link_gen_ = sym<int (*)(Device, unsigned*)>("nvmlDeviceGetMaxPcieLinkGeneration");
    max_link_width_ = sym<int (*)(Device, unsigned*)>("nvmlDeviceGetMaxPcieLinkWidth");
    driver_ = sym<int (*)(char*, unsigned)>("nvmlSystemGetDriverVersion");
  }
  ~Nvml() {
    if (lib_) {
      shutdown_();
      ::dlclose(lib_);
    }
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return lib_ != nullptr; }
  Device device(const std::string& bus_id) const {
    Device d = nullptr;
    return (by_bus_ && by_bus_(bus_id.c_str(), &d) == 0) ? d : nullptr;
  }
  static constexpr int kClockSm = 1;  // NVML_CLOCK_SM
  unsigned clock(Device d, int which) const { return call(clock_, d, which); }
  unsigned max_clock(Device d, int which) const { return call(max_clock_, d, which); }
  unsigned app_clock(Device d, int which) const { return call(app_clock_, d, which); }
  unsigned link_gen(Device d) const { return call1(link_gen_, d); }
  unsigned link_width(Device d) const { return call1(link_width_, d); }
  unsigned max_link_gen(Device d) const { return call1(max_link_gen_, d); }
  unsigned max_link_width(Device d) const { return call1(max_link_width_, d); }
  std::string driver_version() const {
    char buf[96] = {};
    return (driver_ && driver_(buf, sizeof buf) == 0) ? std::string(buf) : std::string();
  }

 private:
  template <class F> F sym(const char* name) { return reinterpret_cast<F>(::dlsym(lib_, name)); }
  static unsigned call(int (*f)(Device, int, unsigned*), Device d, int which) {
    unsigned v = 0;
    return (f && d && f(d, which, &v) == 0) ? v : 0;
  }
  static unsigned call1(int (*f)(Device, unsigned*), Device d) {
    unsigned v = 0;
    return (f && d && f(d, &v) == 0) ? v : 0;
  }
  void* lib_ = nullptr;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, Device*) = nullptr;
  int (*clock_)(Device, int, unsigned*) = nullptr;
  int (*max_clock_)(Device, int, unsigned*) = nullptr;
  int (*app_clock_)(Device, int, unsigned*) = nullptr;
  int (*link_gen_)(Device, unsigned*) = nullptr;
  int (*link_width_)(Device, unsigned*) = nullptr;
  int (*max_link_gen_)(Device, unsigned*) = nullptr;
  int (*max_link_width_)(Device, unsigned*) = nullptr;
  int (*driver_)(char*, unsigned) = nullptr;
};

}  // namespace kvf::cuda_host
