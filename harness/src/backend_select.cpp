#include <charconv>
#include <string>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"

#if defined(KVF_HAVE_CUDA)
#include "../cuda/cuda_backend_impl.hpp"
#endif

namespace kvf {

namespace {
constexpr const char* kNoCudaBuild = "this build has no CUDA backend (configured without CUDA: no nvcc found, or KVF_CUDA=OFF)";

std::string gpu_range(int count) {
  return count == 1 ? std::string("0") : "0.." + std::to_string(count - 1);
}
}  // namespace

CudaProbe probe_cuda(int device) {
#if defined(KVF_HAVE_CUDA)
  return probe_cuda_impl(device);
#else
  (void)device;
  CudaProbe p;
  p.error = kNoCudaBuild;
  return p;
#endif
}

std::vector<GpuListing> list_gpus(std::string* why_none) {
#if defined(KVF_HAVE_CUDA)
  return list_gpus_impl(why_none);
#else
  if (why_none) *why_none = kNoCudaBuild;
  return {};
#endif
}

DeviceChoice parse_device(std::string_view v, bool all_allowed) {
  DeviceChoice d;
  d.text = std::string(v);
  if (v == "cpu") {
    d.kind = DeviceChoice::Kind::cpu;
  } else if (v == "all" && all_allowed) {
    d.kind = DeviceChoice::Kind::all;
  } else if (v == "all") {
    bad_flag("--device", v, "a bench measures one device; kvf run --device all runs each visible GPU in turn, or give "
                            "one ordinal");
  } else {
    int n = -1;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc{} || p != v.data() + v.size() || n < 0 || n > kMaxDeviceOrdinal)
      bad_flag("--device", v, std::string(all_allowed ? "allowed: cpu, all, or" : "allowed: cpu or") +
                                  " a GPU ordinal 0.." + std::to_string(kMaxDeviceOrdinal) +
                                  " (kvf run --list-devices shows them)");
    d.kind = DeviceChoice::Kind::gpu;
    d.ordinal = n;
  }
  return d;
}

std::unique_ptr<Backend> make_backend(std::string_view choice, std::string* note, const DeviceChoice& device) {
  auto say = [&](std::string s) {
    if (note) *note = std::move(s);
  };
  using K = DeviceChoice::Kind;
  if (choice != "cpu" && choice != "cuda" && choice != "auto")
    throw UsageError("--backend " + std::string(choice) + ": unknown backend; allowed: auto, cpu, cuda");
  if (device.kind == K::all)
    throw UsageError("--device all: a bench measures one device; kvf run --device all runs each visible GPU in turn, "
                     "or give one ordinal");
  if (choice == "cpu" && device.kind == K::gpu)
    throw UsageError("--device " + device.text + " with --backend cpu: the cpu backend has one device, the CPU; "
                     "allowed: --device cpu, or --backend cuda for a GPU");
  if (choice == "cuda" && device.kind == K::cpu)
    throw UsageError("--device cpu with --backend cuda: the CPU is not a CUDA device; give a GPU ordinal or --backend cpu");
  if (choice == "cpu" || device.kind == K::cpu) {
    say(choice == "cpu" ? "backend: cpu (requested)" : "backend: cpu (--device cpu)");
    return make_cpu_backend();
  }
  const int ordinal = device.kind == K::gpu ? device.ordinal : 0;
  const CudaProbe p = probe_cuda(ordinal);
  if (p.usable) {
#if defined(KVF_HAVE_CUDA)
    auto be = make_cuda_backend(ordinal);
    say("backend: cuda (" + std::string(choice == "auto" ? "auto: found " : "requested: ") + be->info().name +
        ", device " + std::to_string(ordinal) + ")");
    return be;
#endif
  }
  if (device.kind == K::gpu) {
    if (p.device_count > 0 && ordinal >= p.device_count)
      throw UsageError("--device " + device.text + ": this machine has " + std::to_string(p.device_count) +
                       " visible GPU(s) (allowed: " + gpu_range(p.device_count) + ", all, cpu)");
    throw UsageError("--device " + device.text + ": no usable GPU: " + p.error + "; allowed here: --device cpu");
  }
  if (choice == "cuda")
    throw UsageError("--backend cuda: no usable GPU: " + p.error +
                     "; check the NVIDIA driver (nvidia-smi) or run with --backend cpu");
  say("backend: cpu (auto: no usable GPU: " + p.error + ")");
  return make_cpu_backend();
}

}  // namespace kvf
