// Private to the harness: the CUDA backend's own kernels (backend_kernels.cu), launched through these functions
// so the backend's host code (cuda_backend.cpp) compiles as C++: nvcc parses a unit twice (device and host pass)
// without the precompiled header, and each ptxas check of the .cu parses it again per architecture.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvf::backend_kernels {

// Shared between host and device through mapped pinned memory.
struct BlockFlags {
  int release;    // host -> device: 1 lets the blocking kernel return
  int timed_out;  // device -> host: 1 when the blocking kernel gave up waiting
};

struct ClockReading {
  unsigned long long cycles;  // clock64 delta
  unsigned long long ns;      // globaltimer delta
  int ok;                     // 0: the timer did not advance (no reading)
};

// Each launches one kernel on `s` (grid x threads where given) and returns cudaGetLastError().
// One thread: spins until flags->release, or until timeout_ns of globaltimer have passed (then flags->timed_out).
cudaError_t launch_blocking(cudaStream_t s, volatile BlockFlags* flags, unsigned long long timeout_ns);
// One thread: the SM clock over window_ns of globaltimer into *out.
cudaError_t launch_clock(cudaStream_t s, ClockReading* out, unsigned long long window_ns);
// pattern_word(seed, i) into the n aligned 8-byte words of p.
cudaError_t launch_fill_words(cudaStream_t s, unsigned grid, unsigned threads, std::uint64_t* p, std::size_t n,
                              std::uint64_t seed);
// Byte j of p (counting from byte `first` of the pattern) gets byte (j % 8) of word j / 8.
cudaError_t launch_fill_bytes(cudaStream_t s, unsigned grid, unsigned threads, unsigned char* p, std::size_t first,
                              std::size_t n, std::uint64_t seed);
// The L2 flush: a write pass over n 16-byte lines, then a read pass that leaves L2 holding clean lines.
cudaError_t launch_flush_write(cudaStream_t s, unsigned grid, unsigned threads, ulonglong2* p, std::size_t n,
                               unsigned long long v);
cudaError_t launch_flush_read(cudaStream_t s, unsigned grid, unsigned threads, const ulonglong2* p, std::size_t n,
                              unsigned long long never, unsigned long long* sink);
// Loads every kernel above (cudaFuncGetAttributes): nothing may be loaded behind the blocking kernel.
cudaError_t load_backend_kernels();

}  // namespace kvf::backend_kernels
