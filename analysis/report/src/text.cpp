// Untrusted text: everything the report did not write itself reaches gnuplot, Markdown and HTML only through
// these (kvf/report.hpp says why), and the fixed number format of every figure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kvf/errors.hpp"
#include "kvf/study_report.hpp"
#include "kvf/table.hpp"

namespace kvf::report {

namespace {

// Non-ASCII code points that print nothing visible or move text around: shown as '?' so a name cannot
// hide or reorder what the report says next to it.
bool invisible(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) ||                      // C1 controls
         (cp >= 0x200b && cp <= 0x200f) ||                  // zero-width, LRM/RLM
         (cp >= 0x202a && cp <= 0x202e) ||                  // bidirectional embeddings and overrides
         (cp >= 0x2060 && cp <= 0x206f) ||                  // word joiner, invisible operators, isolates
         cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) ||  // BOM, interlinear annotation
         cp == 0xfffe || cp == 0xffff || (cp >= 0xe0000 && cp <= 0xe007f);  // non-characters, tags
}

// Length of the valid UTF-8 sequence at s[i] and its code point; 0 when invalid (overlong, surrogate,
// beyond U+10FFFF, truncated).
std::size_t utf8_at(const std::string& s, std::size_t i, char32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t len = 0;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
  else return 0;
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

}  // namespace

std::string printable_text(const std::string& s, std::size_t max_chars) {
  std::string out;
  out.reserve(std::min(s.size(), max_chars * 4) + 3);
  std::size_t chars = 0, i = 0;
  for (; i < s.size() && chars < max_chars; ++chars) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f') out += ' ';
      else if (c < 0x20 || c == 0x7f) out += '?';
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t len = utf8_at(s, i, cp);
    if (len == 0) {
      out += '?';
      ++i;
    } else {
      if (cp == 0x2028 || cp == 0x2029) out += ' ';  // line and paragraph separators
      else if (invisible(cp)) out += '?';
      else out.append(s, i, len);
      i += len;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

std::string gnuplot_quote(const std::string& s, std::size_t max_chars) {
  const std::string t = printable_text(s, max_chars);
  // gnuplot's scanner reads '' right after the opening quote as an empty string, not as a quote: the rest of
  // the text would be code. A leading quote gets a space before it.
  std::string o = !t.empty() && t[0] == '\'' ? "' " : "'";
  for (char c : t) {
    if (c == '`') o += '?';
    else if (c == '\'') o += "''";
    else o += c;
  }
  return o + "'";
}

std::string gnuplot_data_label(const std::string& s, std::size_t max_chars) {
  // gnuplot reads a "..." field of a data file as one column; a quote would end it, # start a comment.
  const std::string t = printable_text(s, max_chars);
  std::string o = "\"";
  for (char c : t) {
    if (c == '"') o += '\'';
    else if (c == '#' || c == '\\' || c == '`') o += '?';
    else o += c;
  }
  return o + "\"";
}

std::string md_text(const std::string& s, std::size_t max_chars) {
  const std::string t = printable_text(s, max_chars);
  std::string o;
  o.reserve(t.size() + t.size() / 8);
  for (char c : t) {
    if (c != '\0' && std::strchr("\\`*_[]<>#&~", c)) o += '\\';
    o += c;
  }
  return o;
}

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else if (c == '\'') o += "&#39;";
    else o += c;
  }
  return o;
}

