// A study's report plug-in: what one study adds to `kvf report` and `kvf model`. The core
// (kvf/report.hpp) loads results, renders, escapes and keeps the GPU-spec machinery; a plug-in names its
// study's arms and parameters. Each package builds one in studies/<study>/report/ (library kvf_report_<study>)
// and defines `kvf::report::StudyReport <study>_report()`; the build's study list generates the table that
// calls them (study_reports(), in kvf_report). docs/CONTRIBUTING.md has the recipe.
//
// A plug-in contributes:
//   sections     markdown (and charts, as Plot specs the core writes and draws), numbered by the core in the
//                order of the study list;
//   verdicts     claim rules judged per results directory, listed by their number in docs/report.md;
//   terms        the model's prediction of a measured row, per arm (the measured-vs-predicted table);
//   calibration  which measured rows replace which GpuSpec field.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvf/report.hpp"

namespace kvf::report {

// ------------------------------------------------------------------------------------------ charts
// A chart a section asks for: the core writes NAME.dat / NAME.gp (every text through gnuplot_quote) and runs
// gnuplot. Names are made up by the plug-in, [A-Za-z0-9_-] only.
struct Line {
  std::string title, style = "linespoints";
  std::vector<std::pair<double, double>> pts;
  std::vector<std::string> labels;  // with labels: one per point
  // The series' parameters (values as a person reads them: "32K", "bf16"). A keyed series is named in the
  // legend by its title and the parameters that differ between the plot's keyed series; the ones they all
  // share are said once, under the chart. The parameters of Plot::panel_by choose its panel; a line without
  // them is drawn in every panel.
  std::map<std::string, std::string> key;
  std::vector<std::pair<double, double>> yerr;  // with error bars: (low, high) per point; style "yerrorlines"
  // A reference line (a ceiling, a threshold, a knee) at pts[0]'s y (horizontal) or x (vertical), labelled on
  // the chart with its title instead of in the legend.
  enum class Ref { none, horizontal, vertical } ref = Ref::none;
};
// Tick labels of a log2 x axis in human units: tokens 4K / 64K, bytes 512 B / 64 KiB.
enum class AxisUnit { plain, tokens, bytes };
inline constexpr std::size_t kMaxChartName = 64;  // a Plot's name: a file stem of [A-Za-z0-9_-], 1 to this many
struct Plot {
  std::string name, title, xlabel, ylabel;
  bool logx = false, logy = false;
  std::vector<Line> lines;
  std::vector<std::string> extra;  // gnuplot commands before plot (arrows, ranges): numbers the plug-in formatted
  int logx_base = 2;
  AxisUnit xunit = AxisUnit::plain;
  // Small multiples: one panel per combination of these key parameters (in the order the lines give them),
  // one shared legend below; panels are titled by the ones that differ between panels. Empty: one plot.
  std::vector<std::string> panel_by;
};
// How the core draws a Plot: its panels (one when nothing splits it), each keyed series titled by what
// differs, and the parameters every keyed series shares ("k=v, k=v"; "" for none).
struct ChartPanel {
  std::string title;
  std::vector<Line> lines;
};
struct ChartLayout {
  std::vector<ChartPanel> panels;
  std::string fixed;
};
ChartLayout lay_out(const Plot& p);
// The NAME.dat and NAME.gp texts the core writes for `p` (std::logic_error when the name is not a plain stem).
struct ChartFiles {
  std::string dat, gp;
};
ChartFiles chart_files(const Plot& p);

// ------------------------------------------------------------------------------------------ markdown
// Table rows and the texts that go into them. Cells are report text or md_text of input text (no line breaks);
// | is escaped by row() for all.
namespace md {
std::string row(const std::vector<std::string>& cells);
std::string header(const std::vector<std::string>& cells);  // the row, then |---|
std::string us(const std::optional<double>& s);               // seconds as microseconds, "-" when missing
std::string lbl(const ResultSet& rs);                         // a directory's device label (capped: in every row)
std::string txt(const std::string& s);                        // input text as Markdown
// Human units for the cells a person reads (machine columns stay in the CSVs): tokens 4K / 64K / 256K (a
// multiple of 1024 as K, else the number), bytes 512 KiB / 16 MiB, a rate in GB/s as 25.1 GB/s or 3.08 TB/s.
std::string tokens(double n);
std::string bytes(double b);
std::string rate(double gbps);
// A folded block: <details> in report.html and on code hosts, the body (markdown) shown on demand.
std::string fold(const std::string& summary, const std::string& body);
// The parameters of a table's rows split into those fixed across every row (stated once: "k=v, k=v") and
// those that vary (one short key per row, in the rows' order: "ctx=4096, dtype=bf16"); `leave_out` names
// the columns the table shows anyway. Text is raw input: pass it through txt().
struct Grouping {
  std::string fixed;
  std::vector<std::string> varying, keys;
};
Grouping group_params(const std::vector<std::map<std::string, std::string>>& rows,
                      const std::set<std::string>& leave_out = {});
// Rows of `study` in rs with every (parameter, value) of `only` (the section's rows), stated against
// `ceiling_label` (e.g. "stream:op=read:gbps"), that beat it beyond their own spread (their percentage at their q3
// time above 100): a sentence for a section that prints percentages of that ceiling, naming how many and the
// largest; "" when none did. The Inputs section lists every such row.
std::string ceiling_beaten(const ResultSet& rs, const std::string& study, const std::string& ceiling_label,
                           const std::string& ceiling_name,
                           const std::vector<std::pair<std::string, std::string>>& only = {});
}  // namespace md
std::string us_text(double s);  // "12.5 us": in figures and model-term texts

// ------------------------------------------------------------------------------------------ sections
struct ReportContext {
  const StudyReports& studies;
  const std::vector<ResultSet>& sets;
  const ReportOptions& o;
  std::vector<GpuSpec> gpus;  // data/gpus.json (or --gpus); empty with gpus_error when it could not be read
  std::vector<Shape> shapes;  // data/models.json (or --models-file); empty with shapes_error
  std::string gpus_error, shapes_error;
  std::vector<Plot> plots;
  // Problems with an input a plug-in reads itself (a file beside the results, read around: the section says it
  // is not available); `kvf report` prints each as a warning. Kept once per text.
  std::vector<std::string> warnings;
  void warn(const std::string& w);

