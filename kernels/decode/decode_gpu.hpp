// GPU side of the idleness study's decode step (only in builds with KVF_HAVE_CUDA): cuBLASLt bf16 x bf16 -> fp32
// GEMMs (the frontier study's LtGemm), the access study's split-KV decode attention kernel, and small fused
// kernels whose per-element bodies are in decode_math.hpp. Same function as the CPU twin (decode.hpp), checked
// against the same reference and tolerance before timing.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "decode.hpp"

namespace kvf::decode::gpu {

class DecodeGpu {
 public:
  // Weights: the CPU LayerWeights (bf16 values held in fp32) converted exactly to bf16 and uploaded. K/V: kv_copies
  // copies of [B][Hkv][C][D] bf16 filled on the device (fill_bf16 of decode_math.hpp). h0: fill_f32 as the twin.
  DecodeGpu(const kvf::frontier::LayerWeights& w, const md::ModelShape& m, int B, int C, int kv_copies,
            std::uint64_t seed, int sm_count, cudaStream_t s);
  ~DecodeGpu();
  DecodeGpu(const DecodeGpu&) = delete;
  DecodeGpu& operator=(const DecodeGpu&) = delete;

  void step(int L, cudaStream_t s);       // h = h0, then L layers (layer l uses K/V copy l % copies)
  void layer(int copy, cudaStream_t s);
  // One layer from h0 checked against reference_layer() for `rows` (synchronizes; restores nothing but h).
  VerifyResult verify(const kvf::frontier::LayerWeights& w, const std::vector<int>& rows, cudaStream_t s);
  int copies() const;
  // The output of step(): h [B][H] in fp32 (synchronizes). poison_hidden fills it with 0xFF bytes (NaN), so a step
  // that did not run cannot pass for one that did (the graph row's check against the eager row).
  std::vector<float> hidden(cudaStream_t s) const;
  void poison_hidden(cudaStream_t s);
  static std::size_t device_bytes(const md::ModelShape& m, int B, int C, int kv_copies);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Prefill chunk: T tokens of one sequence at positions N..N+T-1 over a resident prefix of N tokens, L layers, the
// same function and inputs as the CPU twin (decode.hpp: PrefillState / prefill_step_cpu): cuBLASLt GEMMs with M = T,
// the fused small kernels (decode_math.hpp), K/V appended to one bf16 cache [Hkv][N+T][D] that every layer shares
// (as the twin's), and the causal attention of prefill_attn_gpu.hpp: on tensor cores, or (mma_attention false) the
// CUDA-core kernel kept for comparison.
class PrefillGpu {
 public:
  // T in 1..4096, N in 0..131072; the model must pass unsupported_reason() (head dim 64/128, GQA group a power of two
  // <= 16). Throws std::invalid_argument otherwise, std::runtime_error on a CUDA/cuBLASLt error.
  PrefillGpu(const kvf::frontier::LayerWeights& w, const md::ModelShape& m, int T, int N, std::uint64_t seed,
             int sm_count, cudaStream_t s, bool mma_attention = true);
  ~PrefillGpu();
  PrefillGpu(const PrefillGpu&) = delete;
  PrefillGpu& operator=(const PrefillGpu&) = delete;

  void step(int L, cudaStream_t s);  // h = h0, then L layers
  void layer(cudaStream_t s);
  // The frontier study's through-layers arm (layers.hpp: through_layers_cpu, whose last layer computes only K/V):
  // h = h0, L-1 full layers, then layer L's K/V only (RMSNorm, the K/V rows of Wqkv, bias, RoPE, appended at
  // N..N+T-1). L >= 1.
  void step_kv(int L, cudaStream_t s);
  // One layer from h0, then check_prefill_rows (decode.hpp) on `rows` of h and of the appended K/V (synchronizes).
  PrefillVerifyResult verify(const kvf::frontier::LayerWeights& w, const std::vector<int>& rows, cudaStream_t s);
  // step_kv(1) (the K/V-only path the frontier arm times), with the appended rows poisoned first, then
  // check_appended_kv on `rows` (synchronizes).
  VerifyResult verify_kv(const kvf::frontier::LayerWeights& w, const std::vector<int>& rows, cudaStream_t s);
  int attention_splits() const;  // KV splits of the attention (1: none)
  const char* attention_kernel() const;  // which causal attention kernel runs, in words (prefill_attention_kernel_name)
  // The outputs of step() and step_kv() (synchronize): h [T][H] in fp32 (step_kv: after its L-1 full layers), and
  // the appended rows N..N+T-1 of the K/V cache, [K | V][Hkv][T][D] widened exactly from bf16. poison_outputs fills
  // both with 0xFF bytes (NaN), so a step that did not run cannot pass for one that did (the graph row's check).
  std::vector<float> hidden(cudaStream_t s) const;
  std::vector<float> appended_kv(cudaStream_t s) const;
  void poison_outputs(cudaStream_t s);
  static std::size_t device_bytes(const md::ModelShape& m, int T, int N);