// Four significant digits, never in e-notation: a person reads 65536 or 0.00012, not 6.554e+04 (%.4g
// switches to e-notation at 1e4 and below 1e-4). Large values keep every integer digit.
std::string fmt(double v) {
  if (!std::isfinite(v)) return "-";
  if (v == 0) return "0";
  char b[64];
  const double a = std::fabs(v);
  if (a >= 1e4) {
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  const int decimals = std::clamp(3 - static_cast<int>(std::floor(std::log10(a))), 0, 15);
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  std::string o = b;
  if (o.find('.') != std::string::npos) {
    while (o.back() == '0') o.pop_back();
    if (o.back() == '.') o.pop_back();
  }
  return o == "-0" ? "0" : o;
}
std::string fmt(const std::optional<double>& v) { return v ? fmt(*v) : std::string("-"); }

double cell_number(const CsvTable& t, std::size_t row, const char* column, double lo, double hi) {
  const auto v = parse_number(t, row, column);
  if (!v) throw UsageError(t.where(row) + ": column '" + column + "': empty (a number is needed)");
  if (!(*v >= lo && *v <= hi))
    throw UsageError(t.where(row) + ": column '" + column + "': " + t.at(row, column) + " is out of range (allowed: [" +
                     fmt(lo) + ", " + fmt(hi) + "])");
  return *v;
}

std::string us_text(double s) { return fmt(s * 1e6) + " us"; }

namespace md {

std::string row(const std::vector<std::string>& cells) {
  std::string s = "|";
  for (const auto& c : cells) {
    s += ' ';
    for (char ch : c) {
      if (ch == '|') s += '\\';
      s += ch;
    }
    s += " |";
  }
  return s + "\n";
}
std::string header(const std::vector<std::string>& cells) {
  std::string s = row(cells) + "|";
  for (std::size_t i = 0; i < cells.size(); ++i) s += "---|";
  return s + "\n";
}
std::string us(const std::optional<double>& s) { return s ? fmt(*s * 1e6) : "-"; }
// A results directory's device label, as Markdown (capped: it is repeated in every row of its tables).
std::string lbl(const ResultSet& rs) { return md_text(rs.label, kMaxLabelText); }
std::string txt(const std::string& s) { return md_text(s); }

std::string tokens(double n) {
  if (!std::isfinite(n)) return "-";
  if (n >= 1024 && std::fmod(n, 1024) == 0) return fmt(n / 1024) + "K";
  return fmt(n);
}

std::string bytes(double b) {
  if (!std::isfinite(b)) return "-";
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt(b) + " " + units[u];
}

std::string rate(double gbps) {
  if (!std::isfinite(gbps)) return "-";
  return std::fabs(gbps) >= 1000 ? fmt(gbps / 1000) + " TB/s" : fmt(gbps) + " GB/s";
}

std::string fold(const std::string& summary, const std::string& body) {
  // Each tag on a line of its own: markdown_to_html passes exactly these lines through; input text can never
  // form one (md_text escapes < and >).
  return "<details>\n<summary>" + md_text(summary) + "</summary>\n\n" + body + "\n</details>\n\n";
}

Grouping group_params(const std::vector<std::map<std::string, std::string>>& rows,
                      const std::set<std::string>& leave_out) {
  Grouping g;
  std::map<std::string, std::set<std::string>> values;
  std::map<std::string, std::size_t> present;
  for (const auto& r : rows)
    for (const auto& [k, v] : r)
      if (!leave_out.count(k)) {
        values[k].insert(v);
        ++present[k];
      }
  for (const auto& [k, vs] : values) {
    if (vs.size() == 1 && present[k] == rows.size()) {
      g.fixed += (g.fixed.empty() ? "" : ", ") + k + "=" + *vs.begin();
    } else {
      g.varying.push_back(k);
    }
  }
  for (const auto& r : rows) {
    std::string key;
    for (const auto& k : g.varying) {
      const auto it = r.find(k);
      key += (key.empty() ? "" : ", ") + k + "=" + (it == r.end() ? std::string("-") : it->second);
    }
    g.keys.push_back(key.empty() ? "all" : key);
  }
  return g;
}

std::string ceiling_beaten(const ResultSet& rs, const std::string& study, const std::string& ceiling_label,
                           const std::string& ceiling_name,
                           const std::vector<std::pair<std::string, std::string>>& only) {
  std::size_t n = 0;
  const CaseRow* top = nullptr;
  double top_pct = 0;
  std::string which = study;  // "access rows (part=gather)"
  for (const auto& [k, v] : only) which += (which == study ? " rows (" : ", ") + k + "=" + v;
  which += which == study ? " rows" : ")";
  for (const auto* r : rs.rows(study)) {
    if (std::any_of(only.begin(), only.end(), [&](const auto& kv) { return r->param(kv.first) != kv.second; }))
      continue;
    if (r->ceiling != ceiling_label || !r->pct_of_ceiling || !r->q3_s || !(*r->q3_s > 0)) continue;
    const double at_q3 = *r->pct_of_ceiling * *r->median_s / *r->q3_s;  // a rate: median time over q3 time
    if (!(at_q3 > 100)) continue;
    ++n;
    if (!top || *r->pct_of_ceiling > top_pct) top = r, top_pct = *r->pct_of_ceiling;
  }
  if (!n) return "";
  return "**" + lbl(rs) + ": the " + txt(ceiling_name) + " was beaten** by " + std::to_string(n) + " " + txt(which) +
         " beyond their own spread, by up to " + fmt(top_pct - 100) + "% (" + txt(top->case_name) + ", " +
         txt(top->mode) + "): it is the most its own loops read in this run, not the hardware's bound (the machine's "
         "bandwidth moved during the run, or those rows read in a way its loops do not), so every percentage of it "
         "below overstates how near a row comes to the memory (Inputs, \"Rows above their ceiling\").\n\n";
}

}  // namespace md

}  // namespace kvf::report
