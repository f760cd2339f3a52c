// The regression gate behind `kvf gate`: load two result sets, match their cases, compare each
// matched case's raw samples, and give a verdict per case plus an exit code for CI.
//
// Exit codes (errors.hpp): 0 no regression, 1 a case is SLOWER (or MISSING with fail_on_missing),
// 2 bad input (a UsageError: missing/malformed file, nothing comparable, too few samples, device
// mismatch). Nothing that goes wrong while reading or comparing is ever reported as exit 1.
//
// Verdict rules (first that applies wins; docs/gate.md "Verdict rules" says the same in prose):
//   Per compared case: b = baseline samples, c = current samples (throttled samples dropped),
//     change      = median(c) / median(b) - 1                 (> 0: current is slower)
//     spread(x)   = (q3(x) - q1(x)) / median(x)               (relative IQR, Hyndman-Fan type 7)
//     noise_floor = 2 * max(spread(b), spread(c))
//     limit       = max(threshold, noise_floor)
//     p           = two-sided Mann-Whitney U p-value of c vs b (see mann_whitney_u)
//   NEW      the key is only in the current set.
//   MISSING  the key is only in the baseline set.
//   SKIPPED  the key is in both, but either side was skipped (samples = 0): not compared.
//   SLOWER   change >  +limit and p < alpha.
//   FASTER   change <  -limit and p < alpha.
//   NOISY    noise_floor > threshold (the spread is too wide for the threshold to be resolved), or
//            |change| > threshold without the two conditions above (a change that the samples cannot
//            tell apart from noise).
//   SAME     everything else: |change| <= threshold and noise_floor <= threshold.
// So a case fails the build only when its median moved by more than the threshold AND by more than
// twice the wider of the two runs' interquartile spreads AND the rank test says the shift is
// significant. Noise (in either run) widens the limit instead of failing the build.
#pragma once
#include <cstddef>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/results.hpp"
#include "kvf/table.hpp"

