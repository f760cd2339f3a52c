// Per-element bodies of the decode step's small fused kernels, __host__ __device__: decode_gpu.cu runs them as
// grid-stride loops; tests/idleness runs the same bodies on the CPU over every index and compares with the CPU
// twin's loops (indexing and rounding points).
#pragma once
#include <cmath>
#include <cstdint>

#include "frontier_math.hpp"  // KVF_FHD, f32_to_bf16, bf16_to_f32, rope_rotate
#include "kvf/pattern.hpp"    // pattern_word

namespace kvf::decode::elems {

// Deterministic fill: the value kvf::frontier::fill_bf16_uniform writes at index i.
KVF_FHD std::uint16_t fill_bf16(std::uint64_t seed, std::uint64_t i, float scale) {
  const float u = float(std::int64_t(pattern_word(seed, i) >> 40) - (std::int64_t(1) << 23)) * (1.0f / float(1 << 23));
  return kvf::frontier::f32_to_bf16(u * scale);
}

// After the QKV GEMM, idx over B * (Hq + 2 Hkv) * (D/2): bias, RoPE on q and k (pair i, i + D/2), bf16 q to
// q_out [B][Hq][D], bf16 k and v to position C-1 of the HND caches [B][Hkv][C][D].
KVF_FHD void qkv_post(std::int64_t idx, const float* qkv, const float* bias, int Hq, int Hkv, int D, int C,
                      const float* cs, std::uint16_t* q_out, std::uint16_t* kc, std::uint16_t* vc) {
  const int half = D / 2, heads = Hq + 2 * Hkv;
  const int i = int(idx % half);
  const int hh = int((idx / half) % heads);
  const std::int64_t b = idx / (std::int64_t(half) * heads);
  const float* x = qkv + b * std::int64_t(heads) * D + std::int64_t(hh) * D;
  const float* bb = bias ? bias + std::int64_t(hh) * D : nullptr;
  float lo = x[i], hi = x[i + half];
  if (bb) {
    lo += bb[i];
    hi += bb[i + half];
  }
  if (hh < Hq + Hkv) {
    const kvf::frontier::RopePair o = kvf::frontier::rope_rotate(lo, hi, cs[i], cs[half + i]);
    std::uint16_t* dst = hh < Hq ? q_out + (b * Hq + hh) * std::int64_t(D)
                                 : kc + ((b * Hkv + (hh - Hq)) * std::int64_t(C) + (C - 1)) * D;
    dst[i] = kvf::frontier::f32_to_bf16(o.lo);
    dst[i + half] = kvf::frontier::f32_to_bf16(o.hi);
  } else {
    std::uint16_t* dst = vc + ((b * Hkv + (hh - Hq - Hkv)) * std::int64_t(C) + (C - 1)) * D;
    dst[i] = kvf::frontier::f32_to_bf16(lo);
    dst[i + half] = kvf::frontier::f32_to_bf16(hi);
  }
}

// SwiGLU, e over B * I: bf16(silu(gate) * up) of row e / I, gu rows [gate (I) | up (I)].
KVF_FHD std::uint16_t swiglu(std::int64_t e, const float* gu, int I) {
  const std::int64_t t = e / I, i = e % I;
  const float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
  return kvf::frontier::f32_to_bf16(g / (1.0f + expf(-g)) * u);
}

// One RMSNorm output element given the row's 1/rms.
KVF_FHD std::uint16_t rms_elem(float x, float inv, float g) { return kvf::frontier::f32_to_bf16(x * inv * g); }

}  // namespace kvf::decode::elems
