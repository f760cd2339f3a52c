// The residency action table: for a page class (tokens, layers, reuse probability, phase) the cost of
// each action and the cheapest. Costs are in microseconds:
//   total = reuse_probability * reuse_us + one_time_us + hbm_price_us_per_mib * hbm_MiB
// keep            resident bf16 K/V; nothing on reuse
// compress_int8/4 resident int8/int4 K/V (+ fp32 scale per 128 values); quantize once, dequantize on reuse
// demote          K/V written to host memory (D2H, overlapped: not counted), fetched on reuse (H2D), one copy per layer
//                 (back to back: the first copy's fixed cost, then copy_issue_us per further one where a run
//                 fitted it)
// recompute_x     resident bf16 layer input X; K/V recomputed on reuse (GEMM + RoPE + paged write)
// recompute_x_int8/int4  XQuant-style: resident quantized X, dequantize + the same recompute
// fetch_peer      held by a peer node (only with a fitted remote tier): remote fetch (one descriptor per layer)
//                 into host memory, then the demote's fetch
// evict           nothing resident; on reuse the page's tokens run through layers 1..L-1 again, then layer L's
//                 K/V as recompute_x computes them
// Phase: decode handles one page per call (P = 1, weights read per page); prefill batches `prefill_pages` pages
// per call: a recompute's weight reads, and a fetch's or a (de)quantize pass's fixed costs (one copy, descriptor or
// launch per layer for all P pages), amortized over P.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "series.hpp"

