// What block and token selection keep of a real model's attention (issue 19): the figures of one layer's
// captured attention. Pure compute: no files, no flags, no CSV; every figure comes out as plain rows (one
// per layer, head, figure and parameter) a writer prints. Definitions and formulas: kernels/attention/quality/
// README.md. The selections are the access study's own (kernels/access/access.hpp), called, not rewritten.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace kvf::attention::quality {

// Captured attention of one layer, fp32, row-major:
//   q      [hq][rows][d]   the last `rows` (M) query rows of each query head, RoPE applied, unscaled
//   k, v   [hkv][ctx][d]   keys (RoPE applied) and values of the context, per kv head
//   probs  [hq][rows][ctx] optional: post-softmax probabilities (as a framework's hook writes them); empty:
//                          computed as softmax(scale * q . k) over the visible keys, in double
// Query head h reads kv head h / (hq / hkv) (Llama's repeat_kv order, the one the access study's routing
// sums over: heads h*G .. h*G+G-1 share kv head h).
// Row r sees the keys [0, visible(r)): ctx - (rows - 1 - r) with `causal` (the last M rows of a causal
// prefill of ctx tokens: the last row sees every key), all ctx without (decode queries after the context).
struct LayerAttention {
  std::uint32_t layer = 0;
  std::uint32_t hq = 0, hkv = 0, d = 0, ctx = 0, rows = 0;
  float scale = 0.0f;  // softmax scale of q . k; 0: 1/sqrt(d)
  bool causal = true;
  std::span<const float> q, k, v, probs;

  std::uint32_t group() const { return hkv ? hq / hkv : 0; }
  std::uint32_t visible(std::uint32_t row) const { return causal ? ctx - (rows - 1 - row) : ctx; }
  float softmax_scale() const;
};

// std::invalid_argument, one line naming the value and what is allowed: zero heads, rows (M) or ctx; hq not a
// multiple of hkv; d not a multiple of 16 in [16, 128] (the access study's routing keeps a query sum of at
// most 128 floats and reads key rows 16 elements at a time); causal rows beyond ctx; a span of the wrong
// size (q, k, v; probs when given); probabilities negative, not finite, non-zero on masked keys, or a row
// not summing to 1 within 1e-3.
void validate(const LayerAttention& a);

// The true attention probabilities, fp32 [hq][rows][ctx] (0 on masked keys): a.probs when given, else the
// softmax of scale * q . k (fp32 inputs, double accumulation).
std::vector<float> true_probs(const LayerAttention& a);

// A row index of the figure rows below: a per-row figure (0 .. rows-1), or the mean over the rows.
inline constexpr std::int32_t kMeanOfRows = -1;

// ---------------------------------------------------------------------------------------------- H1
// Mass on the sink block [0, sink) plus the local window [visible - window, visible) (the union, counted
// once).
struct LocalityRow {
  std::uint32_t layer = 0, head = 0;
  std::int32_t row = kMeanOfRows;
  std::uint32_t sink = 0, window = 0;
  double mass = 0;
};
// One row per (head, window) with the mean over the query rows, and with per_row one per (head, window,
// row) as well. std::invalid_argument: sink 0 or above ctx, a window above ctx.
std::vector<LocalityRow> locality(const LayerAttention& a, std::span<const float> probs, std::uint32_t sink,
                                  std::span<const std::uint32_t> windows, bool per_row = false);

// ---------------------------------------------------------------------------------------------- H3
// Entropy -sum p ln p over the visible keys (nats), and normalized by ln(visible) (1: uniform over the
// visible keys, 0: one-hot; 0 when a row sees a single key).
struct EntropyRow {
  std::uint32_t layer = 0, head = 0;
  std::int32_t row = kMeanOfRows;
  double nats = 0, normalized = 0;
};
std::vector<EntropyRow> entropy(const LayerAttention& a, std::span<const float> probs, bool per_row = false);

// One layer's entropy: the mean over its heads (and rows) of the kMeanOfRows rows.
struct LayerEntropy {
  std::uint32_t layer = 0;
  double nats = 0, normalized = 0;
};
// std::invalid_argument: rows of more than one layer, or no mean-of-rows row.
LayerEntropy layer_entropy(std::span<const EntropyRow> rows);

