// `kvf report`: report.md (deterministic: input order, fixed number format, no clock but meta.json's),
// gnuplot charts (.dat + .gp written, SVG + PNG drawn when gnuplot runs) and a self-contained report.html.
// The core's own sections are the inputs, the verdicts table and measured-vs-predicted; every other section
// comes from a study's plug-in, numbered in the order of the study list.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "internal.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"

namespace kvf::report {

using namespace md;

GpuSpec ReportContext::spec_of(const ResultSet& rs) const { return spec_from_results(studies, rs, gpus); }

const Shape* ReportContext::model() const {
  const Shape* m = nullptr;
  for (const auto& sh : shapes)
    if (sh.name == o.model) m = &sh;
  return m;
}

std::string ReportContext::chart(Plot p) {
  if (!detail::has_points(p)) return "";
  const std::string name = p.name, fixed = lay_out(p).fixed;
  plots.push_back(std::move(p));
  // The parameters every series shares, said once: the legend names only what differs.
  return "![" + name + "](" + name + ".svg)\n\n" + (fixed.empty() ? "" : "Every series: " + md::txt(fixed) + ".\n\n");
}

void ReportContext::warn(const std::string& w) {
  if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) warnings.push_back(w);
}

namespace {

using Ctx = ReportContext;

// Every commit a directory's results came from: its meta.json's, or each source's of a merged directory.
std::string commits_of(const ResultSet& r) {
  std::vector<std::string> shas;
  for (const auto& run : r.runs)
    if (!run.git_sha.empty() && std::find(shas.begin(), shas.end(), run.git_sha) == shas.end()) shas.push_back(run.git_sha);
  if (shas.empty() && !r.git_sha.empty()) shas.push_back(r.git_sha);
  std::string out;
  for (const auto& g : shas) out += (out.empty() ? "" : ", ") + txt(g);
  return out.empty() ? "-" : out;
}

std::string provenance(Ctx& cx) {
  std::string t;
  int i = 0;
  for (const auto& r : cx.sets) {
    ++i;
    for (const auto& run : r.runs)
      t += row({std::to_string(i), txt(run.study), run.source.empty() ? "-" : txt(run.source),
                run.git_sha.empty() ? "-" : txt(run.git_sha), run.status.empty() ? "-" : txt(run.status),
                run.started.empty() ? "-" : txt(run.started), run.finished.empty() ? "-" : txt(run.finished),
                run.command.empty() ? "-" : txt(run.command)});
  }
  if (t.empty()) return "";
  return fold("Provenance: every study's run, its commit and command line",
              header({"#", "study", "merged from", "git", "status", "started (UTC)", "finished (UTC)", "command"}) + t);
}

// Every ceiling the measured rows name, per directory and mode, with the values they were stated against: the
// bounds every pct_of_ceiling divides by, measured in the same run, at a glance. The ceiling's own rows (those its
// label matches) are counted apart from the rows stated against it; a row naming a ceiling without a value is one
// whose run had no such measurement in that mode, or whose measurement is not scored.
std::string ceilings_table(Ctx& cx) {
  struct Seen {
    std::optional<CeilingRef> ref;
    std::vector<std::string> values;  // as shown, distinct (several runs when merged)
    std::size_t own = 0, own_unscored = 0, users = 0, without = 0;
  };
  const auto own_row = [](const Seen& c, const CaseRow& r) {
    return c.ref && r.study == c.ref->study &&
           std::all_of(c.ref->match.begin(), c.ref->match.end(),
                       [&](const Param& m) { return r.param(m.name) == m.value; });
  };
  std::string t;
  std::size_t n = 0;
  for (const auto& rs : cx.sets) {
    std::map<std::pair<std::string, std::string>, Seen> by;  // (label, mode)
    for (const auto& r : rs.cases) {
      if (r.ceiling.empty() || !r.measured() || !r.invalid.empty()) continue;
      Seen& c = by[{r.ceiling, r.mode}];
      if (!c.ref) c.ref = CeilingRef::parse(r.ceiling);
      if (own_row(c, r)) ++c.own;
      else if (r.ceiling_value) ++c.users;
      else ++c.without;
      if (!r.ceiling_value) continue;
      const std::string v = r.ceiling.ends_with(":gbps")     ? rate(*r.ceiling_value)
                            : r.ceiling.ends_with(":tflops") ? fmt(*r.ceiling_value) + " TFLOP/s"
                                                             : fmt(*r.ceiling_value) + " (unit unknown)";
      if (std::find(c.values.begin(), c.values.end(), v) == c.values.end()) c.values.push_back(v);
    }
    for (auto& [key, c] : by) {
      for (const auto& r : rs.cases)  // the ceiling measured in this mode, but not scored (repeats that disagree)
        if (r.mode == key.second && r.measured() && !r.invalid.empty() && own_row(c, r)) ++c.own_unscored;
      std::string values;
      for (const auto& v : c.values) values += (values.empty() ? "" : ", ") + v;
      if (values.empty())
        values = c.own_unscored ? "measured, not scored (Rows not scored)" : "not measured in this mode here";
      ++n;
      t += row({lbl(rs), txt(key.first), txt(key.second), values, std::to_string(c.own), std::to_string(c.users),
                std::to_string(c.without)});
    }
  }
  if (!n) return "";
  const std::string table = header({"device", "ceiling (study:params:metric)", "mode", "value (each run)",
                                    "its own rows", "rows stated against it", "rows naming it, without a value"}) +
                            t;
  return "### Ceilings the rows are stated against\n\n" +
         (n <= 12 ? table : fold(std::to_string(n) + " ceilings by mode", table)) + "\n";
}

// Rows faster than the ceiling they are stated against: a ceiling that is beaten is the most its own loop did
// in the run, not a bound, and every percentage of it overstates how near a row comes to the hardware.
std::string above_ceiling(Ctx& cx) {
  std::string t;
  std::size_t n = 0;
  for (const auto& rs : cx.sets)
    for (const auto& r : rs.cases) {
      // the ceiling row itself states 100 up to rounding
      if (!r.measured() || !r.invalid.empty() || !r.pct_of_ceiling || *r.pct_of_ceiling <= 100 * (1 + 1e-9)) continue;
      ++n;
      // rate is bytes (or flops) over time: at the row's q3 time it is median / q3 of the median's rate
      const bool spread = r.q3_s && *r.q3_s > 0;
      t += row({lbl(rs), txt(r.study), txt(r.case_name), txt(r.mode), r.ceiling.empty() ? "-" : txt(r.ceiling),
                fmt(*r.pct_of_ceiling), spread ? fmt(*r.pct_of_ceiling * *r.median_s / *r.q3_s) : "-"});
    }
  std::string s = "\n### Rows above their ceiling\n\n";
  if (!n) return s + "None: no row is faster than the ceiling it is stated against.\n";
  s += "These rows ran faster than the ceiling of their run that they are stated against (`pct_of_ceiling` above "
       "100): that ceiling is the most its own loop did, not what the hardware allows, and every percentage of it "
       "(theirs and other rows') is against that loop. The last column is the row's percentage at its q3 time: "
       "above 100 there, the row beats the ceiling beyond its own spread.\n\n";
  const std::string table =
      header({"device", "study", "case", "mode", "ceiling", "% of ceiling", "% at q3 time"}) + t;
  return s + (n <= 10 ? table : fold(std::to_string(n) + " rows", table));
}

// Rows whose samples other work interrupted: the harness notes "machine busy" when the process was switched out
// involuntarily more than a quiet machine does (bench_run.cpp). Said only where some row says it (runs before
// 2026-11-29 do not record it, so "none" would claim what they never measured).
std::string busy_machine(Ctx& cx) {
  constexpr std::string_view marker = "machine busy: ";  // harness/src/bench_detail.hpp's kBusyMachineMarker + ": "
  std::string t;
  std::size_t n = 0;
  for (const auto& rs : cx.sets)
    for (const auto& r : rs.cases) {
      const auto at = r.note.find(marker);
      if (at == std::string::npos) continue;
      ++n;
      const auto from = at + marker.size(), end = r.note.find(':', from);  // the count, up to the next ':'
      t += row({lbl(rs), txt(r.study), txt(r.case_name), txt(r.mode), txt(r.note.substr(from, end - from))});
    }
  if (!n) return "";
  return "\n### Rows measured on a busy machine\n\n" + std::to_string(n) +
         " rows: other work took the CPUs while their samples ran (involuntary context switches of the bench "
         "process above 50/s per thread): their medians may hold its stalls, and so may any figure stated against "
         "them. Rerun on a quiet machine before trusting them.\n\n" +
         fold(std::to_string(n) + " rows", header({"device", "study", "case", "mode", "switches"}) + t);
}

// Cases whose hot run was slower than their cold one beyond both rows' spreads (by 10% or more): a hot run reads
// what the cold one left in cache and should not be slower by itself, so the machine likely changed between the
// modes (other work, a clock or bandwidth drift), and any figure that sets rows measured minutes apart side by
// side carries that drift. Said only where some case shows it.
std::string hot_slower_than_cold(Ctx& cx) {
  std::string t;
  std::size_t n = 0;
  for (const auto& rs : cx.sets) {
    std::map<std::pair<std::string, std::string>, std::pair<const CaseRow*, const CaseRow*>> by_case;  // cold, hot
    for (const auto& r : rs.cases) {
      if (!r.measured() || !r.invalid.empty() || (r.mode != "cold" && r.mode != "hot")) continue;
      auto& slot = by_case[{r.study, r.case_name}];
      (r.mode == "cold" ? slot.first : slot.second) = &r;
    }
    for (const auto& [key, rows] : by_case) {
      const auto [cold, hot] = rows;
      if (!cold || !hot) continue;
      const double cold_q3 = cold->q3_s.value_or(*cold->median_s), hot_q1 = hot->q1_s.value_or(*hot->median_s);
      if (!(hot_q1 > cold_q3 && *hot->median_s >= 1.1 * *cold->median_s)) continue;
      ++n;
      t += row({lbl(rs), txt(key.first), txt(key.second), us(cold->median_s), us(hot->median_s),
                fmt(*hot->median_s / *cold->median_s)});
    }
  }
  if (!n) return "";
  return "\n### Hot runs slower than cold ones\n\n" + std::to_string(n) + (n == 1 ? " case" : " cases") +
         " ran slower hot than cold, beyond both rows' q1..q3 spreads and by 10% or more. A hot run reads what "
         "the cold one left in cache and should not be slower by itself: the machine likely changed between the two "
         "modes (other work, a clock or bandwidth drift), and figures that set rows measured at different times side "
         "by side carry that drift.\n\n" +
         fold(std::to_string(n) + (n == 1 ? " case" : " cases"),
              header({"device", "study", "case", "cold (us)", "hot (us)", "hot / cold"}) + t);
}

std::string section_inputs(Ctx& cx) {
  std::string s = "## Inputs\n\n";
  s += header({"#", "directory", "device", "backend", "suite", "git", "started (UTC)", "finished (UTC)", "case rows",
               "samples", "counters", "1-min load (max) / hw threads", "thread placement"});
  int i = 0;
  for (const auto& r : cx.sets)
    s += row({std::to_string(++i), txt(r.dir), lbl(r), txt(r.backend), r.has_meta ? txt(r.suite_version) : "-",
              commits_of(r), r.started.empty() ? "-" : txt(r.started),
              r.finished.empty() ? "-" : txt(r.finished), std::to_string(r.cases.size()),
              r.has_samples ? std::to_string(r.n_samples) : "missing",
              r.has_counters ? std::to_string(r.counters.size()) : "missing",
              r.max_load < 0 ? "-"
                             : fmt(r.max_load) +
                                   (r.hardware_threads > 0 ? " / " + std::to_string(r.hardware_threads) : ""),
              r.thread_placement.empty() ? "-" : txt(r.thread_placement)});
  s += "\n" + provenance(cx) + ceilings_table(cx);
  s += "### What is missing\n\n";
  bool any = false;
  for (const auto& r : cx.sets)
    for (const auto& m : r.missing) {
      s += "- " + lbl(r) + ": " + txt(m) + "\n";
      any = true;
    }
  if (!any) s += "Nothing: every file and study is present.\n";
  std::string invalid;
  std::size_t n_invalid = 0;
  for (const auto& r : cx.sets)
    for (const auto& c : r.cases)
      if (!c.invalid.empty()) {
        ++n_invalid;
        invalid += "- " + lbl(r) + ": " + txt(c.study) + " " + txt(c.case_name) + " (" + txt(c.mode) + "), " +
                   txt(c.where) + ": " + txt(c.invalid) + "\n";
      }
  s += "\n### Rows not scored\n\n";
  if (!n_invalid) s += "None: every row passed its own checks and every case name is unique per directory.\n";
  else if (n_invalid <= 10) s += invalid;
  else s += fold(std::to_string(n_invalid) + " rows: listed, never scored by a verdict or a section", invalid);
  s += above_ceiling(cx) + busy_machine(cx) + hot_slower_than_cold(cx);
  s += "\n### Input warnings\n\n";
  any = false;
  for (const auto& r : cx.sets)
    for (const auto& w : r.warnings) {
      s += "- " + lbl(r) + ": " + txt(w) + "\n";
      any = true;
    }
  if (!any) s += "None: every input row was read.\n";
  return s + "\n";
}

// Throttled samples (GPU: SM clock below 75% of the default): left out of every median by the harness.
std::string throttled_note(Ctx& cx) {
  std::string list;
  long cases = 0, total = 0;
  for (const auto& rs : cx.sets)
    for (const auto& r : rs.cases)
      if (r.throttled_samples > 0) {
        ++cases;
        total += r.throttled_samples;
        list += "- " + lbl(rs) + ": " + txt(r.study) + " " + txt(r.case_name) + " (" + txt(r.mode) + "): " +
                std::to_string(r.throttled_samples) + " throttled, " + std::to_string(r.samples) + " kept\n";
      }
  if (!cases) {
    const bool cpu =
        std::any_of(cx.sets.begin(), cx.sets.end(), [](const ResultSet& rs) { return rs.backend == "cpu"; });
    return std::string("Throttled samples: none (every case row has throttled_samples 0") +
           (cpu ? "; the CPU backend never flags any" : "") + ").\n";
  }
  return "Throttled samples: " + std::to_string(total) + " in " + std::to_string(cases) +
         " case rows (SM clock below 75% of the default). Every figure above and below excludes them: medians are "
         "over the kept samples only.\n\n" + list;
}

std::string section_verdicts(Ctx& cx) {
  std::string s = "## Verdicts\n\n";
  s += header({"claim", "device", "verdict", "figures", "model predicts"});
  std::vector<std::string> rule_texts;
  for (const auto& [rule, v] : detail::judge_all(cx.studies, cx.sets)) {
    const ResultSet* of = nullptr;
    for (const auto& r : cx.sets)
      if (r.label == v.device) of = &r;
    s += row({v.claim, of ? lbl(*of) : txt(v.device), "**" + v.verdict + "**", txt(v.figures),
              of && rule->model_says ? rule->model_says(cx, *of) : "-"});
    rule_texts.push_back(v.rule);
  }
  s += "\n";
  for (const auto& st : cx.studies)
    if (st.summary) s += st.summary(cx);
  s += throttled_note(cx) + "\n";
  std::string rules;
  std::set<std::string> seen;
  for (const auto& r : rule_texts)
    if (seen.insert(r).second) rules += "- " + r + "\n";
  return s + fold("How each verdict is decided (docs/report.md)", rules);
}

// The ceilings every prediction of a directory used, and where each came from.
std::string ceilings_of(const ResultSet& rs, const GpuSpec& g) {
  const std::string fp32 = g.fp32_tflops > 0 && g.fp32_tflops != g.bf16_tflops
                               ? " (fp32 twins " + fmt(g.fp32_tflops) + ")"
                               : std::string();
  // A figure the directory and the spec do not give (a CPU has no host link) is "-", as every missing number.
  const auto given = [](double v, const char* unit) { return v > 0 ? fmt(v) + unit : std::string("-"); };
  std::string c = "- " + lbl(rs) + ": memory " + fmt(g.hbm_tbps * 1000) + " GB/s, compute " +
                  given(g.bf16_tflops, " TFLOP/s") + fp32 + ", host link " + given(g.host_link_gbps, " GB/s") +
                  ", launch " + fmt(g.launch_us) +
                  " us, per copy " + fmt(g.copy_fixed_us) + " us" +
                  (g.copy_issue_us > 0 ? " (" + fmt(g.copy_issue_us) + " us per further copy of a series)" : "") +
                  ", disk " +
                  (g.disk_gbps > 0 ? fmt(g.disk_gbps) + " GB/s + " + fmt(g.disk_latency_us) + " us per read"
                                   : std::string("- (no disk figure: no file-tier rows)")) +
                  (g.remote_gbps > 0 ? ", remote tier " + fmt(g.remote_gbps) + " GB/s + " + fmt(g.remote_descriptor_us) +
                                           " us per descriptor + " + fmt(g.remote_fixed_us) + " us per transfer"
                                     : std::string()) +
                  "; measured: ";
  // A field a term had to assume (a disk latency with one read size) is listed, not counted as measured.
  const auto assumed = std::count_if(g.calibration.begin(), g.calibration.end(),
                                     [](const std::string& f) { return f.find(" <- assumed") != std::string::npos; });
  c += std::to_string(g.calibration.size() - std::size_t(assumed)) + " field(s)" +
       (assumed ? ", " + std::to_string(assumed) + " assumed" : "");
  for (const auto& f : g.calibration) c += "; " + txt(f);
  return c + "\n";
}

// What the plug-ins say about their ceilings and terms, above the chart.
std::string model_notes(const Ctx& cx) {
  std::string s = "Ceilings used (spec sheet, replaced by the ceilings measured in the same directory";
  for (const auto& st : cx.studies)
    for (const auto& t : st.calibration)
      if (!t.note.empty()) s += "; " + t.note;
  s += "):\n\n";
  return s;
}

std::string section_predicted(Ctx& cx, int number) {
  std::string s = "## " + std::to_string(number) + ". Measured against model-predicted, every arm\n\n";
  if (!cx.gpus_error.empty()) return s + "Not available: " + txt(cx.gpus_error) + "\n\n";
  Plot p{"predicted", "Measured vs predicted (median, us)", "predicted (us)", "measured (us)", true, true, {}, {}, 10};
  std::string table, ceilings;
  double lo = 1e300, hi = 0;
  for (const auto& rs : cx.sets) {
    const GpuSpec g = cx.spec_of(rs);
    ceilings += ceilings_of(rs, g);
    std::map<std::string, Line> lines;
    const RunIndex index(rs);
    for (const auto& r : rs.cases) {
      if (!r.measured() || !r.invalid.empty()) continue;  // listed under "Rows not scored", never set against a model
      std::string why;
      const auto pr = predict_row(cx.studies, g, r, &why, &index, cx.shapes_error.empty() ? &cx.shapes : nullptr);
      const std::string spread = r.q1_s && r.q3_s ? us(r.q1_s) + ".." + us(r.q3_s) : "-";
      table += row({lbl(rs), txt(r.study), txt(r.case_name), txt(r.mode), us(r.median_s), spread, us(pr),
                    pr ? fmt(*pr / *r.median_s) : "-",
                    txt(pr ? why : "no prediction: " + (why.empty() ? std::string("no model term") : why))});
      if (pr && *pr > 0 && *r.median_s > 0) {
        auto& l = lines[r.study];
        l.title = rs.label + " " + r.study;
        l.style = "points";
        l.pts.emplace_back(*pr * 1e6, *r.median_s * 1e6);
        lo = std::min({lo, *pr * 1e6, *r.median_s * 1e6});
        hi = std::max({hi, *pr * 1e6, *r.median_s * 1e6});
      }
    }
    for (auto& [k, l] : lines) p.lines.push_back(l);
  }
  if (table.empty()) return s + "Not measured: no measured case rows.\n\n";
  if (hi > 0) {
    Line d;
    d.title = "measured = predicted";
    d.style = "lines dt 2 lc rgb 'gray'";
    d.pts = {{lo, lo}, {hi, hi}};
    p.lines.push_back(d);
  }
  s += model_notes(cx) + ceilings + "\n";
  std::string notes;
  for (const auto& st : cx.studies)
    if (!st.model_note.empty()) notes += (notes.empty() ? "" : " ") + st.model_note;
  if (!notes.empty()) s += notes + " These are models: docs/report.md states each.\n\n";
  s += cx.chart(p);
  return s + fold("Every measured row against its prediction",
                  header({"device", "study", "case", "mode", "measured us (median)", "q1..q3 us", "predicted us",
                          "predicted/measured", "model term"}) +
                      table);
}

// Every CUDA-graph row (launch=graph; its case name is the eager row's + "/graph") beside its eager row: what the
// kernel boundaries cost when one graph launch replaces the kernels' launches. Both are timed behind the blocking
// kernel, so the host's launch calls are hidden in both. "" when no directory has graph rows.
std::string section_graphs(Ctx& cx, int number) {
  std::string table;
  for (const auto& rs : cx.sets) {
    std::map<std::string, const CaseRow*> eager;
    for (const auto& r : rs.cases)
      if (r.measured() && r.invalid.empty() && r.param("launch") != "graph")
        eager.emplace(r.key(), &r);
    for (const auto& r : rs.cases) {
      const std::string suffix = "/graph";
      if (r.param("launch") != "graph" || !r.measured() || !r.invalid.empty() || r.case_name.size() <= suffix.size() ||
          r.case_name.compare(r.case_name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string base = r.case_name.substr(0, r.case_name.size() - suffix.size());
      const auto it = eager.find(r.study + "\x1f" + base + "\x1f" + r.mode);
      if (it == eager.end()) continue;
      const Ratio q = median_ratio(r, *it->second);
      table += row({lbl(rs), txt(r.study), txt(base), txt(r.mode), us(it->second->median_s), us(r.median_s),
                    us(*it->second->median_s - *r.median_s), txt(q.text())});
    }
  }
  if (table.empty()) return "";
  return "## " + std::to_string(number) + ". Eager launches against one CUDA graph, every multi-kernel arm\n\n" +
         "Both rows run the same kernels with the same arguments, timed behind the blocking kernel (the host's launch "
         "calls hidden in both): the difference is what the kernel boundaries cost on the GPU.\n\n" +
         fold("Every graph row beside its eager row",
              header({"device", "study", "case", "mode", "eager us", "graph us", "saved us", "graph/eager [95%]"}) +
                  table);
}

Ctx make_ctx(const StudyReports& studies, const std::vector<ResultSet>& sets, const ReportOptions& o) {
  Ctx cx{studies, sets, o, {}, {}, {}, {}, {}, {}};
  try {
    cx.gpus = load_gpus(o.gpus_path.empty() ? default_gpus_path() : o.gpus_path);
  } catch (const UsageError& e) {
    cx.gpus_error = e.what();
  }
  try {
    cx.shapes = load_shapes(o.models_path);
  } catch (const UsageError& e) {
    cx.shapes_error = e.what();
  }
  return cx;
}

std::string render(Ctx& cx, const std::vector<std::string>& chart_notes) {
  std::string s = "# kvfrontier report\n\n";
  s += "Medians of raw samples; every GPU figure comes from the directories below, every prediction from "
       "data/gpus.json peaks replaced by ceilings measured in the same directory. A claim without its inputs is "
       "\"not measured\".\n\n";
  s += section_verdicts(cx);
  s += section_inputs(cx);
  int number = 0;
  for (const auto& st : cx.studies)
    for (const auto& sec : st.sections)
      if (!sec.present || sec.present(cx)) s += "## " + std::to_string(++number) + ". " + sec.title + "\n\n" + sec.body(cx);
  const std::string graphs = section_graphs(cx, number + 1);
  if (!graphs.empty()) ++number;
  s += graphs;
  s += section_predicted(cx, number + 1);
  if (!chart_notes.empty()) {
    s += "## Charts\n\n";
    for (const auto& n : chart_notes) s += "- " + n + "\n";
    s += "\n";
  }
  return s;
}

}  // namespace

std::string render_markdown(const StudyReports& studies, const std::vector<ResultSet>& sets, const ReportOptions& o,
                            const std::vector<std::string>& chart_notes) {
  Ctx cx = make_ctx(studies, sets, o);
  return render(cx, chart_notes);
}

ReportResult write_report(const StudyReports& studies, const std::vector<ResultSet>& sets, const ReportOptions& o) {
  ReportResult res;
  const fs::path dir = o.out_dir.empty() ? fs::path(sets.at(0).dir) / "report" : fs::path(o.out_dir);
  std::error_code ec;
  // The default report directory lies inside a results directory someone else may have made: a symlink
  // there would send every file the report writes (and gnuplot's output) somewhere else.
  if (o.out_dir.empty() && fs::is_symlink(dir, ec))
    throw UsageError(dir.string() + ": is a symbolic link (refused: the report writes only into a real directory; "
                     "pass --out DIR)");
  make_directory(dir, o.out_dir.empty() ? "" : "--out");
  res.dir = dir.string();
  // First pass collects the charts; their notes (gnuplot ran or not) go into the markdown of the second.
  Ctx cx = make_ctx(studies, sets, o);
  (void)render(cx, {});
  std::vector<std::string> notes, drawn;
  ::unlink((dir / "gnuplot.log").c_str());
  for (const auto& p : cx.plots) {
    detail::write_plot(p, dir);
    res.files.push_back((dir / (p.name + ".gp")).string());
    // A chart of an earlier run (or one planted in a shared directory) is never shown as this run's.
    for (const char* ext : {".svg", ".png"}) ::unlink((dir / (p.name + ext)).c_str());
  }
  if (!o.charts) {
    notes.push_back("charts not drawn (--no-charts): .dat and .gp files are written; run `gnuplot NAME.gp` in this directory");
  } else {
    bool missing = false;
    for (const auto& p : cx.plots) {
      if (missing) break;
      const std::string err = detail::run_gnuplot(o.gnuplot, dir, p.name + ".gp");
      if (err.empty()) {
        for (const char* ext : {".svg", ".png"}) {
          const fs::path f = dir / (p.name + ext);
          if (!fs::is_regular_file(fs::symlink_status(f, ec)) || fs::file_size(f, ec) == 0 || ec) {
            res.warnings.push_back(f.string() + ": empty or not written");
          } else {
            res.files.push_back(f.string());
            if (std::string(ext) == ".svg") drawn.push_back(p.name + ext);
          }
        }
        res.gnuplot_ran = true;
      } else {
        res.warnings.push_back(err);
        if (err.find("not found") != std::string::npos || err.find("cannot run") != std::string::npos) missing = true;
      }
    }
    if (missing) notes.push_back("gnuplot not found: charts not drawn; .dat and .gp files are written (install gnuplot-nox)");
  }
  Ctx cx2 = make_ctx(studies, sets, o);
  const std::string md = render(cx2, notes);
  res.warnings.insert(res.warnings.end(), cx2.warnings.begin(), cx2.warnings.end());
  detail::write_new_file(dir / "report.md", md);
  res.files.push_back((dir / "report.md").string());
  detail::write_new_file(dir / "report.html", markdown_to_html(md, dir.string(), drawn));
  res.files.push_back((dir / "report.html").string());
  return res;
}

}  // namespace kvf::report
