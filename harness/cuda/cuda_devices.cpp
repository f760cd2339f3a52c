// Which GPUs there are (kvf run --list-devices, --device N) and whether one can be used (the backend probe).
// Host code only: the CUDA runtime API, no kernels.
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_backend_impl.hpp"
#include "cuda_host.hpp"

namespace kvf {

namespace {
std::string cuda_error_text(cudaError_t err) {
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}
}  // namespace

CudaProbe probe_cuda_impl(int device) {
  CudaProbe p;
  p.compiled = true;
  try {
    // Must precede the first CUDA call of the process to take effect; an explicit setting wins.
    ::setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      p.error = cuda_error_text(err);
      return p;
    }
    p.device_count = n;
    if (n <= 0) {
      p.error = "cudaGetDeviceCount found no CUDA device";
      return p;
    }
    if (device < 0 || device >= n) {
      p.error = "device " + std::to_string(device) + " is not among the " + std::to_string(n) + " visible GPU(s)";
      return p;
    }
    err = cudaSetDevice(device);
    if (err == cudaSuccess) err = cudaFree(nullptr);  // creates the primary context
    if (err != cudaSuccess) {
      p.error = cuda_error_text(err);
      return p;
    }
    p.usable = true;
  } catch (const std::exception& e) {
    p.usable = false;
    p.error = e.what();
  } catch (...) {
    p.usable = false;
    p.error = "unknown error while probing CUDA";
  }
  return p;
}

std::vector<GpuListing> list_gpus_impl(std::string* why_none) {
  ::setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  std::vector<GpuListing> out;
  int n = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&n); err != cudaSuccess) {
    if (why_none) *why_none = cuda_error_text(err);
    return out;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp props{};
    GpuListing g;
    g.ordinal = d;
    if (const cudaError_t err = cudaGetDeviceProperties(&props, d); err != cudaSuccess) {
      g.name = "(properties not readable: " + cuda_error_text(err) + ")";
    } else {
      g.name = props.name;
      g.memory_bytes = props.totalGlobalMem;
      g.compute_capability = std::to_string(props.major) + "." + std::to_string(props.minor);
    }
    char bus[64] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) == cudaSuccess) g.pci_bus_id = cuda_host::sysfs_pci_id(bus);
    (void)cudaGetLastError();
    out.push_back(std::move(g));
  }
  if (out.empty() && why_none) *why_none = "cudaGetDeviceCount found no CUDA device";
  return out;
}

}  // namespace kvf
