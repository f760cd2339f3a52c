#include "kvf/model_shapes.hpp"

#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/names.hpp"
#include "kvf/install_paths.hpp"

namespace kvf::models {

namespace {
using nlohmann::json;

// One model entry, read with the file and the key named on every problem ("--models-file F: key
// 'models[2].hidden_size': ..."). Ranges hold every real model with room to spare and keep the byte counts
// derived from them (layers x heads x head_dim x tokens) far from overflow.
class Entry {
 public:
  Entry(const json& obj, std::string source, std::string path) : obj_(obj), src_(std::move(source)), path_(std::move(path)) {
    if (!obj_.is_object()) throw UsageError(src_ + ": key '" + path_ + "': expected an object, got " + obj_.type_name());
  }
  std::string key(const char* k) const { return path_ + "." + k; }
  std::optional<std::string> str(const char* k) const { return json_string(obj_, k, src_, key(k)); }
  std::string need_str(const char* k) const {
    auto v = str(k);
    if (!v || v->empty()) throw UsageError(src_ + ": key '" + key(k) + "': missing (a non-empty string is needed)");
    return *v;
  }
  std::optional<int> integer(const char* k, int lo, int hi) const {
    const auto v = json_integer(obj_, k, src_, key(k), lo, hi);
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  }
  int need_int(const char* k, int lo, int hi) const {
    const auto v = integer(k, lo, hi);
    if (!v)
      throw UsageError(src_ + ": key '" + key(k) + "': missing (a whole number in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "] is needed)");
    return *v;
  }
  double number(const char* k, double lo, double hi, double dflt) const {
    return json_number(obj_, k, src_, key(k), lo, hi).value_or(dflt);
  }
  bool boolean(const char* k, bool dflt) const {
    const auto it = obj_.find(k);
    if (it == obj_.end() || it->is_null()) return dflt;
    if (!it->is_boolean())
      throw UsageError(src_ + ": key '" + key(k) + "': expected true or false, got " + it->type_name());
    return it->get<bool>();
  }
  // An array of non-empty strings; absent or null as empty.
  std::vector<std::string> strings(const char* k) const {
    std::vector<std::string> out;
    const auto it = obj_.find(k);
    if (it == obj_.end() || it->is_null()) return out;
    if (!it->is_array()) throw UsageError(src_ + ": key '" + key(k) + "': expected an array of strings, got " + it->type_name());
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      const std::string at = key(k) + "[" + std::to_string(i) + "]";
      if (!v.is_string() || v.get_ref<const std::string&>().empty())
        throw UsageError(src_ + ": key '" + at + "': expected a non-empty string, got " + (v.is_string() ? "''" : v.type_name()));
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  // A member object, absent or null as nullptr.
  const json* object(const char* k) const {
    const auto it = obj_.find(k);
    if (it == obj_.end() || it->is_null()) return nullptr;
    if (!it->is_object()) throw UsageError(src_ + ": key '" + key(k) + "': expected an object, got " + it->type_name());
    return &*it;
  }
  const std::string& source() const { return src_; }

 private:
  const json& obj_;
  std::string src_, path_;
};

constexpr int kMaxDim = 1 << 17;  // hidden, intermediate, head dims: the largest real models are near 2^15
constexpr int kMaxHeads = 1024, kMaxLayers = 1024, kMaxPositions = 1 << 30;
}  // namespace

std::vector<ModelShape> load_models(const std::string& path) {
  // Named as the flag that chose it, so every message says which file and how to pick another.
  const std::string src = "--models-file " + path;
  json doc;
  try {
    doc = read_json_input(path);
  } catch (const UsageError& e) {
    throw UsageError("--models-file " + std::string(e.what()));
  }
  if (!doc.is_object() || !doc.contains("models") || !doc["models"].is_array())
    throw UsageError(src + ": no 'models' array");
  std::vector<ModelShape> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < doc["models"].size(); ++i) {
    const Entry m(doc["models"][i], src, "models[" + std::to_string(i) + "]");
    ModelShape s;
    s.name = m.need_str("name");
    if (!names.insert(s.name).second)
      throw UsageError(src + ": key '" + m.key("name") + "': '" + s.name + "' names two models");
    s.hf_id = m.str("hf_id").value_or("");
    s.aliases = m.strings("aliases");
    s.source = m.str("source").value_or("");
    s.hidden = m.need_int("hidden_size", 1, kMaxDim);
    s.n_heads = m.need_int("num_attention_heads", 1, kMaxHeads);
    s.n_kv_heads = m.need_int("num_key_value_heads", 1, s.n_heads);
    if (s.n_heads % s.n_kv_heads)
      throw UsageError(src + ": key '" + m.key("num_key_value_heads") + "': " + std::to_string(s.n_kv_heads) +
                       " does not divide num_attention_heads " + std::to_string(s.n_heads));
    s.head_dim = m.integer("head_dim", 2, 1024).value_or(s.hidden / s.n_heads);
    if (s.head_dim < 2 || s.head_dim % 2)
      throw UsageError(src + ": key '" + m.key("head_dim") + "': " + std::to_string(s.head_dim) +
                       " must be even and at least 2 (RoPE rotates pairs)");
    s.layers = m.need_int("num_hidden_layers", 1, kMaxLayers);
    s.intermediate = m.need_int("intermediate_size", 1, kMaxDim);
    s.vocab = m.integer("vocab_size", 0, 1 << 24).value_or(0);
    s.max_positions = m.integer("max_position_embeddings", 0, kMaxPositions).value_or(0);
    s.rope_theta = m.number("rope_theta", 1.0, 1e12, 10000.0);
    s.rms_eps = m.number("rms_norm_eps", 1e-12, 1.0, 1e-5);
    s.qkv_bias = m.boolean("attention_bias", false);
    if (const json* r = m.object("rope_scaling")) {
      const Entry e(*r, src, m.key("rope_scaling"));
      s.rope_scaling.type = e.str("rope_type").value_or(e.str("type").value_or("none"));
      if (s.rope_scaling.type == "default") s.rope_scaling.type = "none";
      if (s.rope_scaling.type != "none" && s.rope_scaling.type != "llama3" && s.rope_scaling.type != "yarn")
        throw UsageError(src + ": key '" + e.key("rope_type") + "': '" + s.rope_scaling.type +
                         "' is not modelled (allowed: none, default, llama3, yarn)");
      s.rope_scaling.factor = e.number("factor", 1.0, 1e6, 1.0);
      s.rope_scaling.low_freq_factor = e.number("low_freq_factor", 1e-6, 1e6, 1.0);
      s.rope_scaling.high_freq_factor = e.number("high_freq_factor", 1e-6, 1e6, 4.0);
      s.rope_scaling.beta_fast = e.number("beta_fast", 0.0, 1e6, 32.0);
      s.rope_scaling.beta_slow = e.number("beta_slow", 0.0, 1e6, 1.0);
      s.rope_scaling.mscale = e.number("mscale", 0.0, 1e6, 1.0);
      s.rope_scaling.mscale_all_dim = e.number("mscale_all_dim", 0.0, 1e6, 0.0);
      s.rope_scaling.original_max_position = e.integer("original_max_position_embeddings", 0, kMaxPositions).value_or(0);
    }
    if (const json* a = m.object("mla")) {
      const Entry e(*a, src, m.key("mla"));
      s.is_mla = true;
      s.mla.kv_lora_rank = e.need_int("kv_lora_rank", 1, kMaxDim);
      s.mla.q_lora_rank = e.integer("q_lora_rank", 0, kMaxDim).value_or(0);
      s.mla.qk_nope_head_dim = e.need_int("qk_nope_head_dim", 1, 1024);
      s.mla.qk_rope_head_dim = e.need_int("qk_rope_head_dim", 2, 1024);
      s.mla.v_head_dim = e.need_int("v_head_dim", 1, 1024);
    }
    if (const json* o = m.object("moe")) {
      const Entry e(*o, src, m.key("moe"));
      s.is_moe = true;
      s.moe_intermediate = e.integer("moe_intermediate_size", 0, kMaxDim).value_or(0);
      s.n_routed_experts = e.integer("n_routed_experts", 0, 1 << 16).value_or(0);
      s.n_shared_experts = e.integer("n_shared_experts", 0, 1 << 16).value_or(0);
      s.experts_per_tok = e.integer("num_experts_per_tok", 0, 1 << 16).value_or(0);
      s.first_k_dense = e.integer("first_k_dense_replace", 0, kMaxLayers).value_or(0);
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) throw UsageError(src + ": 'models' is empty");
  if (const std::string c = name_conflict(name_table(out)); !c.empty()) throw UsageError(src + ": " + c);
  return out;
}

std::vector<NamedEntry> name_table(const std::vector<ModelShape>& all) {
  std::vector<NamedEntry> t;
  for (const auto& m : all) {
    NamedEntry e{m.name, m.aliases};
    if (!m.hf_id.empty()) e.aliases.push_back(m.hf_id);
    t.push_back(std::move(e));
  }
  return t;
}

const ModelShape& find_model(const std::vector<ModelShape>& all, std::string_view name, const std::string& flag) {
  return all[resolve_name(name_table(all), name, flag, "model")];
}

std::string default_models_path() { return data_file("models.json").string(); }

}  // namespace kvf::models
