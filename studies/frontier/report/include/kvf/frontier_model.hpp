// The frontier study's analytic model of a KV page: the per-page terms of recomputing it (from X, through
// whole layers, the MLA up-projection), its sizes, and the residency action table (keep / compress / demote
// / recompute / evict) behind `kvf model` and the report's frontier map. Built on the core's roofline
// terms (kvf/report.hpp: Cost, add_kernel, transfer); docs/report.md "The model" states every formula.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/report.hpp"

namespace kvf::report {

// Recompute one page's K/V for one layer from resident X (bits 16 = bf16, 8, 4), P pages per call:
// dequant (bits < 16) -> GEMM [T*P, H] x [H, kv_out] -> RoPE + paged write. Weight reads are per call,
// so per page they are amortized over P. Returns the cost per page.
Cost recompute_x(const GpuSpec& g, const Shape& m, double tokens, double pages, int bits);
// MLA (DeepSeek-V3): the up-projection of one page's latent into per-head K (nope part) and V, one layer,
// P pages per call: GEMM [T*P, kv_lora] x [kv_lora, heads*(qk_nope + v_head)], bf16 out.
Cost mla_up(const GpuSpec& g, const Shape& m, double tokens, double pages);
// One page of T tokens through L layers from token embeddings, P pages per call; attention over the page only
// (prefix attention not counted: a lower bound). last_layer_kv_only: layers 1..L-1 whole and layer L's K/V as
// recompute_x computes them, what rebuilding the page's K/V of layers 1..L takes (evict -> recompute; the
// through-layers arm); otherwise L whole layers (a prefill, whose last layer feeds the output).
Cost recompute_layers(const GpuSpec& g, const Shape& m, double tokens, double pages, double layers,
                      bool last_layer_kv_only = false);
// Kernel launches of the GPU through-layers arm (kernels/decode PrefillGpu::step_kv), counted from its code with a
// cuBLASLt matmul as one: the layer input's device copy, per whole layer RMSNorm, QKV GEMM, RoPE + K/V append,
// attention, O GEMM, RMSNorm, gate-up GEMM, SwiGLU, down GEMM and residual add (+ the attention's split merge where
// it splits the prefix), then layer L's RMSNorm, K/V GEMM and RoPE + append. recompute_layers charges the same but
// the merge (whether a prefix splits depends on the device); the input copy stands for a serving engine's embedding
// gather.
inline constexpr int kWholeLayerLaunches = 10, kKvLayerLaunches = 3, kStepInputLaunches = 1;
int through_layers_launches(std::int64_t layers, bool last_layer_kv_only, bool attention_merge);
double kv_bytes_per_layer(const Shape& m, double tokens);                  // bf16
double kv_quant_bytes_per_layer(const Shape& m, double tokens, int bits);  // + fp32 scale per 128 values
double x_bytes_per_layer(const Shape& m, double tokens, int bits);         // bf16 / int8 / int4 (+ scales)

// ------------------------------------------------------------------------------------------ actions
// Limits of the action table's options (`kvf model` flags): beyond them is UsageError naming the flag.
inline constexpr double kMaxTokensPerPage = 1 << 20;
inline constexpr int kMaxPrefillPages = 1 << 16;
inline constexpr double kMaxHbmPrice = 1e9;  // us per MiB
struct ActionOptions {
  std::vector<double> tokens = {16, 64, 128, 256, 1024, 4096};
  std::vector<double> layers;                       // default: 1, 4, 16, model layers
  std::vector<double> reuse = {0.1, 0.5, 0.9};
  int prefill_pages = 16;                           // pages per recompute call in prefill (decode: 1)
  std::optional<double> hbm_price_us_per_mib;       // unset: the time to fetch 1 MiB over the host link
  // Measured costs replace the model's where this directory measured them (frontier arms x / xq at the
  // class's tokens and pages per call, h2d_pinned at the page's K/V bytes per layer); linear interpolation
  // between measured token counts / copy sizes, never beyond them.
  const ResultSet* measured = nullptr;
};
struct ActionCost {
  std::string action;
  double hbm_bytes = 0, host_bytes = 0, reuse_us = 0, one_time_us = 0, total_us = 0;
  std::string source = "model";  // of reuse_us: "model" | "measured" | "interpolated"
};
struct ActionClass {
  double tokens = 0, layers = 0, reuse = 0;
  std::string phase;  // "decode" | "prefill"
  std::vector<ActionCost> costs;
  std::string cheapest;
};
// Throws UsageError naming the flag (--tokens, --layers, --reuse, --prefill-pages, --hbm-price) for a value
// outside its limits (NaN included).
std::vector<ActionClass> action_table(const GpuSpec& g, const Shape& m, const ActionOptions& o);
double hbm_price(const GpuSpec& g, const ActionOptions& o);  // us per MiB: the option, else the host link's
nlohmann::json action_table_json(const GpuSpec& g, const Shape& m, const ActionOptions& o,
                                 const std::vector<ActionClass>& t);

}  // namespace kvf::report
