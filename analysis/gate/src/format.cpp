// Gate output: a Markdown report for a pull-request comment, a CSV table, and a one-line summary.
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "kvf/csv.hpp"
#include "kvf/gate.hpp"

namespace kvf::gate {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string signed_pct(double f) { return fmt("%+.1f%%", 100.0 * f); }
std::string pct(double f) { return fmt("%.1f%%", 100.0 * f); }

std::string p_value(double p) { return p < 1e-4 ? fmt("%.1e", p) : fmt("%.2g", p); }

// 4 significant digits (trailing zeros kept) in the largest unit that keeps the number >= 1.
std::string duration(double s) {
  auto in = [](double v, const char* unit) {
    return (v >= 1000 ? fmt("%.0f", v) : fmt("%#.4g", v)) + " " + unit;
  };
  if (s >= 1) return in(s, "s");
  if (s >= 1e-3) return in(s * 1e3, "ms");
  if (s >= 1e-6) return in(s * 1e6, "us");
  return in(s * 1e9, "ns");
}

std::string geomean_text(const GateReport& r) {
  return std::string(r.paired ? "geomean new/base " : "geomean current/baseline ") + fmt("%.3f", r.geomean_ratio) + " (" + signed_pct(r.geomean_ratio - 1) +
         ") over " + std::to_string(r.compared) + (r.compared == 1 ? " case" : " cases");
}

std::string counts_text(const GateReport& r) {
  std::string s;
  for (auto [v, word] : {std::pair{Verdict::slower, "slower"}, {Verdict::faster, "faster"},
                         {Verdict::same, "same"}, {Verdict::noisy, "noisy"}, {Verdict::new_case, "new"},
                         {Verdict::missing, "missing"}, {Verdict::skipped, "skipped"}}) {
    if (!s.empty()) s += ", ";
    s += std::to_string(r.count(v)) + " " + word;
  }
  return s;
}

// Text from the results (case names, devices, notes) in Markdown: a '|' would end the cell, a line
// break the row, and '<', '`', '*', '_', '[' would become HTML, code, emphasis or a link in a
// pull-request comment. Backslash escapes keep them literal; other control characters become '?'.
std::string cell(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n' || ch == '\r' || ch == '\t') out += ' ';
    else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) out += '?';
    else if (std::string_view("\\`*_[]<>|~!#").find(ch) != std::string_view::npos) (out += '\\') += ch;
    else out += ch;
  }
  return out;
}

// Inside a code span Markdown processes no escapes: only a backtick ends it (it becomes '), and in a
// table a '|' still ends the cell (GitHub honours "\\|" there).
std::string code(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n' || ch == '\r' || ch == '\t') out += ' ';
    else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) out += '?';
    else if (ch == '`') out += '\'';
    else if (ch == '|') out += "\\|";
    else out += ch;
  }
  return out;
}

std::string md_row(const CaseResult& c) {
  const std::string verdict = c.verdict == Verdict::slower ? "**SLOWER**" : to_string(c.verdict);
  std::string row = "| " + verdict + " | `" + code(c.label) + "` | ";
  if (c.compared) {
    row += duration(c.median_base) + " | " + duration(c.median_cur) + " | " + signed_pct(c.change) + " | " +
           p_value(c.p) + " (" + p_value(c.p_holm) + ") | " +
           (std::isfinite(c.detectable) ? pct(c.detectable) : std::string("none")) + " | " +
           std::to_string(c.runs_base) + " | ";
  } else {
    row += "| | | | | | ";  // six empty cells
  }
  row += std::to_string(c.n_base) + " / " + std::to_string(c.n_cur) + " | " + cell(c.note) + " |\n";
  return row;
}

const char* kTableHead =
    "| verdict | case | baseline median | current median | change | p (Holm) | detectable | baseline runs "
    "| samples b / c | note |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";

// A/B mode: the interval and every round's ratio take the baseline runs' and the samples' place.
const char* kPairedHead =
    "| verdict | case | base | new | change [CI] | p (Holm) | detectable | new/base per round | note |\n"
    "|---|---|---:|---:|---:|---:|---:|---|---|\n";

std::string bound(double v) { return std::isfinite(v) ? signed_pct(v) : (v > 0 ? "+inf" : "-inf"); }

std::string ratios(const CaseResult& c, const char* sep) {
  std::string s;
  for (double x : c.round_ratios) s += (s.empty() ? "" : sep) + fmt("%.3f", x);
  return s;
}

