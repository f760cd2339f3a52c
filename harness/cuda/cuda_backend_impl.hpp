// Private to the harness: the entry points of the CUDA backend (harness/cuda/cuda_backend.cpp, its kernels in backend_kernels.cu) that
// backend_select.cpp calls under #if KVF_HAVE_CUDA. Study code uses kvf/cuda_backend.hpp instead.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <memory>

#include "kvf/backend.hpp"

namespace kvf {

// Never throws, never hangs without a driver: usable=false with CUDA's own error text
// ("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version").
// Unless the environment already names one, it sets CUDA_MODULE_LOADING=EAGER before CUDA starts,
// so no kernel module is loaded while the blocking kernel holds the stream (lazy loading waits for
// the device to go idle and deadlocks behind it; NVIDIA/nvbench#136). Call it before any other CUDA call.
// Only `device` gets a context (a probe must not take memory on GPU 0 of a shared box when GPU 3 is asked for).
// (cuda_devices.cpp)
CudaProbe probe_cuda_impl(int device = 0);
// The visible GPUs from their properties (no context); empty with *why_none set when there are none.
std::vector<GpuListing> list_gpus_impl(std::string* why_none);

// The CUDA backend on `device`. Throws UsageError when the device does not exist or cannot be used
// (the message carries CUDA's error text), std::runtime_error for a CUDA failure during setup.
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace kvf

// Also reachable unqualified from outside namespace kvf.
using kvf::make_cuda_backend;
using kvf::list_gpus_impl;
using kvf::probe_cuda_impl;
#endif
