// kvf_report_core: results directories -> report (markdown, charts, html), with the study-specific parts
// (sections, verdict rules, model terms, calibration terms) supplied by each study's report plug-in
// (kvf/study_report.hpp, studies/<study>/report/). The core knows no study: it loads results, keeps the GPU
// spec / roofline machinery, escapes untrusted text, and renders what the plug-ins return. The library
// kvf_report adds every plug-in of the build (study_reports()) and the one-argument-shorter entry points
// below that use them.
//
// Reading: cases.csv, samples.csv, counters.csv through kvf::read_csv_table; meta.json through
// kvf::read_json_input (bounded, typed: kvf/input.hpp). Every problem with an input is a kvf::UsageError naming the file (and line) -> exit 2.
// A partial directory (interrupted run, a study not run, no counters) loads; what is absent is listed in
// ResultSet::missing and every claim that needs it is "not measured".
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/result_tables.hpp"

namespace kvf {
struct CsvTable;  // kvf/table.hpp
}

namespace kvf::report {

struct StudyReport;  // kvf/study_report.hpp: what one study contributes
using StudyReports = std::vector<StudyReport>;
// Every plug-in of this build, in the order of the study list (kvf_study() in CMakeLists.txt). Defined by the
// generated study_reports.cpp of the library kvf_report, not by kvf_report_core.
const StudyReports& study_reports();

// ------------------------------------------------------------------------------------------ results
struct CaseRow {
  std::string study, case_name, backend, device, mode, note, where;  // where = "file:line"
  std::map<std::string, std::string> params;                          // non-empty parameter columns
  long samples = 0;
  long throttled_samples = 0;  // GPU samples below 75% of the default SM clock, left out of the summary (CPU: 0)
  std::optional<double> median_s, q1_s, q3_s, bytes, flops, gbps, tflops, ceiling_value;
  std::optional<double> pct_of_ceiling;  // cases.csv's, against `ceiling` (the label of the row it is stated against)
  std::string ceiling;
  std::vector<double> samples_s;  // samples.csv's kept samples of this row (throttled ones left out), file order
  // Why this row is never scored (empty: valid): its own check failed (a co-run whose background drained),
  // or its (study, case, mode) appears twice in the directory (a merge of runs that is not one run).
  std::string invalid;
  const std::string& param(const std::string& name) const;  // "" when absent
  std::optional<double> num(const std::string& name) const;  // parameter as a number (nullopt when absent)
  // A NaN median (a damaged cases.csv) is no measurement either.
  bool measured() const { return samples > 0 && median_s.has_value() && std::isfinite(*median_s); }
  std::string key() const { return study + '\x1f' + case_name + '\x1f' + mode; }  // one case in one mode
};

using CounterRow = kvf::CounterRow;  // counters.csv, read by the harness (kvf/result_tables.hpp)

// One study's run inside a results directory (meta.json "studies"), with the commit it was built from (a merged
// directory's "sources" give each study its own).
struct StudyRun {
  std::string study, command, status, started, finished, git_sha, source;
};

struct ResultSet {
  std::string dir;            // as given
  std::string label;          // "<device> (<backend>)", made unique across the sets of one report
  std::string device, backend, suite_version, git_sha, started, finished;
  bool has_meta = false, has_samples = false, has_counters = false;
  std::size_t n_samples = 0;
  std::uint64_t llc_bytes = 0;
  int compute_units = 0;  // meta.json device.compute_units (CPU cores or GPU SMs); 0 when absent
  double max_load = -1;      // highest 1-minute load average meta.json recorded (study start/end); -1: none
  int hardware_threads = 0;  // the host's hardware threads, beside it
  // Where the benches' OpenMP threads ran: kvf run's choice (meta.json kvf_run.thread_placement: "close
  // (OMP_PROC_BIND=close OMP_PLACES=cores), calibrated"), else what each study's OpenMP runtime took
  // (machine_load.omp_proc_bind); "" when meta.json says neither.
  std::string thread_placement;
  std::vector<std::string> studies_run;    // from meta.json (or cases.csv when meta.json lacks them)
  std::vector<StudyRun> runs;              // meta.json's studies (and sources), in file order
  std::vector<CaseRow> cases;
  std::vector<CounterRow> counters;
  std::vector<std::string> missing;        // one line each: what this directory lacks
  std::vector<std::string> warnings;       // one line each: input problems read around (a torn last row)
  // Measured, valid rows of one study: what sections and verdicts score (invalid rows are listed, not scored).
  std::vector<const CaseRow*> rows(const std::string& study) const;
};

// Throws UsageError: directory or cases.csv missing, a required column missing, a malformed row or
// number (file:line), a samples.csv/counters.csv row naming no case. Missing samples.csv, meta.json,
// counters.csv or studies are recorded in `missing`.
ResultSet load_results(const std::string& dir);
// Loads each (with `load`; empty: load_results) and checks they agree on the suite version (UsageError naming
// both meta.json files).
std::vector<ResultSet> load_all(const std::vector<std::string>& dirs,
                                const std::function<ResultSet(const std::string&)>& load = {});

// ------------------------------------------------------------------------------------------ model
struct GpuSpec {
  std::string name;
  std::vector<std::string> aliases;  // other spellings, CUDA device names among them (data/gpus.json)
  double hbm_tbps = 0, l2_mib = 0, host_link_gbps = 0, nvlink_gbps = 0, bf16_tflops = 0;
  // CPU: the fp32 GEMM rows (OpenBLAS sgemm), the peak of the fp32 twins; 0 = not measured (bf16_tflops serves).
  // bf16_tflops is then the best GEMM row, oneDNN's bf16 matmul where it is faster (AMX, AVX-512-BF16).
  double fp32_tflops = 0;
  int sms = 0;
  double launch_us = 0, copy_fixed_us = 0;   // per kernel launch, per copy call
  // Each further copy of a back-to-back series (a page's layers, one copy each): what it adds beside its bytes
  // while the first one's latency is paid (a GPU run's granularity rows fit it). 0: copy_fixed_us, every copy
  // paying a whole copy's fixed cost, as the spec sheets assume.
  double copy_issue_us = 0;
  // Disk tier (O_DIRECT file reads): never a spec-sheet number; 0 = "no disk figure" until a results
  // directory calibrates it (a plug-in's calibration term: a fit over file-tier read sizes, or a baseline).
  double disk_gbps = 0, disk_latency_us = 0;  // per read: latency + bytes / bandwidth
  // Remote tier (a page fetched from a peer node over UCX, the remote study): never a spec-sheet number either;
  // 0 = "no remote figure". Per transfer: fixed + descriptors x per-descriptor + bytes / bandwidth.
  double remote_gbps = 0, remote_fixed_us = 0, remote_descriptor_us = 0;
  std::map<std::string, std::string> source;  // field -> where the number comes from
  std::vector<std::string> calibration;       // one line per field replaced by a measured ceiling
  // Where a field's figure comes from, read off its source: a results directory ("measured: ..."), an assumption
  // ("assumption: ..." in data/gpus.json, "assumed ..." from a calibration term) or the spec sheet (anything else).
  enum class Origin { spec, assumed, measured };
  Origin origin(const std::string& field) const;
};
std::string default_gpus_path();  // gpus.json where kvf::data_file finds it (kvf/install_paths.hpp)
// Throws UsageError naming the file/field when the file is missing or a GPU lacks a field or a source.
std::vector<GpuSpec> load_gpus(const std::string& path);
// The GPU a user-typed name (--gpu, --spec-gpu) names: canonical name or alias, case-blind; an alias two GPUs
// declare ("H100") is refused with both (kvf/names.hpp). UsageError names `flag`.
const GpuSpec& find_gpu(const std::vector<GpuSpec>& all, const std::string& name, const std::string& flag = "--gpu");
// The GPU a CUDA device name of a results directory names: as find_gpu, else the entry with the longest name or
// alias contained in it ("NVIDIA H100 80GB HBM3 (MIG 1g)"); nullptr when none does or two tie.
const GpuSpec* gpu_for_device(const std::vector<GpuSpec>& all, const std::string& device);

// Model shape: the subset of data/models.json (loaded through studies/shapes, kvf/model_shapes.hpp) the
// model terms need. Beside the GPU specs: the two spec files every prediction reads.
struct Shape {
  std::string name;
  std::vector<std::string> aliases;  // the model's aliases and Hugging Face id (find_shape matches them)
  double hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, layers = 0, intermediate = 0;
  double kv_values_per_token = 0;  // per layer: 2*Hkv*D (GQA), kv_lora_rank + rope dim (MLA)
  bool mla = false, moe = false;
  double q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  double moe_intermediate = 0, n_routed = 0, n_shared = 0, experts_per_tok = 0, first_k_dense = 0;
  double kv_out() const { return mla ? kv_values_per_token : 2 * n_kv_heads * head_dim; }  // GEMM output width
};
// Shapes outside what any model has (layers <= 0 or > kMaxLayers, a head count <= 0, ...) are UsageError
// naming the file, the model and the key.
inline constexpr std::int64_t kMaxLayers = 10000;
std::vector<Shape> load_shapes(const std::string& path = {});  // default: data/models.json
const Shape& find_shape(const std::vector<Shape>& all, const std::string& name);

// One roofline step: max(flops / peak, bytes / bandwidth) + launches * launch overhead.
struct Cost {
  double seconds = 0, flops = 0, bytes = 0;
  int launches = 0, copies = 0;
  std::string bound;  // "compute" | "memory" | "link" | "fixed"
};
double roofline_s(const GpuSpec& g, double flops, double bytes);
// Building a Cost out of kernels: add_kernel adds one launch of roofline(flops, bytes); finish_cost divides
// the call by the `per` pages it served and names what bounds it.
void add_kernel(Cost& c, const GpuSpec& g, double flops, double bytes);
void finish_cost(Cost& c, const GpuSpec& g, double per);
// Copies of `bytes` in `copies` back-to-back calls over a link of `gbps`: copies_fixed_s + bytes / bandwidth.
Cost transfer(const GpuSpec& g, double bytes, int copies, double gbps);
// The fixed part of `copies` back-to-back copies: the first copy's fixed cost, then copy_issue_us per further one
// (copy_fixed_us where none was fitted), seconds.
double copies_fixed_s(const GpuSpec& g, int copies);
// Disk tier: reads x disk_latency + bytes / disk bandwidth. Throws UsageError when g has no disk figure.
double disk_s(const GpuSpec& g, double bytes, double reads);
// Remote tier: one transfer of `bytes` as `descriptors` descriptors: remote_fixed + descriptors x
// remote_descriptor + bytes / remote bandwidth. Throws UsageError when g has no remote figure.
double remote_s(const GpuSpec& g, double bytes, double descriptors);
// Pipelined split: two parts run at once, joined by one sync: max(a_s, b_s) + sync_s when both parts are
// non-empty, else the one part (no sync).
double overlap_s(double recompute_s, double fetch_s, double sync_s);
// Bandwidth sharing: a step of `bytes` that ran alone in `alone_s` beside a co-runner demanding `demand_bps`
// of a memory system of `bw_bps`: bytes / min(bytes / alone_s, bw - demand). nullopt when demand >= bw (the
// model gives no bound).
std::optional<double> corun_s(double bytes, double alone_s, double bw_bps, double demand_bps);

// Replace spec peaks with ceilings measured in `rs`: the plug-ins' calibration terms (stream read, GEMM
// ceiling, host copy and its per-copy fixed cost, disk, NVLink), then the L2 size from meta.json. Returns the
// fields replaced (also appended to g.calibration). host_tiers_only: the disk and remote-tier figures alone, the
// host's side, which a CPU run measures for a GPU too (a CPU's memory and GEMM ceilings do not price a GPU).
std::vector<std::string> calibrate(const StudyReports& studies, GpuSpec& g, const ResultSet& rs,
                                   bool host_tiers_only = false);
// A spec built only from a results directory (e.g. a CPU run): every ceiling measured, none assumed
// except launch/copy overheads (0 on the CPU).
GpuSpec spec_from_results(const StudyReports& studies, const ResultSet& rs, const std::vector<GpuSpec>& gpus);

// The rows a model term looks up in a run (alone rows of the co-run and overlap terms), indexed once: the
// report predicts every row of a run, and a scan of the run per row made it quadratic in rows. Lookups
// build their index on first use (one pass per distinct key set), then cost O(log n). `run` must outlive it.
class RunIndex {
 public:
  explicit RunIndex(const ResultSet& run) : run_(&run) {}
  const ResultSet& run() const { return *run_; }
  // The first measured row (file order) of `study` whose parameters equal `match`, in `mode`; nullptr if none.
  const CaseRow* first(const std::string& study, const std::vector<std::pair<std::string, std::string>>& match,
                       const std::string& mode) const;
  // The measured row of `study` with param arm=`arm` and the largest numeric `param`, in `mode` (first on ties).
  const CaseRow* largest(const std::string& study, const std::string& arm, const std::string& param,
                         const std::string& mode) const;

