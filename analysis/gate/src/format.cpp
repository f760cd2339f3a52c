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
  return "geomean current/baseline " + fmt("%.3f", r.geomean_ratio) + " (" + signed_pct(r.geomean_ratio - 1) +
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
           p_value(c.p) + " | " + pct(c.noise_floor) + " | ";
  } else {
    row += "| | | | | ";  // five empty cells
  }
  row += std::to_string(c.n_base) + " / " + std::to_string(c.n_cur) + " | " + cell(c.note) + " |\n";
  return row;
}

const char* kTableHead =
    "| verdict | case | baseline median | current median | change | p | noise floor | samples b / c | note |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---|\n";

}  // namespace

std::string summary_line(const GateReport& r) {
  std::string s = std::string("kvf gate: ") + (r.exit_code ? "FAIL" : "PASS") + ": " + counts_text(r) + "; " +
                  geomean_text(r);
  std::string named;
  int shown = 0;
  for (const auto& c : r.cases) {
    const bool fails = c.verdict == Verdict::slower || (c.verdict == Verdict::missing && r.exit_code);
    if (!fails) continue;
    if (shown++ == 3) { named += ", ..."; break; }
    if (!named.empty()) named += ", ";
    named += c.label;
    named += ' ';
    named += c.verdict == Verdict::slower ? signed_pct(c.change) : std::string("missing");
  }
  if (!named.empty()) s += "; failing: " + named;
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
    md += "### :white_check_mark: kvf gate: PASS\n\n";
  }
  md += counts_text(r) + ". " + geomean_text(r) + ".\n\n";

  std::string head, same;
  std::size_t n_same = 0;
  for (const auto& c : r.cases) {
    if (c.verdict == Verdict::same) {
      same += md_row(c);
      ++n_same;
    } else {
      head += md_row(c);
    }
  }
  if (!head.empty()) md += kTableHead + head + "\n";
  if (n_same) {
    md += "<details><summary>" + std::to_string(n_same) + (n_same == 1 ? " case" : " cases") +
          " unchanged (SAME)</summary>\n\n" + kTableHead + same + "\n</details>\n\n";
  }
  md += "Threshold " + pct(o.threshold) + ", alpha " + fmt("%g", o.alpha) + ", min samples " +
        std::to_string(o.min_samples) + (o.filter.empty() ? "" : ", filter `" + code(o.filter) + "`") +
        ". A case is SLOWER when its median rose by more than max(threshold, noise floor) and the "
        "Mann-Whitney U test gives p < alpha; noise floor = 2 x the wider relative IQR of the two runs.\n\n";
  md += "Baseline: `" + code(r.baseline_source) + "` (" + cell(r.baseline_device) + "). Current: `" +
        code(r.current_source) + "` (" + cell(r.current_device) + ").\n";
  if (r.throttled_base || r.throttled_cur)
    md += "\nThrottled samples were ignored: " + std::to_string(r.throttled_base) + " in the baseline, " +
          std::to_string(r.throttled_cur) + " in the current run.\n";
  if (!r.warnings.empty()) {
    md += "\nWarnings:\n";
    for (const auto& w : r.warnings) md += "- " + cell(w) + "\n";
  }
  return md;
}

std::string format_csv(const GateReport& r) {
  std::string out = csv_line({"verdict", "study", "case", "mode", "params", "baseline_samples", "current_samples",
                              "baseline_throttled", "current_throttled", "baseline_median_s", "current_median_s",
                              "change", "p_value", "test", "baseline_rel_iqr", "current_rel_iqr", "noise_floor",
                              "limit", "note"});
  const double nan = std::nan("");
  for (const auto& c : r.cases) {
    auto n = [&](double v) { return csv_number(c.compared ? v : nan); };
    out += csv_line({to_string(c.verdict), c.key.study, c.key.case_name, c.key.mode, c.key.params_string(),
                     std::to_string(c.n_base), std::to_string(c.n_cur), std::to_string(c.throttled_base),
                     std::to_string(c.throttled_cur), n(c.median_base), n(c.median_cur), n(c.change), n(c.p),
                     c.compared ? (c.exact ? "exact" : "asymptotic") : "", n(c.spread_base), n(c.spread_cur),
                     n(c.noise_floor), n(c.limit), c.note});
  }
  return out;
}

}  // namespace kvf::gate
