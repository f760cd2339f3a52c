// Causal GQA attention of a prefill chunk over a resident prefix (only in builds with KVF_HAVE_CUDA).
//
// Two kernels (the plan's PfKernel, decode_math.hpp):
// - mma (the default, sm_80+): FlashAttention-2's scheme on tensor cores, mma.sync m16n8k16 bf16 with fp32
//   accumulation, P rounded to bf16 as its A operand (as FlashAttention does); 64-row query tiles, 64-key tiles
//   double-buffered through cp.async. Checked on the host (fragment layouts emulated, tests/idleness
//   test_prefill.cpp) and on an H200 (results/gpu/H200-2026-11-27b, PrefillGpu.*): T 512 after N 8K / 32K,
//   233 / 260 TFLOP/s, 9.7x / 10.7x the CUDA-core kernel; 48 TFLOP/s (4.0x) with no prefix.
// - cuda_core: scores and P.V are fp32 FMAs on the SMs' FP32 pipes from shared-memory tiles (K/V read from the bf16
//   cache with 16-byte loads, widened to fp32 once per tile). On an H100 that pipe peaks at ~67 TFLOP/s fp32
//   against ~990 TFLOP/s bf16 dense on the tensor pipe, so for long prefixes it, not the GEMMs, dominated the
//   prefill chunk's time (the H200 run's 32K forward: 10.5 s of its 27.7 s; with mma 1.35 s of 20.3 s). Kept
//   for comparison.
// The notes of the rows say which kernel ran and how many KV splits it used.
//
// Layout: q bf16 [T][Hq][D] (rotated); K and V caches bf16 [Hkv][cap][D], positions 0..N-1 the prefix and
// N..N+T-1 the chunk (already appended); out bf16 [T][Hq][D] = bf16(softmax(q K^T / sqrt(D), causal) V), the
// twin's rounding point. Geometry and per-element math: decode_math.hpp (pf_*), unit-tested on the CPU.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cstdint>

#include "decode_math.hpp"

namespace kvf::decode::gpu {

struct PrefillAttnDims {
  int T = 0, N = 0, cap = 0, Hq = 0, Hkv = 0, D = 0;  // D: 64 or 128; Hq / Hkv: power of two <= 16
};
// ws: elems::pf_workspace_floats(plan, T, Hq, D) floats (may be null when that is 0). Throws std::runtime_error
// on a launch error or unsupported dims.
void prefill_attention(const PrefillAttnDims& d, const elems::PfPlan& plan, const std::uint16_t* q,
                       const std::uint16_t* k, const std::uint16_t* v, float* ws, std::uint16_t* out, cudaStream_t s);
// The kernel in words, for the rows' notes.
const char* prefill_attention_kernel_name(elems::PfKernel k);

}  // namespace kvf::decode::gpu
#endif
