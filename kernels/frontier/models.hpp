// Model shapes (Hugging Face config field names): the dimensions the kernels take. Loading them from
// data/models.json is the studies' business (studies/shapes, kvf/model_shapes.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::models {

struct RopeScaling {
  std::string type = "none";  // "none" | "llama3" | "yarn"
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  double beta_fast = 32, beta_slow = 1;  // yarn
  double mscale = 1, mscale_all_dim = 0;  // yarn (Hugging Face DeepseekV3YarnRotaryEmbedding defaults)
  int original_max_position = 0;
};

struct MlaShape {
  int kv_lora_rank = 0, q_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
};

struct ModelShape {
  std::string name, hf_id, source;
  std::vector<std::string> aliases;  // other spellings of the name (find_model matches them case-blind, and hf_id)
  int hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, layers = 0, intermediate = 0;
  int vocab = 0, max_positions = 0;
  double rope_theta = 10000, rms_eps = 1e-5;
  RopeScaling rope_scaling;
  bool qkv_bias = false;
  bool is_mla = false;
  MlaShape mla;
  bool is_moe = false;
  int moe_intermediate = 0, n_routed_experts = 0, n_shared_experts = 0, experts_per_tok = 0,
      first_k_dense = 0;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }  // per K (or V)
  // Values one token stores per layer in the KV cache: 2 * Hkv * D (GQA), latent + rope key (MLA).
  std::int64_t kv_values_per_token() const {
    return is_mla ? std::int64_t(mla.kv_lora_rank + mla.qk_rope_head_dim)
                  : 2 * std::int64_t(kv_dim());
  }
};

}  // namespace kvf::models
