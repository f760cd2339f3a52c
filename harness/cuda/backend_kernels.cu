// The CUDA backend's kernels (backend_kernels.hpp): blocking, clock, pattern fill and L2 flush. Device code
// only, beside their launchers; the backend itself is cuda_backend.cpp.
#include "backend_kernels.hpp"

#include "device_time.cuh"
#include "kvf/pattern.hpp"

namespace kvf::backend_kernels {

namespace {

using detail::globaltimer_ns;

// One thread. Spins until the host releases it, or until timeout_ns of globaltimer have passed.
__global__ void blocking_kernel(volatile BlockFlags* flags, unsigned long long timeout_ns) {
  const std::uint64_t t0 = globaltimer_ns();
  while (flags->release == 0) {
    if (globaltimer_ns() - t0 > timeout_ns) {
      flags->timed_out = 1;
      __threadfence_system();
      return;
    }
  }
}

// One thread. Measures the SM clock over `window_ns` of globaltimer. Both ends are taken right
// after the timer ticks, so the timer's update granularity (32 ns to 1 us) does not bias the
// ratio; a cycle cap (~1 s at 2 GHz) keeps a stuck timer from hanging the kernel.
__global__ void clock_kernel(ClockReading* out, unsigned long long window_ns) {
  const long long cap = 1ll << 31;
  const long long g0 = clock64();
  const std::uint64_t before = globaltimer_ns();
  std::uint64_t t0;
  do {
    t0 = globaltimer_ns();
    if (clock64() - g0 > cap) {
      out->ok = 0;
      return;
    }
  } while (t0 == before);
  const long long c0 = clock64();
  std::uint64_t t1;
  do {
    t1 = globaltimer_ns();
  } while (t1 - t0 < window_ns && clock64() - g0 < cap);
  const long long c1 = clock64();
  out->cycles = static_cast<unsigned long long>(c1 - c0);
  out->ns = t1 - t0;
  out->ok = (t1 - t0 >= window_ns) ? 1 : 0;
}

// pattern_word(seed, first_word + i) into every aligned 8-byte word.
__global__ void fill_words_kernel(std::uint64_t* __restrict__ p, std::size_t n, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = pattern_word(seed, i);
}

// Byte j of the buffer (counting from byte `first` of the pattern) gets byte (j % 8) of word j / 8:
// the little-endian image of the word stream, for unaligned buffers and the tail.
__global__ void fill_bytes_kernel(unsigned char* __restrict__ p, std::size_t first, std::size_t n,
                                  std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::size_t j = first + i;
    p[i] = static_cast<unsigned char>(pattern_word(seed, j / 8) >> (8 * (j % 8)));
  }
}

__global__ void flush_write_kernel(ulonglong2* __restrict__ p, std::size_t n, unsigned long long v) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = make_ulonglong2(v ^ i, v + i);
}

// Reads the flush buffer back so L2 is left holding clean lines: without it the dirty lines of the
// write pass would be written back to HBM during the next (timed) cold sample.
__global__ void flush_read_kernel(const ulonglong2* __restrict__ p, std::size_t n, unsigned long long never,
                                  unsigned long long* sink) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long acc = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const ulonglong2 v = p[i];
    acc ^= v.x ^ v.y;
  }
  if (acc == never) *sink = acc;  // keeps the loads; `never` is a value the buffer cannot fold to
}

}  // namespace

cudaError_t launch_blocking(cudaStream_t s, volatile BlockFlags* flags, unsigned long long timeout_ns) {
  blocking_kernel<<<1, 1, 0, s>>>(flags, timeout_ns);
  return cudaGetLastError();
}

cudaError_t launch_clock(cudaStream_t s, ClockReading* out, unsigned long long window_ns) {
  clock_kernel<<<1, 1, 0, s>>>(out, window_ns);
  return cudaGetLastError();
}

cudaError_t launch_fill_words(cudaStream_t s, unsigned grid, unsigned threads, std::uint64_t* p, std::size_t n,
                              std::uint64_t seed) {
  fill_words_kernel<<<grid, threads, 0, s>>>(p, n, seed);
  return cudaGetLastError();
}

cudaError_t launch_fill_bytes(cudaStream_t s, unsigned grid, unsigned threads, unsigned char* p, std::size_t first,
                              std::size_t n, std::uint64_t seed) {
  fill_bytes_kernel<<<grid, threads, 0, s>>>(p, first, n, seed);
  return cudaGetLastError();
}

cudaError_t launch_flush_write(cudaStream_t s, unsigned grid, unsigned threads, ulonglong2* p, std::size_t n,
                               unsigned long long v) {
  flush_write_kernel<<<grid, threads, 0, s>>>(p, n, v);
  return cudaGetLastError();
}

cudaError_t launch_flush_read(cudaStream_t s, unsigned grid, unsigned threads, const ulonglong2* p, std::size_t n,
                              unsigned long long never, unsigned long long* sink) {
  flush_read_kernel<<<grid, threads, 0, s>>>(p, n, never, sink);
  return cudaGetLastError();
}

cudaError_t load_backend_kernels() {
  cudaFuncAttributes fa{};
  cudaError_t e = cudaFuncGetAttributes(&fa, blocking_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, clock_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, fill_words_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, fill_bytes_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, flush_write_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, flush_read_kernel);
  return e;
}

}  // namespace kvf::backend_kernels
