// A Hugging Face Llama-family checkpoint from a local directory (issue 19): config.json, the weights
// (model.safetensors, or shards listed by model.safetensors.index.json) and the token ids of a prompt. No
// download, no Python: the user points at a directory they already have (a `huggingface-cli download` target
// or a hub cache's snapshots/<revision>/).
//
// Everything read is untrusted (docs/untrusted-input.md): config.json and the index through the bounded JSON
// reader (kvf/input.hpp), the safetensors headers through safetensors.hpp; a bad value is a kvf::UsageError
// naming the file and the key or tensor (exit 2).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/attention/safetensors.hpp"
#include "models.hpp"  // kernels/frontier: the shape struct every study's kernels take

namespace kvf::attention {

// The architectures whose forward pass model/ computes: same decoder block (RMSNorm, RoPE, GQA, SwiGLU);
// Qwen2 adds a bias to q, k and v.
const std::vector<std::string>& supported_architectures();  // LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM

struct HfConfig {
  std::string source;        // the config.json path, for messages
  std::string architecture;  // one of supported_architectures()
  std::string torch_dtype;   // as written ("bfloat16", ...; newer files say "dtype"), "" when absent
  // Dimensions in the frontier kernels' struct (Hugging Face names): hidden, intermediate, layers, n_heads,
  // n_kv_heads, head_dim (config's head_dim, else hidden / heads), vocab, max_positions, rope_theta, rms_eps,
  // rope_scaling (type "none", "llama3" or "linear"), qkv_bias (Qwen2).
  models::ModelShape shape;
  bool tie_word_embeddings = false;
  int sliding_window = 0;  // 0: none (Mistral v0.1 says 4096; Qwen2 only when use_sliding_window)
};

// Parses a config.json tree; `source` names it in messages. Refuses an architecture outside
// supported_architectures() (naming them), a rope_scaling type other than llama3 or linear (naming both), a
// hidden_act other than silu, and dimensions that do not fit together (heads not a multiple of kv heads, odd
// head_dim, hidden not divisible by heads without head_dim).
HfConfig parse_hf_config(const nlohmann::json& j, const std::string& source);
HfConfig read_hf_config(const std::filesystem::path& dir);

// Token ids of a prompt: a JSON array of whole numbers in [0, vocab_size), as any tokenizer writes them
// (README: the python3 one-liner with the user's own tokenizer). An id at or above vocab_size is refused
// with its position and value.
std::vector<std::int32_t> parse_token_ids(const nlohmann::json& j, int vocab_size, const std::string& source);
std::vector<std::int32_t> read_token_ids(const std::filesystem::path& file, int vocab_size);

// The checkpoint: config plus every tensor of every file, memory-mapped.
class Checkpoint {
 public:
  // dir holds config.json and either model.safetensors.index.json (sharded: its weight_map names each
  // tensor's file, plain file names inside dir) or model.safetensors. Every file's header is checked at once.
  explicit Checkpoint(const std::filesystem::path& dir);
  const HfConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }
  // The tensor, whose shape must be `shape`; UsageError naming the file (or the directory when absent)
  // and the shapes.
  TensorView tensor(const std::string& name, const std::vector<std::int64_t>& shape) const;
  bool has(const std::string& name) const;
  // Sum of the safetensors file sizes (what the mapping may bring into the page cache).
  std::uint64_t mapped_bytes() const;
  std::size_t files() const { return files_.size(); }
  // Bytes per parameter of the layers' weights as stored (layer 0's q_proj: 2 for BF16/F16, 4 for F32), for
  // estimate_run.
  double weight_bytes_per_param() const;

 private:
  std::filesystem::path dir_;
  HfConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> where_;
};

// Hugging Face tensor names of the Llama family (model.layers.<l>.self_attn.q_proj.weight, ...).
std::string layer_tensor(int layer, std::string_view suffix);

}  // namespace kvf::attention
