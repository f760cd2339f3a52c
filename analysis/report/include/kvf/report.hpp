// kvf_report: results directories -> report (markdown, charts, html), the analytic model behind
// `kvf model`, and the residency action table (keep / compress / demote / recompute / evict).
//
// Reading: cases.csv, samples.csv, counters.csv through kvf::read_csv_table; meta.json through
// kvf::read_json_input (bounded, typed: kvf/input.hpp). Every problem with an input is a kvf::UsageError naming the file (and line) -> exit 2.
// A partial directory (interrupted run, a study not run, no counters) loads; what is absent is listed in
// ResultSet::missing and every claim that needs it is "not measured".
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvf::report {

// ------------------------------------------------------------------------------------------ results
struct CaseRow {
  std::string study, case_name, backend, device, mode, note, where;  // where = "file:line"
  std::map<std::string, std::string> params;                          // non-empty parameter columns
  long samples = 0;
  long throttled_samples = 0;  // GPU samples below 75% of the default SM clock, left out of the summary (CPU: 0)
  std::optional<double> median_s, q1_s, q3_s, bytes, flops, gbps, tflops, ceiling_value;
  const std::string& param(const std::string& name) const;  // "" when absent
  std::optional<double> num(const std::string& name) const;  // parameter as a number (nullopt when absent)
  bool measured() const { return samples > 0 && median_s.has_value(); }
};

struct CounterRow {
  std::string study, case_name, source, capture, range, chip, metric, unit;
  long range_index = 0;
  std::optional<double> t_start_ns, t_end_ns, value;
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
  std::vector<std::string> studies_run;    // from meta.json (or cases.csv when meta.json lacks them)
  std::vector<CaseRow> cases;
  std::vector<CounterRow> counters;
  std::vector<std::string> missing;        // one line each: what this directory lacks
  std::vector<std::string> warnings;       // one line each: input problems read around (a torn last row)
  std::vector<const CaseRow*> rows(const std::string& study) const;  // measured rows of one study
};

// Throws UsageError: directory or cases.csv missing, a required column missing, a malformed row or
// number (file:line), a samples.csv/counters.csv row naming no case. Missing samples.csv, meta.json,
// counters.csv or studies are recorded in `missing`.
ResultSet load_results(const std::string& dir);
// Loads each and checks they agree on the suite version (UsageError naming both meta.json files).
std::vector<ResultSet> load_all(const std::vector<std::string>& dirs);

// ------------------------------------------------------------------------------------------ model
struct GpuSpec {
  std::string name;
  double hbm_tbps = 0, l2_mib = 0, host_link_gbps = 0, nvlink_gbps = 0, bf16_tflops = 0;
  int sms = 0;
  double launch_us = 0, copy_fixed_us = 0;   // per kernel launch, per copy call
  // Disk tier (the frontier's O_DIRECT file reads): never a spec-sheet number; 0 = "no disk figure" until a
  // results directory calibrates it (fit over file-tier read sizes, else the dd_direct baseline row).
  double disk_gbps = 0, disk_latency_us = 0;  // per read: latency + bytes / bandwidth
  std::map<std::string, std::string> source;  // field -> where the number comes from
  std::vector<std::string> calibration;       // one line per field replaced by a measured ceiling
};
std::string default_gpus_path();  // <source>/data/gpus.json
// Throws UsageError naming the file/field when the file is missing or a GPU lacks a field or a source.
std::vector<GpuSpec> load_gpus(const std::string& path);
const GpuSpec& find_gpu(const std::vector<GpuSpec>& all, const std::string& name);  // UsageError lists known

// Model shape: the subset of data/models.json (loaded through kernels/frontier/models.hpp) the model needs.
struct Shape {
  std::string name;
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
// Recompute one page's K/V for one layer from resident X (bits 16 = bf16, 8, 4), P pages per call:
// dequant (bits < 16) -> GEMM [T*P, H] x [H, kv_out] -> RoPE + paged write. Weight reads are per call,
// so per page they are amortized over P. Returns the cost per page.
Cost recompute_x(const GpuSpec& g, const Shape& m, double tokens, double pages, int bits);
// MLA (DeepSeek-V3): the up-projection of one page's latent into per-head K (nope part) and V, one layer,
// P pages per call: GEMM [T*P, kv_lora] x [kv_lora, heads*(qk_nope + v_head)], bf16 out.
Cost mla_up(const GpuSpec& g, const Shape& m, double tokens, double pages);
// One page of T tokens through L whole layers from token embeddings (evict -> recompute from scratch),
// P pages per call; attention over the page only (prefix attention not counted: a lower bound).
Cost recompute_layers(const GpuSpec& g, const Shape& m, double tokens, double pages, double layers);
// Copies of `bytes` in `copies` calls over a link of `gbps`: copies * fixed + bytes / bandwidth.
Cost transfer(const GpuSpec& g, double bytes, int copies, double gbps);
double kv_bytes_per_layer(const Shape& m, double tokens);             // bf16
double kv_quant_bytes_per_layer(const Shape& m, double tokens, int bits);  // + fp32 scale per 128 values
double x_bytes_per_layer(const Shape& m, double tokens, int bits);    // bf16 / int8 / int4 (+ scales)

// Disk tier: reads x disk_latency + bytes / disk bandwidth. Throws UsageError when g has no disk figure.
double disk_s(const GpuSpec& g, double bytes, double reads);
// Pipelined split (the overlap arm): recompute share and fetch share run at once, joined by one sync:
// max(recompute_s, fetch_s) + sync_s when both parts are non-empty, else the one part (no sync).
double overlap_s(double recompute_s, double fetch_s, double sync_s);
// Bandwidth sharing (the co-run arms): a decode step of `bytes` that ran alone in `alone_s` beside a co-runner
// demanding `demand_bps` of a memory system of `bw_bps`: bytes / min(bytes / alone_s, bw - demand).
// nullopt when demand >= bw (the model gives no bound).
std::optional<double> corun_s(double bytes, double alone_s, double bw_bps, double demand_bps);

// Replace spec peaks with ceilings measured in `rs` (stream read, GEMM ceiling, host copy, per-copy fixed
// cost fitted from copy sizes, disk latency and bandwidth fitted from file-tier read sizes). Returns the fields replaced (also appended to g.calibration).
std::vector<std::string> calibrate(GpuSpec& g, const ResultSet& rs);
// A spec built only from a results directory (e.g. a CPU run): every ceiling measured, none assumed
// except launch/copy overheads (0 on the CPU).
GpuSpec spec_from_results(const ResultSet& rs, const std::vector<GpuSpec>& gpus);

// Prediction for one measured case row (nullopt when the model has no term for it); `why` says how, or why
// not. `run` (the row's own results directory) gives the co-run and overlap terms their alone rows; `shapes`
// gives the overlap term the model's recompute cost of the row's model (without it: the run's alone rows).
std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why = nullptr,
                                  const ResultSet* run = nullptr, const std::vector<Shape>* shapes = nullptr);

// The rows predict_row looks up in a run (alone rows of the co-run and overlap terms), indexed once: the
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
std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex& run,
                                  const std::vector<Shape>* shapes);