std::string md_row_paired(const CaseResult& c) {
  const std::string verdict = c.verdict == Verdict::slower ? "**SLOWER**" : to_string(c.verdict);
  std::string row = "| " + verdict + " | `" + code(c.label) + "` | ";
  if (c.compared) {
    row += duration(c.median_base) + " | " + duration(c.median_cur) + " | " + signed_pct(c.change) + " [" +
           bound(c.ci_lo) + ", " + bound(c.ci_hi) + "] | " + p_value(c.p) + " (" + p_value(c.p_holm) + ") | " +
           (std::isfinite(c.detectable) ? pct(c.detectable) : std::string("none")) + " | " + ratios(c, " ") + " | ";
  } else {
    row += "| | | | | ";
  }
  return row + cell(c.note) + " |\n";
}

// A PASS protects only the compared cases whose test could have flagged a slowdown of the threshold's size
// (detectable <= threshold); said where any compared case could not.
std::string protected_text(const GateReport& r) {
  std::size_t able = 0;
  for (const auto& c : r.cases) able += c.compared && c.detectable <= r.threshold;
  if (able == r.compared) return "";
  return " (" + std::to_string(able) + " of " + std::to_string(r.compared) + " compared cases protected)";
}

}  // namespace

std::string summary_line(const GateReport& r) {
  std::string s = std::string("kvf gate") + (r.paired ? " --ab" : "") + ": " + (r.exit_code ? "FAIL" : "PASS") + ": " +
                  counts_text(r) + (r.exit_code ? "" : protected_text(r)) + "; " + geomean_text(r);
  std::string named;
  int shown = 0;
  for (const auto& c : r.cases) {
    const bool fails = c.verdict == Verdict::slower || (c.verdict == Verdict::missing && r.missing_fails);
    if (!fails) continue;
    if (shown++ == 3) { named += ", ..."; break; }
    if (!named.empty()) named += ", ";
    named += c.label;
    named += ' ';
    named += c.verdict == Verdict::slower ? signed_pct(c.change) : std::string("missing");
  }
  if (!named.empty()) s += "; failing: " + named;
  if (!r.injected.empty()) s += "; FAULT INJECTED into the new build (test only): " + r.injected;
  return s;
}

std::string format_markdown(const GateReport& r, const GateOptions& o) {
  std::string md;
  const std::size_t slower = r.count(Verdict::slower), missing = r.count(Verdict::missing);
  if (r.exit_code) {
    md += "### :x: kvf gate: FAIL (" + std::to_string(slower) + " slower";
    if (o.fail_on_missing && missing) md += ", " + std::to_string(missing) + " missing";
    md += ")\n\n";
  } else {
    md += "### :white_check_mark: kvf gate: PASS" + protected_text(r) + "\n\n";
  }
  md += counts_text(r) + ". " + geomean_text(r) + ".\n\n";

  if (!r.injected.empty())
    md += "**FAULT INJECTED (test of the gate, not a measurement):** the new build ran with `--inject-slowdown " +
          code(r.injected) + "`.\n\n";
  std::string head, same;
  std::size_t n_same = 0;
  for (const auto& c : r.cases) {
    const std::string row = r.paired ? md_row_paired(c) : md_row(c);
    if (c.verdict == Verdict::same) {
      same += row;
      ++n_same;
    } else {
      head += row;
    }
  }
  const char* table_head = r.paired ? kPairedHead : kTableHead;
  if (!head.empty()) md += table_head + head + "\n";
  if (n_same) {
    md += "<details><summary>" + std::to_string(n_same) + (n_same == 1 ? " case" : " cases") +
          " unchanged (SAME)</summary>\n\n" + table_head + same + "\n</details>\n\n";
  }
  const std::string filter = o.filter.empty() ? "" : ", filter `" + code(o.filter) + "`";
  if (r.paired) {
    md += "A/B: " + std::to_string(r.rounds) + " rounds in " + fmt("%.0f", r.wall_s) + " s, order " + r.order +
          " (A = base, seed " + std::to_string(r.seed) + "); each round's value per case: its " +
          (o.round_stat == GateOptions::RoundStat::min ? "fastest sample" : "median sample") + ". Threshold " + pct(o.threshold) + ", alpha " +
          fmt("%g", o.alpha) + filter +
          ". change: Hodges-Lehmann estimate of new/base - 1 over the rounds, with its " + fmt("%g", 100 * (1 - o.alpha)) +
          "% interval; p: one-sided Wilcoxon signed-rank on the per-round log ratios, Holm-corrected over " +
          std::to_string(r.compared) + " cases. A case is SLOWER when the corrected p < alpha and the change is "
          "beyond the threshold; detectable: the smallest slowdown this run's round-to-round noise would have let "
          "the gate flag.\n\n";
    md += "Base: `" + code(r.baseline_source) + "` (" + cell(r.baseline_device) + "). New: `" +
          code(r.current_source) + "` (" + cell(r.current_device) + ").\n";
  } else {
    md += "Threshold " + pct(o.threshold) + ", alpha " + fmt("%g", o.alpha) + ", min samples " +
          std::to_string(o.min_samples) + filter +
          ". A case is SLOWER when its median rose by more than the threshold and its one-sided p, Holm-corrected "
          "over " + std::to_string(r.compared) + " cases, is below alpha: with 2 or more baseline runs a t test of the "
          "current run's median against the runs' medians (runs are the units), with one run a Mann-Whitney U test "
          "of the samples. detectable: the smallest slowdown the case's test could have flagged; above the "
          "threshold the case is NOISY (more baseline runs, or a quieter case).\n\n";
    md += "Baseline: `" + code(r.baseline_source) + "` (" + cell(r.baseline_device) + "). Current: `" +
          code(r.current_source) + "` (" + cell(r.current_device) + ").\n";
  }
  if (r.throttled_base || r.throttled_cur)
    md += "\nThrottled samples were ignored: " + std::to_string(r.throttled_base) + " in the baseline, " +
          std::to_string(r.throttled_cur) + " in the current run.\n";
  if (!r.warnings.empty()) {
    md += "\nWarnings:\n";
    for (const auto& w : r.warnings) md += "- " + cell(w) + "\n";
  }
  return md;
}