 private:
  void poison_appended(cudaStream_t s);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One layer of a real checkpoint, in host memory: bf16 matrices, row-major [out][in], the stacked products as the
// CPU forward stacks them (wqkv [q | k | v][H], wgu [gate | up][H]); fp32 norms; bqkv [q | k | v] or null.
struct ModelLayerHost {
  const std::uint16_t* wqkv = nullptr;
  const std::uint16_t* wo = nullptr;
  const std::uint16_t* wgu = nullptr;
  const std::uint16_t* wd = nullptr;
  const float* g_attn = nullptr;
  const float* g_mlp = nullptr;
  const float* bqkv = nullptr;
};

// A checkpoint's prefill on the device (bench_attention's GPU forward, kernels/attention/model): PrefillGpu::layer's
// kernels and rounding points over a whole context, one layer at a time in chunks of T rows, with the weights the
// caller uploads for each layer, the caller's RoPE table (the checkpoint's scaling), and one bf16 K/V cache
// [Hkv][cap][D] that a layer's chunks append to (positions t0 .. t0 + T - 1) and the next layer overwrites.
class ModelPrefillGpu {
 public:
  // T in 1..4096; cap a multiple of T (the context rounded up: rows past it are padding whose outputs nobody reads);
  // cos_sin: cap rows of [cos | sin] (D/2 each). Throws as PrefillGpu.
  ModelPrefillGpu(const md::ModelShape& m, int T, int cap, const std::vector<float>& cos_sin, int sm_count);
  ~ModelPrefillGpu();
  ModelPrefillGpu(const ModelPrefillGpu&) = delete;
  ModelPrefillGpu& operator=(const ModelPrefillGpu&) = delete;

  void set_hidden(const std::vector<float>& h, cudaStream_t s);  // h [cap][H]: the embeddings
  void upload_layer(const ModelLayerHost& w, cudaStream_t s);    // the host arrays may be reused on return
  void layer_chunk(int t0, cudaStream_t s);                      // rows t0 .. t0 + T through the uploaded layer
  // Copies back (synchronize): rows r0 .. r0 + n - 1 of h; positions 0 .. n - 1 of the K/V cache, [Hkv][n][D];
  // rows i0 .. i0 + n - 1 of the last chunk's rotated q, [n][Hq][D] (bf16).
  std::vector<float> hidden_rows(int r0, int n, cudaStream_t s) const;
  void kv(int n, std::vector<std::uint16_t>& k, std::vector<std::uint16_t>& v, cudaStream_t s) const;
  std::vector<std::uint16_t> q_rows(int i0, int n, cudaStream_t s) const;
  const char* attention_kernel() const;  // the causal attention's kernel in words (kPfDefaultKernel)
  static std::size_t device_bytes(const md::ModelShape& m, int T, int cap, int sm_count);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Recompute from X (the frontier study's arm): P pages of T tokens, K/V GEMM (cuBLASLt), RoPE + paged bf16 write.
class RecomputeGpu {
 public:
  RecomputeGpu(const md::ModelShape& m, int T, int P, std::uint64_t seed, cudaStream_t s);
  ~RecomputeGpu();
  void run(cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Ceilings of the same run: cuBLASLt bf16 square GEMM (tensor pipe), device read with 16-byte loads (DRAM).
class GemmCeiling {
 public:
  GemmCeiling(int n, cudaStream_t s);
  ~GemmCeiling();
  void run(cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
class ReadCeiling {
 public:
  ReadCeiling(std::size_t bytes, cudaStream_t s);
  ~ReadCeiling();
  void run(cudaStream_t s);

 private:
  void* buf_ = nullptr;
  unsigned long long* sum_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace kvf::decode::gpu
#endif