// Where entropy drops, over the layers of one prompt in ascending layer order (e_l = normalized entropy):
//   first_below   the first layer with e_l < threshold (-1: none)
//   largest_drop  the layer l (not the first) with the largest e_{l-1} - e_l, the earliest on ties
//                 (-1: fewer than two layers, or entropy never drops); drop = that e_{l-1} - e_l
struct EntropyBoundary {
  std::int32_t first_below = -1;
  std::int32_t largest_drop = -1;
  double drop = 0;
};
// std::invalid_argument: layers not strictly ascending, threshold outside (0, 1).
EntropyBoundary entropy_boundary(std::span<const LayerEntropy> layers, double threshold);

// Stability of one boundary definition across prompts: the boundary layer of each prompt (-1: none).
struct BoundaryStability {
  std::uint32_t prompts = 0, none = 0;  // prompts, and those without a boundary
  std::int32_t min = -1, max = -1;      // over the prompts with one
  double median = -1;                   // of those (the mean of the two middle ones for an even count)
  std::int32_t spread = -1;             // max - min: 0 when every prompt agrees
  std::int32_t mode = -1;               // the most frequent boundary (the lowest layer on ties)
  double mode_share = 0;                // prompts at the mode / prompts
};
// std::invalid_argument: no prompts, a boundary below -1.
BoundaryStability boundary_stability(std::span<const std::int32_t> per_prompt);

// ---------------------------------------------------------------------------------------------- selections
// The access study's arms at equal token budgets, plus the oracle:
//   block   select_blocks_by_score: block 0 and the last block, then the highest centroid scores
//   token   select_tokens_by_score: tokens of block 0 and of the last block, then the top q . k sums
//   oracle  per query head, the budget tokens of highest true probability (ties: the lower position), no
//           forced tokens: the most mass any selection of that many tokens can keep
// Budget: sparse_blocks(ctx, block, keep) blocks of `block` tokens (k = round(ctx/block * keep)).
// Routing is the access study's: one list per (query row, kv head) scored by the sum over the kv head's
// query heads (build_centroids/score_blocks/score_tokens on bf16 copies of q and k).
enum class Arm { block, token, oracle };
const char* to_string(Arm);

// A planted span of the context (the needle), [pos, pos + len).
struct Needle {
  std::uint32_t pos = 0, len = 0;
};
// Depth of a needle in percent: 100 * pos / (ctx - len) (0: at the start, 100: ending at the last key).
double needle_depth_pct(std::uint32_t ctx, Needle n);
// The position of a needle of len tokens at depth_pct: round(depth_pct / 100 * (ctx - len)).
// std::invalid_argument: len 0 or above ctx, depth outside [0, 100].
std::uint32_t needle_pos(std::uint32_t ctx, std::uint32_t len, double depth_pct);

struct SelectionOptions {
  std::vector<std::uint32_t> blocks{16, 32, 64, 128, 256};
  std::vector<double> keeps{1.0 / 2, 1.0 / 4, 1.0 / 8, 1.0 / 16, 1.0 / 32};
  std::vector<Needle> needles;  // spans to report the kept mass of (none: no needle rows)
};

