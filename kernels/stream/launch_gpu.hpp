// Launch-floor kernels of the stream study: the fixed cost under every multi-kernel arm (a kernel boundary,
// a graph launch). Only in builds with KVF_HAVE_CUDA.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

namespace kvf::stream {

// n dependent launches (the chain_graph row captures this call with kvf::CudaGraph) of a one-thread kernel that adds 1 to *counter (device memory).
void gpu_ticks(unsigned int* counter, int n, cudaStream_t s);

}  // namespace kvf::stream
#endif
