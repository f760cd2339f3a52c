// CUDA-specific access for study code that launches kernels (only in builds with KVF_HAVE_CUDA).
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <string>

#include "kvf/backend.hpp"
#include "kvf/cuda_check.hpp"

namespace kvf {

// The stream every region of the CUDA backend is timed on. Throws UsageError if `be` is not CUDA.
cudaStream_t cuda_stream(Backend& be);
// The device ordinal and properties of the CUDA backend.
const cudaDeviceProp& cuda_props(Backend& be);

}  // namespace kvf
#endif
