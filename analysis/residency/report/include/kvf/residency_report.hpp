// The files `kvf residency --out DIR` writes (residency.csv: one row per policy and HBM budget; residency.json:
// the replay's inputs), as the report reads them. Results directories are untrusted input (docs/untrusted-input.md):
// both files go through the harness's bounded readers, columns are read by name (others are ignored: the
// simulator adds columns), and every problem is a kvf::UsageError naming the file (and line, and column or key).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kvf::report::residency {

// One policy at one HBM budget (a residency.csv row). Times in the file's units: us per request, s over the trace.
struct Row {
  std::string where;  // "file:line"
  std::string policy, prefill_source, fetch_source;
  std::string compress_to;  // the forms `cost` may compress to ("none"); empty in files older than the column
  bool offline = false;
  double hbm_gib = 0, host_gib = 0;
  double hit_rate_hbm = 0, hit_rate_host = 0, hit_rate = 0;
  double tier3_gib = 0, hit_rate_tier3 = 0;  // the tier behind host memory (disk or peer; 0 in files before it)
  double prefill_avoided = 0, prefill_avoided_s = 0;  // fraction of input tokens; seconds over the trace
  double prefill_total_s = 0, added_total_s = 0;
  double added_p50_us = 0, added_p99_us = 0, nocache_p50_us = 0, nocache_p99_us = 0;
  double host_link_bytes = 0;  // fetched over the host link (host -> HBM)
  // HBM -> host (demotes) and the GPU time of compress passes, off the request path; nullopt in files before them
  std::optional<double> host_link_demote_bytes, compress_total_s;
  // The oracle at this policy's tiers' blocks in one tier, where that bounds its reuse (README "The oracle's
  // bound"); nullopt where it does not, and in files before the column.
  std::optional<double> oracle_bound_hit_rate;
};

// residency.json's inputs: what was replayed, against what.
struct Replay {
  std::filesystem::path dir;  // where residency.csv and residency.json were read
  std::string model, gpu, trace, calibrate, block_form;
  std::int64_t requests = 0, references = 0, distinct_blocks = 0, warnings = 0, prefix_violations = 0;
  std::int64_t block_tokens = 0;
  double block_bytes = 0;
  bool peer_tier = false;  // the tier behind host memory is a peer's pool (--peer-gib), not a disk
  std::vector<std::string> calibration;  // "field <- what measured it", one per replaced spec figure
  std::vector<Row> rows;                 // residency.csv, file order
  std::vector<std::string> read_around;  // a torn last row left out
  std::vector<double> budgets() const;        // the distinct hbm_gib, ascending
  std::vector<std::string> policies() const;  // in first-row order
};

// Where a results directory keeps its replay: DIR/residency/ (what scripts/run writes), else DIR itself (a
// `kvf residency --out` into the results directory). nullopt when neither holds residency.csv or residency.json.
std::optional<std::filesystem::path> find_replay(const std::filesystem::path& results_dir);

// Reads residency.csv and residency.json of `dir`; `root` is the results directory (a symlink leaving it is
// refused, as for every results file). Throws UsageError: a file missing or over a limit, a malformed row, a
// required column missing, a number out of its range, a (policy, budget) twice, rows of another replay than
// the JSON's (requests differ), no rows.
Replay read_replay(const std::filesystem::path& dir, const std::filesystem::path& root);

// The swept budget the answer table shows: the one nearest `wanted` (ties: the smaller), or without it the
// middle of the sweep (the lower middle of an even count). `budgets` ascending, not empty.
double chosen_budget(const std::vector<double>& budgets, const std::optional<double>& wanted);

}  // namespace kvf::report::residency
