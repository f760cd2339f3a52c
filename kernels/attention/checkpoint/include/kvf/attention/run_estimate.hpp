// What a forward pass with attention capture will cost, said before it starts (issue 19: "say the cost
// first"), and refused when this machine cannot hold it.
//
// The model's forward (kvf/attention/forward.hpp) runs layer by layer over the whole context, in chunks of
// `chunk` query rows, so its memory is:
//   resident = hidden state  C x hidden fp32 (the residual stream of every position, C rounded up to whole chunks)
//            + one layer's weights: the working copy (at most 6 bytes per parameter: the GEMM's fp32 or packed
//              copy plus the bf16 staging of one matrix) and that layer's mapped pages (file bytes)
//            + K and V of the current layer  2 x kv_heads x C x head_dim fp32 (unless captured)
//            + chunk activations  chunk x (qkv + hidden x 3 + q_dim + 3 x intermediate) fp32 + the GEMM inputs
//            + attention scores  threads x chunk x C fp32
//            + capture, per captured layer: probabilities q_heads x M x C, Q rows q_heads x M x head_dim, and K
//              and V 2 x kv_heads x C x head_dim (all fp32)
//            + logits M x vocab fp32 and one 4096-row block of lm_head in fp32
// The safetensors files are memory-mapped: the page cache may hold all of them (mapped_weight_bytes) but the
// pass needs one layer's pages at a time, so they are listed, not required.
// FLOPs: 2 x params x C_pad for the projections and MLP (C rounded up to whole chunks), 4 x q_dim x C x (C +
// chunk) / 2 for causal attention (scores and P.V, the chunk's keys included), 2 x M x hidden x vocab for the
// logits. Time = the projection, MLP and logit FLOPs at the GEMM rate (forward.hpp: measure_gemm_rate) plus the
// attention FLOPs at the attention's own rate (measure_attention_rate: fp32 per query head with its softmax, well below a
// bf16 oneDNN or AMX GEMM), each measured or stated by the caller.
#pragma once
#include <cstdint>
#include <string>

#include "kvf/attention/checkpoint.hpp"

namespace kvf::attention {

struct RunShape {
  int context = 0;         // C: tokens in the prompt
  int queries = 1;         // M: last query rows whose attention is captured (also the logits' rows)
  int chunk = 256;         // query rows per prefill step
  int capture_layers = -1; // layers captured; -1: all
  int threads = 1;         // OpenMP threads (one score buffer each)
};

struct RunEstimate {
  std::uint64_t mapped_weight_bytes = 0;  // the safetensors files (page cache, not required resident)
  std::uint64_t layer_weight_bytes = 0;   // one layer: working copy + its mapped pages
  std::uint64_t hidden_bytes = 0, kv_bytes = 0, activation_bytes = 0, capture_bytes = 0, logits_bytes = 0;
  std::uint64_t resident_bytes = 0;       // the sum of the six above
  double flops = 0, flops_per_s = 0, seconds = 0;  // flops: every FLOP; flops_per_s: the GEMM rate
  double attention_flops = 0, attention_flops_per_s = 0;  // the causal attention's share and its rate
  std::string rate_source;                // "measured: ..." or "stated: ..."
};

// mapped: Checkpoint::mapped_bytes() (or the files' size for a model not at hand); weight_bytes_per_param: 2 for
// bf16/f16 files, 4 for f32. UsageError for a shape outside [1, ...] (naming it).
// attention_flops_per_s: the attention's rate, 0 for the GEMM rate.
RunEstimate estimate_run(const HfConfig& c, std::uint64_t mapped, double weight_bytes_per_param, const RunShape& r,
                         double flops_per_s, const std::string& rate_source, double attention_flops_per_s = 0);
// The KV-cached decode of `tokens` tokens for `rows` selections at once after a prompt of `context`
// (forward.hpp: greedy_decode_cached_cpu): tokens - 1 steps, each the projections and MLP of every layer over
// `rows` rows (2 x params x rows FLOPs, the layer's weights converted once per step), attention over at most the
// context plus the tokens decoded (4 x q_dim x keys per row and layer: an upper bound, every row taken dense), and
// the logits of every row. Memory beyond the prefill: the rows' own K/V (2 x rows x layers x kv_dim x tokens fp32)
// and one layer's weights.
// The attention of a decode step reads, per row and layer, the kv heads' K and V over the keys in fp32: at 32K and
// 49 rows that is 49 x 256 MiB per layer, which memory, not the FLOP rate, bounds. Its time is taken as the larger of
// its FLOPs at flops_per_s and its bytes (each kv head's rows read once per row: the G query heads of a row share
// them in cache) at read_bytes_per_s (0: FLOPs only).
struct DecodeEstimate {
  double flops = 0, seconds = 0;
  double attention_flops = 0, attention_bytes = 0;
  std::uint64_t cache_bytes = 0;
};
DecodeEstimate estimate_decode(const HfConfig& c, int context, int rows, int tokens, double flops_per_s,
                               double read_bytes_per_s = 0);
// One line: "estimate: <time> (<GFLOP> at <rate>, <source>); memory <resident> resident of <available> available
// (hidden .., weights/layer .., K/V .., activations .., capture .., logits ..), weights mapped <mapped>".
std::string describe(const RunEstimate& e, std::uint64_t available);
// MemAvailable from /proc/meminfo (what can be had without swapping), 0 when unknown.
std::uint64_t available_memory_bytes();
// UsageError (one line: what the run needs, what is available, what shrinks it) when resident_bytes exceeds
// `available`; nothing when available is 0 (unknown).
void check_memory(const RunEstimate& e, std::uint64_t available, const RunShape& r);
// Bytes as "1.50 GiB", "12.0 MiB".
std::string bytes_text(double b);

}  // namespace kvf::attention
