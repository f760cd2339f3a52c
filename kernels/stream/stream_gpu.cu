// GPU stream kernels: read (xor checksum), write (pattern), copy. 16-byte vector accesses
// (ld/st.global.v2.u64), grid-stride over a grid that fills every SM to its occupancy limit.
//
// Bytes in flight (Little's law): HBM3 on H100 needs about 3.35 TB/s x ~0.5-0.7 us ~ 2 MB in flight,
// ~15 KB per SM. The read and copy loops issue kUnroll independent 16 B loads per thread before
// using any of them: at 2048 resident threads per SM that is 128 KB per SM, several times the need,
// so the kernels stay bandwidth-bound even at lower occupancy or higher latency (mapped host memory).
#include "stream_gpu.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kvf/cuda_check.hpp"
#include "kvf/pattern.hpp"

namespace kvf::stream {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kMaxBlocksPerSm = 8;

// Xor of every thread's value into *out: warp shuffle, then one atomicXor per block.
__device__ __forceinline__ void block_xor_into(unsigned long long acc, unsigned long long* out) {
  __shared__ unsigned long long warp_acc[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_acc[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kThreads / 32 ? warp_acc[lane] : 0ull;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0 && acc != 0) atomicXor(out, acc);  // xor with 0 changes nothing: skip the atomic
  }
}

__global__ void __launch_bounds__(kThreads) read_kernel(const ulonglong2* __restrict__ src, std::size_t n,
                                                        unsigned long long* __restrict__ checksum) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
  unsigned long long acc = 0;
  // kUnroll independent loads per thread, each one coalesced across the warp (512 B per warp).
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    ulonglong2 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y;
  }
  for (; i < n; i += stride) {
    const ulonglong2 v = src[i];
    acc ^= v.x ^ v.y;
  }
  block_xor_into(acc, checksum);
}

__global__ void __launch_bounds__(kThreads) write_kernel(ulonglong2* __restrict__ dst, std::size_t n,
                                                         std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    dst[i] = make_ulonglong2(pattern_word(seed, 2 * i), pattern_word(seed, 2 * i + 1));
}

__global__ void __launch_bounds__(kThreads) copy_kernel(ulonglong2* __restrict__ dst,
                                                        const ulonglong2* __restrict__ src, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    ulonglong2 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// Blocks per launch that fill every SM, per device (the occupancy query also loads the kernels,
// so no module is loaded lazily later, behind a blocking kernel).
struct Grid {
  int read = 0, write = 0, copy = 0;
};

int full_grid(const void* kernel, int sms) {
  int per_sm = 0;
  cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor (stream kernels)");
  return sms * std::clamp(per_sm, 1, kMaxBlocksPerSm);
}

const Grid& grid_for_current_device() {
  static std::mutex mu;
  static std::map<int, Grid> cache;
  int dev = 0;
  KVF_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(dev); it != cache.end()) return it->second;
  int sms = 0;
  KVF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  Grid g;
  g.read = full_grid(reinterpret_cast<const void*>(read_kernel), sms);
  g.write = full_grid(reinterpret_cast<const void*>(write_kernel), sms);
  g.copy = full_grid(reinterpret_cast<const void*>(copy_kernel), sms);
  return cache.emplace(dev, g).first->second;
}

unsigned blocks(int full, std::size_t n) {
  const std::size_t need = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(full), need)));
}

void check_args(const char* fn, std::size_t bytes, std::initializer_list<const void*> ptrs) {
  if (bytes % 16 != 0)
    throw std::invalid_argument(std::string(fn) + ": bytes = " + std::to_string(bytes) +
                                ": must be a multiple of 16 (one 16-byte vector per access)");
  for (const void* p : ptrs) {
    if (bytes != 0 && p == nullptr) throw std::invalid_argument(std::string(fn) + ": null pointer");
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(std::string(fn) + ": pointer " + std::to_string(reinterpret_cast<std::uintptr_t>(p)) +
                                  " is not 16-byte aligned");
  }
}

}  // namespace

void gpu_read(const void* src, std::size_t bytes, unsigned long long* checksum, cudaStream_t s) {
  check_args("gpu_read", bytes, {src});
  if (checksum == nullptr) throw std::invalid_argument("gpu_read: null checksum pointer");
  if (bytes == 0) return;
  const std::size_t n = bytes / 16;
  read_kernel<<<blocks(grid_for_current_device().read, n), kThreads, 0, s>>>(static_cast<const ulonglong2*>(src), n,
                                                                            checksum);
  KVF_CUDA_CHECK(cudaGetLastError());
}

void gpu_write(void* dst, std::size_t bytes, std::uint64_t seed, cudaStream_t s) {
  check_args("gpu_write", bytes, {dst});
  if (bytes == 0) return;
  const std::size_t n = bytes / 16;
  write_kernel<<<blocks(grid_for_current_device().write, n), kThreads, 0, s>>>(static_cast<ulonglong2*>(dst), n, seed);
  KVF_CUDA_CHECK(cudaGetLastError());
}

void gpu_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  check_args("gpu_copy", bytes, {dst, src});
  if (bytes == 0) return;
  const std::size_t n = bytes / 16;
  copy_kernel<<<blocks(grid_for_current_device().copy, n), kThreads, 0, s>>>(static_cast<ulonglong2*>(dst),
                                                                            static_cast<const ulonglong2*>(src), n);
  KVF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvf::stream
