// The analytic model behind `kvf model` and the report's "predicted" column: roofline terms per kernel
// (max of FLOP time and byte time), weight reads per GEMM call amortized over the P pages of the call,
// a launch overhead per kernel and a fixed cost per copy call. GPU peaks from data/gpus.json, model
// shapes from data/models.json (through kernels/frontier/models.hpp), ceilings from a results directory.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/report.hpp"
#include "kvf/model_shapes.hpp"
#include "models.hpp"

namespace kvf::report {

namespace fs = std::filesystem;

std::string default_gpus_path() {
#if defined(KVF_SOURCE_DIR)
  const std::string p = std::string(KVF_SOURCE_DIR) + "/data/gpus.json";
  if (fs::exists(p)) return p;
#endif
  return "data/gpus.json";
}

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Peaks and overheads are physical quantities: finite, >= 0, and below what any device has (1e9 of the
// unit: PB/s, PiB, EFLOP/s) so a typo like 1e300 is refused rather than carried into every prediction.
constexpr double kMaxSpecValue = 1e9;

}  // namespace

std::vector<GpuSpec> load_gpus(const std::string& path) {
  const nlohmann::json j = kvf::read_json_input(path);
  if (!j.is_object()) throw UsageError(path + ": expected a JSON object with a 'gpus' array");
  if (!j.contains("gpus") || !j["gpus"].is_array()) throw UsageError(path + ": key 'gpus': expected an array");
  double launch = 0, copy = 0;
  std::map<std::string, std::string> dsrc;
  if (const auto it = j.find("defaults"); it != j.end() && !it->is_null()) {
    const auto& d = *it;
    launch = kvf::json_number(d, "launch_us", path, "defaults.launch_us", 0, kMaxSpecValue).value_or(0);
    copy = kvf::json_number(d, "copy_fixed_us", path, "defaults.copy_fixed_us", 0, kMaxSpecValue).value_or(0);
    if (const auto src = d.find("source"); src != d.end() && !src->is_null()) {
      if (!src->is_object()) throw UsageError(path + ": key 'defaults.source': expected an object");
      for (auto e = src->begin(); e != src->end(); ++e)
        dsrc[e.key()] = *kvf::json_string(*src, e.key(), path, "defaults.source." + e.key());
    }
  }
  std::vector<GpuSpec> out;
  for (std::size_t i = 0; i < j["gpus"].size(); ++i) {
    const auto& g = j["gpus"][i];
    const std::string at = "gpus[" + std::to_string(i) + "]";
    GpuSpec s;
    s.name = kvf::json_string(g, "name", path, at + ".name").value_or("");
    if (s.name.empty()) throw UsageError(path + ": " + at + ": a gpu without a 'name'");
    auto field = [&](const char* f) {
      const auto v = kvf::json_number(g, f, path, at + "." + f, 0, kMaxSpecValue);
      if (!v) throw UsageError(path + ": gpu '" + s.name + "': key '" + at + "." + f + "' missing");
      return *v;
    };
    s.hbm_tbps = field("hbm_tbps");
    s.l2_mib = field("l2_mib");
    s.host_link_gbps = field("host_link_gbps");
    s.nvlink_gbps = field("nvlink_gbps");
    s.bf16_tflops = field("bf16_tflops");
    const auto sms = kvf::json_integer(g, "sms", path, at + ".sms", 0, 1 << 20);
    if (!sms) throw UsageError(path + ": gpu '" + s.name + "': key '" + at + ".sms' missing");
    s.sms = static_cast<int>(*sms);
    s.launch_us = kvf::json_number(g, "launch_us", path, at + ".launch_us", 0, kMaxSpecValue).value_or(launch);
    s.copy_fixed_us = kvf::json_number(g, "copy_fixed_us", path, at + ".copy_fixed_us", 0, kMaxSpecValue).value_or(copy);
    const auto src = g.find("source");
    if (src != g.end() && !src->is_null() && !src->is_object())
      throw UsageError(path + ": key '" + at + ".source': expected an object");
    for (const char* f : {"hbm_tbps", "l2_mib", "host_link_gbps", "nvlink_gbps", "bf16_tflops", "sms"}) {
      const auto text = src == g.end() ? std::nullopt : kvf::json_string(*src, f, path, at + ".source." + f);
      if (!text || text->empty()) throw UsageError(path + ": gpu '" + s.name + "': no source for '" + f + "'");
      s.source[f] = *text;
    }
    for (const auto& [k, v] : dsrc) s.source[k] = v;
    if (const auto al = g.find("aliases"); al != g.end() && !al->is_null()) {
      if (!al->is_array()) throw UsageError(path + ": key '" + at + ".aliases': expected an array of strings");
      for (std::size_t k = 0; k < al->size(); ++k) {
        const std::string key = at + ".aliases[" + std::to_string(k) + "]";
        if (!(*al)[k].is_string())
          throw UsageError(path + ": key '" + key + "': expected a string, got " + (*al)[k].type_name());
        const std::string a = (*al)[k].get<std::string>();
        s.source["alias:" + a] = a;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

const GpuSpec& find_gpu(const std::vector<GpuSpec>& all, const std::string& name) {
  const std::string n = lower(name);
  // exact name or alias first, then the longest name/alias contained in `name` (e.g. a CUDA device name)
  const GpuSpec* best = nullptr;
  std::size_t best_len = 0;
  for (const auto& g : all) {
    std::vector<std::string> names = {g.name};
    for (const auto& [k, v] : g.source)
      if (k.rfind("alias:", 0) == 0) names.push_back(v);
    for (const auto& a : names) {
      const std::string la = lower(a);
      if (la == n) return g;
      if (la.size() > best_len && n.find(la) != std::string::npos) {
        best = &g;
        best_len = la.size();
      }
    }
  }
  if (best) return *best;
  std::string known;
  for (const auto& g : all) known += (known.empty() ? "" : ", ") + g.name;
  throw UsageError("--gpu " + name + ": unknown GPU; known: " + known);
}

std::vector<Shape> load_shapes(const std::string& path) {
  const std::string file = path.empty() ? kvf::models::default_models_path() : path;
  const auto ms = kvf::models::load_models(file);
  std::vector<Shape> out;
  for (const auto& m : ms) {
    // The model's loops and integer conversions run over these (layers above all): a shape outside what any
    // model has is bad input naming the file and key, never a meaningless prediction.
    const auto check = [&](double v, double lo, double hi, const char* key) {
      if (!(v >= lo && v <= hi))
        throw UsageError(file + ": model '" + m.name + "': key '" + key + "': " + fmt(v) + " is not in [" + fmt(lo) +
                         ", " + fmt(hi) + "]");
    };
    check(m.layers, 1, kMaxLayers, "num_hidden_layers");
    check(m.hidden, 1, 1 << 20, "hidden_size");
    check(m.n_heads, 1, 1 << 16, "num_attention_heads");
    check(m.n_kv_heads, 1, m.n_heads, "num_key_value_heads");
    check(m.head_dim, 1, 1 << 16, "head_dim");
    check(m.intermediate, 0, 1 << 24, "intermediate_size");
    if (m.is_mla) {
      check(m.mla.kv_lora_rank, 1, 1 << 20, "mla.kv_lora_rank");
      check(m.mla.q_lora_rank, 0, 1 << 20, "mla.q_lora_rank");
      check(m.mla.qk_nope_head_dim, 0, 1 << 16, "mla.qk_nope_head_dim");
      check(m.mla.qk_rope_head_dim, 0, 1 << 16, "mla.qk_rope_head_dim");
      check(m.mla.v_head_dim, 1, 1 << 16, "mla.v_head_dim");
    }
    if (m.is_moe) {
      check(m.moe_intermediate, 1, 1 << 24, "moe.moe_intermediate_size");
      check(m.n_routed_experts, 1, 1 << 16, "moe.n_routed_experts");
      check(m.n_shared_experts, 0, 1 << 16, "moe.n_shared_experts");
      check(m.experts_per_tok, 1, m.n_routed_experts, "moe.num_experts_per_tok");
      check(m.first_k_dense, 0, m.layers, "moe.first_k_dense_replace");
    }
    Shape s;
    s.name = m.name;
    s.hidden = m.hidden;
    s.n_heads = m.n_heads;
    s.n_kv_heads = m.n_kv_heads;
    s.head_dim = m.head_dim;
    s.layers = m.layers;
    s.intermediate = m.intermediate;
    s.kv_values_per_token = static_cast<double>(m.kv_values_per_token());
    s.mla = m.is_mla;
    s.q_lora = m.mla.q_lora_rank;
    s.kv_lora = m.mla.kv_lora_rank;
    s.qk_nope = m.mla.qk_nope_head_dim;
    s.qk_rope = m.mla.qk_rope_head_dim;
    s.v_head = m.mla.v_head_dim;
    s.moe = m.is_moe;
    s.moe_intermediate = m.moe_intermediate;
    s.n_routed = m.n_routed_experts;
    s.n_shared = m.n_shared_experts;
    s.experts_per_tok = m.experts_per_tok;
    s.first_k_dense = m.first_k_dense;
    out.push_back(s);
  }
  return out;
}

const Shape& find_shape(const std::vector<Shape>& all, const std::string& name) {
  for (const auto& s : all)
    if (s.name == name) return s;
  std::string known;
  for (const auto& s : all) known += (known.empty() ? "" : ", ") + s.name;
  throw UsageError("--model " + name + ": unknown model; known: " + known);
}

// ------------------------------------------------------------------------------------------ terms
double roofline_s(const GpuSpec& g, double flops, double bytes) {
  double t = 0;
  if (flops > 0) {
    if (g.bf16_tflops <= 0) throw UsageError(g.name + ": no FLOP/s peak (bf16_tflops is 0): cannot predict compute");
    t = std::max(t, flops / (g.bf16_tflops * 1e12));
  }
  if (bytes > 0) {
    if (g.hbm_tbps <= 0) throw UsageError(g.name + ": no memory bandwidth (hbm_tbps is 0): cannot predict");
    t = std::max(t, bytes / (g.hbm_tbps * 1e12));
  }
  return t;
}

namespace {
void add_kernel(Cost& c, const GpuSpec& g, double flops, double bytes) {
  c.seconds += roofline_s(g, flops, bytes) + g.launch_us * 1e-6;
  c.flops += flops;
  c.bytes += bytes;
  c.launches += 1;
}
void finish(Cost& c, const GpuSpec& g, double per) {
  c.seconds /= per;
  c.flops /= per;
  c.bytes /= per;
  const double tf = g.bf16_tflops > 0 ? c.flops / (g.bf16_tflops * 1e12) : 0;
  const double tb = g.hbm_tbps > 0 ? c.bytes / (g.hbm_tbps * 1e12) : 0;
  const double tl = c.launches * g.launch_us * 1e-6 / per;
  c.bound = tl > std::max(tf, tb) ? "fixed" : tf > tb ? "compute" : "memory";
}
}  // namespace

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
  finish(c, g, pages);
  return c;
}

Cost mla_up(const GpuSpec& g, const Shape& m, double tokens, double pages) {
  if (!m.mla) throw UsageError(m.name + ": not an MLA model (no latent to up-project)");
  const double rows = tokens * pages, out = m.n_heads * (m.qk_nope + m.v_head);
  Cost c;
  add_kernel(c, g, 2 * rows * m.kv_lora * out, m.kv_lora * out * 2 + rows * m.kv_lora * 2 + rows * out * 2);
  finish(c, g, pages);
  return c;
}

Cost recompute_layers(const GpuSpec& g, const Shape& m, double tokens, double pages, double layers) {
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
  for (std::int64_t l = 0; l < n_layers; ++l) {
    const bool moe_layer = m.moe && l >= m.first_k_dense;
    double mlp_active = 3 * H * m.intermediate, mlp_read = mlp_active;
    if (moe_layer) {
      const double e = 3 * H * m.moe_intermediate;
      mlp_active = (m.experts_per_tok + m.n_shared) * e;
      mlp_read = (std::min(m.n_routed, rows * m.experts_per_tok) + m.n_shared) * e;
    }
    // attention projections, then attention over the page itself (causal: half of T x T), then the MLP
    add_kernel(c, g, 2 * rows * attn_params, 2 * attn_params + rows * H * 2 * 2 + rows * m.kv_values_per_token * 2);
    add_kernel(c, g, 2 * rows * tokens * qdim, rows * qdim * 2 * 2);
    add_kernel(c, g, 2 * rows * mlp_active, 2 * mlp_read + rows * H * 2 * 2);
  }
  finish(c, g, pages);
  return c;
}

Cost transfer(const GpuSpec& g, double bytes, int copies, double gbps) {
  if (gbps <= 0) throw UsageError(g.name + ": link bandwidth unknown (0): cannot predict a transfer");
  Cost c;
  c.bytes = bytes;
  c.copies = copies;
  c.seconds = copies * g.copy_fixed_us * 1e-6 + bytes / (gbps * 1e9);
  c.bound = copies * g.copy_fixed_us * 1e-6 > bytes / (gbps * 1e9) ? "fixed" : "link";
  return c;
}

double disk_s(const GpuSpec& g, double bytes, double reads) {
  if (g.disk_gbps <= 0) throw UsageError(g.name + ": no disk figure (no file-tier rows to calibrate from): cannot predict a file read");
  return reads * g.disk_latency_us * 1e-6 + bytes / (g.disk_gbps * 1e9);
}

double overlap_s(double recompute_s, double fetch_s, double sync_s) {
  if (recompute_s <= 0) return fetch_s;
  if (fetch_s <= 0) return recompute_s;
  return std::max(recompute_s, fetch_s) + sync_s;
}

std::optional<double> corun_s(double bytes, double alone_s, double bw_bps, double demand_bps) {
  if (bytes <= 0 || alone_s <= 0 || bw_bps <= demand_bps) return std::nullopt;
  return bytes / std::min(bytes / alone_s, bw_bps - demand_bps);
}

// ------------------------------------------------------------------------------------------ calibration
namespace {

// Best value of `metric` over measured rows of `study` matching every (param, value); cold first, then hot.
std::optional<std::pair<double, std::string>> best(const ResultSet& rs, const std::string& study,
                                                   const std::vector<std::pair<std::string, std::string>>& match,
                                                   bool tflops) {
  for (const char* mode : {"cold", "hot"}) {
    std::optional<double> b;
    for (const auto* r : rs.rows(study)) {
      if (r->mode != mode) continue;
      bool ok = true;
      for (const auto& [k, v] : match) ok = ok && r->param(k) == v;
      const auto& val = tflops ? r->tflops : r->gbps;
      if (ok && val && *val > 0 && (!b || *val > *b)) b = *val;
    }
    if (b) return std::make_pair(*b, std::string(mode));
  }
  return std::nullopt;
}

std::string label_of(const std::vector<std::pair<std::string, std::string>>& match) {
  std::string s;
  for (const auto& [k, v] : match) s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

// Least-squares t = a + n * b over (bytes, seconds) points with at least two distinct sizes.
std::optional<std::pair<double, double>> fit_affine(const std::vector<std::pair<double, double>>& pts) {
  std::set<double> xs;
  for (const auto& p : pts) xs.insert(p.first);
  if (xs.size() < 2) return std::nullopt;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(pts.size());
  for (const auto& [x, y] : pts) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double a = (sy - b * sx) / n;
  if (!(b > 0)) return std::nullopt;
  return std::make_pair(a, b);
}

}  // namespace

std::vector<std::string> calibrate(GpuSpec& g, const ResultSet& rs) {
  std::vector<std::string> done;
  auto note = [&](const std::string& field, const std::string& text) {
    g.source[field] = "measured: " + text;
    done.push_back(field + " <- " + text);
  };
  char buf[512];
  if (auto v = best(rs, "stream", {{"op", "read"}}, false)) {
    g.hbm_tbps = v->first / 1000;
    std::snprintf(buf, sizeof buf, "%.4g GB/s, best stream op=read (%s) in %s", v->first, v->second.c_str(), rs.dir.c_str());
    note("hbm_tbps", buf);
  }
  for (const char* study : {"frontier", "idleness"}) {  // the frontier study's GEMM ceiling, else the idleness study's
    if (auto v = best(rs, study, {{"arm", "gemm_ceiling"}}, true)) {
      g.bf16_tflops = v->first;
      std::snprintf(buf, sizeof buf, "%.4g TFLOP/s, %s arm=gemm_ceiling (%s) in %s", v->first, study, v->second.c_str(),
                    rs.dir.c_str());
      note("bf16_tflops", buf);
      break;
    }
  }
  // Host link: fit a + n/B over the frontier's pinned H2D copy sizes; else the stream study's best H2D.
  std::vector<std::pair<double, double>> pts;
  for (const auto* r : rs.rows("frontier"))
    if (r->param("arm") == "h2d_pinned" && r->mode == "cold" && r->bytes && r->median_s)
      pts.emplace_back(*r->bytes, *r->median_s);
  if (auto f = fit_affine(pts)) {
    g.host_link_gbps = 1.0 / f->second / 1e9;
    std::snprintf(buf, sizeof buf, "%.4g GB/s, fit t = a + n/B over %zu frontier h2d_pinned rows in %s", g.host_link_gbps,
                  pts.size(), rs.dir.c_str());
    note("host_link_gbps", buf);
    if (f->first > 0) {
      g.copy_fixed_us = f->first * 1e6;
      std::snprintf(buf, sizeof buf, "%.4g us, intercept of the same fit", g.copy_fixed_us);
      note("copy_fixed_us", buf);
    }
  } else {
    for (const auto& m : std::vector<std::vector<std::pair<std::string, std::string>>>{{{"op", "h2d_pinned"}}}) {
      if (auto v = best(rs, "stream", m, false)) {
        g.host_link_gbps = v->first;
        std::snprintf(buf, sizeof buf, "%.4g GB/s, best stream %s (%s) in %s", v->first, label_of(m).c_str(),
                      v->second.c_str(), rs.dir.c_str());
        note("host_link_gbps", buf);
      }
    }
  }
  // Disk tier (CPU runs: the frontier's O_DIRECT file reads). Per read t = a + n/B, fitted over the file_page
  // rows (one read of copy_bytes from a random offset: latency + transfer) when they have 2 sizes or more; else
  // over the file_direct rows (bytes / copy_bytes sequential reads into 4 KiB pages, like dd; per-read time =
  // median * copy_bytes / bytes). Else the dd_direct baseline's bandwidth, latency 0 (dd's process start is
  // inside its time).
  std::vector<std::pair<double, double>> dpts;
  std::set<double> dsizes;
  std::string darm;
  for (const char* want : {"file_page", "file_direct"}) {
    dpts.clear();
    dsizes.clear();
    for (const auto* r : rs.rows("frontier")) {
      if (r->param("arm") != want) continue;
      const auto cb = r->num("copy_bytes");
      if (!cb || *cb <= 0 || !r->bytes || *r->bytes < *cb) continue;
      dpts.emplace_back(*cb, *r->median_s / std::round(*r->bytes / *cb));
      dsizes.insert(*cb);
    }
    darm = want;
    if (dsizes.size() >= 2) break;
  }
  if (auto f = fit_affine(dpts)) {
    g.disk_gbps = 1.0 / f->second / 1e9;
    std::snprintf(buf, sizeof buf, "%.4g GB/s, fit t = a + n/B per read over %zu frontier %s rows (%zu read sizes) in %s",
                  g.disk_gbps, dpts.size(), darm.c_str(), dsizes.size(), rs.dir.c_str());
    note("disk_gbps", buf);
    g.disk_latency_us = std::max(0.0, f->first * 1e6);
    if (f->first > 0) std::snprintf(buf, sizeof buf, "%.4g us per read, intercept of the same fit", g.disk_latency_us);
    else std::snprintf(buf, sizeof buf, "0 us per read: the same fit's intercept is %.4g us (negative), taken as 0", f->first * 1e6);
    note("disk_latency_us", buf);
  } else if (auto v = best(rs, "frontier", {{"arm", "dd_direct"}}, false)) {
    g.disk_gbps = v->first;
    g.disk_latency_us = 0;
    std::snprintf(buf, sizeof buf, "%.4g GB/s, best frontier arm=dd_direct (%s; dd iflag=direct, process start included) in %s",
                  v->first, v->second.c_str(), rs.dir.c_str());
    note("disk_gbps", buf);
    note("disk_latency_us", "0 us per read: fewer than 2 file-tier read sizes to fit a latency");
  }
  if (auto v = best(rs, "frontier", {{"arm", "p2p"}}, false)) {
    g.nvlink_gbps = v->first;
    std::snprintf(buf, sizeof buf, "%.4g GB/s, frontier arm=p2p (%s) in %s", v->first, v->second.c_str(), rs.dir.c_str());
    note("nvlink_gbps", buf);
  }
  if (rs.backend == "cuda" && rs.llc_bytes) {
    g.l2_mib = static_cast<double>(rs.llc_bytes) / (1 << 20);
    std::snprintf(buf, sizeof buf, "%.4g MiB, meta.json device.llc_bytes in %s", g.l2_mib, rs.dir.c_str());
    note("l2_mib", buf);
  }
  for (const auto& d : done) g.calibration.push_back(d);
  return done;
}

GpuSpec spec_from_results(const ResultSet& rs, const std::vector<GpuSpec>& gpus) {
  GpuSpec g;
  if (rs.backend == "cuda") {
    try {
      g = find_gpu(gpus, rs.device);
    } catch (const UsageError&) {
      g.name = rs.device;  // unknown GPU: only measured ceilings, plus the spec file's stated overheads
      if (!gpus.empty()) {
        g.launch_us = gpus.front().launch_us;
        g.copy_fixed_us = gpus.front().copy_fixed_us;
        for (const char* f : {"launch_us", "copy_fixed_us"})
          if (gpus.front().source.count(f)) g.source[f] = gpus.front().source.at(f);
      }
    }
  } else {
    g.name = rs.device.empty() ? "cpu" : rs.device;
    g.launch_us = 0;
    g.copy_fixed_us = 0;
    g.l2_mib = static_cast<double>(rs.llc_bytes) / (1 << 20);
    g.source["l2_mib"] = "meta.json device.llc_bytes";
    g.source["launch_us"] = "CPU: no launch";
    g.source["copy_fixed_us"] = "CPU: not modelled (0)";
  }
  calibrate(g, rs);
  if (rs.backend != "cuda") {
    // The CPU's GEMM ceiling is fp32 (OpenBLAS): the field name says bf16, the number is what this box does.
    if (g.source.count("bf16_tflops")) g.source["bf16_tflops"] += " (fp32 sgemm on the CPU)";
  }
  return g;
}

// ------------------------------------------------------------------------------------------ per-row prediction
namespace {

using Match = std::vector<std::pair<std::string, std::string>>;

// A measured row of `run` matching every (param, value): the same mode first, then cold, then hot.
const CaseRow* alone_row(const RunIndex* run, const std::string& study, const Match& m, const std::string& mode) {
  if (!run) return nullptr;
  for (const auto& md : {mode, std::string("cold"), std::string("hot")})
    if (const CaseRow* r = run->first(study, m, md)) return r;
  return nullptr;
}

// Length-prefixed, so no parameter value can make two different tuples one key.
void append_key(std::string& key, const std::string& part) {
  key += std::to_string(part.size());
  key += ':';
  key += part;
}

std::optional<double> predict(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex* run_index,
                              const std::vector<Shape>* shapes);

std::string us_text(double s) { return fmt(s * 1e6) + " us"; }
std::string gbps_text(double bps) { return fmt(bps / 1e9) + " GB/s"; }

}  // namespace

const CaseRow* RunIndex::first(const std::string& study, const Match& match, const std::string& mode) const {
  std::string keys;
  append_key(keys, study);
  for (const auto& [k, v] : match) append_key(keys, k);
  auto [index, fresh] = first_.try_emplace(keys);
  auto& rows = index->second;
  auto tuple = [&](const CaseRow& r, bool from_match) {
    std::string t;
    append_key(t, r.mode);
    for (const auto& [k, v] : match) append_key(t, from_match ? v : r.param(k));
    return t;
  };
  if (fresh)
    for (const auto& r : run_->cases)
      if (r.study == study && r.measured()) rows.try_emplace(tuple(r, false), &r);  // file order: the first wins
  CaseRow probe;
  probe.mode = mode;
  const auto it = rows.find(tuple(probe, true));
  return it == rows.end() ? nullptr : it->second;
}

const CaseRow* RunIndex::largest(const std::string& study, const std::string& arm, const std::string& param,
                                 const std::string& mode) const {
  std::string key;
  for (const auto* part : {&study, &arm, &param, &mode}) append_key(key, *part);
  auto [it, fresh] = largest_.try_emplace(key, nullptr);
  if (fresh) {
    std::optional<double> best;
    for (const auto& r : run_->cases) {
      if (r.study != study || !r.measured() || r.mode != mode || r.param("arm") != arm) continue;
      const auto v = r.num(param);
      if (v && (!best || *v > *best)) {
        best = v;
        it->second = &r;
      }
    }
  }
  return it->second;
}

std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why, const ResultSet* run,
                                  const std::vector<Shape>* shapes) {
  if (!run) return predict(g, r, why, nullptr, shapes);
  const RunIndex index(*run);
  return predict(g, r, why, &index, shapes);
}

std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex& run,
                                  const std::vector<Shape>* shapes) {
  return predict(g, r, why, &run, shapes);
}

namespace {

std::optional<double> predict(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex* run_index,
                              const std::vector<Shape>* shapes) {
  const ResultSet* run = run_index ? &run_index->run() : nullptr;
  auto say = [&](const std::string& s) {
    if (why) *why = s;
  };
  auto none = [&](const std::string& s) -> std::optional<double> {
    say(s);
    return std::nullopt;
  };
  const double bytes = r.bytes.value_or(0), flops = r.flops.value_or(0);
  const double launch = g.launch_us * 1e-6, fixed = g.copy_fixed_us * 1e-6;
  auto link = [&](double gbps, const char* what, int copies) -> std::optional<double> {
    if (gbps <= 0 || bytes <= 0) return none(std::string(what) + ": no link figure or no bytes");
    say(std::string(what) + ": copies x fixed + bytes / link");
    return copies * fixed + bytes / (gbps * 1e9);
  };
  auto roof = [&](int launches, const std::string& what) -> std::optional<double> {
    if (flops > 0 && g.bf16_tflops <= 0) return none("no FLOP/s ceiling (no GEMM ceiling measured, no spec)");
    if (g.hbm_tbps <= 0) return none("no memory bandwidth (no stream read measured, no spec)");
    if (flops <= 0 && bytes <= 0) return none("row has neither bytes nor flops");
    say(what);
    return roofline_s(g, flops, bytes) + launches * launch;
  };
  // Co-run: bandwidth sharing between a memory-bound decode step and a co-runner, both from this run's alone
  // rows: t = bytes / min(bytes / t_alone, memory bandwidth - co-runner bytes / co-runner time).
  // busy_threads: CPU threads the co-runner keeps running (0: it waits on a device or a disk, or a GPU run).
  auto corun = [&](const CaseRow* alone, const CaseRow* co, double demand_factor, const std::string& co_what,
                   int busy_threads = 0) -> std::optional<double> {
    if (!run) return none("co-run model: needs this run's alone rows (none given)");
    if (!alone) return none("co-run model: no decode-alone row (background none, same shape) in this run");
    if (!co || !co->bytes || *co->bytes <= 0 || !(*co->median_s > 0))
      return none("co-run model: no alone row of the co-runner (" + co_what + ") with bytes in this run");
    if (!(*alone->median_s > 0)) return none("co-run model: the decode-alone row's median is 0");
    if (g.hbm_tbps <= 0 || bytes <= 0) return none("co-run model: no memory bandwidth or no decode bytes");
    const double bw = g.hbm_tbps * 1e12, demand = demand_factor * *co->bytes / *co->median_s;
    auto t = corun_s(bytes, *alone->median_s, bw, demand);
    if (!t)
      return none("co-run model: co-runner demand " + gbps_text(demand) + " >= memory bandwidth " + gbps_text(bw) +
                  ": bandwidth sharing gives no bound");
    // CPU: the decode team (one thread per core) also time-shares the cores with the co-runner's busy threads.
    // A fair share gives slowdown (C + busy) / C; a barrier-synchronized static team can do worse (up to 2).
    const int cores = run->compute_units;
    std::string share;
    if (r.backend == "cpu" && busy_threads > 0 && cores > 0) {
      const double ts = double(cores + busy_threads) / cores;
      share = "; core time-sharing: (" + std::to_string(cores) + " cores + " + std::to_string(busy_threads) +
              " busy thread) / " + std::to_string(cores) + " = slowdown " + fmt(ts) +
              " (a static team can reach 2); the larger of the two slowdowns";
      t = std::max(*t, ts * *alone->median_s);
    }
    say("co-run model (bandwidth sharing): decode bytes / min(alone rate " + gbps_text(bytes / *alone->median_s) +
        ", memory " + gbps_text(bw) + " - co-runner " + gbps_text(demand) + " = " + co_what + " " +
        (demand_factor == 1 ? "" : fmt(demand_factor) + " x ") + "bytes / time of '" + co->case_name + "' (" +
        co->mode + ")); decode alone '" + alone->case_name + "' " + us_text(*alone->median_s) +
        share + "; predicted slowdown " + fmt(*t / *alone->median_s) +
        (r.backend != "cpu"  ? " (shared SMs not modelled)"
         : busy_threads == 0 ? " (the co-runner waits on a device: no core time-sharing term)"
         : share.empty()     ? " (core time-sharing not modelled: meta.json gives no core count)"
                             : ""));
    return t;
  };
  // A count parameter of the row (layers, copies): a whole number in [1, hi] before it becomes an int; anything
  // else is no prediction, with the reason (file:line, column, value).
  std::string bad_count;
  auto count = [&](const char* name, std::int64_t hi) -> std::optional<int> {
    const auto v = r.num(name);
    if (!v) return 1;
    try {
      return static_cast<int>(kvf::checked_integer(*v, 1, hi, r.where + ": column '" + name + "'"));
    } catch (const UsageError& e) {
      bad_count = e.what();
      return std::nullopt;
    }
  };
  const std::string op = r.param("op"), arm = r.param("arm");
  if (r.study == "stream") {
    if (op.rfind("h2d", 0) == 0 || op.rfind("d2h", 0) == 0) return link(g.host_link_gbps, "host link", 1);
    if (op == "zero_copy_read") return link(g.host_link_gbps, "host link (SM reads)", 0);
    return roof(0, "bytes / memory bandwidth");
  }
  if (r.study == "frontier") {
    if (arm == "gemm_ceiling") return roof(1, "flops / GEMM peak");
    if (arm == "x") return roof(2, "roofline(flops, bytes) + 2 launches (GEMM, RoPE+write)");
    if (arm == "xq") return roof(3, "roofline(flops, bytes) + 3 launches (dequant, GEMM, RoPE+write)");
    if (arm == "mla_latent" || arm == "mla_up") return roof(2, "roofline(flops, bytes) + 2 launches");
    if (arm == "layers") {
      const auto layers = count("layers", kMaxLayers);
      if (!layers) return none(bad_count);
      return roof(8 * *layers, "roofline + 8 launches per layer");
    }
    if (arm == "h2d_pinned" || arm == "h2d_pageable" || arm == "d2h_pinned" || arm == "d2h_pageable" || arm == "bidir")
      return link(g.host_link_gbps, "host link", 1);
    if (arm == "zero_copy") return link(g.host_link_gbps, "host link (SM reads)", 0);
    if (arm == "p2p") return link(g.nvlink_gbps, "NVLink", 1);
    if (arm == "granularity") {
      const auto copies = count("copies", 1 << 30);
      if (!copies) return none(bad_count);
      const int n = *copies;
      if (r.backend == "cuda") return link(g.host_link_gbps, "host link, one call per chunk", n);
      if (g.hbm_tbps <= 0) return none("no memory bandwidth");
      say("2 x bytes / memory bandwidth (read + write)");
      return 2 * bytes / (g.hbm_tbps * 1e12);
    }
    if (arm == "memcpy" || arm == "dram_copy") {
      if (g.hbm_tbps <= 0 || bytes <= 0) return none("no memory bandwidth or no bytes");
      say("2 x bytes / memory bandwidth (read + write)");
      return 2 * bytes / (g.hbm_tbps * 1e12);
    }
    if (arm == "dd_direct" || arm == "file_direct" || arm == "file_direct_huge" || arm == "file_page") {
      const auto cb = r.num("copy_bytes");
      if (!cb || *cb <= 0 || bytes < *cb) return none("file-tier row without copy_bytes <= bytes");
      if (g.disk_gbps <= 0)
        return none("no disk figure (no file-tier reads of 2 sizes and no dd_direct row to calibrate from)");
      const double reads = std::round(bytes / *cb);
      say("disk: reads x latency + bytes / disk bandwidth (" + fmt(reads) + (reads == 1 ? " read" : " reads") + ")" +
          (arm == "dd_direct"   ? "; dd's process start (fork+exec) not modelled"
           : arm == "file_direct_huge" ? "; disk fitted on 4 KiB-page destinations, this one is on huge pages"
                                       : ""));
      return disk_s(g, bytes, reads);
    }
    if (arm == "overlap") {
      const auto T = r.num("tokens"), rr = r.num("recompute_tokens"), fetch = r.num("copy_bytes");
      if (!T || !rr || !fetch || *T <= 0) return none("overlap row without tokens, recompute_tokens or copy_bytes");
      const std::string lk = r.param("link"), model = r.param("model");
      const double sync = launch;
      // The run's alone rows: f=0 (fetch the whole page) and f=1 (recompute the whole page), same shape and mode.
      const CaseRow* f0 = alone_row(run_index, "frontier", {{"arm", "overlap"}, {"model", model}, {"tokens", r.param("tokens")},
                                                       {"recompute_tokens", "0"}}, r.mode);
      const CaseRow* f1 = alone_row(run_index, "frontier", {{"arm", "overlap"}, {"model", model}, {"tokens", r.param("tokens")},
                                                       {"recompute_tokens", r.param("tokens")}}, r.mode);
      std::string measured_alone;
      std::optional<double> m_rec, m_fetch;
      if (f0 && f1 && *rr > 0 && *rr < *T) {
        m_rec = *rr / *T * *f1->median_s;
        m_fetch = (*T - *rr) / *T * *f0->median_s;
        measured_alone = "this run's alone rows (f x t(f=1), (1-f) x t(f=0)): max " +
                         us_text(std::max(*m_rec, *m_fetch)) + ", sum " + us_text(*m_rec + *m_fetch);
      }
      const Shape* shape = nullptr;
      if (shapes)
        for (const auto& sh : *shapes)
          if (sh.name == model) shape = &sh;
      double t_rec = 0, t_fetch = 0;
      std::string source;
      try {
        if (shape || *rr == 0) {
          // The model's own terms: recompute_x of the recomputed tokens, the link's term of the fetched bytes.
          if (*rr > 0) t_rec = recompute_x(g, *shape, *rr, 1, 16).seconds;
          if (*fetch > 0) {
            if (lk == "file_o_direct") {
              if (g.disk_gbps <= 0) return none("overlap: no disk figure for the fetched part (no file-tier rows to calibrate from)");
              t_fetch = disk_s(g, *fetch, 1);
            } else if (lk == "h2d_pinned") {
              t_fetch = transfer(g, *fetch, 1, g.host_link_gbps).seconds;
            } else {
              return none("overlap: link '" + lk + "' has no model term");
            }
          }
          source = "model: recompute_x(" + fmt(*rr) + " tok) " + us_text(t_rec) + ", " +
                   (lk == "file_o_direct" ? "disk" : "host link") + "(" + fmt(*fetch) + " B) " + us_text(t_fetch);
        } else if (m_rec) {
          t_rec = *m_rec;
          t_fetch = *m_fetch;
          source = "calibrated on " + measured_alone.substr(0, measured_alone.find(':')) + ", model " + model +
                   " not in data/models.json";
          measured_alone.clear();
        } else {
          return none("overlap: model " + model + " not in data/models.json and no f=0/f=1 alone rows in this run");
        }
      } catch (const UsageError& e) {
        return none(std::string("overlap: ") + e.what());
      }
      const double t = overlap_s(t_rec, t_fetch, sync);
      say("pipelined split: max(recompute share, fetch share) + 1 sync (" + us_text(sync) + ") = " + us_text(t) +
          "; sum " + us_text(t_rec + t_fetch) + " [" + source + "]" +
          (measured_alone.empty() ? "" : "; " + measured_alone));
      return t;
    }
    if (arm == "interference") {
      const std::string bg = r.param("background"), model = r.param("model"), N = r.param("decode_tokens");
      if (bg == "none")
        return roof(r.backend == "cuda" ? 1 : 0, std::string("decode step alone: roofline(flops, bytes)") +
                                                     (r.backend == "cuda" ? " + 1 launch" : " (one thread: the all-core ceilings overstate it)"));
      const CaseRow* alone = alone_row(run_index, "frontier", {{"arm", "interference"}, {"model", model}, {"decode_tokens", N},
                                                         {"background", "none"}}, r.mode);
      if (bg == "recompute")
        return corun(alone, alone_row(run_index, "frontier", {{"arm", "x"}, {"model", model}, {"tokens", "128"}, {"pages", "1"},
                                                        {"layers", "1"}, {"xdtype", "bf16"}}, r.mode),
                     1, "recompute x T=128 P=1", 1);
      if (bg == "copy" && r.backend == "cuda")
        return corun(alone, alone_row(run_index, "frontier", {{"arm", "h2d_pinned"}, {"copy_bytes", "524288"}}, r.mode), 1,
                     "512 KiB pinned H2D copies");
      if (bg == "copy") {
        // The background copies 512 KiB pages over a 128 MiB pool (DRAM, not cache): the largest memcpy row
        // measured, cold first; read + write traffic.
        const CaseRow* co = nullptr;
        for (const char* md : {"cold", "hot"})
          if (run_index && !co) co = run_index->largest("frontier", "memcpy", "copy_bytes", md);
        return corun(alone, co, 2, "DRAM copies (read + write)", 1);
      }
      if (bg == "file")
        return corun(alone, alone_row(run_index, "frontier", {{"arm", "file_direct"}, {"copy_bytes", "524288"}}, r.mode), 1,
                     "512 KiB O_DIRECT reads (DMA into memory)");
      return none("interference background '" + bg + "' has no model term");
    }
    return none("frontier arm '" + arm + "' has no model term");
  }
  if (r.study == "access") return roof(r.backend == "cuda" ? 1 : 0, "roofline(flops, bytes) of the row");
  if (r.study == "idleness") {
    const auto layers = count("layers", kMaxLayers);
    if (!layers) return none(bad_count);
    const int layer_launches = 8 * *layers;
    if (arm == "gemm_ceiling") return roof(1, "flops / GEMM peak");
    if (arm == "read_ceiling") return roof(1, "bytes / memory bandwidth");
    if (arm == "decode" || arm == "prefill") return roof(layer_launches, "roofline(flops, bytes) + 8 launches per layer");
    if (arm == "corun") {
      const std::string bg = r.param("background"), model = r.param("model");
      if (bg == "none") return roof(layer_launches, "decode step alone: roofline(flops, bytes) + 8 launches per layer");
      if (bg == "recompute_alone")
        return roof(r.backend == "cuda" ? 2 : 0, "recompute one page alone: roofline(flops, bytes) + 2 launches (GEMM, RoPE+write)");
      if (bg == "recompute") {
        const CaseRow* alone = alone_row(run_index, "idleness", {{"arm", "corun"}, {"model", model}, {"batch", r.param("batch")},
                                                           {"context", r.param("context")}, {"layers", r.param("layers")},
                                                           {"background", "none"}}, r.mode);
        return corun(alone, alone_row(run_index, "idleness", {{"arm", "corun"}, {"model", model}, {"background", "recompute_alone"}}, r.mode),
                     1, "recompute one page alone", 1);
      }
      return none("co-run background '" + bg + "' has no model term");
    }
    return none("idleness arm '" + arm + "' has no model term");
  }
  return none("study '" + r.study + "' has no model term");
}

}  // namespace

}  // namespace kvf::report
