#include "models.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "kvf/errors.hpp"

namespace kvf::models {

namespace {
using nlohmann::json;

template <class T>
T get(const json& j, const char* key, const std::string& ctx) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) throw UsageError(ctx + ": missing field '" + key + "'");
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw UsageError(ctx + ": field '" + key + "' has the wrong type");
  }
}
template <class T>
T get_or(const json& j, const char* key, T dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  return it->get<T>();
}
}  // namespace

std::vector<ModelShape> load_models(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw UsageError("--models-file " + path + ": cannot open (give the path of data/models.json with --models-file)");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    throw UsageError("--models-file " + path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!doc.contains("models") || !doc["models"].is_array())
    throw UsageError("--models-file " + path + ": no 'models' array");
  std::vector<ModelShape> out;
  for (const auto& m : doc["models"]) {
    ModelShape s;
    s.name = get<std::string>(m, "name", path);
    const std::string ctx = path + ": model " + s.name;
    s.hf_id = get_or<std::string>(m, "hf_id", "");
    s.source = get_or<std::string>(m, "source", "");
    s.hidden = get<int>(m, "hidden_size", ctx);
    s.n_heads = get<int>(m, "num_attention_heads", ctx);
    s.n_kv_heads = get<int>(m, "num_key_value_heads", ctx);
    s.head_dim = get_or<int>(m, "head_dim", s.n_heads ? s.hidden / s.n_heads : 0);
    s.layers = get<int>(m, "num_hidden_layers", ctx);
    s.intermediate = get<int>(m, "intermediate_size", ctx);
    s.vocab = get_or<int>(m, "vocab_size", 0);
    s.max_positions = get_or<int>(m, "max_position_embeddings", 0);
    s.rope_theta = get_or<double>(m, "rope_theta", 10000.0);
    s.rms_eps = get_or<double>(m, "rms_norm_eps", 1e-5);
    s.qkv_bias = get_or<bool>(m, "attention_bias", false);
    if (m.contains("rope_scaling") && m["rope_scaling"].is_object()) {
      const auto& r = m["rope_scaling"];
      s.rope_scaling.type = get_or<std::string>(r, "rope_type", get_or<std::string>(r, "type", "none"));
      s.rope_scaling.factor = get_or<double>(r, "factor", 1.0);
      s.rope_scaling.low_freq_factor = get_or<double>(r, "low_freq_factor", 1.0);
      s.rope_scaling.high_freq_factor = get_or<double>(r, "high_freq_factor", 4.0);
      s.rope_scaling.beta_fast = get_or<double>(r, "beta_fast", 32.0);
      s.rope_scaling.beta_slow = get_or<double>(r, "beta_slow", 1.0);
      s.rope_scaling.mscale = get_or<double>(r, "mscale", 1.0);
      s.rope_scaling.mscale_all_dim = get_or<double>(r, "mscale_all_dim", 0.0);
      s.rope_scaling.original_max_position = get_or<int>(r, "original_max_position_embeddings", 0);
    }
    if (m.contains("mla") && m["mla"].is_object()) {
      const auto& a = m["mla"];
      s.is_mla = true;
      s.mla.kv_lora_rank = get<int>(a, "kv_lora_rank", ctx + " mla");
      s.mla.q_lora_rank = get_or<int>(a, "q_lora_rank", 0);
      s.mla.qk_nope_head_dim = get<int>(a, "qk_nope_head_dim", ctx + " mla");
      s.mla.qk_rope_head_dim = get<int>(a, "qk_rope_head_dim", ctx + " mla");
      s.mla.v_head_dim = get<int>(a, "v_head_dim", ctx + " mla");
    }
    if (m.contains("moe") && m["moe"].is_object()) {
      const auto& e = m["moe"];
      s.is_moe = true;
      s.moe_intermediate = get_or<int>(e, "moe_intermediate_size", 0);
      s.n_routed_experts = get_or<int>(e, "n_routed_experts", 0);
      s.n_shared_experts = get_or<int>(e, "n_shared_experts", 0);
      s.experts_per_tok = get_or<int>(e, "num_experts_per_tok", 0);
      s.first_k_dense = get_or<int>(e, "first_k_dense_replace", 0);
    }
    if (s.hidden <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.layers <= 0 ||
        s.head_dim % 2 != 0)
      throw UsageError(ctx + ": sizes must be positive and head_dim even");
    out.push_back(std::move(s));
  }
  if (out.empty()) throw UsageError("--models-file " + path + ": 'models' is empty");
  return out;
}

const ModelShape& find_model(const std::vector<ModelShape>& all, std::string_view name) {
  for (const auto& m : all)
    if (m.name == name) return m;
  std::string known;
  for (const auto& m : all) known += (known.empty() ? "" : ", ") + m.name;
  throw UsageError("--models " + std::string(name) + ": unknown model; known: " + known);
}

std::string default_models_path() {
  // The source tree baked in at build time, else data/models.json under the working directory.
#if defined(KVF_SOURCE_DIR)
  const std::string baked = std::string(KVF_SOURCE_DIR) + "/data/models.json";
  if (std::ifstream(baked)) return baked;
  if (std::ifstream("data/models.json")) return "data/models.json";
  return baked;
#else
  return "data/models.json";
#endif
}

}  // namespace kvf::models
