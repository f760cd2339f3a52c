// Needle retrieval by greedy decoding (issue 19, needle (b)): the planted answer decoded after the prompt with
// full attention, then with each block and token selection of the sweep applied in every layer, exact match
// against the answer the user planted. The selection is what a cache compressed at the end of the prefill would
// hold (quality::kept_at_prefill_end: routed on the last prompt row, per layer and kv head); the decoded tokens
// themselves stay visible. Every row decodes together from the prefill's K/V (forward.hpp:
// greedy_decode_cached_cpu): one pass over the weights per answer token after the first, one row per selection.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvf/attention/checkpoint.hpp"
#include "kvf/attention/forward.hpp"
#include "kvf/attention/quality.hpp"

namespace kvf::attention {

struct DecodeRow {
  std::string arm;  // "dense", "block", "token"
  std::uint32_t block = 0, budget = 0;  // dense: 0 and the prompt length
  double keep = 1;
  std::vector<std::int32_t> decoded;
  std::size_t matched_prefix = 0;  // leading tokens equal to the answer's
  bool exact = false;              // every token equal
  double seconds = 0;              // of the one batched decode every row took part in
};

// One captured layer as the quality library reads it (the last M rows of a causal prefill; the pass's own
// probabilities).
quality::LayerAttention captured_layer(const AttentionCapture& cap, int c);

// The (block, keep) pairs of the sweep whose budget fits the prompt, each with its k_blocks (sparse_blocks): what is
// decoded besides the dense run, once per arm. A budget below sink + latest is left out, as the figures leave it out.
struct DecodeBudget {
  std::uint32_t block = 0;
  double keep = 1;
  std::uint32_t k_blocks = 0;
};
std::vector<DecodeBudget> decode_budgets(int context, const std::vector<std::uint32_t>& blocks,
                                         const std::vector<double>& keeps);

// The prefill: forward_cpu over the prompt capturing every layer (its K/V are the decode's prompt cache, its
// next_token the answer's first decoded token under every selection).
// UsageError: a capture without every layer (the selection applies in every layer), an empty answer.
std::vector<DecodeRow> needle_decode(const Checkpoint& ck, const ForwardResult& prefill,
                                     const std::vector<std::int32_t>& answer, const std::vector<std::uint32_t>& blocks,
                                     const std::vector<double>& keeps);

// needle_decode.csv: arm, block, keep, budget, answer_tokens, matched_prefix, exact_match, seconds (of the batched
// decode, the same in every row), decoded (ids separated by spaces).
void write_needle_decode(const std::filesystem::path& file, const std::vector<DecodeRow>& rows,
                         std::size_t answer_tokens);

}  // namespace kvf::attention
