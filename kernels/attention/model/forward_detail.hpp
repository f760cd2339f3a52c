// What forward_cpu.cpp shares with forward_gpu.cpp (not part of the model library's interface).
#pragma once
#include <cstdint>
#include <vector>

#include "kvf/attention/forward.hpp"

namespace kvf::attention::detail {

// forward_cpu's checks of the tokens and options (UsageError).
void validate_forward(const HfConfig& cfg, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt);
// A view's values widened to fp32.
std::vector<float> vec_f32(const TensorView& v);
std::vector<float> vec_f32(const std::vector<TensorView>& vs);  // one after another
// Layer l's tensors, shapes checked against the config: the rows of [q; k; v] and [gate; up] in stacking order,
// o_proj, down_proj, the two norms, and the q/k/v biases (Qwen2; empty otherwise).
struct LayerTensors {
  std::vector<TensorView> qkv, gu, bias;
  TensorView o, d, g_in, g_post;
};
LayerTensors layer_tensors(const Checkpoint& ck, int l);
// The parts' bf16 bits one after another into out (sum of their numel elements), by every OpenMP thread in
// chunks: the mapped file's pages fault in parallel (one thread copied 15 GiB at ~1.3 GB/s on an H200 host).
void stack_bf16(const std::vector<TensorView>& parts, std::uint16_t* out);
// h rows 0 .. tokens.size() - 1 = the tokens' embeddings, fp32 (rows past them untouched).
void embed_rows(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, float* h);
// When opt.capture: the capture's geometry and zeroed arrays for opt.capture_layers (empty: every layer).
void init_capture(const models::ModelShape& m, int C, const ForwardOptions& opt, AttentionCapture& cap);
// r.logits [M][vocab] and r.next_token from the M residual rows `rows` ([M][hidden], fp32): final norm, lm_head.
void logits_of_rows(const Checkpoint& ck, const float* rows, int M, ForwardResult& r);

}  // namespace kvf::attention::detail
