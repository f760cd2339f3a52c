// The frontier's per-page terms: roofline kernels (the core's add_kernel / finish_cost), weight reads per GEMM
// call amortized over the P pages of the call.
#include <algorithm>
#include <cmath>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "kvf/input.hpp"

namespace kvf::report {

double kv_bytes_per_layer(const Shape& m, double tokens) { return tokens * m.kv_values_per_token * 2; }
double kv_quant_bytes_per_layer(const Shape& m, double tokens, int bits) {
  return tokens * (m.kv_values_per_token * bits / 8 + std::ceil(m.kv_values_per_token / 128) * 4);
}
double x_bytes_per_layer(const Shape& m, double tokens, int bits) {
  if (bits >= 16) return tokens * m.hidden * 2;
  return tokens * (m.hidden * bits / 8 + std::ceil(m.hidden / 128) * 4);
}

Cost recompute_x(const GpuSpec& g, const Shape& m, double tokens, double pages, int bits) {
  const double rows = tokens * pages, H = m.hidden, out = m.kv_out();
  Cost c;
  if (bits < 16) add_kernel(c, g, 0, x_bytes_per_layer(m, rows, bits) + rows * H * 2);  // dequantize to bf16 X
  // GEMM: weights read once per call (amortized over the P pages), X read, fp32 K/V written.
  add_kernel(c, g, 2 * rows * H * out, out * H * 2 + rows * H * 2 + rows * out * 4);
  // RoPE + write into the paged cache: fp32 read, bf16 written.
  add_kernel(c, g, 0, rows * out * 4 + rows * out * 2);
  finish_cost(c, g, pages);
  return c;
}

Cost mla_up(const GpuSpec& g, const Shape& m, double tokens, double pages) {
  if (!m.mla) throw UsageError(m.name + ": not an MLA model (no latent to up-project)");
  const double rows = tokens * pages, out = m.n_heads * (m.qk_nope + m.v_head);
  Cost c;
  add_kernel(c, g, 2 * rows * m.kv_lora * out, m.kv_lora * out * 2 + rows * m.kv_lora * 2 + rows * out * 2);
  finish_cost(c, g, pages);
  return c;
}

int through_layers_launches(std::int64_t layers, bool last_layer_kv_only, bool attention_merge) {
  if (layers <= 0) return 0;
  const std::int64_t whole = last_layer_kv_only ? layers - 1 : layers;
  const std::int64_t n = kStepInputLaunches + whole * (kWholeLayerLaunches + (attention_merge ? 1 : 0)) +
                         (last_layer_kv_only ? kKvLayerLaunches : 0);
  return int(std::min<std::int64_t>(n, std::int64_t(1) << 30));
}

namespace {
// The launches the roofline terms do not count (the norms, SwiGLU, the residual add, the input copy, and the O and
// down GEMMs, which the terms fold into the projections and the MLP): launches only, so the count is the arm's;
// the elementwise kernels' bytes (the page's activations) are left out.
void add_launches(Cost& c, const GpuSpec& g, int n) {
  c.seconds += n * g.launch_us * 1e-6;
  c.launches += n;
}
}  // namespace

Cost recompute_layers(const GpuSpec& g, const Shape& m, double tokens, double pages, double layers,
                      bool last_layer_kv_only) {
  const auto n_layers = kvf::checked_integer(layers, 0, kMaxLayers, "layers");
  const double rows = tokens * pages, H = m.hidden;
  double attn_params = 0, qdim = 0;
  if (m.mla) {
    const double qk = m.qk_nope + m.qk_rope;
    attn_params = H * m.q_lora + m.q_lora * m.n_heads * qk + H * (m.kv_lora + m.qk_rope) +
                  m.kv_lora * m.n_heads * (m.qk_nope + m.v_head) + m.n_heads * m.v_head * H;
    qdim = m.n_heads * qk;
  } else {
    qdim = m.n_heads * m.head_dim;
    attn_params = H * (qdim + 2 * m.n_kv_heads * m.head_dim) + qdim * H;
  }
  Cost c;
  if (n_layers > 0) add_launches(c, g, kStepInputLaunches);
  for (std::int64_t l = 0; l < n_layers; ++l) {
    if (last_layer_kv_only && l == n_layers - 1) {
      // The K/V of the last layer only, as recompute_x computes them from the layer input (the through-layers
      // arm's last layer; the MLA latent for MLA models): the K/V GEMM, then RoPE + the paged write.
      const double out = m.kv_out();
      add_kernel(c, g, 2 * rows * H * out, out * H * 2 + rows * H * 2 + rows * out * 4);
      add_kernel(c, g, 0, rows * out * 4 + rows * out * 2);
      add_launches(c, g, kKvLayerLaunches - 2);  // the RMSNorm
      break;
    }
    const bool moe_layer = m.moe && l >= m.first_k_dense;
    double mlp_active = 3 * H * m.intermediate, mlp_read = mlp_active;
    if (moe_layer) {
      const double e = 3 * H * m.moe_intermediate;
      mlp_active = (m.experts_per_tok + m.n_shared) * e;
      // Routed experts read: the expected number of distinct ones when rows x k picks fall uniformly on E experts
      // (min(E, rows x k) counted every pick distinct: +25% at 16 tokens for 8 of 256). Skewed routing reads fewer.
      const double E = m.n_routed, k = m.experts_per_tok;
      const double distinct = E * (1 - std::pow(1 - k / E, rows));
      mlp_read = (distinct + m.n_shared) * e;
    }
    // attention projections, then attention over the page itself (causal: half of T x T), then the MLP
    add_kernel(c, g, 2 * rows * attn_params, 2 * attn_params + rows * H * 2 * 2 + rows * m.kv_values_per_token * 2);
    add_kernel(c, g, 2 * rows * tokens * qdim, rows * qdim * 2 * 2);
    add_kernel(c, g, 2 * rows * mlp_active, 2 * mlp_read + rows * H * 2 * 2);
    add_launches(c, g, kWholeLayerLaunches - 3);
  }
  finish_cost(c, g, pages);
  return c;
}

}  // namespace kvf::report
