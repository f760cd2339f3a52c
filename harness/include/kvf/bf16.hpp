// bf16 as raw bits, the same on host and device: every study converts with these, so a CPU twin and
// its CUDA kernel round identically (round to nearest even; a NaN stays a quiet NaN).
#pragma once
#include <cstdint>
#include <cstring>

#include "kvf/pattern.hpp"  // KVF_HD

namespace kvf {

KVF_HD float f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
KVF_HD std::uint32_t bits_from_f32(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KVF_HD float bf16_to_f32(std::uint16_t h) { return f32_from_bits(std::uint32_t{h} << 16); }
KVF_HD std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = bits_from_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

}  // namespace kvf
