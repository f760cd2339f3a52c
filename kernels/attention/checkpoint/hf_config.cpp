// config.json of a Llama-family checkpoint (kvf/attention/checkpoint.hpp).
#include <algorithm>

#include "kvf/attention/checkpoint.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"

namespace kvf::attention {

namespace fs = std::filesystem;

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> a = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};
  return a;
}

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// A required whole-number key in [lo, hi]: bounds far beyond any released model, so a typo or a hostile value
// is refused before it sizes an allocation.
int dim(const nlohmann::json& j, const char* key, const std::string& src, std::int64_t lo, std::int64_t hi) {
  const auto v = json_integer(j, key, src, key, lo, hi);
  if (!v) throw UsageError(src + ": key '" + key + "' is missing (a Llama-family config.json has it)");
  return int(*v);
}

std::string architecture(const nlohmann::json& j, const std::string& src) {
  const auto it = j.find("architectures");
  if (it == j.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
    throw UsageError(src + ": key 'architectures' is missing or not a list of names; supported: " +
                     joined(supported_architectures()));
  const std::string a = (*it)[0].get<std::string>();
  const auto& ok = supported_architectures();
  if (it->size() != 1 || std::find(ok.begin(), ok.end(), a) == ok.end())
    throw UsageError(src + ": architecture '" + shown_value(a) + "' is not supported; supported: " + joined(ok));
  return a;
}

void rope_scaling(const nlohmann::json& j, const std::string& src, models::ModelShape& m) {
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object()) throw UsageError(src + ": key 'rope_scaling' is " + it->type_name() + ", expected an object or null");
  // transformers renamed "type" to "rope_type"; files carry either (or both, equal).
  auto type = json_string(*it, "rope_type", src, "rope_scaling.rope_type");
  if (!type) type = json_string(*it, "type", src, "rope_scaling.type");
  if (!type) throw UsageError(src + ": rope_scaling has no rope_type (or type)");
  auto& rs = m.rope_scaling;
  if (*type == "default") return;
  if (*type != "llama3" && *type != "linear")
    throw UsageError(src + ": rope_scaling type '" + shown_value(*type) +
                     "' is not supported; supported: llama3, linear, default (or no rope_scaling)");
  rs.type = *type;
  const auto factor = json_number(*it, "factor", src, "rope_scaling.factor", 1, 1024);
  if (!factor) throw UsageError(src + ": rope_scaling " + *type + " needs 'factor'");
  rs.factor = *factor;
  if (*type == "linear") return;
  const auto lo = json_number(*it, "low_freq_factor", src, "rope_scaling.low_freq_factor", 1e-6, 1e6);
  const auto hi = json_number(*it, "high_freq_factor", src, "rope_scaling.high_freq_factor", 1e-6, 1e6);
  const auto orig = json_integer(*it, "original_max_position_embeddings", src,
                                 "rope_scaling.original_max_position_embeddings", 1, std::int64_t(1) << 24);
  if (!lo || !hi || !orig)
    throw UsageError(src + ": rope_scaling llama3 needs factor, low_freq_factor, high_freq_factor and "
                     "original_max_position_embeddings");
  if (!(*hi > *lo))
    throw UsageError(src + ": rope_scaling high_freq_factor " + std::to_string(*hi) +
                     " must be above low_freq_factor " + std::to_string(*lo));
  rs.low_freq_factor = *lo;
  rs.high_freq_factor = *hi;
  rs.original_max_position = int(*orig);
}

bool flag(const nlohmann::json& j, const char* key, const std::string& src, bool dflt) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) throw UsageError(src + ": key '" + key + "' is " + it->type_name() + ", expected true or false");
  return it->get<bool>();
}

}  // namespace

HfConfig parse_hf_config(const nlohmann::json& j, const std::string& src) {
  if (!j.is_object()) throw UsageError(src + ": expected a JSON object");
  HfConfig c;
  c.source = src;
  c.architecture = architecture(j, src);
  auto& m = c.shape;
  m.name = c.architecture;
  m.hidden = dim(j, "hidden_size", src, 1, 1 << 17);
  m.intermediate = dim(j, "intermediate_size", src, 1, 1 << 20);
  m.layers = dim(j, "num_hidden_layers", src, 1, 4096);
  m.n_heads = dim(j, "num_attention_heads", src, 1, 4096);
  const auto kv = json_integer(j, "num_key_value_heads", src, "num_key_value_heads", 1, 4096);
  m.n_kv_heads = kv ? int(*kv) : m.n_heads;  // absent: multi-head attention, as transformers reads it
  if (m.n_heads % m.n_kv_heads != 0)
    throw UsageError(src + ": num_attention_heads " + std::to_string(m.n_heads) +
                     " is not a multiple of num_key_value_heads " + std::to_string(m.n_kv_heads));
  const auto hd = json_integer(j, "head_dim", src, "head_dim", 2, 4096);
  if (!hd && m.hidden % m.n_heads != 0)
    throw UsageError(src + ": hidden_size " + std::to_string(m.hidden) + " is not divisible by num_attention_heads " +
                     std::to_string(m.n_heads) + " and there is no head_dim");
  m.head_dim = hd ? int(*hd) : m.hidden / m.n_heads;
  if (m.head_dim % 2 != 0) throw UsageError(src + ": head_dim " + std::to_string(m.head_dim) + " is odd (RoPE rotates pairs)");
  m.vocab = dim(j, "vocab_size", src, 1, 1 << 24);
  m.max_positions = int(json_integer(j, "max_position_embeddings", src, "max_position_embeddings", 1, 1 << 26).value_or(0));
  m.rms_eps = json_number(j, "rms_norm_eps", src, "rms_norm_eps", 0, 1).value_or(1e-6);
  m.rope_theta = json_number(j, "rope_theta", src, "rope_theta", 1, 1e12).value_or(10000.0);
  rope_scaling(j, src, m);
  const auto act = json_string(j, "hidden_act", src, "hidden_act");
  if (act && *act != "silu")
    throw UsageError(src + ": hidden_act '" + shown_value(*act) + "' is not supported; supported: silu");
  // Qwen2's attention always has q/k/v biases; Llama's only with attention_bias (then o_proj too), which no
  // released Llama sets: refused rather than half-supported, as is Llama's mlp_bias.
  m.qkv_bias = c.architecture == "Qwen2ForCausalLM";
  if (c.architecture == "LlamaForCausalLM" && (flag(j, "attention_bias", src, false) || flag(j, "mlp_bias", src, false)))
    throw UsageError(src + ": attention_bias / mlp_bias true is not supported for LlamaForCausalLM");
  c.tie_word_embeddings = flag(j, "tie_word_embeddings", src, false);
  auto dt = json_string(j, "torch_dtype", src, "torch_dtype");
  if (!dt) dt = json_string(j, "dtype", src, "dtype");
  c.torch_dtype = dt.value_or("");
  const bool sw_on = c.architecture == "MistralForCausalLM" || flag(j, "use_sliding_window", src, false);
  if (sw_on) c.sliding_window = int(json_integer(j, "sliding_window", src, "sliding_window", 1, 1 << 26).value_or(0));
  return c;
}

HfConfig read_hf_config(const fs::path& dir) {
  const fs::path p = dir / "config.json";
  if (!input_exists(p))
    throw UsageError(dir.string() + ": no config.json (expected a Hugging Face model directory: config.json and "
                     "model.safetensors or model.safetensors.index.json)");
  return parse_hf_config(read_json_input(p), p.string());
}

}  // namespace kvf::attention
