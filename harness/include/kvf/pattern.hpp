// Deterministic fill pattern shared by host and device code, so a copy or a fill can be verified
// anywhere by recomputing the expected word instead of keeping a second buffer.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define KVF_HD __host__ __device__ __forceinline__
#else
#define KVF_HD inline
#endif

namespace kvf {

// splitmix64: cheap, full-period, and every bit depends on (seed, index).
KVF_HD std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kvf
