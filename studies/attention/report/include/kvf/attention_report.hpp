// bench_attention's output in the report (issue 19): the files `bench_attention --out RESULTS/attention` writes
// (studies/attention/README.md "What it writes"), read beside a results directory, summarized per layer and per
// selection, joined with the access study's latency of the same selections from that directory's cases.csv, and
// judged by claims 7 (H1), 8 (H3) and 9 (the bet) of docs/report.md. Files are untrusted input: read through the
// harness's bounded readers, columns by name, every problem a kvf::UsageError naming the file (and line, column or
// key). The section and the verdicts read around a file that cannot be read ("not available: <why>").
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvf/report.hpp"

namespace kvf::report::attention {

struct LocalityRow {
  int layer = 0, head = 0;
  std::int64_t sink = 0, window = 0;
  double mass = 0;
};
struct EntropyRow {
  int layer = 0, head = 0;
  double nats = 0, normalized = 0;
};
struct LayerEntropyRow {
  int layer = 0;
  double nats = 0, normalized = 0;
};
struct SelectionRow {
  int layer = 0, head = 0;
  std::string arm;  // block, token, oracle
  std::int64_t block = 0, budget = 0;
  double keep = 0, recall = 0;
  std::optional<double> out_error;  // empty: the kept keys held no probability (NaN in the library)
};
struct NeedleRow {
  int layer = 0, head = 0;
  std::int64_t pos = 0, len = 0, block = 0, budget = 0;
  std::string arm;
  double depth_pct = 0, keep = 0, mass = 0, kept_mass = 0, all_kept = 0;
};

// needle_decode.csv (bench_attention --answer): the planted answer greedy-decoded with full attention ("dense") and
// under each selection applied in every layer.
struct DecodeRow {
  std::string arm;  // dense, block, token
  std::int64_t block = 0, budget = 0, answer_tokens = 0, matched_prefix = 0;
  double keep = 1;
  bool exact = false;
};

// One bench_attention run: one model, one prompt, one context.
struct Run {
  std::filesystem::path dir;
  std::string name;    // the run's folder below attention/ ("" for attention/ itself)
  std::string source;  // checkpoint | dump
  std::string model;   // the checkpoint directory's last component and architecture, or the dump file
  std::string prompt;  // the token file, or "the dump's"
  std::int64_t context = 0, queries = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  double threshold = 0;                            // meta.json entropy_boundary.threshold
  std::int64_t meta_first_below = -1, meta_largest_drop = -1;  // what meta.json says (checked against the CSV)
  std::vector<std::string> skipped;                // meta.json skipped_budgets, as "block B keep K: why"
  std::vector<LocalityRow> locality;
  std::vector<EntropyRow> entropy;
  std::vector<LayerEntropyRow> layers;  // layer_entropy.csv, ascending layer
  std::vector<SelectionRow> selection;
  std::vector<NeedleRow> needles;  // empty without needle.csv
  std::vector<DecodeRow> decodes;  // empty without needle_decode.csv
  std::vector<std::string> read_around;  // torn last rows left out
  // "Llama-3.1-8B (LlamaForCausalLM), prompt p.json (8K tokens, last 16 queries, 32 layers)": every verdict says it.
  std::string rests_on() const;
};

// The runs beside a results directory: RESULTS/attention/ when it holds meta.json, else each folder of it that
// does (name order; at most kMaxRuns); or the directory itself when it is one `bench_attention --out` (its
// meta.json is bench_attention's). Empty when there is none.
inline constexpr std::size_t kMaxRuns = 32;
std::vector<std::filesystem::path> find_runs(const std::filesystem::path& results_dir);
// Whether DIR/meta.json is bench_attention's (its schema), read through the bounded JSON reader; false when absent
// or unreadable (read_run then says why).
bool is_attention_output(const std::filesystem::path& dir);
// Reads one run's files; `root` is the results directory (a symlink leaving it is refused). UsageError: a file
// missing (needle.csv is optional) or over a limit, a malformed row, a required column missing, a value out of its
// range, an unknown arm, a row twice, a meta.json that is not bench_attention's.
Run read_run(const std::filesystem::path& dir, const std::filesystem::path& root);

// ------------------------------------------------------------------------------------------ summaries
// H1 at one window: per layer, the mean (and min, max) over heads of the sink + window mass.
struct Spread {
  double mean = 0, min = 0, max = 0;
  int n = 0;
};
std::vector<std::int64_t> windows(const Run& r);  // ascending
std::map<int, Spread> locality_by_layer(const Run& r, std::int64_t window);
// H1's window: the largest swept W in (0, context / 8]; nullopt when none was swept.
std::optional<std::int64_t> h1_window(const Run& r);
inline constexpr double kH1Mass = 0.5;

// H3: the layer boundary computed from layer_entropy.csv at the run's threshold (kvf::attention::quality's
// definitions: first layer below the threshold; the layer after the largest drop), -1 for none.
struct Boundary {
  int first_below = -1, largest_drop = -1;
  double drop = 0;
};
Boundary boundary(const Run& r);

// One selection (keep, block) of the run: per arm, the mean over layers and heads of recall and out_error.
struct ArmFigures {
  double recall = 0, out_error = 0;
  int n = 0, error_n = 0;  // rows; rows with an out_error
};
struct SelectionPoint {
  double keep = 0;
  std::int64_t block = 0, budget = 0;
  std::map<std::string, ArmFigures> arm;  // block, token, oracle (those present)
};
std::vector<SelectionPoint> selection_points(const Run& r);  // by block, then keep descending
std::string keep_text(double keep);  // "1/8" where 1/keep is a whole number, else the number

// ------------------------------------------------------------------------------------------ the join
// The access study's block and token rows of one selection (same keep, same block size): the group of rows (every
// parameter but the arm and derived sizes equal, eager launch, uniform scatter) whose shape is closest to the run's:
// context first (|log2(ctx / context)|), then head counts and head dim, then bf16, batch 1, per_head selection, HND,
// cold mode.
struct Joined {
  const SelectionPoint* point = nullptr;
  const CaseRow *block = nullptr, *token = nullptr;
  Ratio token_vs_block;  // > 1 with its interval above 1: block faster
  std::string shape;     // the access rows' shape: "ctx=8192, hq=32, hkv=8, head_dim=128, bf16, HND, b1, per_head, cold"
  std::vector<std::string> differs;  // what differs from the run ("context 64K against 8K", "hq 32 against 2")
};
struct Join {
  std::vector<Joined> points;
  std::string none;  // when points is empty: why ("no access study rows in DIR", ...)
};
Join join_latency(const Run& r, const std::vector<SelectionPoint>& points, const ResultSet& rs);
inline constexpr double kRecallWithin = 0.05;  // the bet's "comparable quality": block recall >= token's - this
// The bet judges a selection on access rows within this factor of the run's context only (latency ratios move with
// context: the fixed floor below, the bytes above); farther joins are shown, not judged.
inline constexpr double kJudgedContextFactor = 4;
inline bool judged_context(double access_ctx, double run_ctx) {
  return access_ctx <= run_ctx * kJudgedContextFactor && access_ctx * kJudgedContextFactor >= run_ctx;
}

// ------------------------------------------------------------------------------------------ verdicts
// `run` empty with `error`: the run could not be read (every claim "not available" with the reason).
Verdict judge_h1(const Run* run, const std::string& error, const std::string& device);
Verdict judge_h3(const Run* run, const std::string& error, const std::string& device);
Verdict judge_bet(const Run* run, const std::string& error, const ResultSet& rs);
extern const char* const kClaim7;
extern const char* const kClaim8;
extern const char* const kClaim9;

}  // namespace kvf::report::attention
