// The regression gate behind `kvf gate`: load two result sets, match their cases, compare each
// matched case's raw samples, and give a verdict per case plus an exit code for CI.
//
// Exit codes (errors.hpp): 0 no regression, 1 a case is SLOWER (or MISSING with fail_on_missing),
// 2 bad input (a UsageError: missing/malformed file, nothing comparable, too few samples, device
// mismatch). Nothing that goes wrong while reading or comparing is ever reported as exit 1.
//
// Verdict rules (first that applies wins; docs/gate.md "Verdict rules" says the same in prose):
//   Per compared case: b = baseline samples (every run's, pooled), c = current samples (throttled dropped),
//   k = baseline runs that measured it, m = compared cases:
//     change      = median(c) / base - 1 (> 0: current is slower); base = median(b) for k = 1, exp(mean(x_j))
//                 for k >= 2
//     k >= 2      x_j = log(median of run j), s = their sd (at least 1.2533 (relIQR(b) / 1.349) / sqrt(n per run)
//                 and 1e-4), t = (log median(c) - mean(x)) / (s sqrt(1 + 1/k)): p_slower = P(T_{k-1} > t),
//                 p_faster = P(T_{k-1} < t) (is the current run one more run of the baseline? samples inside one
//                 run move together: runs are the units)
//     k = 1       p_slower / p_faster: one-sided Mann-Whitney U of c against b (half the two-sided p in the
//                 direction the ranks moved); whole-run shifts are invisible to it (the report warns)
//     Holm's correction of p_slower over the m cases, and of p_faster: one gate raises a false SLOWER with
//     probability at most alpha, however many cases it compares
//     detectable  = the smallest slowdown the case's test would flag at alpha / m (Holm's first step)
//   NEW      the key is only in the current set, or skipped in the baseline and measured now.
//   MISSING  the key is only in the baseline set, or measured there and skipped now.
//   SKIPPED  the key is in both, skipped on both sides: not compared.
//   SLOWER   p_slower (Holm) < alpha and change > +threshold.
//   FASTER   p_faster (Holm) < alpha and change < -threshold.
//   NOISY    detectable > threshold (this baseline could not have flagged a slowdown of the threshold's size),
//            or |change| > threshold without significance.
//   SAME     everything else.
// The threshold is the smallest change worth a red build; the test says the change is more than run-to-run
// (k >= 2) or sample (k = 1) noise. A noisy current run no longer widens anything: a case whose samples
// turned bimodal or jittery, with its median shifted significantly, is a regression.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/results.hpp"
#include "kvf/stats.hpp"
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
  bool injected = false;         // its note says a test-only fault injection slowed it (bench --inject-slowdown)
  // merge_runs: its baseline runs name different devices ("'a' in run1, 'b' in run2"); "" when they agree
  std::string device_conflict;
};

