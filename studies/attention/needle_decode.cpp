#include "needle_decode.hpp"

#include <chrono>
#include <stdexcept>

#include "kvf/attention/quality.hpp"
#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "access.hpp"

namespace kvf::attention {

namespace q = quality;

quality::LayerAttention captured_layer(const AttentionCapture& cap, int c) {
  const std::size_t H = cap.q_heads, K = cap.kv_heads, M = cap.queries, C = cap.context, D = cap.head_dim;
  quality::LayerAttention a;
  a.layer = static_cast<std::uint32_t>(cap.layer_ids[c]);
  a.hq = cap.q_heads;
  a.hkv = cap.kv_heads;
  a.d = cap.head_dim;
  a.ctx = cap.context;
  a.rows = cap.queries;
  a.causal = true;
  a.q = {cap.q_at(c, 0, 0), H * M * D};
  a.k = {cap.k_at(c, 0), K * C * D};
  a.v = {cap.v_at(c, 0), K * C * D};
  a.probs = {cap.probs_at(c, 0, 0), H * M * C};
  return a;
}

std::vector<DecodeBudget> decode_budgets(int context, const std::vector<std::uint32_t>& blocks,
                                         const std::vector<double>& keeps) {
  std::vector<DecodeBudget> out;
  for (const auto b : blocks)
    for (const double k : keeps) {
      if (b == 0 || context % b) continue;
      try {
        out.push_back({b, k, access::sparse_blocks(static_cast<std::uint32_t>(context), b, k)});
      } catch (const std::invalid_argument&) {  // below sink + latest (meta.json skipped_budgets says so)
      }
    }
  return out;
}

std::vector<DecodeRow> needle_decode(const Checkpoint& ck, const ForwardResult& prefill,
                                     const std::vector<std::int32_t>& answer, const std::vector<std::uint32_t>& blocks,
                                     const std::vector<double>& keeps) {
  const int L = ck.config().shape.layers;
  const AttentionCapture& cap = prefill.capture;
  if (answer.empty()) throw UsageError("--answer: the planted answer holds no token");
  if (static_cast<int>(cap.layer_ids.size()) != L)
    throw UsageError("--answer decodes with the selection in every layer: capture every layer (no --layers)");
  const int C = cap.context;
  std::vector<DecodeRow> rows(1);
  rows[0].arm = "dense";
  rows[0].budget = static_cast<std::uint32_t>(C);
  std::vector<SelectionMask> masks;
  const auto budgets = decode_budgets(C, blocks, keeps);
  const q::Arm arms[] = {q::Arm::block, q::Arm::token};
  for (const q::Arm arm : arms)
    for (const DecodeBudget& db : budgets) {
      SelectionMask mask;
      mask.layers = L;
      mask.kv_heads = cap.kv_heads;
      mask.from = C;
      masks.push_back(std::move(mask));
      DecodeRow r;
      r.arm = q::to_string(arm);
      r.block = db.block;
      r.keep = db.keep;
      r.budget = db.k_blocks * db.block;
      rows.push_back(std::move(r));
    }
  // Layer by layer (one layer's bf16 keys alive at a time), every selection routed from one router: the keys
  // converted once per layer, centroids and scores once per block size, then one top-k per budget.
  for (int l = 0; l < L; ++l) {
    const q::LayerAttention layer = captured_layer(cap, l);
    q::PrefillEndRouter router(layer);
    std::size_t m = 0;
    for (const q::Arm arm : arms)
      for (const DecodeBudget& db : budgets) {
        SelectionMask& mask = masks[m++];
        for (auto& kept : router.kept(arm, db.block, db.keep)) mask.kept.push_back(std::move(kept));
      }
  }
  std::vector<const SelectionMask*> of_row = {nullptr};
  for (const auto& m : masks) of_row.push_back(&m);
  const auto t0 = std::chrono::steady_clock::now();
  auto decoded = greedy_decode_cached_cpu(ck, cap, prefill.next_token, static_cast<int>(answer.size()), of_row);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    DecodeRow& r = rows[i];
    r.decoded = std::move(decoded[i]);
    r.seconds = seconds;
    while (r.matched_prefix < answer.size() && r.decoded[r.matched_prefix] == answer[r.matched_prefix]) ++r.matched_prefix;
    r.exact = r.matched_prefix == answer.size();
  }
  return rows;
}

void write_needle_decode(const std::filesystem::path& file, const std::vector<DecodeRow>& rows,
                         std::size_t answer_tokens) {
  make_directory(file.parent_path(), "--out");
  std::string s = csv_line({"arm", "block", "keep", "budget", "answer_tokens", "matched_prefix", "exact_match",
                            "seconds", "decoded"});
  for (const auto& r : rows) {
    std::string ids;
    for (const auto t : r.decoded) ids += (ids.empty() ? "" : " ") + std::to_string(t);
    s += csv_line({r.arm, std::to_string(r.block), csv_number(r.keep), std::to_string(r.budget),
                   std::to_string(answer_tokens), std::to_string(r.matched_prefix), r.exact ? "1" : "0",
                   csv_number(r.seconds), ids});
  }
  write_file_atomically(file, s);
}

}  // namespace kvf::attention