 private:
  const ResultSet* run_;
  mutable std::map<std::string, std::map<std::string, const CaseRow*>> first_;  // key set -> values -> row
  mutable std::map<std::string, const CaseRow*> largest_;
};
// Prediction for one measured case row by the model terms of its study's plug-in (nullopt when there is no
// term for it); `why` says how, or why not. `run` (the row's own results directory) gives the co-run and
// overlap terms their alone rows; `shapes` gives the overlap term the model's recompute cost of the row's
// model (without it: the run's alone rows).
std::optional<double> predict_row(const StudyReports& studies, const GpuSpec& g, const CaseRow& r, std::string* why,
                                  const RunIndex* run, const std::vector<Shape>* shapes);

// ------------------------------------------------------------------------------------------ analysis
// Linear interpolation of the first sign change of d(x) = a(x) - b(x) between consecutive x.
struct Crossover {
  bool found = false;
  double x = 0;
  std::string text;  // "T* = 183 tokens" or "outside measured range (16..512): recompute faster throughout"
};
Crossover find_crossover(const std::vector<double>& x, const std::vector<double>& a, const std::vector<double>& b,
                         const std::string& a_name, const std::string& b_name, const std::string& unit,
                         const std::string& range_word = "measured");  // "evaluated" for model points
// Linear interpolation of y at x over sorted (xs, ys); nullopt outside [xs.front(), xs.back()].
std::optional<double> interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x);