// Per (layer, head, arm, block, keep), means over the query rows:
//   recall     sum of the true probabilities of the kept tokens
//   out_error  ||o_kept - o||_2 / ||o||_2, o = sum_t p_t v_t / sum_t p_t over the visible keys (the dense
//              output: the sum is 1 up to rounding), o_kept the softmax over the kept visible keys only
//              times V (= sum_kept p v / sum_kept p); the absolute error when o = 0; NaN when the kept keys
//              carry no probability at all
struct SelectionRow {
  std::uint32_t layer = 0, head = 0;
  Arm arm = Arm::block;
  std::uint32_t block = 0;
  double keep = 0;
  std::uint32_t budget = 0;  // tokens kept: sparse_blocks(...) * block
  double recall = 0, out_error = 0;
};
// Per (layer, head, needle, arm, block, keep), means over the query rows:
//   mass       true probability on the needle (what dense attention puts there)
//   kept_mass  the part of it the selection keeps
//   all_kept   the share of query rows whose selection keeps every needle token
struct NeedleRow {
  std::uint32_t layer = 0, head = 0;
  std::uint32_t pos = 0, len = 0;
  double depth_pct = 0;
  Arm arm = Arm::block;
  std::uint32_t block = 0;
  double keep = 0;
  std::uint32_t budget = 0;
  double mass = 0, kept_mass = 0, all_kept = 0;
};
// A (block, keep) of the sweep whose budget is smaller than sink + latest block (sparse_blocks' reason):
// left out of the rows, stated, not an error, so one sweep serves every context.
struct SkippedBudget {
  std::uint32_t block = 0;
  double keep = 0;
  std::string why;
};
struct SelectionFigures {
  std::vector<SelectionRow> rows;
  std::vector<NeedleRow> needles;
  std::vector<SkippedBudget> skipped;
};
// probs: true_probs(a). Threads take query rows; the means are summed in row order (the same figures for any
// thread count).
// std::invalid_argument: probs of the wrong size, no blocks or keeps, a keep outside (0, 1], a block not
// dividing ctx, a needle outside the context or empty, causal rows whose masked tail (rows - 1 keys) does not fit in the smallest
// block (the latest block every arm keeps must hold every key a row cannot see).
SelectionFigures selection_quality(const LayerAttention& a, std::span<const float> probs,
                                   const SelectionOptions& opt);

// ---------------------------------------------------------------------------------------------- decoding
// What a cache compressed at the end of the prefill holds, for greedy decoding with the selection applied in
// every layer (kvf::attention::SelectionMask, needle retrieval): the block or token arm, routed as above on
// the last query row (the one that sees every key), per kv head: [hkv] -> kept positions, ascending.
// std::invalid_argument: the oracle (it reads each query head's true probabilities: no cache can hold that),
// a block not dividing ctx, a budget below sink + latest block (sparse_blocks).
std::vector<std::vector<std::int32_t>> kept_at_prefill_end(const LayerAttention& a, Arm arm, std::uint32_t block,
                                                           double keep);
// The same for many (arm, block, keep) of one layer: the keys are converted and the last row's query taken once,
// centroids and block scores built once per block size, token scores once (they do not depend on the block), so
// a budget sweep costs one top-k per budget. kept(...) == kept_at_prefill_end(a, ...) for any order of calls.
// The layer must outlive the router. Throws as kept_at_prefill_end (the layer is validated at construction).
class PrefillEndRouter {
 public:
  explicit PrefillEndRouter(const LayerAttention& a);
  std::vector<std::vector<std::int32_t>> kept(Arm arm, std::uint32_t block, double keep);

 private:
  const LayerAttention& a_;
  std::vector<std::uint16_t> kbf_, qbf_;          // keys and the last row's queries, bf16 as the access study reads them
  std::map<std::uint32_t, std::vector<float>> block_scores_;  // per block size
  std::vector<float> token_scores_;                           // empty until the token arm is asked
};

// ---------------------------------------------------------------------------------------------- all
struct QualityOptions {
  std::uint32_t sink = 16;
  std::vector<std::uint32_t> windows{0, 64, 256, 1024, 4096};  // each <= ctx (a shorter context: fewer W)
  bool per_row = false;                                         // H1 and H3 per query row as well
  SelectionOptions selection;
};
struct LayerFigures {
  std::vector<LocalityRow> locality;
  std::vector<EntropyRow> entropy;
  LayerEntropy layer_entropy;
  SelectionFigures selection;
};
// Every figure of one layer: validate (given probabilities checked once, then read in place), true_probs when
// none are given, then each of the above.
LayerFigures layer_figures(const LayerAttention& a, const QualityOptions& opt);

namespace testing {
// The token arm's sums come from one walk of the score order for every block size, each list checked to be its
// cut of that walk, else from one walk per block size over the lists themselves. true: the per-block walks always
// (for tests that hold the two to the same figures; process-wide).
void token_walk_per_block(bool on);
}  // namespace testing

}  // namespace kvf::attention::quality
