// Per-thread bodies of the frontier CUDA kernels as __host__ __device__ functions: the kernels in
// recompute_gpu.cu are grid-stride loops over these, and tests/frontier runs the same bodies on the
// CPU over every index to check the GPU's indexing against the CPU twin bit for bit.
#pragma once
#include <cstdint>

#include "frontier_math.hpp"

namespace kvf::frontier::elems {

// idx over rows * nkv * (D/2): K pair (i, i + D/2) rotated, V elements i and i + D/2, bf16 write.
KVF_FHD void rope_write(std::int64_t idx, const float* Y, const float* bias, int nkv, int D, const float* cos_sin,
                        const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache) {
  const int half = D / 2;
  const int i = int(idx % half);
  const int h = int((idx / half) % nkv);
  const std::int64_t r = idx / (std::int64_t(half) * nkv);
  const int kvd = nkv * D;
  const float* y = Y + r * 2 * kvd;
  const int k0 = h * D + i, k1 = h * D + i + half;
  float lo = y[k0], hi = y[k1];
  float vlo = y[kvd + k0], vhi = y[kvd + k1];
  if (bias) {
    lo += bias[k0];
    hi += bias[k1];
    vlo += bias[kvd + k0];
    vhi += bias[kvd + k1];
  }
  const float* cs = cos_sin + std::int64_t(pos[r]) * D;
  const RopePair o = rope_rotate(lo, hi, cs[i], cs[half + i]);
  const std::int64_t s = slot[r];
  cache[cache_index(s, 0, h, i, nkv, D)] = f32_to_bf16(o.lo);
  cache[cache_index(s, 0, h, i + half, nkv, D)] = f32_to_bf16(o.hi);
  cache[cache_index(s, 1, h, i, nkv, D)] = f32_to_bf16(vlo);
  cache[cache_index(s, 1, h, i + half, nkv, D)] = f32_to_bf16(vhi);
}

// Quad t of int8 X (elements 4t .. 4t+3, one group since 4 | kQuantGroup): returns the two 32-bit
// words of bf16 pairs (low element in the low half).
struct Words2 {
  std::uint32_t w0, w1;
};
KVF_FHD Words2 dequant_int8_quad(std::int64_t t, std::uint32_t packed, const float* scales, int hidden) {
  const int groups = (hidden + kQuantGroup - 1) / kQuantGroup;
  const std::int64_t e = t * 4;
  const std::int64_t r = e / hidden;
  const int c = int(e % hidden);
  const float sc = scales[r * groups + c / kQuantGroup];
  std::uint16_t out[4];
  for (int j = 0; j < 4; ++j) out[j] = f32_to_bf16(dequant(int(std::int8_t(std::uint8_t(packed >> (8 * j)))), sc));
  return {std::uint32_t(out[0]) | (std::uint32_t(out[1]) << 16), std::uint32_t(out[2]) | (std::uint32_t(out[3]) << 16)};
}

// Octet t of int4 X (elements 8t .. 8t+7 from 4 packed bytes, one group since 8 | kQuantGroup).
struct Words4 {
  std::uint32_t w[4];
};
KVF_FHD Words4 dequant_int4_oct(std::int64_t t, std::uint32_t packed, const float* scales, int hidden) {
  const int groups = (hidden + kQuantGroup - 1) / kQuantGroup;
  const std::int64_t e = t * 8;
  const std::int64_t r = e / hidden;
  const int c = int(e % hidden);
  const float sc = scales[r * groups + c / kQuantGroup];
  Words4 o;
  for (int j = 0; j < 4; ++j) {
    const std::uint8_t b = std::uint8_t(packed >> (8 * j));
    o.w[j] = std::uint32_t(f32_to_bf16(dequant(int4_lo(b), sc))) |
             (std::uint32_t(f32_to_bf16(dequant(int4_hi(b), sc))) << 16);
  }
  return o;
}

}  // namespace kvf::frontier::elems