struct ResultSet {
  std::string source;                  // the path as given
  std::string format;                  // "kvf results" | "Google Benchmark JSON"
  std::vector<CaseData> cases;
  std::set<std::string> meta_devices;  // device names found in meta.json / the benchmark context
  std::vector<std::string> warnings;   // oddities that do not stop the gate (orphan samples, ...)
  // From meta.json, for the remedy when a case has too few samples: whether the run was --quick, the fewest
  // samples it asked for (--min-samples) and its longest --budget (0: unknown).
  bool quick = false;
  int run_min_samples = 0;
  double run_budget_s = 0;
  // "study: CASE_REGEX=FRACTION" for each study of the run that a test-only fault injection slowed (meta.json),
  // and each case whose note says so.
  std::vector<std::string> fault_injection;
  // meta.json's studies whose status says the run stopped before their end ("running": killed, interrupted, or
  // stopped by kvf run's --time-limit). run_gate refuses to gate their cases (--filter may leave them out).
  std::vector<std::string> unfinished;
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
// Fills quick, run_min_samples, run_budget_s and fault_injection from a results directory's meta.json.
void read_run_settings(const nlohmann::json& meta, ResultSet& rs);

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
// Student's t with df degrees of freedom (df > 0): P(T > t), and the t with P(T > t) = p, p in (0, 1)
// (std::invalid_argument outside those ranges).
double student_t_sf(double t, double df);
double student_t_isf(double p, double df);
// (q3 - q1) / median; 0 for fewer than 2 samples.
double relative_iqr(std::span<const double> xs);

// ---------------------------------------------------------------------------------------------
// Verdicts

enum class Verdict { slower, missing, noisy, faster, new_case, skipped, same };
const char* to_string(Verdict v);  // "SLOWER", "MISSING", ...

struct GateOptions {
  double threshold = 0.05;  // fraction (the CLI takes percent)
  double alpha = 0.05;
  // The harness's own minimum, which every run (a --quick one too) takes per case and mode unless one sample
  // outlasts the whole budget of a full run (kvf/stats.hpp).
  int min_samples = StopRule{}.min_samples;
  std::string filter;       // ECMAScript regex searched in CaseKey::label(); empty: all
  bool fail_on_missing = false;
  bool allow_device_mismatch = false;
  // Gate results that carry a test-only fault injection (refused otherwise: they are not measurements).
  bool allow_fault_injection = false;
  // A/B mode: each round's value per case and build: its fastest sample (another job on a shared machine only
  // ever slows a sample down, so the minimum moves least with the load) or its median.
  enum class RoundStat { min, median } round_stat = RoundStat::min;
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
  double spread_runs = 0;                  // sd of the baseline runs' log medians (0: one run)
  std::size_t runs_base = 1;               // how many baseline runs measured the case
  double p = 1;                            // stored baselines: one-sided, in the direction of the change
  bool compared = false;                   // both sides measured: the numbers above are meaningful
  bool exact = false;
  std::string note;
  // Stored baselines: p_holm is p after Holm's correction, detectable the smallest slowdown the case's test would
  // have flagged (infinity: none).
  // A/B mode (run_paired_gate): change is the Hodges-Lehmann estimate of new/base - 1 over the rounds, [ci_lo,
  // ci_hi] its 1 - alpha interval, p the one-sided signed-rank p in the direction of the change, p_holm that p
  // after Holm's correction over the compared cases, detectable the smallest slowdown this run would have
  // flagged (infinity: none; see detectable_slowdown). median_base / median_cur: medians of the rounds' medians.
  std::vector<double> round_ratios;  // new / base per round, in round order
  double ci_lo = 0, ci_hi = 0, p_holm = 1, detectable = 0;
};
// A detectable slowdown beyond +1000% (11x), or beyond the threshold where that is larger, is reported as none
// (infinity): a gate that cannot see less protects nothing, and the t quantile of one or two degrees of freedom at
// alpha / m gives figures past any meaning there.
inline constexpr double kMaxDetectable = 10;
inline double max_detectable(double threshold) { return std::max(kMaxDetectable, threshold); }
inline double reported_detectable(double detectable, double threshold) {
  return detectable <= max_detectable(threshold) ? detectable : std::numeric_limits<double>::infinity();
}

struct GateReport {
  std::vector<CaseResult> cases;     // ordered by verdict (SLOWER first), then label
  std::string baseline_source, current_source;
  std::string baseline_device, current_device;  // "a, b" over the compared cases ("unknown" if none)
  double geomean_ratio = 1;          // geometric mean of median_cur / median_base over compared cases
  std::size_t compared = 0;
  double threshold = 0.05;           // the gate's (GateOptions::threshold): what "protected" is counted against
  int throttled_base = 0, throttled_cur = 0;
  std::vector<std::string> warnings;
  int exit_code = 0;                 // 0 or 1 (bad input throws instead)
  bool missing_fails = false;        // fail_on_missing: a MISSING case is among the failing ones
  std::size_t count(Verdict v) const;
  // A/B mode: the rounds, their order ("AB BA ..." with A the base build), the seed that drew it, the wall
  // time, and the fault injection given to the new build ("" when none).
  bool paired = false;
  std::size_t rounds = 0;
  std::string order, injected;
  std::uint64_t seed = 0;
  double wall_s = 0;
};

// Throws UsageError for: an invalid filter, nothing comparable, fewer usable samples than
// min_samples in a compared case, a device mismatch that is not allowed, or a fault injection in either
// set without allow_fault_injection.
GateReport run_gate(const ResultSet& baseline, const ResultSet& current, const GateOptions& opts);

// ---------------------------------------------------------------------------------------------
// A/B mode (`kvf gate --ab`): both builds measured alternately in one job, decided on paired per-round ratios.
// Per compared case, d_i = log(new_i / base_i) for round i, each side's value its fastest sample in that round
// (GateOptions::round_stat: or the median). The rules (docs/gate.md "A/B mode" says the same in prose):
//   change      = exp(HL(d)) - 1, HL the Hodges-Lehmann estimate (median of the Walsh averages)
//   [lo, hi]    = the distribution-free 1 - alpha interval of HL from the signed-rank test, exponentiated - 1
//   p_slower    = one-sided Wilcoxon signed-rank p that d is shifted up; p_faster down; each Holm-corrected
//                 over the compared cases (so one trial of m cases raises a false SLOWER with probability <= alpha)
//   detectable  = the smallest slowdown s such that d - HL(d) + log(1 + s) would give p_slower < alpha / m
//   SLOWER   p_slower (Holm) < alpha and change > threshold, as the stored mode (a significant one within the
//            threshold is SAME, with a note, which says when its interval reaches the threshold)
//   FASTER   p_faster (Holm) < alpha and change < -threshold
//   NOISY    detectable > threshold: this run could not have seen a slowdown of the threshold's size
//   SAME     everything else. NEW / MISSING / SKIPPED as in run_gate.

struct SignedRank {
  double w_plus = 0;      // sum of the ranks of the positive differences
  std::size_t n = 0;      // differences that are not zero (zeros are dropped: scipy's zero_method='wilcox')
  double p_greater = 1;   // one-sided: the differences are shifted up
  double p_less = 1;      // one-sided: shifted down
  double p_two_sided = 1;
  bool exact = false;     // exact null distribution (n <= 50, no ties), else the normal approximation
};
// Wilcoxon signed-rank test of the differences d against 0, as scipy.stats.wilcoxon(d) with its defaults
// (zero_method='wilcox', correction=False): exact when n <= 50 and no |d| ties, else normal with tie correction.
SignedRank wilcoxon_signed_rank(std::span<const double> d);
// P(W+ <= w) under H0 for n differences without ties. Exposed for tests.
double signed_rank_cdf(std::size_t n, double w);

struct ShiftEstimate {
  double estimate = 0, lo = 0, hi = 0;  // lo/hi: -inf/+inf when n is too small for the confidence asked
};
// Hodges-Lehmann estimate of the shift of d and its two-sided 1 - alpha interval (inverted signed-rank test).
ShiftEstimate hodges_lehmann(std::span<const double> d, double alpha);
// The smallest shift s >= 0 such that (d - HL(d)) + s gives p_greater < level; infinity when even a shift past
// every difference cannot (e.g. n = 5: the smallest one-sided exact p is 1/32).
double detectable_shift(std::span<const double> d, double level);
// Holm's step-down adjustment of p-values (same order as given).
std::vector<double> holm_adjust(std::span<const double> p);
// The order of the rounds: true where the base build runs first. Each pair of rounds holds one base-first and
// one new-first round (which comes first drawn from the seed), so drift that is linear over two rounds cancels;
// an odd last round is drawn alone.
std::vector<bool> ab_order(std::size_t rounds, std::uint64_t seed);

struct PairedRuns {
  std::string base_source, new_source;  // the two build directories, as given
  std::vector<ResultSet> base, cur;     // one result set per round and side
  std::vector<bool> base_first;         // ab_order
  std::uint64_t seed = 0;
  double wall_s = 0;
  std::string injected;                 // the new build's --inject-slowdown ("" when none)
};
// Throws UsageError for: an invalid filter, rounds below 2 or unequal, nothing comparable, a backend or
// device that differs between the builds (unless allowed).
GateReport run_paired_gate(const PairedRuns& runs, const GateOptions& opts);

// ---------------------------------------------------------------------------------------------
// Output

std::string summary_line(const GateReport& r);   // "kvf gate: FAIL: 1 slower, ...; geomean ..."
std::string format_markdown(const GateReport& r, const GateOptions& opts);
std::string format_csv(const GateReport& r);

}  // namespace kvf::gate