struct Verdict {
  // verdict: supported | refuted | mixed (figures say where each holds) | not established (inside the noise or
  // an untested regime) | not measured
  std::string claim, device, verdict, figures, rule;
};

// Noise: the ratio of two rows' medians (a / b) with a 95% percentile-bootstrap interval from their raw samples
// (2000 resamples of each, a fixed seed: the report stays byte-identical). A difference is a sign only when the
// interval excludes 1. Fewer than 3 samples on either side: no interval (established() false).
struct Ratio {
  double value = 0, lo = 0, hi = 0;
  bool has_interval = false;
  std::string why_none = "fewer than 3 raw samples";  // without an interval: why (text() says it)
  bool a_slower() const { return has_interval && lo > 1; }
  bool a_faster() const { return has_interval && hi < 1; }
  bool established() const { return a_slower() || a_faster(); }
  std::string text() const;  // "1.058x [1.041, 1.075]" or "1.02x (no interval: fewer than 3 raw samples)"
};
Ratio median_ratio(const std::vector<double>& a, const std::vector<double>& b);
// Rows: their raw samples; without them (samples.csv missing or partial) value = lo = hi = the ratio of cases.csv's
// medians, has_interval false, why_none naming samples.csv when cases.csv counts 3 or more samples on both sides.
Ratio median_ratio(const CaseRow& a, const CaseRow& b);
// Every plug-in's verdict rules on every set: grouped by claim (the rules' numbers), then by results
// directory (the order given on the command line).
std::vector<Verdict> verdicts(const StudyReports& studies, const std::vector<ResultSet>& sets);

