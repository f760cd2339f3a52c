// The kernels of test_green_ctx.cpp (kvf::GreenSplit on a GPU), apart from its gtest code: nvcc parses a unit
// twice (device and host pass) and without the tests' precompiled header, so the .cu holds only what needs it.
#include <cuda_runtime.h>

namespace {

__global__ void smid_kernel(unsigned* out, unsigned long long spin_ns) {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < spin_ns);
  if (threadIdx.x == 0) out[blockIdx.x] = id;
}

__global__ void spin_then_set(int* flag, unsigned long long spin_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < spin_ns);
  *flag = 1;
}

__global__ void copy_flag(const int* flag, int* out) { *out = *flag; }

}  // namespace

// Each launches one kernel on `s` and returns cudaGetLastError().
cudaError_t launch_smid(cudaStream_t s, unsigned* out, int blocks, unsigned long long spin_ns) {
  smid_kernel<<<blocks, 64, 0, s>>>(out, spin_ns);
  return cudaGetLastError();
}
cudaError_t launch_spin_then_set(cudaStream_t s, int* flag, unsigned long long spin_ns) {
  spin_then_set<<<1, 1, 0, s>>>(flag, spin_ns);
  return cudaGetLastError();
}
cudaError_t launch_copy_flag(cudaStream_t s, const int* flag, int* out) {
  copy_flag<<<1, 1, 0, s>>>(flag, out);
  return cudaGetLastError();
}
