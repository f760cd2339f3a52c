// KVF_CUDA_CHECK without the Backend: kvf/backend.hpp brings nlohmann/json, which kernel files (.cu) do not use
// and which every nvcc front end would parse again (the build's and each ptxas check's: CI time). Kernel files
// include this header; study code that needs the backend's stream or properties includes kvf/cuda_backend.hpp.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

namespace kvf {

// Throws std::runtime_error with the CUDA error text and the call site.
void cuda_check(cudaError_t err, const char* what);

}  // namespace kvf

#define KVF_CUDA_CHECK(expr) ::kvf::cuda_check((expr), #expr)
#endif