// ------------------------------------------------------------------------------------------ actions
// Limits of the action table's options (`kvf model` flags): beyond them is UsageError naming the flag.
inline constexpr double kMaxTokensPerPage = 1 << 20;
inline constexpr int kMaxPrefillPages = 1 << 16;
inline constexpr double kMaxHbmPrice = 1e9;  // us per MiB
struct ActionOptions {
  std::vector<double> tokens = {16, 64, 128, 256, 1024, 4096};
  std::vector<double> layers;                       // default: 1, 4, 16, model layers
  std::vector<double> reuse = {0.1, 0.5, 0.9};
  int prefill_pages = 16;                           // pages per recompute call in prefill (decode: 1)
  std::optional<double> hbm_price_us_per_mib;       // unset: the time to fetch 1 MiB over the host link
  // Measured costs replace the model's where this directory measured them (frontier arms x / xq at the
  // class's tokens and pages per call, h2d_pinned at the page's K/V bytes per layer); linear interpolation
  // between measured token counts / copy sizes, never beyond them.
  const ResultSet* measured = nullptr;
};
struct ActionCost {
  std::string action;
  double hbm_bytes = 0, host_bytes = 0, reuse_us = 0, one_time_us = 0, total_us = 0;
  std::string source = "model";  // of reuse_us: "model" | "measured" | "interpolated"
};
struct ActionClass {
  double tokens = 0, layers = 0, reuse = 0;
  std::string phase;  // "decode" | "prefill"
  std::vector<ActionCost> costs;
  std::string cheapest;
};
// Throws UsageError naming the flag (--tokens, --layers, --reuse, --prefill-pages, --hbm-price) for a value
// outside its limits (NaN included).
std::vector<ActionClass> action_table(const GpuSpec& g, const Shape& m, const ActionOptions& o);
double hbm_price(const GpuSpec& g, const ActionOptions& o);  // us per MiB: the option, else the host link's
nlohmann::json action_table_json(const GpuSpec& g, const Shape& m, const ActionOptions& o,
                                 const std::vector<ActionClass>& t);

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
  std::string claim, device, verdict, figures, rule;  // verdict: supported | refuted | not measured
};
std::vector<Verdict> verdicts(const std::vector<ResultSet>& sets);

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

// ------------------------------------------------------------------------------------------ report
struct ReportOptions {
  std::string out_dir;           // default: <first dir>/report
  bool charts = true;            // run gnuplot
  std::string gnuplot = "gnuplot";
  std::string gpus_path, models_path;
  std::string model = "Llama-3.1-8B";   // shape used by the frontier map (section 4)
  std::string spec_gpu = "H100 SXM";    // spec-sheet GPU predicted when no GPU results are given
};
struct ReportResult {
  std::string dir;  // files are written fresh: an existing file (or a symlink planted in its place) is replaced
  std::vector<std::string> files, warnings;
  bool gnuplot_ran = false;
};
std::string render_markdown(const std::vector<ResultSet>& sets, const ReportOptions& o,
                            const std::vector<std::string>& chart_notes);
// report.md -> a self-contained report.html. Charts are inlined only from `drawn` (names of SVG files gnuplot
// wrote in `dir` during this run), so a stale or planted SVG in the directory is never inlined.
std::string markdown_to_html(const std::string& md, const std::string& dir, const std::vector<std::string>& drawn);
ReportResult write_report(const std::vector<ResultSet>& sets, const ReportOptions& o);

}  // namespace kvf::report