  // The spec of a directory's device with its measured ceilings (spec_from_results with these plug-ins).
  GpuSpec spec_of(const ResultSet& rs) const;
  // The shape of --model (o.model); nullptr when it is not in the shapes.
  const Shape* model() const;
  // Keeps `p` to be drawn and returns its figure line, with the parameters every keyed series shares below it
  // ("" when no series has a point).
  std::string chart(Plot p);
};

struct Section {
  std::string title;                                  // the core writes "## <n>. <title>"
  std::function<std::string(ReportContext&)> body;    // markdown after the heading
  // Whether the section is in this report at all (unset: always). A section of an optional input (a replay
  // beside the results) is left out, heading and number, where no directory has it: those reports stay as
  // they were.
  std::function<bool(const ReportContext&)> present;
};

// ------------------------------------------------------------------------------------------ verdicts
struct VerdictRule {
  int number = 0;       // the claim's number in docs/report.md "Verdict rules": the order of the Verdicts table
  std::string claim;    // Verdict::claim starts with it
  std::function<std::vector<Verdict>(const ResultSet&)> judge;  // one or more verdicts per directory
  // What the model predicts for the claim on the directory's device: a cell of the Verdicts table, never the
  // verdict itself. Unset: "-".
  std::function<std::string(const ReportContext&, const ResultSet&)> model_says;
};

// ------------------------------------------------------------------------------------------ model terms
using Match = std::vector<std::pair<std::string, std::string>>;  // (parameter, value) pairs a row must have

// One measured row being predicted, and the terms every study's model shares. Each helper returns the
// prediction (seconds) or nullopt, and says how in `why`.
class Predictor {
 public:
  Predictor(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex* run,
            const std::vector<Shape>* shapes);
  const GpuSpec& g;
  const CaseRow& r;
  const RunIndex* run_index;  // the row's own results directory, indexed; nullptr when not given
  const std::vector<Shape>* shapes;
  const double bytes, flops;  // the row's, 0 when absent

