// A tiny Llama-shaped checkpoint written by the tests themselves, in the real Hugging Face layout: config.json
// and model.safetensors, or two shards and model.safetensors.index.json. Random weights from a fixed seed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvf::attention::test {

struct TinySpec {
  std::string arch = "LlamaForCausalLM";
  int hidden = 64, intermediate = 96, layers = 3, heads = 4, kv_heads = 2, head_dim = 16, vocab = 64;
  std::string rope = "llama3";  // "llama3", "linear" or "none"
  bool tie = false;
  std::string dtype = "BF16";   // "BF16" or "F32"
  int shards = 1;               // 1: model.safetensors; 2: two shards and an index
  std::uint64_t seed = 1;
  double weight_scale = 1.5;    // multiplies q/k projections: peaky attention, as trained models have
};

struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

nlohmann::json tiny_config(const TinySpec& s);
std::vector<RawTensor> tiny_tensors(const TinySpec& s);
// A safetensors image of the tensors (offsets in order, header padded to 8 bytes with spaces).
std::string safetensors_image(const std::vector<RawTensor>& ts);
// A safetensors image whose header is the given JSON text followed by `data` (for lying headers).
std::string raw_image(const std::string& header, const std::string& data);
// config.json and the weights into `dir` (made fresh).
void write_tiny_checkpoint(const std::filesystem::path& dir, const TinySpec& s);
void write_text(const std::filesystem::path& p, const std::string& bytes);
// Whether the CUDA runtime sees a GPU (the GPU forward's tests run only then).
bool gpu_visible();
// A directory of this test process under the build's temporary directory, fresh each call.
std::filesystem::path fresh_dir(const std::string& name);

}  // namespace kvf::attention::test