namespace {

std::string format_csv_paired(const GateReport& r) {
  std::string out = csv_line({"verdict", "study", "case", "mode", "params", "rounds", "base_samples", "new_samples",
                              "base_median_s", "new_median_s", "change", "ci_low", "ci_high", "p_value", "p_holm",
                              "test", "detectable", "round_ratios", "note"});
  const double nan = std::nan("");
  for (const auto& c : r.cases) {
    auto n = [&](double v) { return csv_number(c.compared ? v : nan); };
    out += csv_line({to_string(c.verdict), c.key.study, c.key.case_name, c.key.mode, c.key.params_string(),
                     std::to_string(r.rounds), std::to_string(c.n_base), std::to_string(c.n_cur), n(c.median_base),
                     n(c.median_cur), n(c.change), n(c.ci_lo), n(c.ci_hi), n(c.p), n(c.p_holm),
                     c.compared ? (c.exact ? "exact" : "asymptotic") : "", n(c.detectable), ratios(c, " "),
                     c.note});
  }
  return out;
}

}  // namespace

std::string format_csv(const GateReport& r) {
  if (r.paired) return format_csv_paired(r);
  std::string out = csv_line({"verdict", "study", "case", "mode", "params", "baseline_samples", "current_samples",
                              "baseline_throttled", "current_throttled", "baseline_median_s", "current_median_s",
                              "change", "p_value", "p_holm", "test", "baseline_runs", "baseline_runs_sd",
                              "baseline_rel_iqr", "current_rel_iqr", "detectable", "note"});
  const double nan = std::nan("");
  for (const auto& c : r.cases) {
    auto n = [&](double v) { return csv_number(c.compared ? v : nan); };
    out += csv_line({to_string(c.verdict), c.key.study, c.key.case_name, c.key.mode, c.key.params_string(),
                     std::to_string(c.n_base), std::to_string(c.n_cur), std::to_string(c.throttled_base),
                     std::to_string(c.throttled_cur), n(c.median_base), n(c.median_cur), n(c.change), n(c.p),
                     n(c.p_holm), c.compared ? (c.runs_base >= 2 ? "t" : c.exact ? "exact" : "asymptotic") : "",
                     c.compared ? std::to_string(c.runs_base) : "", n(c.spread_runs), n(c.spread_base),
                     n(c.spread_cur), n(c.detectable), c.note});
  }
  return out;
}

}  // namespace kvf::gate
