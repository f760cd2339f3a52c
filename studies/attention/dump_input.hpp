// A user's own capture (issue 19: "users who cannot run a model here can feed their own dumps"): one safetensors
// file a forward hook wrote, per captured layer l
//   layers.<l>.q      [q_heads, M, head_dim]   the last M query rows, RoPE applied, unscaled
//   layers.<l>.k      [kv_heads, C, head_dim]  the context's keys (RoPE applied)
//   layers.<l>.v      [kv_heads, C, head_dim]  its values
//   layers.<l>.probs  [q_heads, M, C]          optional: post-softmax attention (else softmax(q.k / sqrt(d)))
// in BF16, F16 or F32; "__metadata__" may say "causal": "false" (decode queries after the context; default true:
// the last M rows of a causal prefill). Read through the checked safetensors reader (every header promise
// verified before a byte is used).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "kvf/attention/quality.hpp"
#include "kvf/attention/safetensors.hpp"

namespace kvf::attention {

class AttentionDump {
 public:
  // UsageError (one line naming the file and the tensor): no layers.<l>.q tensor, a layer missing k or v, shapes
  // that disagree, a dtype other than BF16/F16/F32, __metadata__ causal neither "true" nor "false".
  explicit AttentionDump(const std::filesystem::path& file);
  const std::vector<std::uint32_t>& layers() const { return layers_; }  // ascending
  bool causal() const { return causal_; }
  // Layer `layer`'s tensors widened to fp32 into `store` and viewed by the returned LayerAttention (valid while
  // `store` lives).
  struct Store {
    std::vector<float> q, k, v, probs;
  };
  quality::LayerAttention layer(std::uint32_t layer, Store& store) const;

 private:
  std::unique_ptr<SafetensorsFile> file_;
  std::vector<std::uint32_t> layers_;
  bool causal_ = true;
};

}  // namespace kvf::attention
