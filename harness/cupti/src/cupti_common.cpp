#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "internal.hpp"
#include "kvf/cupti/status.hpp"
#include "kvf/errors.hpp"

namespace kvf::cupti {

const char* to_string(Availability a) {
  switch (a) {
    case Availability::available: return "available";
    case Availability::no_gpu: return "no_gpu";
    case Availability::insufficient_privileges: return "insufficient_privileges";
    case Availability::profiler_busy: return "profiler_busy";
    case Availability::unsupported_device: return "unsupported_device";
    case Availability::error: return "error";
  }
  return "error";
}

std::string result_name(int r) {
  const char* s = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(r), &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(r);
}

CountersStatus classify(int r, const std::string& call) {
  CountersStatus st;
  const std::string what = call + ": " + result_name(r);
  switch (static_cast<CUptiResult>(r)) {
    case CUPTI_SUCCESS:
      st.availability = Availability::available;
      return st;
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      st.availability = Availability::insufficient_privileges;
      st.reason = "GPU counters unavailable (" + what +
                  "): profiling needs privileges (ERR_NVGPUCTRPERM): run as root or give the binary CAP_PERFMON "
                  "(sudo setcap cap_perfmon+ep <binary>), or load the nvidia module with "
                  "NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM); "
                  "continuing with timings only";
      return st;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    case CUPTI_ERROR_HARDWARE_BUSY:
    case CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED:
      st.availability = Availability::profiler_busy;
      st.reason = "GPU counters unavailable (" + what +
                  "): another profiler holds the counters (nsys, ncu or cuda-gdb attached to this process, or DCGM "
                  "profiling / another process using the device-wide PM hardware; pause DCGM with "
                  "`dcgmi profile --pause`); continuing without counters";
      return st;
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
      st.availability = Availability::unsupported_device;
      st.reason = "GPU counters unavailable (" + what +
                  "): this device or configuration does not support profiling (MIG slice, vGPU, CMP, confidential "
                  "computing, WSL or a pre-Turing GPU); continuing with timings only";
      return st;
    case CUPTI_ERROR_INVALID_DEVICE:
    case CUPTI_ERROR_NOT_INITIALIZED:
      st.availability = Availability::no_gpu;
      st.reason = "GPU counters unavailable (" + what + "): no usable GPU";
      return st;
    default:
      st.availability = Availability::error;
      st.reason = "GPU counters unavailable (" + what + "); continuing with timings only";
      return st;
  }
}

namespace detail {

void check(CUptiResult r, const char* call) {
  if (r != CUPTI_SUCCESS) throw CuptiError(r, std::string(call) + ": " + result_name(r));
}

std::vector<const char*> c_names(const std::vector<std::string>& names) {
  std::vector<const char*> v;
  v.reserve(names.size());
  for (const auto& n : names) v.push_back(n.c_str());
  return v;
}

namespace {
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using CtxSynchronizeFn = CUresult (*)();

template <class Fn>
Fn driver_entry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}
}  // namespace

CountersStatus current_context(int device, CUcontext* ctx) {
  CountersStatus st;
  *ctx = nullptr;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    st.availability = Availability::no_gpu;
    st.reason = std::string("GPU counters unavailable: no usable GPU (") +
                (e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device") + "); the study runs its CPU twin";
    return st;
  }
  if (device < 0 || device >= count) {
    st.availability = Availability::no_gpu;
    st.reason = "GPU counters unavailable: device " + std::to_string(device) + " does not exist (" +
                std::to_string(count) + " devices)";
    return st;
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(nullptr)) != cudaSuccess) {
    (void)cudaGetLastError();
    st.availability = Availability::no_gpu;
    st.reason = std::string("GPU counters unavailable: cannot create a CUDA context (") + cudaGetErrorString(e) + ")";
    return st;
  }
  auto get = driver_entry<CtxGetCurrentFn>("cuCtxGetCurrent");
  if (!get || get(ctx) != CUDA_SUCCESS || !*ctx) {
    st.availability = Availability::error;
    st.reason = "GPU counters unavailable: cuCtxGetCurrent is not available from the driver";
    return st;
  }
  st.availability = Availability::available;
  return st;
}

