// Element-level math shared by the CUDA kernels, the CPU twin and the tests (__host__ __device__).
// Everything here is exact integer/bit work or one fp32 operation, so the GPU and the CPU twin agree
// bit for bit on what they compute from the same inputs (the GEMM's summation order aside).
#pragma once
#include <cstdint>
#include <cstring>

#include "kvf/bf16.hpp"

#if defined(__CUDACC__)
#define KVF_FHD __host__ __device__ __forceinline__
#else
#define KVF_FHD inline
#endif

namespace kvf::frontier {

// vLLM's paged-cache block: 16 tokens. Layout of one layer's cache (NHD, like vLLM's flash backend):
//   cache[block][kv (0 = K, 1 = V)][token in block (16)][kv head][head dim]   (bf16)
inline constexpr int kBlockTokens = 16;
// Group size of the XQuant-style int8/int4 quantization of X (along the hidden dimension).
inline constexpr int kQuantGroup = 128;

// f32 <-> bits and bf16 conversions (round to nearest even, NaN kept quiet, as __float2bfloat16_rn):
// the harness's, shared with every other study.
using ::kvf::bf16_to_f32;
using ::kvf::f32_to_bf16;

// Offset (in elements) of (slot, kv, head, d) in one layer's paged cache. slot = block * 16 + token.
KVF_FHD std::int64_t cache_index(std::int64_t slot, int kv, int head, int d, int n_kv_heads, int head_dim) {
  const std::int64_t block = slot / kBlockTokens, tok = slot % kBlockTokens;
  return (((block * 2 + kv) * kBlockTokens + tok) * n_kv_heads + head) * std::int64_t(head_dim) + d;
}

// RoPE, rotate-half (HF Llama/Qwen/Mistral) convention, on the pair (x[i], x[i + D/2]):
//   out[i] = x[i] c - x[i+D/2] s,   out[i+D/2] = x[i+D/2] c + x[i] s,   c, s of angle pos * inv_freq[i].
// cos/sin come from a table computed in double on the host (vLLM's cos_sin_cache): row `pos` holds
// D/2 cosines then D/2 sines.
struct RopePair {
  float lo, hi;
};
KVF_FHD RopePair rope_rotate(float lo, float hi, float c, float s) {
  return {lo * c - hi * s, hi * c + lo * s};
}

// Symmetric group quantization of X along hidden. int8: q in [-127, 127], scale = max|x| / 127.
// int4: q in [-7, 7], scale = max|x| / 7, two values per byte (even index in the low nibble).
// Dequantized value = bf16(q * scale): the GEMM consumes bf16 on both backends.
KVF_FHD float dequant(int q, float scale) { return static_cast<float>(q) * scale; }
KVF_FHD int int4_lo(std::uint8_t b) { return int(std::int8_t(std::uint8_t(b << 4))) >> 4; }
KVF_FHD int int4_hi(std::uint8_t b) { return int(std::int8_t(b)) >> 4; }
KVF_FHD std::uint8_t int4_pack(int lo, int hi) {
  return static_cast<std::uint8_t>((unsigned(lo) & 0xfu) | ((unsigned(hi) & 0xfu) << 4));
}
KVF_FHD int quant_round(float x, float inv_scale, int qmax) {
  float r = x * inv_scale;
  int q = static_cast<int>(r >= 0.f ? r + 0.5f : r - 0.5f);
  return q > qmax ? qmax : (q < -qmax ? -qmax : q);
}

// Bytes one page of T tokens needs resident per layer in each form the study compares.
enum class Resident { kv_bf16, kv_fp8, x_bf16, x_int8, x_int4, mla_latent_bf16, token_ids };
KVF_FHD std::int64_t resident_bytes(Resident r, std::int64_t tokens, std::int64_t hidden,
                                    std::int64_t kv_values_per_token) {
  const std::int64_t groups = (hidden + kQuantGroup - 1) / kQuantGroup;
  switch (r) {
    case Resident::kv_bf16: return tokens * kv_values_per_token * 2;
    case Resident::kv_fp8: return tokens * kv_values_per_token;  // per-tensor scale, as vLLM's fp8 cache
    case Resident::x_bf16: return tokens * hidden * 2;
    case Resident::x_int8: return tokens * (hidden + groups * 4);  // fp32 scale per group
    case Resident::x_int4: return tokens * (hidden / 2 + groups * 4);
    case Resident::mla_latent_bf16: return tokens * kv_values_per_token * 2;
    case Resident::token_ids: return tokens * 4;
  }
  return 0;
}

}  // namespace kvf::frontier
