// The cost of a forward pass with capture (kvf/attention/run_estimate.hpp).
#include "kvf/attention/run_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kvf/errors.hpp"

namespace kvf::attention {

std::string bytes_text(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, b < 10 ? "%.2f %s" : "%.1f %s", b, unit[u]);
  return buf;
}

namespace {
std::string seconds_text(double s) {
  char buf[48];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  return buf;
}
}  // namespace

RunEstimate estimate_run(const HfConfig& c, std::uint64_t mapped, double weight_bytes_per_param, const RunShape& r,
                         double flops_per_s, const std::string& rate_source, double attention_flops_per_s) {
  const auto& m = c.shape;
  if (r.context < 1 || r.queries < 1 || r.queries > r.context || r.chunk < 1 || r.threads < 1)
    throw UsageError("attention run: context " + std::to_string(r.context) + ", queries " + std::to_string(r.queries) +
                     ", chunk " + std::to_string(r.chunk) + ": need context >= 1, 1 <= queries <= context, chunk >= 1");
  const double C = r.context, M = r.queries, T = std::min(r.chunk, r.context), H = m.hidden, D = m.head_dim;
  const double qd = double(m.n_heads) * D, kvd = double(m.n_kv_heads) * D, I = m.intermediate, V = m.vocab;
  const double L = m.layers, Lc = r.capture_layers < 0 ? L : std::min<double>(r.capture_layers, L);
  const double params = H * (qd + 2 * kvd) + H * qd + 3 * H * I + 2 * H;  // one layer, norms included
  const double f = 4.0;
  RunEstimate e;
  e.mapped_weight_bytes = mapped;
  e.layer_weight_bytes = std::uint64_t(params * (6 + weight_bytes_per_param));
  const double C_pad = std::ceil(C / T) * T;  // the last chunk is padded to whole rows
  e.hidden_bytes = std::uint64_t(C_pad * H * f + C * D * f);  // residual stream + RoPE table
  e.kv_bytes = Lc < L ? std::uint64_t(2 * kvd * C * f) : 0;
  const double qkv = qd + 2 * kvd;
  e.activation_bytes = std::uint64_t(T * (qkv + 3 * H + qd + 3 * I) * f + T * (2 * H + qd + I) * f +
                                     T * std::max({H, qd, I}) * 2 + r.threads * T * C * f);
  e.capture_bytes = std::uint64_t(Lc * (m.n_heads * M * C + m.n_heads * M * D + 2 * kvd * C) * f);
  const double vb = std::min(4096.0, V);  // lm_head is widened in blocks of 4096 rows
  e.logits_bytes = std::uint64_t((M * V + vb * H + M * H + M * vb) * f);
  e.resident_bytes = e.hidden_bytes + e.layer_weight_bytes + e.kv_bytes + e.activation_bytes + e.capture_bytes +
                     e.logits_bytes;
  const double gemm_params = H * qkv + H * qd + 3 * H * I;
  e.attention_flops = L * 4 * qd * C * (C + T) / 2;
  e.flops = L * 2 * gemm_params * C_pad + e.attention_flops + 2 * M * H * V;
  e.flops_per_s = flops_per_s;
  e.attention_flops_per_s = attention_flops_per_s > 0 ? attention_flops_per_s : flops_per_s;
  e.seconds = flops_per_s > 0 ? (e.flops - e.attention_flops) / flops_per_s + e.attention_flops / e.attention_flops_per_s
                              : 0;
  e.rate_source = rate_source;
  return e;
}

DecodeEstimate estimate_decode(const HfConfig& c, int context, int rows, int tokens, double flops_per_s,
                               double read_bytes_per_s) {
  const auto& m = c.shape;
  const double H = m.hidden, D = m.head_dim, qd = double(m.n_heads) * D, kvd = double(m.n_kv_heads) * D;
  const double I = m.intermediate, V = m.vocab, L = m.layers, R = rows, steps = std::max(0, tokens - 1);
  const double gemm_params = H * (qd + 2 * kvd) + H * qd + 3 * H * I;
  DecodeEstimate e;
  const double keys = double(context) + tokens;
  e.attention_flops = steps * R * L * 4 * qd * keys;
  e.attention_bytes = steps * R * L * 2 * kvd * keys * 4.0;
  e.flops = steps * R * (L * 2 * gemm_params + 2 * H * V) + e.attention_flops;
  const double attention_s = std::max(flops_per_s > 0 ? e.attention_flops / flops_per_s : 0.0,
                                      read_bytes_per_s > 0 ? e.attention_bytes / read_bytes_per_s : 0.0);
  e.seconds = flops_per_s > 0 ? (e.flops - e.attention_flops) / flops_per_s + attention_s : 0;
  e.cache_bytes = std::uint64_t(2 * R * L * kvd * std::max(tokens, 1) * 4.0);
  return e;
}

std::string describe(const RunEstimate& e, std::uint64_t available) {
  char rate[160];
  if (e.attention_flops_per_s > 0 && e.attention_flops_per_s != e.flops_per_s)
    std::snprintf(rate, sizeof rate, "%.0f GFLOP: %.0f at %.1f GFLOP/s, attention %.0f at %.1f GFLOP/s",
                  e.flops / 1e9, (e.flops - e.attention_flops) / 1e9, e.flops_per_s / 1e9, e.attention_flops / 1e9,
                  e.attention_flops_per_s / 1e9);
  else
    std::snprintf(rate, sizeof rate, "%.0f GFLOP at %.1f GFLOP/s", e.flops / 1e9, e.flops_per_s / 1e9);
  return "estimate: " + (e.flops_per_s > 0 ? seconds_text(e.seconds) : std::string("time unknown")) + " (" + rate +
         ", " + e.rate_source + "); memory " + bytes_text(double(e.resident_bytes)) + " resident of " +
         (available ? bytes_text(double(available)) : std::string("unknown")) + " available (hidden " +
         bytes_text(double(e.hidden_bytes)) + ", weights/layer " + bytes_text(double(e.layer_weight_bytes)) +
         ", K/V " + bytes_text(double(e.kv_bytes)) + ", activations " + bytes_text(double(e.activation_bytes)) +
         ", capture " + bytes_text(double(e.capture_bytes)) + ", logits " + bytes_text(double(e.logits_bytes)) +
         "), weights mapped " + bytes_text(double(e.mapped_weight_bytes));
}

std::uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream s(line.substr(13));
    std::uint64_t kib = 0;
    if (s >> kib) return kib * 1024;
  }
  return 0;
}

void check_memory(const RunEstimate& e, std::uint64_t available, const RunShape& r) {
  if (available == 0 || e.resident_bytes <= available) return;
  throw UsageError("context " + std::to_string(r.context) + " with " + std::to_string(r.queries) +
                   " captured queries needs " + bytes_text(double(e.resident_bytes)) + " resident (capture " +
                   bytes_text(double(e.capture_bytes)) + ", hidden " + bytes_text(double(e.hidden_bytes)) +
                   ", activations " + bytes_text(double(e.activation_bytes)) + "), " + bytes_text(double(available)) +
                   " available: a shorter context, fewer queries or fewer captured layers fit");
}

}  // namespace kvf::attention
