// What forward_cpu.cpp shares with forward_gpu.cpp (not part of the model library's interface).
#pragma once
#include <cstdint>
#include <vector>

#include "kvf/attention/forward.hpp"

namespace kvf::attention::detail {

// forward_cpu's checks of the tokens and options (UsageError).
void validate_forward(const HfConfig& cfg, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt);
// r.logits [M][vocab] and r.next_token from the M residual rows `rows` ([M][hidden], fp32): final norm, lm_head.
void logits_of_rows(const Checkpoint& ck, const float* rows, int M, ForwardResult& r);

}  // namespace kvf::attention::detail
