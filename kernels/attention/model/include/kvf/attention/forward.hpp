// The Llama-family forward pass on the CPU with attention capture (issue 19), and its fp64 reference.
//
//   h = embed_tokens[token]
//   per layer: xn = RMSNorm(h) g_in;  q, k, v = xn W^T (+ bias, Qwen2);  q, k = RoPE (llama3 / linear scaling as
//              transformers computes the inverse frequencies);  o = softmax(q k^T / sqrt(D), causal) v per query
//              head (GQA: head hq reads kv head hq / (Hq / Hkv));  h += o Wo^T;
//              h += (silu(xn2 Wg^T) * xn2 Wu^T) Wd^T with xn2 = RMSNorm(h) g_post
//   logits = RMSNorm(h) g_final lm_head^T (lm_head = embed_tokens when tie_word_embeddings); next = argmax.
//
// Order: layer by layer over the whole context, each layer in chunks of `chunk` query rows (the last chunk
// padded). One layer's weights are converted once (bf16 files: the frontier study's Bf16Gemm, oneDNN's bf16
// matmul or OpenBLAS sgemm on an fp32 copy; f16/f32 files: OpenBLAS sgemm on fp32), and only that layer's K/V
// and the residual stream (C x hidden) live between chunks: memory stays bounded at long contexts and the
// mapped weights are read once (run_estimate.hpp gives the bytes). Activations are fp32, rounded to bf16 where
// a bf16 GEMM reads them; attention is fp32 (oneDNN f32 matmul per head).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvf/attention/checkpoint.hpp"
#include "kvf/host_memory.hpp"

