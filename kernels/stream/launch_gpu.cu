// Launch-floor kernels (launch_gpu.hpp): one thread adds 1 to a device counter, so a run of N launches can be
// checked (the counter moved by exactly N) while the kernel does as little as a kernel can.
#include "launch_gpu.hpp"

#include "kvf/cuda_check.hpp"

namespace kvf::stream {
namespace {

__global__ void tick_kernel(unsigned int* counter) { *counter += 1; }

}  // namespace

void gpu_ticks(unsigned int* counter, int n, cudaStream_t s) {
  for (int i = 0; i < n; ++i) tick_kernel<<<1, 1, 0, s>>>(counter);
  cuda_check(cudaGetLastError(), "tick_kernel launch");
}

}  // namespace kvf::stream