namespace kvf::report {
namespace {
// Where a cost read off measured points came from: the point itself, or between two of them.
const char* measured_at(const std::vector<double>& xs, double x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end() ? "measured" : "interpolated";
}
}  // namespace

double hbm_price(const GpuSpec& g, const ActionOptions& o) {
  if (o.hbm_price_us_per_mib) return *o.hbm_price_us_per_mib;
  return double(1 << 20) / (g.host_link_gbps * 1e9) * 1e6;
}

std::vector<ActionClass> action_table(const GpuSpec& g, const Shape& m, const ActionOptions& o) {
  std::vector<double> layers = o.layers;
  if (layers.empty()) {
    for (double l : {1.0, 4.0, 16.0})
      if (l < m.layers) layers.push_back(l);
    layers.push_back(m.layers);
  }
  // Written as !(in range) so NaN is refused too; layers become copy counts (int), so whole numbers only.
  for (double l : layers)
    if (!(l >= 1 && l <= m.layers) || l != std::floor(l))
      throw UsageError("--layers " + fmt(l) + ": a whole number in [1, " + fmt(m.layers) + "] (" + m.name + " has " +
                       fmt(m.layers) + " layers)");
  for (double t : o.tokens)
    if (!(t >= 1 && t <= kMaxTokensPerPage))
      throw UsageError("--tokens " + fmt(t) + ": tokens per page in [1, " +
                       std::to_string(static_cast<long long>(kMaxTokensPerPage)) + "]");
  for (double p : o.reuse)
    if (!(p >= 0 && p <= 1)) throw UsageError("--reuse " + fmt(p) + ": a probability in [0, 1]");
  if (o.prefill_pages < 1 || o.prefill_pages > kMaxPrefillPages)
    throw UsageError("--prefill-pages " + std::to_string(o.prefill_pages) + ": pages per call in [1, " +
                     std::to_string(kMaxPrefillPages) + "]");
  if (o.hbm_price_us_per_mib && !(*o.hbm_price_us_per_mib >= 0 && *o.hbm_price_us_per_mib <= kMaxHbmPrice))
    throw UsageError("--hbm-price " + fmt(*o.hbm_price_us_per_mib) + ": microseconds per MiB in [0, " +
                     fmt(kMaxHbmPrice) + "]");
  if (g.host_link_gbps <= 0) throw UsageError(g.name + ": host link bandwidth unknown: the demote action needs it");
  const double price = hbm_price(g, o);
  const double MiB = 1 << 20;

  std::vector<frontier::RecSeries> recs;
  std::vector<frontier::XferSeries> xfers;
  const frontier::XferSeries* h2d = nullptr;
  if (o.measured) {
    recs = frontier::recompute_series(*o.measured);
    xfers = frontier::transfer_series(*o.measured);
    h2d = frontier::find_xfer(xfers, "h2d_pinned");
  }
  std::vector<ActionClass> out;
  for (const char* phase : {"decode", "prefill"}) {
    const double P = std::string(phase) == "decode" ? 1 : o.prefill_pages;
    for (double T : o.tokens)
      for (double L : layers)
        for (double p : o.reuse) {
          ActionClass c;
          c.tokens = T;
          c.layers = L;
          c.reuse = p;
          c.phase = phase;
          const double kv = kv_bytes_per_layer(m, T) * L;
          auto add = [&](const std::string& name, double hbm, double host, double reuse_s, double once_s,
                         const std::string& source = "model") {
            ActionCost a;
            a.action = name;
            a.source = source;
            a.hbm_bytes = hbm;
            a.host_bytes = host;
            a.reuse_us = reuse_s * 1e6;
            a.one_time_us = once_s * 1e6;
            a.total_us = p * a.reuse_us + a.one_time_us + price * hbm / MiB;
            c.costs.push_back(a);
          };
          add("keep", kv, 0, 0, 0);
          const int copies = static_cast<int>(L);  // whole, in [1, kMaxLayers]: checked above
          for (int bits : {8, 4}) {
            const double q = kv_quant_bytes_per_layer(m, T, bits) * L;
            // one pass per layer: read one form, write the other
            const double pass = L * (roofline_s(g, 0, P * (q + kv) / L) + g.launch_us * 1e-6) / P;
            add(bits == 8 ? "compress_int8" : "compress_int4", q, 0, pass, pass);
          }
          {
            // The D2H write-back runs on a copy engine, overlapped with compute: not on the critical path (0).
            // The P pages of a call in one copy per layer.
            double fetch = transfer(g, P * kv, copies, g.host_link_gbps).seconds / P;
            std::string src = "model";
            if (h2d) {
              const double b = P * kv / L;
              if (auto t = interpolate(h2d->bytes, h2d->secs, b)) {
                // The first layer's copy as measured alone; each further one its issue cost and its bytes (where a
                // run fitted copy_issue_us: the granularity rows), else another whole copy as measured.
                const double further =
                    g.copy_issue_us > 0 ? g.copy_issue_us * 1e-6 + b / (g.host_link_gbps * 1e9) : *t;
                fetch = (*t + (L - 1) * further) / P;
                src = measured_at(h2d->bytes, b);
              }
            }
            add("demote", 0, kv, fetch, 0, src);
            // A peer node holds the page (a shared pool, the prefill node): pulled over the remote tier into host
            // memory (what the remote study measures, one descriptor per layer as engines post them), then the
            // demote's fetch to HBM. Only where a results directory fitted the remote tier.
            if (g.remote_gbps > 0)
              add("fetch_peer", 0, 0, remote_s(g, P * kv, L) / P + fetch, 0,
                  src == "model" ? "remote fit + model" : "remote fit + " + src);
          }
          double bf16_recompute_s = 0;  // recompute_x's reuse cost and where it came from (evict at L=1 below)
          std::string bf16_recompute_src;
          for (int bits : {16, 8, 4}) {
            const double x = x_bytes_per_layer(m, T, bits) * L;
            double t = L * recompute_x(g, m, T, P, bits).seconds;
            std::string src = "model";
            const std::string arm = bits == 16 ? "x" : "xq", dt = bits == 16 ? "bf16" : bits == 8 ? "int8" : "int4";
            // An MLA model's K/V is its latent: the mla arm's mla_latent rows recompute it from bf16 X.
            const auto same_arm = [&](const frontier::RecSeries& sr) {
              if (bits == 16 && m.mla && sr.arm == "mla_latent") return true;
              return sr.arm == arm && sr.xdtype == dt;
            };
            for (const auto& sr : recs) {
              if (sr.model != m.name || !same_arm(sr) || sr.layers != 1 || sr.pages != P) continue;
              if (auto v = interpolate(sr.tokens, sr.secs, T)) {  // per page per layer
                t = L * *v;
                src = measured_at(sr.tokens, T);
              }
            }
            add(bits == 16 ? "recompute_x" : bits == 8 ? "recompute_x_int8" : "recompute_x_int4", x, 0, t, 0, src);
            if (bits == 16) bf16_recompute_s = t, bf16_recompute_src = src;
          }
          {
            // The through-layers arm measures evict's reuse cost itself (from token ids through L layers, layer L's
            // K/V at the end; layers 1..L-1 attend over the arm's prefix, which the model leaves out): its rows of
            // this model, L and pages per call replace the model where present, the smallest prefix measured.
            double t = recompute_layers(g, m, T, P, L, true).seconds, prefix = 0;
            std::string src = "model";
            const auto prefix_of = [](const frontier::RecSeries& sr) {
              return sr.prefix.empty() ? 0.0 : std::strtod(sr.prefix.c_str(), nullptr);
            };
            for (const auto& sr : recs) {
              if (sr.model != m.name || sr.arm != "layers" || sr.layers != L || sr.pages != P) continue;
              if (src != "model" && prefix_of(sr) >= prefix) continue;
              if (auto v = interpolate(sr.tokens, sr.secs, T)) {  // per page
                t = *v;
                prefix = prefix_of(sr);
                src = measured_at(sr.tokens, T);
              }
            }
            // At one layer evict computes what recompute_x does (layer 1's K/V from its input) after the embedding
            // gather and the layer's RMSNorm: a measured recompute_x prices it too, plus those two launches, so a
            // modelled evict cannot undercut the measured same work.
            if (src == "model" && L == 1 && bf16_recompute_src != "model")
              t = bf16_recompute_s + (kStepInputLaunches + kKvLayerLaunches - 2) * g.launch_us * 1e-6 / P,
              src = bf16_recompute_src;
            add("evict", 0, 0, t, 0, src);
          }
          const ActionCost* best = &c.costs.front();
          for (const auto& a : c.costs)
            if (a.total_us < best->total_us) best = &a;  // ties: the first listed (keep before the rest)
          c.cheapest = best->action;
          out.push_back(std::move(c));
        }
  }
  return out;
}

nlohmann::json action_table_json(const GpuSpec& g, const Shape& m, const ActionOptions& o,
                                 const std::vector<ActionClass>& t) {
  nlohmann::json j;
  j["schema"] = "kvfrontier action table v1";
  j["gpu"] = g.name;
  j["model"] = m.name;
  j["cost_unit"] = "microseconds per page";
  j["cost_rule"] = "total_us = reuse * reuse_us + one_time_us + hbm_price_us_per_mib * hbm_bytes / 2^20";
  j["hbm_price_us_per_mib"] = hbm_price(g, o);
  j["hbm_price_source"] = o.hbm_price_us_per_mib ? "--hbm-price" : "default: time to fetch 1 MiB over the host link";
  j["phases"] = {{"decode", {{"pages_per_call", 1}}}, {"prefill", {{"pages_per_call", o.prefill_pages}}}};
  nlohmann::json spec;
  spec["hbm_tbps"] = g.hbm_tbps;
  spec["host_link_gbps"] = g.host_link_gbps;
  spec["bf16_tflops"] = g.bf16_tflops;
  spec["launch_us"] = g.launch_us;
  spec["copy_fixed_us"] = g.copy_fixed_us;
  if (g.copy_issue_us > 0) spec["copy_issue_us"] = g.copy_issue_us;
  if (g.remote_gbps > 0) {
    spec["remote_gbps"] = g.remote_gbps;
    spec["remote_fixed_us"] = g.remote_fixed_us;
    spec["remote_descriptor_us"] = g.remote_descriptor_us;
  }
  spec["calibrated"] = g.calibration;
  j["ceilings"] = spec;
  j["measured_from"] = o.measured ? o.measured->dir : "";
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& c : t) {
    nlohmann::json r;
    r["tokens"] = c.tokens;
    r["layers"] = c.layers;
    r["reuse"] = c.reuse;
    r["phase"] = c.phase;
    r["cheapest"] = c.cheapest;
    nlohmann::json costs = nlohmann::json::object();
    for (const auto& a : c.costs)
      costs[a.action] = {{"total_us", a.total_us}, {"reuse_us", a.reuse_us}, {"one_time_us", a.one_time_us},
                         {"hbm_bytes", a.hbm_bytes}, {"host_bytes", a.host_bytes}, {"source", a.source}};
    r["costs"] = costs;
    rows.push_back(r);
  }
  j["classes"] = rows;
  return j;
}

}  // namespace kvf::report