namespace kvf::gate {

// ---------------------------------------------------------------------------------------------
// Inputs

// What a case is matched on: study, case, mode and every parameter (sorted by name; a parameter whose
// value is empty counts as absent, so a column one file lacks matches an empty field in the other).
struct CaseKey {
  std::string study, case_name, mode;
  std::vector<Param> params;
  std::string label() const;   // "study/case/mode" (empty parts left out)
  std::string params_string() const;  // "name=value,name=value"
  friend bool operator<(const CaseKey& a, const CaseKey& b);
  friend bool operator==(const CaseKey& a, const CaseKey& b);
};

struct CaseData {
  CaseKey key;
  std::string backend, device;   // from cases.csv (Google Benchmark JSON: device from its context)
  std::vector<double> samples;   // seconds, usable samples only (throttled ones dropped)
  int throttled = 0;             // samples dropped because they were flagged throttled
  bool skipped = false;          // cases.csv row with samples = 0 (or a benchmark with an error)
  std::string note;              // why it was skipped, from the note column
  // One median per run for a baseline merged from several runs (merge_runs); empty for one run.
  std::vector<double> run_medians;
};

struct ResultSet {
  std::string source;                  // the path as given
  std::string format;                  // "kvf results" | "Google Benchmark JSON"
  std::vector<CaseData> cases;
  std::set<std::string> meta_devices;  // device names found in meta.json / the benchmark context
  std::vector<std::string> warnings;   // oddities that do not stop the gate (orphan samples, ...)
};

// path: a results directory, its cases.csv / samples.csv / meta.json, or a Google Benchmark JSON
// file (--benchmark_format=json with --benchmark_repetitions=N). Throws UsageError naming the file.
ResultSet load_results(const std::string& path);
// A baseline made of several runs of the same suite (e.g. three `kvf run --quick` on the runner): the
// samples of each case are pooled, and each run's median is kept so the verdict can see how far whole
// runs move between each other (on a shared machine: more than the samples inside one run do).
// Throws UsageError when given no run.
ResultSet merge_runs(std::vector<ResultSet> runs);
// The pieces load_results is made of (exposed for tests).
ResultSet load_kvf_tables(CsvTable cases, const CsvTable& samples, const std::string& source);
ResultSet load_gbench_json(const nlohmann::json& j, const std::string& source);
std::set<std::string> meta_device_names(const nlohmann::json& meta);

// ---------------------------------------------------------------------------------------------
// Statistics

struct MwuResult {
  double u1 = 0;       // U statistic of x (scipy's `statistic`)
  double p = 1;        // two-sided p-value
  bool exact = false;  // exact null distribution (else normal approximation)
  bool ties = false;   // the pooled sample has ties
};
// Two-sided Mann-Whitney U test with scipy.stats.mannwhitneyu's defaults (use_continuity=True,
// alternative='two-sided', method='auto'): exact when min(nx, ny) <= 8 and the pooled sample has no
// ties; otherwise the normal approximation with tie correction and a 0.5 continuity correction.
// All values equal (zero variance) gives p = 1. Both spans must be non-empty. `method` forces one
// branch (scipy's method='exact' / 'asymptotic'; exact ignores ties, as scipy does).
enum class MwuMethod { automatic, exact, asymptotic };
MwuResult mann_whitney_u(std::span<const double> x, std::span<const double> y,
                         MwuMethod method = MwuMethod::automatic);
// P(U <= u) under H0 for sample sizes n1, n2 (no ties), from the coefficients of the Gaussian
// binomial [n1+n2 choose n1]_q. Exposed for tests.
double mwu_exact_cdf(std::size_t n1, std::size_t n2, std::size_t u);
// The smallest two-sided p-value the exact test can give: 2 / C(n1+n2, n1) (capped at 1).
double mwu_min_p(std::size_t n1, std::size_t n2);
// (q3 - q1) / median; 0 for fewer than 2 samples.
double relative_iqr(std::span<const double> xs);

// ---------------------------------------------------------------------------------------------
// Verdicts

enum class Verdict { slower, missing, noisy, faster, new_case, skipped, same };
const char* to_string(Verdict v);  // "SLOWER", "MISSING", ...

struct GateOptions {
  double threshold = 0.05;  // fraction (the CLI takes percent)
  double alpha = 0.05;
  int min_samples = 5;
  std::string filter;       // ECMAScript regex searched in CaseKey::label(); empty: all
  bool fail_on_missing = false;
  bool allow_device_mismatch = false;
};

struct CaseResult {
  CaseKey key;
  std::string label;        // CaseKey::label(), with the parameters appended where labels collide
  Verdict verdict = Verdict::same;
  std::size_t n_base = 0, n_cur = 0;
  int throttled_base = 0, throttled_cur = 0;
  double median_base = 0, median_cur = 0;  // seconds (0 where not compared)
  double change = 0;                       // median_cur / median_base - 1
  double spread_base = 0, spread_cur = 0;  // relative IQR
  double spread_runs = 0;                  // (max - min) / median of the baseline runs' medians (0: one run)
  std::size_t runs_base = 1;               // how many baseline runs measured the case
  double noise_floor = 0, limit = 0;
  double p = 1;
  bool compared = false;                   // both sides measured: the numbers above are meaningful
  bool exact = false;
  std::string note;
};

struct GateReport {
  std::vector<CaseResult> cases;     // ordered by verdict (SLOWER first), then label
  std::string baseline_source, current_source;
  std::string baseline_device, current_device;  // "a, b" over the compared cases ("unknown" if none)
  double geomean_ratio = 1;          // geometric mean of median_cur / median_base over compared cases
  std::size_t compared = 0;
  int throttled_base = 0, throttled_cur = 0;
  std::vector<std::string> warnings;
  int exit_code = 0;                 // 0 or 1 (bad input throws instead)
  std::size_t count(Verdict v) const;
};

// Throws UsageError for: an invalid filter, nothing comparable, fewer usable samples than
// min_samples in a compared case, or a device mismatch that is not allowed.
GateReport run_gate(const ResultSet& baseline, const ResultSet& current, const GateOptions& opts);

// ---------------------------------------------------------------------------------------------
// Output

std::string summary_line(const GateReport& r);   // "kvf gate: FAIL: 1 slower, ...; geomean ..."
std::string format_markdown(const GateReport& r, const GateOptions& opts);
std::string format_csv(const GateReport& r);

}  // namespace kvf::gate