// ------------------------------------------------------------------------------------------ untrusted text
// Every text the report did not write itself (device names, case names, parameters, paths, messages that
// quote them) reaches gnuplot, Markdown and HTML only through these. Results directories are shared, so a
// device name is attacker-controlled: in a gnuplot double-quoted string a backquote runs a shell command and
// a line break starts a new gnuplot command; in Markdown/HTML it is markup.
//
// printable_text: line breaks and tabs become spaces; other control characters, DEL, invalid UTF-8 and
// invisible Unicode (C1 controls, line/paragraph separators, bidirectional and zero-width format characters)
// become '?'; at most `max_chars` characters (code points), then "...".
inline constexpr std::size_t kMaxChartText = 200;  // a chart title, axis label or legend entry
inline constexpr std::size_t kMaxLabelText = 200;  // a device label (repeated in every table row)
inline constexpr std::size_t kMaxCellText = 2000;  // any other text in report.md
std::string printable_text(const std::string& s, std::size_t max_chars);
// A gnuplot single-quoted string ('...': gnuplot expands neither backquotes nor escapes in it; ' doubled),
// from printable_text with backquotes replaced by '?'. Never holds a line break.
std::string gnuplot_quote(const std::string& s, std::size_t max_chars = kMaxChartText);
// A "..." label field of a .dat file read `with labels`: printable_text without ", #, \ and backquotes.
std::string gnuplot_data_label(const std::string& s, std::size_t max_chars = kMaxChartText);
// Markdown text or table cell: printable_text with \ ` * _ [ ] < > # & ~ backslash-escaped (| is escaped
// by the table writer, for every cell).
std::string md_text(const std::string& s, std::size_t max_chars = kMaxCellText);
// (No code spans for input text: inside one nothing can be escaped, so a `<script>` would stay raw.)
// HTML text and attribute values: < > & " ' as entities.
std::string html_escape(const std::string& s);

