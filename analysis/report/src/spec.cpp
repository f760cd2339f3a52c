// The spec side of every prediction: GPU peaks (data/gpus.json), model shapes (data/models.json, through
// studies/shapes), and the generic terms the plug-ins build their models from: roofline kernels, copies over
// a link, disk reads, a pipelined split and bandwidth sharing.
#include <algorithm>
#include <cmath>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/install_paths.hpp"
#include "kvf/names.hpp"
#include "kvf/model_shapes.hpp"
#include "kvf/report.hpp"
#include "models.hpp"

namespace kvf::report {

std::string default_gpus_path() { return kvf::data_file("gpus.json").string(); }

namespace {

std::vector<NamedEntry> gpu_names(const std::vector<GpuSpec>& all) {
  std::vector<NamedEntry> t;
  for (const auto& g : all) t.push_back({g.name, g.aliases});
  return t;
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
        s.aliases.push_back((*al)[k].get<std::string>());
      }
    }
    out.push_back(std::move(s));
  }
  if (const std::string c = name_conflict(gpu_names(out)); !c.empty()) throw UsageError(path + ": " + c);
  return out;
}

const GpuSpec& find_gpu(const std::vector<GpuSpec>& all, const std::string& name, const std::string& flag) {
  return all[resolve_name(gpu_names(all), name, flag, "GPU")];
}

const GpuSpec* gpu_for_device(const std::vector<GpuSpec>& all, const std::string& device) {
  const auto names = gpu_names(all);
  const std::string d = lower_ascii(device);
  const GpuSpec* best = nullptr;
  std::size_t best_len = 0;
  bool tie = false;
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::vector<std::string> spellings = names[i].aliases;
    spellings.push_back(names[i].name);
    for (const auto& a : spellings) {
      const std::string la = lower_ascii(a);
      if (la == d) return &all[i];
      if (la.empty() || d.find(la) == std::string::npos || la.size() < best_len) continue;
      if (la.size() == best_len) {
        tie = tie || best != &all[i];
        continue;
      }
      best = &all[i];
      best_len = la.size();
      tie = false;
    }
  }
  // Two GPUs equally likely ("NVIDIA H100 NVL" holds only the "H100" both H100 parts declare): neither.
  return tie ? nullptr : best;
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
    s.aliases = kvf::models::name_table({m}).front().aliases;
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
  std::vector<NamedEntry> t;
  for (const auto& s : all) t.push_back({s.name, s.aliases});
  return all[resolve_name(t, name, "--model", "model")];
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

GpuSpec::Origin GpuSpec::origin(const std::string& field) const {
  const auto it = source.find(field);
  if (it == source.end()) return Origin::spec;
  if (it->second.rfind("measured: ", 0) == 0) return Origin::measured;
  return it->second.rfind("assum", 0) == 0 ? Origin::assumed : Origin::spec;
}

void add_kernel(Cost& c, const GpuSpec& g, double flops, double bytes) {
  c.seconds += roofline_s(g, flops, bytes) + g.launch_us * 1e-6;
  c.flops += flops;
  c.bytes += bytes;
  c.launches += 1;
}

void finish_cost(Cost& c, const GpuSpec& g, double per) {
  c.seconds /= per;
  c.flops /= per;
  c.bytes /= per;
  const double tf = g.bf16_tflops > 0 ? c.flops / (g.bf16_tflops * 1e12) : 0;
  const double tb = g.hbm_tbps > 0 ? c.bytes / (g.hbm_tbps * 1e12) : 0;
  const double tl = c.launches * g.launch_us * 1e-6 / per;
  c.bound = tl > std::max(tf, tb) ? "fixed" : tf > tb ? "compute" : "memory";
}

Cost transfer(const GpuSpec& g, double bytes, int copies, double gbps) {
  if (gbps <= 0) throw UsageError(g.name + ": link bandwidth unknown (0): cannot predict a transfer");
  Cost c;
  c.bytes = bytes;
  c.copies = copies;
  c.seconds = copies_fixed_s(g, copies) + bytes / (gbps * 1e9);
  c.bound = copies_fixed_s(g, copies) > bytes / (gbps * 1e9) ? "fixed" : "link";
  return c;
}

double copies_fixed_s(const GpuSpec& g, int copies) {
  if (copies <= 0) return 0;
  const double further = g.copy_issue_us > 0 ? g.copy_issue_us : g.copy_fixed_us;
  return (g.copy_fixed_us + (copies - 1) * further) * 1e-6;
}

double disk_s(const GpuSpec& g, double bytes, double reads) {
  if (g.disk_gbps <= 0) throw UsageError(g.name + ": no disk figure (no file-tier rows to calibrate from): cannot predict a file read");
  return reads * g.disk_latency_us * 1e-6 + bytes / (g.disk_gbps * 1e9);
}

double remote_s(const GpuSpec& g, double bytes, double descriptors) {
  if (g.remote_gbps <= 0)
    throw UsageError(g.name + ": no remote figure (no remote-study rows to calibrate from): cannot predict a fetch from a peer");
  return g.remote_fixed_us * 1e-6 + descriptors * g.remote_descriptor_us * 1e-6 + bytes / (g.remote_gbps * 1e9);
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

}  // namespace kvf::report
