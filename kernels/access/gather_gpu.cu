// GPU gather kernel of the access study: reads runs of R bytes at run-aligned offsets given by the
// keyed bijection of access_math.hpp (random without replacement; no index array, so the measured
// cost is the access pattern, not index loads), 16-byte non-coherent vector loads, four independent
// loads in flight per thread per step, checksum = wrapping sum of all 8-byte words.
#include <cuda_runtime.h>

#include <stdexcept>

#include "access_gpu.hpp"

namespace kvf::access::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

__device__ __forceinline__ unsigned long long fold(uint4 x) {
  return ((static_cast<unsigned long long>(x.y) << 32) | x.x) + ((static_cast<unsigned long long>(x.w) << 32) | x.z);
}

__device__ __forceinline__ const uint4* vec_addr(const unsigned char* pool, const GatherGeom& g, std::uint32_t k,
                                                 std::uint32_t vshift, unsigned long long v) {
  return reinterpret_cast<const uint4*>(pool + gather_vec_offset(g, k, vshift, v));
}

__global__ void __launch_bounds__(kThreads) gather_kernel(const unsigned char* __restrict__ pool, GatherGeom g,
                                                          std::uint32_t k, std::uint32_t vshift,
                                                          unsigned long long nvec, unsigned long long* sum) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long v = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long acc = 0;
  for (; v + (kUnroll - 1) * stride < nvec; v += kUnroll * stride) {
    uint4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = __ldg(vec_addr(pool, g, k, vshift, v + u * stride));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += fold(x[u]);
  }
  for (; v < nvec; v += stride) acc += fold(__ldg(vec_addr(pool, g, k, vshift, v)));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, acc);
}

}  // namespace

void gather(const void* pool, const GatherGeom& g, unsigned long long* sum, int sm_count, cudaStream_t s) {
  if (g.run_bytes < 16 || (g.run_bytes & (g.run_bytes - 1)) || g.total_bytes % g.run_bytes)
    throw std::invalid_argument("gpu::gather: run size must be a power of two >= 16 dividing the total");
  const std::uint32_t vshift = gather_vshift(g.run_bytes);
  const unsigned long long nvec = g.total_bytes / 16;
  // Enough threads for >= 8 warps x 4 loads in flight on every SM, no more than the work.
  unsigned long long blocks = static_cast<unsigned long long>(sm_count > 0 ? sm_count : 1) * 8;
  const unsigned long long need = (nvec + kThreads * kUnroll - 1) / (kThreads * kUnroll);
  if (blocks > need) blocks = need ? need : 1;
  gather_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(static_cast<const unsigned char*>(pool), g,
                                                                    g.slot_bits(), vshift, nvec, sum);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("gather_kernel launch: ") + cudaGetErrorString(e));
}

}  // namespace kvf::access::gpu
