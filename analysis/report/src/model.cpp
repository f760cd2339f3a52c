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
#include "kvf/report.hpp"
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

double num_field(const nlohmann::json& g, const std::string& path, const std::string& name, const char* field) {
  if (!g.contains(field) || !g[field].is_number())
    throw UsageError(path + ": gpu '" + name + "': field '" + field + "' missing or not a number");
  const double v = g[field].get<double>();
  if (v < 0) throw UsageError(path + ": gpu '" + name + "': field '" + field + "' is negative");
  return v;
}

}  // namespace

std::vector<GpuSpec> load_gpus(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError(path + ": cannot open the GPU spec file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.contains("gpus") || !j["gpus"].is_array()) throw UsageError(path + ": no 'gpus' array");
  double launch = 0, copy = 0;
  std::map<std::string, std::string> dsrc;
  if (j.contains("defaults")) {
    launch = j["defaults"].value("launch_us", 0.0);
    copy = j["defaults"].value("copy_fixed_us", 0.0);
    if (j["defaults"].contains("source"))
      for (auto it = j["defaults"]["source"].begin(); it != j["defaults"]["source"].end(); ++it)
        dsrc[it.key()] = it.value().get<std::string>();
  }
  std::vector<GpuSpec> out;
  for (const auto& g : j["gpus"]) {
    GpuSpec s;
    s.name = g.value("name", "");
    if (s.name.empty()) throw UsageError(path + ": a gpu without a 'name'");
    s.hbm_tbps = num_field(g, path, s.name, "hbm_tbps");
    s.l2_mib = num_field(g, path, s.name, "l2_mib");
    s.host_link_gbps = num_field(g, path, s.name, "host_link_gbps");
    s.nvlink_gbps = num_field(g, path, s.name, "nvlink_gbps");
    s.bf16_tflops = num_field(g, path, s.name, "bf16_tflops");
    s.sms = static_cast<int>(num_field(g, path, s.name, "sms"));
    s.launch_us = g.value("launch_us", launch);
    s.copy_fixed_us = g.value("copy_fixed_us", copy);
    for (const char* f : {"hbm_tbps", "l2_mib", "host_link_gbps", "nvlink_gbps", "bf16_tflops", "sms"}) {
      if (!g.contains("source") || !g["source"].contains(f) || !g["source"][f].is_string() ||
          g["source"][f].get<std::string>().empty())
        throw UsageError(path + ": gpu '" + s.name + "': no source for '" + f + "'");
      s.source[f] = g["source"][f].get<std::string>();
    }
    for (const auto& [k, v] : dsrc) s.source[k] = v;
    if (g.contains("aliases"))
      for (const auto& a : g["aliases"]) s.source["alias:" + a.get<std::string>()] = a.get<std::string>();
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
  const auto ms = kvf::models::load_models(path.empty() ? kvf::models::default_models_path() : path);
  std::vector<Shape> out;
  for (const auto& m : ms) {
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
  for (int l = 0; l < static_cast<int>(layers); ++l) {
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
  char buf[256];
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
std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why) {
  auto say = [&](const std::string& s) {
    if (why) *why = s;
  };
  const double bytes = r.bytes.value_or(0), flops = r.flops.value_or(0);
  const double launch = g.launch_us * 1e-6, fixed = g.copy_fixed_us * 1e-6;
  auto link = [&](double gbps, const char* what, int copies) -> std::optional<double> {
    if (gbps <= 0 || bytes <= 0) return std::nullopt;
    say(std::string(what) + ": copies x fixed + bytes / link");
    return copies * fixed + bytes / (gbps * 1e9);
  };
  auto roof = [&](int launches, const char* what) -> std::optional<double> {
    if ((flops > 0 && g.bf16_tflops <= 0) || g.hbm_tbps <= 0 || (flops <= 0 && bytes <= 0)) return std::nullopt;
    say(std::string(what));
    return roofline_s(g, flops, bytes) + launches * launch;
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
    if (arm == "layers") return roof(8 * static_cast<int>(r.num("layers").value_or(1)), "roofline + 8 launches per layer");
    if (arm == "h2d_pinned" || arm == "h2d_pageable" || arm == "d2h_pinned" || arm == "d2h_pageable" || arm == "bidir")
      return link(g.host_link_gbps, "host link", 1);
    if (arm == "zero_copy") return link(g.host_link_gbps, "host link (SM reads)", 0);
    if (arm == "p2p") return link(g.nvlink_gbps, "NVLink", 1);
    if (arm == "granularity") {
      const int n = static_cast<int>(r.num("copies").value_or(1));
      if (r.backend == "cuda") return link(g.host_link_gbps, "host link, one call per chunk", n);
      if (g.hbm_tbps <= 0) return std::nullopt;
      say("2 x bytes / memory bandwidth (read + write)");
      return 2 * bytes / (g.hbm_tbps * 1e12);
    }
    if (arm == "memcpy" || arm == "dram_copy") {
      if (g.hbm_tbps <= 0 || bytes <= 0) return std::nullopt;
      say("2 x bytes / memory bandwidth (read + write)");
      return 2 * bytes / (g.hbm_tbps * 1e12);
    }
    return std::nullopt;  // file tier, overlap: no model term (disk not modelled)
  }
  if (r.study == "access") return roof(r.backend == "cuda" ? 1 : 0, "roofline(flops, bytes) of the row");
  if (r.study == "idleness") {
    if (arm == "gemm_ceiling") return roof(1, "flops / GEMM peak");
    if (arm == "read_ceiling") return roof(1, "bytes / memory bandwidth");
    if (arm == "decode" || arm == "prefill")
      return roof(8 * static_cast<int>(r.num("layers").value_or(1)), "roofline(flops, bytes) + 8 launches per layer");
    return std::nullopt;  // co-run: interference is not modelled
  }
  return std::nullopt;
}

}  // namespace kvf::report