  void say(const std::string& s);
  std::optional<double> none(const std::string& s);  // no prediction, because s
  // copies x the per-copy fixed cost + bytes / link.
  std::optional<double> link(double gbps, const char* what, int copies);
  // roofline(flops, bytes) of the row + launches x the launch overhead. fp32: a CPU row that computes in fp32 (a
  // twin, OpenBLAS) is bound by fp32_tflops where measured, not by the best (bf16) GEMM.
  std::optional<double> roof(int launches, const std::string& what, bool fp32 = false);
  // Bandwidth sharing between a memory-bound step (this row) and a co-runner, both from this run's alone rows:
  // bytes / min(bytes / t_alone, memory bandwidth - demand_factor x co-runner bytes / time). busy_threads: CPU
  // threads the co-runner keeps running (0: it waits on a device or a disk, or a GPU run) add core time-sharing.
  std::optional<double> corun(const CaseRow* alone, const CaseRow* co, double demand_factor, const std::string& co_what,
                              int busy_threads = 0);
  // A count parameter of the row (layers, copies): 1 when absent, else a whole number in [1, hi]; anything else
  // is nullopt with the reason (file:line, column, value) in bad_count.
  std::optional<int> count(const char* name, std::int64_t hi);
  std::string bad_count;
  // The whole number the row's note writes after `key` ("... KV splits 3; ..." -> 3), nullopt when it has none.
  std::optional<long> note_count(std::string_view key) const;
  // A measured row of the run matching every (param, value): the row's mode first, then cold, then hot.
  const CaseRow* alone_row(const std::string& study, const Match& m) const;
  const Shape* shape(const std::string& name) const;  // nullptr when no shapes were given or it is not there

 private:
  std::string* why_;
};

struct ModelTerm {
  std::vector<std::string> arms;  // values of the study's arm column this term predicts; empty: any other value
  std::function<std::optional<double>(Predictor&)> predict;
};

// ------------------------------------------------------------------------------------------ calibration
struct Calibrated {
  std::string field;  // a GpuSpec field: hbm_tbps, bf16_tflops, host_link_gbps, copy_fixed_us, disk_gbps, ...
  double value = 0;   // in the field's unit
  std::string text;   // how it was measured: becomes the field's source ("measured: <text>")
};
struct CalibrationTerm {
  std::string field;  // the field it measures (it may set others with it: a fit gives bandwidth and fixed cost)
  // When several plug-ins measure one field, the lowest rank that finds rows in the directory wins: a ceiling arm
  // made for it before a by-product of another study. Within that rank the better figure wins (the higher rate,
  // the lower fixed cost), and the others are named in its source text.
  int rank = 0;
  std::function<std::vector<Calibrated>(const ResultSet&)> measure;  // empty: nothing to measure from here
  std::string note;  // said once beside the ceilings of the measured-vs-predicted section ("" for none)
};
// Helpers of calibration terms. The best `metric` over measured rows of `study` matching every (param, value):
// gbps from the cold rows where there are any (else hot), tflops from both modes. Returns (value, mode).
std::optional<std::pair<double, std::string>> best_value(const ResultSet& rs, const std::string& study,
                                                         const Match& match, bool tflops);
// A term measuring `field` as the best gbps (tflops) of `study`'s rows matching `match`, divided by `per_unit`
// (GB/s -> TB/s: 1000). Its text: "<value> GB/s, [best ]<study> <k>=<v> (<mode>) in <dir>".
CalibrationTerm best_row_term(const std::string& field, int rank, const std::string& study, const Match& match,
                              bool tflops, double per_unit = 1, bool say_best = false);
// Least-squares t = a + n * b over (bytes, seconds) with at least two distinct sizes and b > 0: (a, b). relative:
// each point weighted by 1 / t^2 (least squares of relative error), for sizes that span decades, where plain least
// squares fits the large copies and leaves the small ones to the intercept.
std::optional<std::pair<double, double>> fit_affine(const std::vector<std::pair<double, double>>& pts,
                                                    bool relative = false);

// ------------------------------------------------------------------------------------------ the plug-in
struct StudyReport {
  std::string study;  // the `study` column of cases.csv
  std::vector<Section> sections;
  std::vector<VerdictRule> verdicts;
  // Page one: the answer a reader acts on (the frontier's cheapest action for --model), a few lines of
  // markdown under the verdicts; unset or "" for none.
  std::function<std::string(ReportContext&)> summary;
  std::string arm_column = "arm";   // the parameter that names a row's arm
  std::vector<ModelTerm> terms;     // none fits a row: "<study> arm '<value>' has no model term"
  std::vector<CalibrationTerm> calibration;
  // A sentence on what the terms model, said above the measured-vs-predicted chart ("" for none).
  std::string model_note;
  // A directory of the plug-in's own files and no cases.csv (a replay's --out directory), given to `kvf report`:
  // the set the report shows for it (no case rows, what it lacks in `missing`), or nullopt when it is not one.
  // UsageError for its own files that cannot be read. Unset: the plug-in reads results directories only.
  std::function<std::optional<ResultSet>(const std::string& dir)> own_directory;
};

}  // namespace kvf::report
