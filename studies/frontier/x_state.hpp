// Recompute of T x P tokens' K/V from the layer input X in one of its resident forms (bf16, int8, int4):
// the x and xq arms time it, the overlap arm runs it beside a fetch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frontier.hpp"
#include "gemm_onednn.hpp"
#include "recompute.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/cuda_backend.hpp"
#include "recompute_gpu.hpp"
#endif

namespace kvf::frontier_study {

struct XState {
  int rows = 0, hidden = 0, bits = 16;
  fr::KvGeom g;
  std::vector<std::uint16_t> w, x;  // bf16 W [2kvd][hidden], bf16 X
  std::vector<std::uint16_t> xb;    // CPU, quantized X: the dequantized bf16 GEMM input
  std::vector<float> y, bias, cos_sin;
  // CPU: oneDNN bf16 matmul with W packed once at setup (as an engine packs at load); it reads bf16 X
  // directly, so nothing is widened per call.
  std::unique_ptr<fr::Bf16Gemm> gemm_cpu;
  std::vector<std::uint8_t> xq;
  std::vector<float> scales;
  std::vector<double> inv_freq;
  std::vector<std::int32_t> pos;
  std::vector<std::int64_t> slot;
  std::vector<std::uint16_t> cache;
  std::int64_t n_blocks = 0;
#if defined(KVF_HAVE_CUDA)
  BufferHandle dw, dx, dxq, dsc, dy, dbias, dcs, dpos, dslot, dcache;
  std::unique_ptr<fr::gpu::LtGemm> gemm;
#endif
};

// bits: 16 (bf16 X), 8 or 4 (quantized X). gpu: keep only what the GPU path reads on the host.
void x_setup_host(XState& s, const md::ModelShape& m, int T, int P, int bits, bool gpu);
void x_run_cpu(XState& s);
#if defined(KVF_HAVE_CUDA)
void x_setup_gpu(XState& s, Backend& be);
void x_run_gpu(XState& s, cudaStream_t st);
#endif
// Sampled rows of s.cache against the fp64 reference of `xin` (bf16 values of the GEMM input).
fr::VerifyStats x_check(const XState& s, const std::vector<std::uint16_t>& xin_bf16);

}  // namespace kvf::frontier_study