namespace kvf::attention {

// Block or token selection applied in every layer (needle retrieval under compression): queries at positions
// >= `from` attend, among the keys below `from`, only to the kept ones of their kv head; keys at or above
// `from` (the decode queries themselves) stay visible, causally. kept[l * kv_heads + h]: positions in
// [0, from), any order, repeats allowed.
struct SelectionMask {
  int layers = 0, kv_heads = 0, from = 0;
  std::vector<std::vector<std::int32_t>> kept;
};

// What the quality figures read, fp32. Index `c` runs over capture.layer_ids (the model layers captured, in
// order); m = 0 .. M-1 is query position C - M + m.
//   probs [c][q_head][m][C]     post-softmax attention of query m over every position (0 past the causal limit)
//   q     [c][q_head][m][D]     the query rows after RoPE, unscaled (score = q.k / sqrt(D))
//   k, v  [c][kv_head][C][D]    the layer's keys after RoPE and values, bias included
struct AttentionCapture {
  int q_heads = 0, kv_heads = 0, head_dim = 0, queries = 0, context = 0;
  std::vector<int> layer_ids;
  // Huge-page host arrays, zero-filled by every thread (init_capture): an 8B model's capture at 32K is 10 GiB, and
  // a std::vector's serial zero-fill faulted it in 4 KiB at a time on one core.
  HostArray<float> probs, q, k, v;
  const float* probs_at(int c, int hq, int m) const {
    return probs.data() + ((std::size_t(c) * q_heads + hq) * queries + m) * context;
  }
  const float* q_at(int c, int hq, int m) const {
    return q.data() + ((std::size_t(c) * q_heads + hq) * queries + m) * head_dim;
  }
  const float* k_at(int c, int hk) const { return k.data() + (std::size_t(c) * kv_heads + hk) * context * head_dim; }
  const float* v_at(int c, int hk) const { return v.data() + (std::size_t(c) * kv_heads + hk) * context * head_dim; }
};

struct ForwardOptions {
  int chunk = 256;                  // query rows per step
  int queries = 1;                  // M: captured query rows and logit rows (the last M positions)
  bool capture = true;              // false: logits only
  std::vector<int> capture_layers;  // empty: every layer
  const SelectionMask* mask = nullptr;
  // Called on the pass's thread once per captured layer c, in order, as soon as the layer is final: its q, k, v
  // and probs are not written again (forward_gpu: after layer 0's check). The capture's arrays are allocated
  // before the first layer and moved, never copied, into the result: pointers into them stay valid after the
  // pass returns. For work beside the pass (bench_attention's figures during a GPU pass); it should return fast.
  std::function<void(const AttentionCapture& cap, int c)> on_captured;
};

struct ForwardResult {
  std::vector<float> logits;  // [M][vocab], rows of positions C - M .. C - 1
  std::int32_t next_token = -1;  // argmax of the last row (lowest id on ties)
  AttentionCapture capture;
  std::string gemm;                  // the GEMM that ran the projections (Bf16Gemm::impl or OpenBLAS fp32)
  std::uint64_t allocated_bytes = 0; // the pass's large buffers (weights' working copy, state, capture, logits)
  // Wall seconds per phase, summing to the pass. forward_gpu: setup (device, buffers, embeddings), weights_host
  // (read and converted on the host), upload (its host time), layers_gpu (with the pinned uploads), capture, check
  // (layer 0 against fp64), logits. forward_cpu: setup, weights_host (read, converted, packed for the GEMM),
  // layers (the capture included), logits.
  std::vector<std::pair<std::string, double>> phase_s;
};

// UsageError: tokens empty or an id >= vocab, queries outside [1, C], chunk < 1, a capture layer out of range, a
// mask of the wrong geometry, a context beyond a sliding window (not built), a missing or misshapen tensor.
ForwardResult forward_cpu(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt);

// The same pass with the projections, RoPE, attention and MLP on a GPU (only in builds with CUDA; the idleness
// study's prefill kernels, kvf::decode::gpu::ModelPrefillGpu): the weights rounded to bf16 (exact for a bf16
// checkpoint) and uploaded one layer at a time, the K/V cache and q in bf16 as engines keep them (the CPU pass keeps
// them in fp32), fp32 residual stream. The capture holds those bf16 values widened; its probabilities are computed
// from them on the host (fill_probs_from_qk); logits on the host. Before any layer past the first runs, rows of layer
// 0 (h, K and V) are checked against kvf::decode's fp64 reference (decode.hpp's tolerances): a mismatch throws
// std::runtime_error naming the figures. No mask (opt.mask must be null: the needle decode runs cached on the CPU).
// device: a CUDA ordinal. *gpu_note (if given): the device and the check's figures.
// UsageError: as forward_cpu, a mask, or a context the device memory cannot hold; std::runtime_error: no CUDA in
// this build or no usable device, a CUDA error, the check failing.
ForwardResult forward_gpu(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt,
                          int device = 0, std::string* gpu_note = nullptr);
// Whether this build has the GPU forward (KVF_HAVE_CUDA).
bool forward_gpu_built();

// probs of captured layer c from its q and k: softmax(q k^T / sqrt(D)) over positions 0 .. C - M + m (causal), 0
// past them; what forward_cpu's attention computes for those rows, in the same fp32 arithmetic.
void fill_probs_from_qk(AttentionCapture& cap, int c);

// `n` greedy tokens after the prompt, each step a forward_cpu over prompt + tokens so far with `mask` (its
// `from` is normally the prompt length): n prefills. The oracle of greedy_decode_cached_cpu.
std::vector<std::int32_t> greedy_decode_cpu(const Checkpoint& ck, const std::vector<std::int32_t>& prompt, int n,
                                            const SelectionMask* mask, int chunk);

// `n` greedy tokens after the prompt for several selections at once, from the prompt's keys and values as a
// capture of every layer holds them (forward_cpu with no capture_layers): the prompt is not computed again. A
// selection applies to queries at or after the prompt's end (each mask's `from` is the prompt length), so the
// prompt's own K/V are the same under every selection; masks[i] == nullptr decodes with full attention.
// Token 0 is `first` (the prefill's argmax: the last prompt row attends to everything, whatever the selection);
// each later step runs every layer once over one row per selection, the layer's weights converted once per step
// and shared by the rows, each row attending to its selection's kept prompt keys and to its own decoded tokens.
// Cost: (n - 1) passes over the weights with masks.size() rows each, against n prefills per selection for
// greedy_decode_cpu. *gemm (if given) says which GEMM ran the projections.
// UsageError: a capture without every layer or of another model's shape, `first` or n out of range, a mask of the
// wrong geometry or with `from` other than the prompt length.
std::vector<std::vector<std::int32_t>> greedy_decode_cached_cpu(const Checkpoint& ck, const AttentionCapture& prompt_kv,
                                                                std::int32_t first, int n,
                                                                const std::vector<const SelectionMask*>& masks,
                                                                std::string* gemm = nullptr);

// The RoPE inverse frequencies transformers uses for this config (default, linear: / factor, llama3).
std::vector<double> hf_inv_freq(const models::ModelShape& m);

// FLOP/s of this machine's projection GEMM at a layer's shape (rows x hidden x hidden, best of a few runs);
// *what says which GEMM ("oneDNN ..." or "OpenBLAS sgemm fp32 ...").
double measure_gemm_rate(int rows, int hidden, std::string* what);
// FLOP/s of the prefill's attention at this shape: one chunk of `rows` queries over `keys` keys (the chunk's own
// included), scores and P.V per query head by oneDNN f32 matmul as the CPU pass runs them (best of a few runs). It is
// not the projection rate: on a bf16 oneDNN or AMX host the projections run several times faster.
double measure_attention_rate(const models::ModelShape& m, int rows, int keys);
// Bytes per second this machine reads from memory with every thread (a plain sum over 256 MiB, best of three): the
// bound of the needle decode's attention, which streams each row's fp32 K and V (run_estimate.hpp).
double measure_read_rate();

// ---------------------------------------------------------------- fp64 reference (small models only)
// Plain loops in double from the same weights, the RoPE frequencies computed independently of hf_inv_freq.
// bf16_gemm_inputs = false: no rounding anywhere (the model as defined); true: the four GEMM inputs (the two
// norms' outputs, the attention output, the MLP activation) rounded to bf16 where the CPU pass rounds them for a
// bf16 checkpoint, so what is left between the two is fp32 against fp64 arithmetic. Layouts as AttentionCapture,
// every layer captured. std::invalid_argument above 2^34 multiply-adds (it is a test oracle).
struct ReferenceResult {
  int queries = 0, context = 0;
  std::vector<double> logits, probs, q, k, v;
};
ReferenceResult forward_reference(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, int queries,
                                  const SelectionMask* mask = nullptr, bool bf16_gemm_inputs = false);

}  // namespace kvf::attention