void synchronize(CUcontext ctx) {
  (void)ctx;  // the context is current on this thread (current_context made it so)
  static auto sync = driver_entry<CtxSynchronizeFn>("cuCtxSynchronize");
  if (sync) sync();
  else cudaDeviceSynchronize();
}

CountersStatus profiler_initialize() {
  static std::once_flag once;
  static CUptiResult result = CUPTI_SUCCESS;
  std::call_once(once, [] {
    CUpti_Profiler_Initialize_Params p{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    result = cuptiProfilerInitialize(&p);
  });
  return classify(result, "cuptiProfilerInitialize");
}

CountersStatus device_chip_name(int device, std::string* chip) {
  CUpti_Device_GetChipName_Params p{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  p.deviceIndex = static_cast<size_t>(device);
  CUptiResult r = cuptiDeviceGetChipName(&p);
  if (r != CUPTI_SUCCESS || !p.pChipName) return classify(r == CUPTI_SUCCESS ? CUPTI_ERROR_UNKNOWN : r, "cuptiDeviceGetChipName");
  *chip = p.pChipName;
  CountersStatus st;
  st.availability = Availability::available;
  return st;
}

CollectorSetup setup_collector(int device, const std::string& chip, const std::vector<std::string>& user_metrics,
                               const std::string& set, const CollectorKind& kind) {
  CollectorSetup out;
  auto unavailable = [&out](CountersStatus st) {
    out.status = std::move(st);
    std::fprintf(stderr, "kvf: counters: %s\n", out.status.reason.c_str());
    return out;
  };
  out.status = current_context(device, &out.ctx);  // also proves a usable device exists; "no GPU" is the study's
  if (!out.status.available()) return out;
  if (CountersStatus st = profiler_initialize(); !st.available()) return unavailable(std::move(st));
  out.chip = chip;
  if (out.chip.empty())
    if (CountersStatus st = device_chip_name(device, &out.chip); !st.available()) return unavailable(std::move(st));
  const bool user = !user_metrics.empty();
  if (user) {
    out.metrics = user_metrics;
  } else {
    const auto& chips = study_chips();
    const bool study = std::find(chips.begin(), chips.end(), out.chip) != chips.end();
    out.metrics = default_set(study ? out.chip : "GH100", kind.profiler).metrics;
  }
  // Availability first: it fails while another session (or profiler) holds the device's counters.
  std::vector<std::uint8_t> avail;
  std::size_t size = 0;
  if (CUptiResult r = kind.availability(out.ctx, &size, nullptr); r != CUPTI_SUCCESS)
    return unavailable(classify(r, kind.availability_call));
  avail.resize(size);
  if (CUptiResult r = kind.availability(out.ctx, &size, avail.data()); r != CUPTI_SUCCESS)
    return unavailable(classify(r, kind.availability_call));
  try {
    HostSession hs(out.chip, kind.profiler, avail);
    out.config = hs.config_image(out.metrics);  // UsageError naming an unknown metric
  } catch (const UsageError&) {
    if (user) throw;
    return unavailable({Availability::error,
                        std::string("GPU counters unavailable: the ") + kind.set_label + " is not valid on chip " + out.chip});
  } catch (const CuptiError& e) {
    return unavailable(classify(e.code, "cuptiProfilerHost (config image)"));
  }
  if (const std::size_t passes = num_passes(out.config); passes != 1)
    throw UsageError("metric set '" + set + "' needs " + std::to_string(passes) + " passes on " + out.chip + "; " +
                     kind.one_pass_why);
  return out;
}

}  // namespace detail
}  // namespace kvf::cupti
