// The idleness study in the report: idleness against batch for the three definitions and the PM-sampling time
// series (section), "more than 60% idle in decode" (claim 2), and its rows' model terms (roofline per layer;
// the co-run rows by bandwidth sharing against their alone rows, or against the device's link, memory or disk
// figures for the copy and file backgrounds).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "kvf/study_report.hpp"

namespace kvf::report {

namespace {

using namespace md;

const char* kClaim2 = "More than 60% of the GPU is idle in decode";
const char* kRule2 =
    "Decode ranges only (counters.csv, source=range, cases decode/...; prefill and co-run ranges are other phases), "
    "the definition's kvf:idle_*_pct: the median per (batch, context), over the depths of that cell (contexts are "
    "never pooled: a median of two contexts' ranges can fall between them, where no range is). Supported iff > 60 in "
    "every cell; refuted iff <= 60 in every cell; mixed otherwise (the figures name the cells at or below 60). "
    "The lowest cell is printed beside it.";

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The idleness definitions, in the order the report shows them: counters.csv metric, what a person reads.
const std::vector<std::pair<std::string, std::string>> kDefinitions = {
    {"kvf:idle_sm_pct", "SM idle (no resident warp)"},
    {"kvf:idle_issue_pct", "issue slots idle"},
    {"kvf:idle_tensor_pct", "tensor pipe idle"},
    {"kvf:idle_compute_pct", "compute idle (1 - achieved / GEMM ceiling)"}};
// Beside the CPU's compute idleness, what says whether its decode is memory bound (not an idleness definition:
// no chart panel, no claim).
const char* kCpuMemUse = "kvf:mem_use_pct";

// Per (case, definition, mode) the median over ranges of kvf:idle_*_pct, with the case's first row (its
// parameters). The CPU model's "ranges" are its cold and hot rows (mode): a median of the two fell between them.
struct IdleStat {
  std::string case_name, metric, mode;
  const CaseRow* row = nullptr;
  double median = 0;
  std::size_t ranges = 0;
};

std::vector<IdleStat> idle_stats(const ResultSet& rs) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<double>> vals;
  for (const auto& c : rs.counters) {
    if (!std::isfinite(c.value)) continue;
    const bool gpu = c.source == "range" && (c.metric == "kvf:idle_sm_pct" || c.metric == "kvf:idle_issue_pct" ||
                                             c.metric == "kvf:idle_tensor_pct");
    // 1 - achieved / GEMM ceiling, and the share of the read ceiling in use
    const bool cpu = c.source == "cpu_model" && (c.metric == "kvf:idle_compute_pct" || c.metric == kCpuMemUse);
    if (!gpu && !cpu) continue;
    vals[{c.case_name, c.metric, cpu ? c.range : std::string()}].push_back(c.value);
  }
  // The first row of each case, looked up per (case, definition) below; a scan of every row per key made the
  // report quadratic in rows. Hashed: an ordered map of 100,000 names was most of a large report's time.
  // Only scored rows: a case whose every row is invalid (a co-run that overlapped nothing) is listed under "Rows
  // not scored", never beside the others here.
  std::unordered_map<std::string_view, const CaseRow*> row_of;
  std::unordered_set<std::string_view> unscored;
  if (!vals.empty()) {
    row_of.reserve(rs.cases.size());
    for (const auto& r : rs.cases)
      if (r.invalid.empty()) row_of.emplace(r.case_name, &r);
      else unscored.insert(r.case_name);
  }
  std::vector<IdleStat> out;
  for (const auto& [k, v] : vals) {
    const auto& [case_name, metric, mode] = k;
    if (unscored.count(case_name) && !row_of.count(case_name)) continue;
    IdleStat s;
    s.case_name = case_name;
    s.metric = metric;
    s.mode = mode;
    s.median = median_of(v);
    s.ranges = v.size();
    if (const auto r = row_of.find(case_name); r != row_of.end()) s.row = r->second;
    out.push_back(s);
  }
  return out;
}

std::optional<double> batch_of(const IdleStat& st) { return st.row ? st.row->num("batch") : std::nullopt; }

// The claim's chart: decode ranges only, idle % against batch, one panel per definition, one series per
// context, the claim's 60% drawn.
Plot idle_plot(const ReportContext& cx) {
  Plot p{"idleness", "Idleness in decode against batch (median over decode ranges)", "batch", "idle %", true, false, {},
         {"set yrange [0:100]"}};
  p.panel_by = {"definition"};
  std::map<std::map<std::string, std::string>, Line> lines;
  for (const auto& rs : cx.sets)
    for (const auto& st : idle_stats(rs)) {
      const auto b = batch_of(st);
      if (!b || st.case_name.rfind("decode/", 0) != 0 || st.metric == kCpuMemUse) continue;
      std::string def = st.metric;
      for (const auto& [m, name] : kDefinitions)
        if (m == st.metric) def = name;
      std::map<std::string, std::string> key = {{"device", rs.label}, {"definition", def}};
      if (!st.mode.empty()) key["mode"] = st.mode;
      for (const char* k : {"model", "layers"})
        if (!st.row->param(k).empty()) key[k] = st.row->param(k);
      const auto ctx = st.row->num("context") ? st.row->num("context") : st.row->num("ctx");
      if (ctx) key["context"] = tokens(*ctx);
      auto& l = lines[key];
      l.key = key;
      l.pts.emplace_back(*b, st.median);
    }
  // panels in the definitions' order
  for (const auto& [metric, def] : kDefinitions)
    for (auto& [k, l] : lines)
      if (k.at("definition") == def) {
        std::sort(l.pts.begin(), l.pts.end());
        p.lines.push_back(l);
      }
  // The claim is about a GPU: its line is not drawn over the CPU model's compute idleness alone.
  const bool gpu_panel = std::any_of(p.lines.begin(), p.lines.end(), [](const Line& l) {
    return l.key.count("definition") && l.key.at("definition") != kDefinitions.back().second;
  });
  if (!gpu_panel) return p;
  Line claim;
  claim.ref = Line::Ref::horizontal;
  claim.title = "claim: more than 60% idle";
  claim.pts = {{0, 60}};
  p.lines.push_back(claim);
  return p;
}

std::string section_idle(ReportContext& cx) {
  std::string s;
  Plot ts{"pm_sampling", "PM sampling time series", "time (ms)", "value", false, false, {}, {}};
  std::string table;
  std::set<std::string> present;
  std::size_t pm = 0;
  std::vector<std::vector<IdleStat>> stats_of;  // per set, computed once
  bool any_mode = false;
  for (const auto& rs : cx.sets) {
    stats_of.push_back(idle_stats(rs));
    for (const auto& st : stats_of.back()) present.insert(st.metric), any_mode = any_mode || !st.mode.empty();
  }
  for (std::size_t si = 0; si < cx.sets.size(); ++si) {
    const auto& rs = cx.sets[si];
    // One row per case (and mode, on the CPU), one column per definition measured anywhere.
    std::map<std::pair<std::string, std::string>, std::pair<const IdleStat*, std::map<std::string, double>>> by_case;
    const auto& stats = stats_of[si];
    for (const auto& st : stats) {
      auto& c = by_case[{st.case_name, st.mode}];
      if (!c.first || st.metric != kCpuMemUse) c.first = &st;
      c.second[st.metric] = st.median;
    }
    for (const auto& [key, c] : by_case) {
      std::vector<std::string> cells = {lbl(rs), txt(key.first), batch_of(*c.first) ? fmt(*batch_of(*c.first)) : "-"};
      if (any_mode) cells.push_back(key.second.empty() ? "-" : txt(key.second));
      for (const auto& [m, label] : kDefinitions)
        if (present.count(m)) cells.push_back(c.second.count(m) ? fmt(c.second.at(m)) : "-");
      if (present.count(kCpuMemUse)) cells.push_back(c.second.count(kCpuMemUse) ? fmt(c.second.at(kCpuMemUse)) : "-");
      cells.push_back(std::to_string(c.first->ranges));
      table += row(cells);
    }
    std::optional<double> t0;
    for (const auto& c : rs.counters)
      if (c.source == "pm_sampling" && std::isfinite(c.t_start_ns) && (!t0 || c.t_start_ns < *t0)) t0 = c.t_start_ns;
    std::map<std::string, Line> series;
    for (const auto& c : rs.counters) {
      if (c.source != "pm_sampling" || !std::isfinite(c.t_start_ns) || !std::isfinite(c.value)) continue;
      auto& l = series[c.metric];
      l.key = {{"device", rs.label}, {"metric", c.metric}};
      l.style = "lines";
      l.pts.emplace_back((c.t_start_ns - *t0) / 1e6, c.value);
      ++pm;
    }
    for (auto& [k, l] : series) ts.lines.push_back(l);
  }
  if (table.empty() && pm == 0)
    return s + "Not measured: no counters.csv with kvf:idle_* rows or PM samples (the idleness study writes them; on a "
               "GPU after `kvf counters`).\n\n";
  s += cx.chart(idle_plot(cx)) + cx.chart(ts);
  if (!table.empty()) {
    std::vector<std::string> head = {"device", "case", "batch"};
    if (any_mode) head.push_back("mode");
    for (const auto& [m, label] : kDefinitions)
      if (present.count(m)) head.push_back(label + " %");
    if (present.count(kCpuMemUse)) head.push_back("memory in use (achieved / read ceiling) %");
    head.push_back("ranges");
    s += "The chart reads decode ranges only (the claim's phase); the table has every phase. Definitions: SM idle = "
         "no resident warp (memory waits count as busy), issue slots idle, tensor pipe idle (GPU, CUPTI "
         "kvf:idle_sm_pct / kvf:idle_issue_pct / kvf:idle_tensor_pct, one range per step); compute idle = 1 - "
         "achieved FLOP/s over the GEMM ceiling (CPU model, kvf:idle_compute_pct, its cold and hot rows apart, the "
         "share of the read ceiling its bytes use beside it). Medians over ranges.\n\n" +
         header(head) + table;
  }
  s += "\nPM samples: " + std::to_string(pm) + "\n\n";
  return s;
}

std::vector<Verdict> claim2(const ResultSet& rs) {
  std::vector<Verdict> out;
  // (batch, context) of each decode case, from its scored rows (an invalid row's ranges are not counted).
  std::map<std::string, std::pair<double, double>> shape_of;
  for (const auto* r : rs.rows("idleness"))
    if (r->case_name.rfind("decode/", 0) == 0)
      if (const auto b = r->num("batch")) shape_of.emplace(r->case_name, std::make_pair(*b, r->num("context").value_or(r->num("ctx").value_or(0))));
  for (const auto& [metric, name] : kDefinitions) {
    if (metric == "kvf:idle_compute_pct") continue;  // the CPU model's: the claim is about a GPU
    Verdict v{std::string(kClaim2) + " - " + name, rs.label, "not measured", "", kRule2};
    std::map<std::pair<double, double>, std::vector<double>> by_cell;
    std::size_t ranges = 0;
    for (const auto& c : rs.counters) {
      if (c.source != "range" || c.metric != metric || !std::isfinite(c.value)) continue;
      const auto it = shape_of.find(c.case_name);
      if (it == shape_of.end()) continue;
      by_cell[it->second].push_back(c.value);
      ++ranges;
    }
    if (by_cell.empty()) {
      const bool cpu_idleness = std::any_of(rs.counters.begin(), rs.counters.end(), [](const CounterRow& c) {
        return c.metric == "kvf:idle_compute_pct";
      });
      v.figures = rs.backend == "cpu"
                      ? std::string("CPU results: the claim is about a GPU") +
                            (cpu_idleness ? " (CPU compute idleness: section 5)"
                                          : " (and this directory has no CPU idleness counters either)")
                  : rs.has_counters ? "no " + metric + " ranges of decode cases in counters.csv"
                                    : "no counters.csv";
      out.push_back(v);
      continue;
    }
    // "batch 64, context 32K" (no context where the case has none).
    const auto cell_name = [](const std::pair<double, double>& c) {
      return "batch " + fmt(c.first) + (c.second > 0 ? ", context " + tokens(c.second) : "");
    };
    std::string per_cell, not_above;
    std::size_t above = 0;
    double low = 1e300, batch = -1;
    std::pair<double, double> low_cell;
    for (auto& [cell, vals] : by_cell) {
      const double m = median_of(vals);
      per_cell += batch == cell.first ? ", " : std::string(per_cell.empty() ? "B" : "; B") + fmt(cell.first) + " ";
      per_cell += fmt(m) + "%" + (cell.second > 0 ? " at " + tokens(cell.second) : "");
      batch = cell.first;
      if (m > 60) ++above;
      else not_above += (not_above.empty() ? "" : "; ") + cell_name(cell);
      if (m < low) low = m, low_cell = cell;
    }
    v.verdict = above == by_cell.size() ? "supported" : above == 0 ? "refuted" : "mixed";
    v.figures = "decode ranges only (" + std::to_string(ranges) + "), median per batch and context: " + per_cell +
                (v.verdict == "mixed" ? "; above 60% in " + std::to_string(above) + " of " +
                                            std::to_string(by_cell.size()) + " cells, not at " + not_above
                                      : "") +
                "; lowest: " + fmt(low) + "% at " + cell_name(low_cell);
    out.push_back(v);
  }
  return out;
}

// Every idleness row's layers column is checked before its arm: a row with a bad one gets no prediction.
ModelTerm per_layer(std::vector<std::string> arms, std::function<std::optional<double>(Predictor&, int)> f) {
  return {std::move(arms), [f = std::move(f)](Predictor& p) -> std::optional<double> {
            const auto layers = p.count("layers", kMaxLayers);
            if (!layers) return p.none(p.bad_count);
            return f(p, *layers);
          }};
}

// The steps' kernel launches as kernels/decode/decode_gpu.cu issues them (a cuBLASLt matmul counted as one): the
// input copy, then per decode layer RMSNorm, QKV GEMM, RoPE + K/V append, attention (its split merge fused), the
// bf16 cast, O GEMM, RMSNorm, gate-up GEMM, SwiGLU, down GEMM, residual add; a prefill layer has no cast and adds the
// attention's split merge where the row's note says the prefix was split ("KV splits S", S > 1).
constexpr int kDecodeLayerLaunches = 11, kPrefillLayerLaunches = 10;

std::optional<double> step_roof(Predictor& p, int layers, const std::string& what) {
  if (p.r.backend != "cuda") return p.roof(0, what + "roofline(flops, bytes)", true);
  int per_layer_launches = kDecodeLayerLaunches;
  std::string said = " (input copy + " + std::to_string(kDecodeLayerLaunches) + " per layer)";
  if (p.r.param("arm") == "prefill") {
    const bool merge = p.note_count("KV splits ").value_or(1) > 1;
    per_layer_launches = kPrefillLayerLaunches + (merge ? 1 : 0);
    said = " (input copy + " + std::to_string(kPrefillLayerLaunches) + (merge ? " + 1 split merge" : "") +
           " per layer)";
  }
  const int n = 1 + per_layer_launches * layers;
  return p.roof(n, what + "roofline(flops, bytes) + " + std::to_string(n) + " launches" + said, true);
}

std::string gb(double bps) { return fmt(bps / 1e9) + " GB/s"; }

// A co-run step beside a background whose memory demand comes from the device's figures (the run has no alone row
// of it): bytes / min(alone rate, memory bandwidth - demand), and on the CPU the cores time-shared with the
// background's busy threads, as Predictor::corun.
std::optional<double> corun_at(Predictor& p, const CaseRow* alone, double demand, const std::string& what,
                               int busy_threads) {
  if (!p.run_index) return p.none("co-run model: needs this run's alone rows (none given)");
  if (!alone) return p.none("co-run model: no decode-alone row (background none, same shape) in this run");
  if (!(*alone->median_s > 0)) return p.none("co-run model: the decode-alone row's median is 0");
  if (p.g.hbm_tbps <= 0 || p.bytes <= 0) return p.none("co-run model: no memory bandwidth or no decode bytes");
  const double bw = p.g.hbm_tbps * 1e12;
  auto t = corun_s(p.bytes, *alone->median_s, bw, demand);
  if (!t)
    return p.none("co-run model: background demand " + gb(demand) + " >= memory bandwidth " + gb(bw) +
                  ": bandwidth sharing gives no bound");
  const int cores = p.run_index->run().compute_units;
  std::string share;
  if (p.r.backend == "cpu" && busy_threads > 0 && cores > 0) {
    const double ts = double(cores + busy_threads) / cores;
    share = "; core time-sharing: (" + std::to_string(cores) + " cores + " + std::to_string(busy_threads) +
            " busy thread) / " + std::to_string(cores) + " = slowdown " + fmt(ts) + "; the larger of the two slowdowns";
    t = std::max(*t, ts * *alone->median_s);
  }
  p.say("co-run model (bandwidth sharing): decode bytes / min(alone rate " + gb(p.bytes / *alone->median_s) +
        ", memory " + gb(bw) + " - background " + gb(demand) + " = " + what + "); decode alone '" + alone->case_name +
        "' " + us_text(*alone->median_s) + share + "; predicted slowdown " + fmt(*t / *alone->median_s));
  return t;
}

std::optional<double> corun(Predictor& p, int layers) {
  const std::string bg = p.r.param("background"), model = p.r.param("model");
  // A row whose background did not overlap its steps (studies/idleness/background.hpp) measured no co-run.
  if (p.r.note.find("co-run INVALID") != std::string::npos)
    return p.none("the row's background did not overlap its steps (its note: co-run INVALID): no co-run to predict");
  if (bg == "none")
    return step_roof(p, layers, "decode step alone: ");
  if (bg == "recompute_alone")
    return p.roof(p.r.backend == "cuda" ? 2 : 0,
                  "recompute one page alone: roofline(flops, bytes) + 2 launches (GEMM, RoPE+write)");
  if (bg == "recompute") {
    const CaseRow* alone =
        p.alone_row("idleness", {{"arm", "corun"}, {"model", model}, {"batch", p.r.param("batch")},
                                 {"context", p.r.param("context")}, {"layers", p.r.param("layers")}, {"background", "none"}});
    return p.corun(alone, p.alone_row("idleness", {{"arm", "corun"}, {"model", model}, {"background", "recompute_alone"}}),
                   1, "recompute one page alone", 1);
  }
  if (bg == "copy" || bg == "file") {
    const CaseRow* alone =
        p.alone_row("idleness", {{"arm", "corun"}, {"model", model}, {"batch", p.r.param("batch")},
                                 {"context", p.r.param("context")}, {"layers", p.r.param("layers")}, {"background", "none"}});
    const bool gpu = p.r.backend == "cuda";
    if (bg == "file") {
      // O_DIRECT reads DMA into memory at the disk's rate; the reading thread mostly waits on the disk.
      if (p.g.disk_gbps <= 0) return p.none("co-run model: no disk figure (no file-tier rows calibrated it)");
      return corun_at(p, alone, p.g.disk_gbps * 1e9, "file bytes at the disk rate " + fmt(p.g.disk_gbps) + " GB/s", 0);
    }
    if (gpu) {
      // H2D writes and D2H reads HBM at the host link's rate, one direction at a time (one stream).
      if (p.g.host_link_gbps <= 0) return p.none("co-run model: no host link figure");
      return corun_at(p, alone, p.g.host_link_gbps * 1e9,
                      "copy bytes at the host link rate " + fmt(p.g.host_link_gbps) + " GB/s", 0);
    }
    // CPU: one memcpy thread among the step's team, one streaming thread per core: a fair share of the memory
    // bandwidth, read + write, bw / (cores + 1).
    const int cores = p.run_index ? p.run_index->run().compute_units : 0;
    if (cores <= 0) return p.none("co-run model: meta.json gives no core count for the copy thread's share");
    return corun_at(p, alone, p.g.hbm_tbps * 1e12 / (cores + 1),
                    "copy bytes (read + write) of one of " + std::to_string(cores + 1) +
                        " streaming threads, memory bandwidth / " + std::to_string(cores + 1),
                    1);
  }
  return p.none("co-run background '" + bg + "' has no model term");
}

// The fp32 twins' peak on the CPU: the best OpenBLAS fp32 GEMM row, this study's (gemm_lib=openblas_fp32; in runs
// before that column the CPU rows without a gemm_lib were those) or the frontier study's (the same library, no
// gemm_lib column). Each source gives its best row of either mode (best_value, as for every compute ceiling), and
// the higher of those is the peak. A GPU run has no fp32 twin.
CalibrationTerm fp32_gemm_term() {
  CalibrationTerm t;
  t.field = "fp32_tflops";
  t.rank = 1;
  t.measure = [](const ResultSet& rs) -> std::vector<Calibrated> {
    if (rs.backend == "cuda") return {};
    std::optional<std::pair<double, std::string>> best;
    std::string from;
    for (const auto& [study, lib] : {std::pair{"idleness", "openblas_fp32"}, {"idleness", ""}, {"frontier", ""}}) {
      const auto v = best_value(rs, study, {{"arm", "gemm_ceiling"}, {"gemm_lib", lib}}, true);
      if (v && (!best || v->first > best->first)) best = v, from = study;
    }
    if (!best) return {};
    return {{"fp32_tflops", best->first,
             fmt(best->first) + " TFLOP/s, best OpenBLAS fp32 gemm_ceiling row, " + from + " (" + best->second +
                 ") in " + rs.dir}};
  };
  return t;
}

}  // namespace

