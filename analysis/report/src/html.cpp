// report.md -> report.html: the report's own markup only (headings, tables, lists, `code`, bold), every other
// character escaped; SVGs inlined only when gnuplot drew them in this run.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>

#include "internal.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"

namespace kvf::report {

namespace {

// ------------------------------------------------------------------------------------------ html
// report.md's inline markup: `code` and **bold** (what render_markdown emits), and backslash escapes
// (what md_text emits for input text): an escaped character is always literal text.
std::string inline_md(const std::string& s) {
  std::string o;
  bool code = false, bold = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!code && c == '\\' && i + 1 < s.size() && std::ispunct(static_cast<unsigned char>(s[i + 1]))) {
      o += html_escape(std::string(1, s[++i]));
    } else if (c == '`') {
      o += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && s.compare(i, 2, "**") == 0) {
      o += bold ? "</b>" : "<b>";
      bold = !bold;
      ++i;
    } else {
      o += html_escape(std::string(1, c));
    }
  }
  if (code) o += "</code>";
  if (bold) o += "</b>";
  return o;
}
bool is_summary_line(const std::string& line) {
  const std::string open = "<summary>", end = "</summary>";
  return line.size() >= open.size() + end.size() && line.compare(0, open.size(), open) == 0 &&
         line.compare(line.size() - end.size(), end.size(), end) == 0;
}
std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(cur.size() >= 2 ? cur.substr(1, cur.size() - 2) : cur);
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return cells;
}

// Several gnuplot SVGs inlined in one page share ids (gpPt0, textbox, ...): prefix each figure's ids and
// the references to them so every figure points at its own definitions.
std::string scope_ids(const std::string& svg, int n) {
  std::string pre = std::to_string(n);  // "f<n>_", built without operator+ (GCC 12 -Wrestrict false positive)
  pre.insert(pre.begin(), 'f');
  pre += '_';
  std::string out;
  out.reserve(svg.size() + svg.size() / 20);
  for (std::size_t i = 0; i < svg.size();) {
    bool done = false;
    for (const char* pat : {"id='", "id=\"", "href='#", "href=\"#", "url(#"}) {
      const std::size_t n = std::strlen(pat);
      if (svg.compare(i, n, pat) == 0 && (std::strcmp(pat, "id='") != 0 && std::strcmp(pat, "id=\"") != 0 ? true
                                              : (i == 0 || svg[i - 1] == ' ' || svg[i - 1] == '\t' || svg[i - 1] == '\n'))) {
        out += pat;
        out += pre;
        i += n;
        done = true;
        break;
      }
    }
    if (!done) out += svg[i++];
  }
  return out;
}

std::string to_html(const std::string& md, const fs::path& dir, const std::vector<std::string>& drawn) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kvfrontier report</title>\n<style>"
       "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
       "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;"
       "text-align:left;vertical-align:top}th{background:#f0f0f0}code{background:#f6f6f6}svg{max-width:100%;height:auto}"
       "summary{cursor:pointer;color:#225;margin:0.5em 0}"
       "</style></head><body>\n";
  std::istringstream in(md);
  std::string line;
  bool in_table = false, in_list = false, header_row = false;
  int figures = 0;
  auto close = [&] {
    if (in_table) h << "</table>\n";
    if (in_list) h << "</ul>\n";
    in_table = in_list = false;
  };
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) == 0) {
      if (line.rfind("|---", 0) == 0) continue;
      if (!in_table) {
        close();
        h << "<table>\n";
        in_table = true;
        header_row = true;
      }
      h << "<tr>";
      for (const auto& c : split_row(line)) h << (header_row ? "<th>" : "<td>") << inline_md(c) << (header_row ? "</th>" : "</td>");
      h << "</tr>\n";
      header_row = false;
      continue;
    }
    if (line.rfind("- ", 0) == 0) {
      if (!in_list) {
        close();
        h << "<ul>\n";
        in_list = true;
      }
      h << "<li>" << inline_md(line.substr(2)) << "</li>\n";
      continue;
    }
    close();
    if (line.empty()) continue;
    // Folds (md::fold): only whole lines of exactly this shape; input text cannot form them (md_text
    // escapes < and >), and the summary's text goes through inline_md like any other.
    if (line == "<details>" || line == "</details>") {
      h << line << "\n";
      continue;
    }
    if (is_summary_line(line)) {
      h << "<summary>" << inline_md(std::string(line.begin() + 9, line.end() - 10)) << "</summary>\n";
      continue;
    }
    if (line.rfind("### ", 0) == 0) h << "<h3>" << inline_md(line.substr(4)) << "</h3>\n";
    else if (line.rfind("## ", 0) == 0) h << "<h2>" << inline_md(line.substr(3)) << "</h2>\n";
    else if (line.rfind("# ", 0) == 0) h << "<h1>" << inline_md(line.substr(2)) << "</h1>\n";
    else if (line.rfind("![", 0) == 0) {
      const auto a = line.find("](");
      const std::string file = a == std::string::npos || line.size() < a + 3 ? "" : line.substr(a + 2, line.size() - a - 3);
      // Only an SVG gnuplot wrote in this run is inlined; read bounded, a regular file inside `dir`.
      std::string text;
      if (std::find(drawn.begin(), drawn.end(), file) != drawn.end()) {
        try {
          text = read_input_file(dir / file, dir);
        } catch (const UsageError&) {
          text.clear();
        }
      }
      const auto start = text.find("<svg");
      if (start != std::string::npos) h << "<figure>" << scope_ids(text.substr(start), ++figures) << "</figure>\n";
      else h << "<p><i>chart " << html_escape(file) << " not drawn</i></p>\n";
    } else {
      h << "<p>" << inline_md(line) << "</p>\n";
    }
  }
  close();
  h << "</body></html>\n";
  return h.str();
}

}  // namespace

std::string markdown_to_html(const std::string& md, const std::string& dir, const std::vector<std::string>& drawn) {
  return to_html(md, fs::path(dir), drawn);
}

}  // namespace kvf::report
