#include "tiny_checkpoint.hpp"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

#include "kvf/backend.hpp"
#include "kvf/bf16.hpp"

namespace kvf::attention::test {

namespace fs = std::filesystem;

nlohmann::json tiny_config(const TinySpec& s) {
  nlohmann::json c = {{"architectures", {s.arch}},
                      {"hidden_size", s.hidden},
                      {"intermediate_size", s.intermediate},
                      {"num_hidden_layers", s.layers},
                      {"num_attention_heads", s.heads},
                      {"num_key_value_heads", s.kv_heads},
                      {"head_dim", s.head_dim},
                      {"vocab_size", s.vocab},
                      {"max_position_embeddings", 256},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", s.tie},
                      {"torch_dtype", s.dtype == "BF16" ? "bfloat16" : "float32"}};
  // Short original context so that a 40-token prompt crosses all three llama3 bands (wavelengths 6.3 to
  // 6283 at head_dim 16: kept below 8, blended between 8 and 32, divided by 8 above 32).
  if (s.rope == "llama3")
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  else if (s.rope == "linear")
    c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  else
    c["rope_scaling"] = nullptr;
  return c;
}

namespace {
RawTensor make(const std::string& name, std::vector<std::int64_t> shape, const std::string& dtype, std::mt19937_64& rng,
               double scale, double offset) {
  RawTensor t{name, dtype, shape, {}};
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = float(offset + scale * u(rng));
    if (dtype == "BF16") {
      const std::uint16_t b = f32_to_bf16(v);
      t.bytes.append(reinterpret_cast<const char*>(&b), 2);
    } else {
      t.bytes.append(reinterpret_cast<const char*>(&v), 4);
    }
  }
  return t;
}
}  // namespace

std::vector<RawTensor> tiny_tensors(const TinySpec& s) {
  std::mt19937_64 rng(s.seed);
  const std::int64_t H = s.hidden, qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim, I = s.intermediate;
  const double sh = std::sqrt(3.0 / H), si = std::sqrt(3.0 / I), sq = std::sqrt(3.0 / qd);
  std::vector<RawTensor> ts;
  ts.push_back(make("model.embed_tokens.weight", {s.vocab, H}, s.dtype, rng, 1.0, 0));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back(make(p + "input_layernorm.weight", {H}, s.dtype, rng, 0.1, 1.0));
    ts.push_back(make(p + "self_attn.q_proj.weight", {qd, H}, s.dtype, rng, sh * s.weight_scale, 0));
    ts.push_back(make(p + "self_attn.k_proj.weight", {kvd, H}, s.dtype, rng, sh * s.weight_scale, 0));
    ts.push_back(make(p + "self_attn.v_proj.weight", {kvd, H}, s.dtype, rng, sh, 0));
    if (s.arch == "Qwen2ForCausalLM") {
      ts.push_back(make(p + "self_attn.q_proj.bias", {qd}, s.dtype, rng, 0.5, 0));
      ts.push_back(make(p + "self_attn.k_proj.bias", {kvd}, s.dtype, rng, 0.5, 0));
      ts.push_back(make(p + "self_attn.v_proj.bias", {kvd}, s.dtype, rng, 0.5, 0));
    }
    ts.push_back(make(p + "self_attn.o_proj.weight", {H, qd}, s.dtype, rng, sq, 0));
    ts.push_back(make(p + "post_attention_layernorm.weight", {H}, s.dtype, rng, 0.1, 1.0));
    ts.push_back(make(p + "mlp.gate_proj.weight", {I, H}, s.dtype, rng, sh, 0));
    ts.push_back(make(p + "mlp.up_proj.weight", {I, H}, s.dtype, rng, sh, 0));
    ts.push_back(make(p + "mlp.down_proj.weight", {H, I}, s.dtype, rng, si, 0));
  }
  ts.push_back(make("model.norm.weight", {H}, s.dtype, rng, 0.1, 1.0));
  if (!s.tie) ts.push_back(make("lm_head.weight", {s.vocab, H}, s.dtype, rng, sh * 4, 0));
  return ts;
}

std::string raw_image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string safetensors_image(const std::vector<RawTensor>& ts) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // as the Rust writer pads: data starts 8-aligned
  return raw_image(text, data);
}

void write_text(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

fs::path fresh_dir(const std::string& name) {
  // This process's directory goes when it exits (each test runs in its own process: hundreds were left in /tmp).
  struct Root {
    fs::path path = fs::temp_directory_path() / ("kvf-attn-test-" + std::to_string(::getpid()));
    ~Root() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Root root;
  const fs::path d = root.path / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_tiny_checkpoint(const fs::path& dir, const TinySpec& s) {
  write_text(dir / "config.json", tiny_config(s).dump(2));
  const auto ts = tiny_tensors(s);
  if (s.shards <= 1) {
    write_text(dir / "model.safetensors", safetensors_image(ts));
    return;
  }
  // Two shards split in the middle of the tensor list, as save_pretrained splits by size.
  nlohmann::json wm = nlohmann::json::object();
  std::vector<RawTensor> a(ts.begin(), ts.begin() + std::ptrdiff_t(ts.size() / 2)), b(ts.begin() + std::ptrdiff_t(ts.size() / 2), ts.end());
  for (const auto& t : a) wm[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) wm[t.name] = "model-00002-of-00002.safetensors";
  write_text(dir / "model-00001-of-00002.safetensors", safetensors_image(a));
  write_text(dir / "model-00002-of-00002.safetensors", safetensors_image(b));
  write_text(dir / "model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", wm}}.dump(2));
}

bool gpu_visible() {
  std::string why;
  return !kvf::list_gpus(&why).empty();
}

}  // namespace kvf::attention::test