StudyReport idleness_report() {
  StudyReport s;
  s.study = "idleness";
  s.sections = {{"Idleness in decode", section_idle}};
  s.verdicts = {{2, kClaim2, claim2, nullptr}};
  s.terms = {
      per_layer({"gemm_ceiling"},
                [](Predictor& p, int) {
                  return p.roof(1, "flops / GEMM peak", p.r.param("gemm_lib") != "onednn_bf16");
                }),
      per_layer({"read_ceiling"}, [](Predictor& p, int) { return p.roof(1, "bytes / memory bandwidth"); }),
      per_layer({"decode", "prefill"},
                [](Predictor& p, int layers) { return step_roof(p, layers, ""); }),
      per_layer({"corun"}, corun),
      per_layer({}, [](Predictor& p, int) { return p.none("idleness arm '" + p.r.param("arm") + "' has no model term"); }),
  };
  // The GEMM ceiling when the frontier study measured none (its rank is 0).
  // Its read ceiling is a read of the same memory as the stream study's: the better of the two is the ceiling.
  s.calibration = {best_row_term("bf16_tflops", 1, "idleness", {{"arm", "gemm_ceiling"}}, true), fp32_gemm_term(),
                   best_row_term("hbm_tbps", 0, "idleness", {{"arm", "read_ceiling"}}, false, 1000, true)};
  return s;
}

}  // namespace kvf::report