// Fixed formatting used everywhere in the report: %.4g, "-" for missing.
std::string fmt(double v);
std::string fmt(const std::optional<double>& v);

// A cell of a file a plug-in reads beside a results directory (the residency replay's, bench_attention's) as a
// number in [lo, hi]; UsageError naming file:line, the column, the value and the range when it is empty, not a
// number or outside.
double cell_number(const CsvTable& t, std::size_t row, const char* column, double lo, double hi);

// ------------------------------------------------------------------------------------------ report
struct ReportOptions {
  std::string out_dir;           // default: <first dir>/report
  bool charts = true;            // run gnuplot
  std::string gnuplot = "gnuplot";
  std::string gpus_path, models_path;
  std::string model = "Llama-3.1-8B";   // model shape the plug-ins predict with (the frontier map, section 4)
  std::string spec_gpu = "H100 SXM";    // spec-sheet GPU predicted when no GPU results are given
  // HBM budget (GiB) of the residency section's table (the nearest swept budget); unset: the sweep's middle.
  std::optional<double> residency_hbm_gib;
};
struct ReportResult {
  std::string dir;  // files are written fresh: an existing file (or a symlink planted in its place) is replaced
  std::vector<std::string> files, warnings;  // warnings: chart problems and inputs the plug-ins read around
  bool gnuplot_ran = false;
};
std::string render_markdown(const StudyReports& studies, const std::vector<ResultSet>& sets, const ReportOptions& o,
                            const std::vector<std::string>& chart_notes);
// report.md -> a self-contained report.html. Charts are inlined only from `drawn` (names of SVG files gnuplot
// wrote in `dir` during this run), so a stale or planted SVG in the directory is never inlined.
std::string markdown_to_html(const std::string& md, const std::string& dir, const std::vector<std::string>& drawn);
ReportResult write_report(const StudyReports& studies, const std::vector<ResultSet>& sets, const ReportOptions& o);

// ------------------------------------------------------------------------------------------ with this build's plug-ins
// The same as above with studies = study_reports(): defined in kvf_report (analysis/report/src/builtin.cpp).
std::vector<std::string> calibrate(GpuSpec& g, const ResultSet& rs, bool host_tiers_only = false);
GpuSpec spec_from_results(const ResultSet& rs, const std::vector<GpuSpec>& gpus);
std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why = nullptr,
                                  const ResultSet* run = nullptr, const std::vector<Shape>* shapes = nullptr);
std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex& run,
                                  const std::vector<Shape>* shapes);
std::vector<Verdict> verdicts(const std::vector<ResultSet>& sets);
// load_all for `kvf report`: a directory without cases.csv that a plug-in claims (StudyReport::own_directory: a
// `kvf residency --out` directory) is that plug-in's set; any other is load_results'.
std::vector<ResultSet> load_report_inputs(const std::vector<std::string>& dirs);
std::string render_markdown(const std::vector<ResultSet>& sets, const ReportOptions& o,
                            const std::vector<std::string>& chart_notes);
ReportResult write_report(const std::vector<ResultSet>& sets, const ReportOptions& o);

}  // namespace kvf::report
