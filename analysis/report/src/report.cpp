// `kvf report`: report.md (deterministic: input order, fixed number format, no clock but meta.json's),
// gnuplot charts (.dat + .gp written, SVG + PNG drawn when gnuplot runs) and a self-contained report.html.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "series.hpp"

extern char** environ;

namespace kvf::report {

using namespace detail;
namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------------ untrusted text
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
  std::string o = "'";
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

namespace {

// ------------------------------------------------------------------------------------------ charts
struct Line {
  std::string title, style = "linespoints";
  std::vector<std::pair<double, double>> pts;
  std::vector<std::string> labels;  // with labels: one per point
};
struct Plot {
  std::string name, title, xlabel, ylabel;
  bool logx = false, logy = false;
  std::vector<Line> lines;
  std::vector<std::string> extra;  // gnuplot commands before plot (arrows, ranges)
  int logx_base = 2;
};

bool has_points(const Plot& p) {
  for (const auto& l : p.lines)
    if (!l.pts.empty()) return true;
  return false;
}

// Chart names become file names and gnuplot `set output` strings: the report makes them up itself
// ("gather", "frontier_map_2"); anything else is a bug, refused before a file is named after it.
bool safe_stem(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// Writes a new file at `path`. Whatever is there is removed first (unlink removes a symlink, not its
// target) and the file is created with O_EXCL | O_NOFOLLOW: the default report directory lies inside a
// results directory someone else may have made, and a symlink planted as report/report.md must not make the
// report overwrite the file it points to. A write failure (ENOSPC, EIO) is not bad input: runtime_error, exit 1.
void write_new_file(const fs::path& path, const std::string& text) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot create (" + std::strerror(errno) + ")");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(path.c_str());
      throw std::runtime_error(path.string() + ": cannot write (" + std::strerror(err) + ")");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw std::runtime_error(path.string() + ": cannot write (" + std::strerror(err) + ")");
  }
}

// A comment line of a .gp or .dat file: gnuplot ignores it, but the files are handed to users to run and
// read, so it holds no line break and no backquote either.
std::string comment_text(const std::string& s) {
  std::string t = printable_text(s, kMaxChartText);
  std::replace(t.begin(), t.end(), '`', '?');
  return t;
}

// Every text in a .gp file is a single-quoted gnuplot_quote string or a number the report formatted; the
// data reach gnuplot only through the .dat file (numbers, and label fields through gnuplot_data_label).
void write_plot(const Plot& p, const fs::path& dir) {
  if (!safe_stem(p.name)) throw std::logic_error("chart name '" + p.name + "' is not a plain file stem");
  std::string dat;
  std::ostringstream plot;
  int idx = 0;
  for (const auto& l : p.lines) {
    if (l.pts.empty()) continue;
    dat += "# " + comment_text(l.title) + "\n";
    for (std::size_t i = 0; i < l.pts.size(); ++i) {
      dat += fmt(l.pts[i].first) + " " + fmt(l.pts[i].second);
      if (!l.labels.empty()) dat += " " + gnuplot_data_label(i < l.labels.size() ? l.labels[i] : std::string());
      dat += "\n";
    }
    dat += "\n\n";
    plot << (idx ? ", \\\n     " : "plot ") << "'" << p.name << ".dat' index " << idx
         << (l.labels.empty() ? " using 1:2 with " + l.style : " using 1:2:3 with labels " + l.style) << " title "
         << gnuplot_quote(l.title);
    ++idx;
  }
  std::ostringstream gp;
  gp << "# kvf report: " << comment_text(p.title) << "\n"
     << "set terminal svg size 960,720 noenhanced font 'Helvetica,12' background rgb 'white'\n"
     << "set output '" << p.name << ".svg'\n"
     << "set title " << gnuplot_quote(p.title) << "\n"
     << "set xlabel " << gnuplot_quote(p.xlabel) << "\nset ylabel " << gnuplot_quote(p.ylabel) << "\n"
     << "set grid\nset key below left Left reverse\n";
  if (p.logx) gp << "set logscale x " << p.logx_base << "\n";
  if (p.logy) gp << "set logscale y\n";
  for (const auto& e : p.extra) gp << e << "\n";
  gp << plot.str() << "\n"
     << "set terminal pngcairo size 960,720 noenhanced font 'Helvetica,10' background rgb 'white'\n"
     << "set output '" << p.name << ".png'\n"
     << "replot\nset output\n";
  write_new_file(dir / (p.name + ".dat"), dat);
  write_new_file(dir / (p.name + ".gp"), gp.str());
}

// Runs gnuplot in `dir` on `gp`; output to gnuplot.log. Returns "" or why it failed.
std::string run_gnuplot(const std::string& gnuplot, const fs::path& dir, const std::string& gp) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  posix_spawn_file_actions_addopen(&fa, 1, "gnuplot.log", O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> args = {gnuplot, gp};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, gnuplot.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return gnuplot + ": cannot run (" + std::strerror(rc) + ")";
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) return gnuplot + " " + gp + ": killed by a signal";
  if (WEXITSTATUS(status) == 127) return gnuplot + ": not found";
  if (WEXITSTATUS(status) != 0) return gnuplot + " " + gp + ": exit " + std::to_string(WEXITSTATUS(status)) + " (see gnuplot.log)";
  return "";
}

// ------------------------------------------------------------------------------------------ markdown helpers
// Cells are report text or md_text of input text (no line breaks); | is escaped here for all.
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

struct Ctx {
  const std::vector<ResultSet>& sets;
  const ReportOptions& o;
  std::vector<GpuSpec> gpus;
  std::vector<Shape> shapes;
  std::string gpus_error, shapes_error;
  std::vector<Plot> plots;
};

std::string chart_ref(Ctx& cx, Plot p) {
  if (!has_points(p)) return "";
  const std::string name = p.name;
  cx.plots.push_back(std::move(p));
  return "![" + name + "](" + name + ".svg)\n\n";
}

// ------------------------------------------------------------------------------------------ sections
std::string section_inputs(Ctx& cx) {
  std::string s = "## Inputs\n\n";
  s += header({"#", "directory", "device", "backend", "suite", "git", "started (UTC)", "finished (UTC)", "case rows",
               "samples", "counters", "1-min load (max) / hw threads"});
  int i = 0;
  for (const auto& r : cx.sets)
    s += row({std::to_string(++i), txt(r.dir), lbl(r), txt(r.backend), r.has_meta ? txt(r.suite_version) : "-",
              r.git_sha.empty() ? "-" : txt(r.git_sha), r.started.empty() ? "-" : txt(r.started),
              r.finished.empty() ? "-" : txt(r.finished), std::to_string(r.cases.size()),
              r.has_samples ? std::to_string(r.n_samples) : "missing",
              r.has_counters ? std::to_string(r.counters.size()) : "missing",
              r.max_load < 0 ? "-"
                             : fmt(r.max_load) +
                                   (r.hardware_threads > 0 ? " / " + std::to_string(r.hardware_threads) : "")});
  s += "\n### What is missing\n\n";
  bool any = false;
  for (const auto& r : cx.sets)
    for (const auto& m : r.missing) {
      s += "- " + lbl(r) + ": " + txt(m) + "\n";
      any = true;
    }
  if (!any) s += "Nothing: every file and study is present.\n";
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

// What the model says for a claim on a directory's device (GPU: calibrated with the directory; CPU: the
// --spec-gpu spec sheet, labelled). Never used for the verdict itself.
std::string model_says(Ctx& cx, const ResultSet& rs, const std::string& claim) {
  const bool c1 = claim.rfind("Recompute ~50 us", 0) == 0, c3 = claim.rfind("Recompute wins", 0) == 0;
  if ((!c1 && !c3) || !cx.gpus_error.empty() || !cx.shapes_error.empty()) return "-";
  const Shape* m = nullptr;
  for (const auto& sh : cx.shapes)
    if (sh.name == cx.o.model) m = &sh;
  if (!m) return "-";
  GpuSpec g;
  std::string tag;
  try {
    if (rs.backend == "cuda") {
      g = spec_from_results(rs, cx.gpus);
      tag = "calibrated";
    } else {
      g = find_gpu(cx.gpus, cx.o.spec_gpu);
      tag = g.name + " spec sheet";
    }
    if (c1)
      return txt(m->name + ", " + tag) + ": recompute " + fmt(recompute_x(g, *m, 128, 1, 16).seconds * 1e6) + " us, fetch " +
             fmt(transfer(g, kv_bytes_per_layer(*m, 128), 1, g.host_link_gbps).seconds * 1e6) + " us";
    const std::vector<double> Ts = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    std::vector<double> r, t;
    for (double T : Ts) {
      r.push_back(recompute_x(g, *m, T, 1, 16).seconds);
      t.push_back(transfer(g, kv_bytes_per_layer(*m, T), 1, g.host_link_gbps).seconds);
    }
    return txt(m->name + ", " + tag + ": crossover " +
               find_crossover(Ts, r, t, "recompute", "fetch", "tokens", "evaluated").text);
  } catch (const UsageError& e) {
    return "- (" + txt(e.what()) + ")";
  }
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
  if (!cases)
    return "Throttled samples: none (every case row has throttled_samples 0; the CPU backend never flags any).\n";
  return "Throttled samples: " + std::to_string(total) + " in " + std::to_string(cases) +
         " case rows (SM clock below 75% of the default). Every figure above and below excludes them: medians are "
         "over the kept samples only.\n\n" + list;
}

std::string section_verdicts(Ctx& cx) {
  std::string s = "## Verdicts\n\n";
  const auto vs = verdicts(cx.sets);
  s += header({"claim", "device", "verdict", "figures", "model predicts"});
  for (const auto& v : vs) {
    const ResultSet* rs = nullptr;
    for (const auto& r : cx.sets)
      if (r.label == v.device) rs = &r;
    s += row({v.claim, rs ? lbl(*rs) : txt(v.device), "**" + v.verdict + "**", txt(v.figures),
              rs ? model_says(cx, *rs, v.claim) : "-"});
  }
  s += "\n" + throttled_note(cx);
  s += "\nRules (docs/report.md):\n\n";
  std::set<std::string> seen;
  for (const auto& v : vs)
    if (seen.insert(v.rule).second) s += "- " + v.rule + "\n";
  return s + "\n";
}

std::string section_gather(Ctx& cx) {
  std::string s = "## 1. Gather bandwidth against run length\n\n";
  Plot p{"gather", "Gather bandwidth against run length", "run length (bytes)", "GB/s", true, false, {}, {}};
  std::string table;
  for (const auto& rs : cx.sets) {
    std::map<std::string, Line> lines;
    std::optional<double> ceiling;
    for (const auto* r : rs.rows("access")) {
      if (r->param("part") != "gather") continue;
      const auto rb = r->num("run_bytes");
      if (!rb || !r->gbps) continue;
      const std::string key = r->param("arm") + " huge=" + r->param("huge") + " " + r->mode;
      auto& l = lines[key];
      l.title = rs.label + ": " + key;
      l.pts.emplace_back(*rb, *r->gbps);
      if (r->ceiling_value && (!ceiling || *r->ceiling_value > *ceiling)) ceiling = r->ceiling_value;
      table += row({lbl(rs), txt(r->param("arm")), txt(r->param("huge")), txt(r->mode), fmt(*rb), fmt(r->gbps),
                    r->ceiling_value ? fmt(100 * *r->gbps / *r->ceiling_value) : "-"});
    }
    double lo = 1e300, hi = 0;
    for (auto& [k, l] : lines) {
      std::sort(l.pts.begin(), l.pts.end());
      lo = std::min(lo, l.pts.front().first);
      hi = std::max(hi, l.pts.back().first);
      p.lines.push_back(l);
    }
    if (ceiling && hi > 0) {
      Line c;
      c.title = rs.label + ": stream read ceiling " + fmt(*ceiling) + " GB/s";
      c.style = "lines dt 2 lw 2";
      c.pts = {{lo, *ceiling}, {hi, *ceiling}};
      p.lines.push_back(c);
    }
  }
  if (table.empty()) return s + "Not measured: no access-study gather rows (part=gather) in any directory.\n\n";
  s += chart_ref(cx, p);
  s += header({"device", "arm", "huge pages", "mode", "run bytes", "GB/s", "% of stream read ceiling"}) + table;
  return s + "\n";
}

std::string section_block_token(Ctx& cx) {
  std::string s = "## 2. Contiguous blocks against scattered tokens, by context length\n\n";
  Plot p{"block_token", "Attention latency: block vs token, by context", "context (tokens)", "median latency (us)", true,
         true, {}, {}};
  std::string table, knees;
  int knee_n = 0;
  for (const auto& rs : cx.sets) {
    const auto groups = access_groups(rs);
    bool any_cold = false;
    for (const auto& g : groups) any_cold = any_cold || g.mode == "cold";
    int drawn = 0;
    for (const auto& g : groups) {
      // chart: cold groups when measured, at most 12 per directory; the table has every group
      const bool draw = (!any_cold || g.mode == "cold") && drawn < 12;
      if (draw) ++drawn;
      Line b, t;
      b.title = rs.label + " keep=" + g.keep + " " + g.mode + " block";
      t.title = rs.label + " keep=" + g.keep + " " + g.mode + " token";
      for (std::size_t i = 0; i < g.ctx.size(); ++i) {
        b.pts.emplace_back(g.ctx[i], g.block_s[i] * 1e6);
        t.pts.emplace_back(g.ctx[i], g.token_s[i] * 1e6);
        table += row({lbl(rs), txt(g.key), fmt(g.ctx[i]), fmt(g.block_s[i] * 1e6), fmt(g.token_s[i] * 1e6),
                      fmt(g.token_s[i] / g.block_s[i]), g.ws_vs_llc[i] > 0 ? fmt(g.ws_vs_llc[i]) : "-"});
      }
      if (draw) {
        p.lines.push_back(b);
        p.lines.push_back(t);
      }
      if (auto k = knee_ctx(g)) {
        knees += "- " + lbl(rs) + " " + txt(g.key) + ": working set crosses the LLC/L2 at ctx " + fmt(*k) + "\n";
        if (knee_n++ < 8)
          p.extra.push_back("set arrow from " + fmt(*k) + ", graph 0 to " + fmt(*k) + ", graph 1 nohead dt 3 lc rgb 'gray'");
      }
    }
  }
  if (table.empty()) return s + "Not measured: no access-study attention rows with both block and token arms.\n\n";
  s += chart_ref(cx, p);
  s += header({"device", "group", "ctx", "block us (best block size)", "token us", "token/block", "working set / LLC"}) + table;
  s += "\nL2/LLC knee (dotted lines in the chart):\n\n" + (knees.empty() ? "- no group's context range crosses the LLC/L2\n" : knees);
  return s + "\n";
}

std::string section_frontier(Ctx& cx) {
  std::string s = "## 3. Recompute against transfer, by tokens per page\n\n";
  Plot p{"recompute_transfer", "Recompute vs transfer per page", "tokens per page", "median time per page (us)", true,
         true, {}, {}};
  std::string table;
  Line cross;
  cross.title = "crossovers";
  cross.style = "points pt 7 ps 1.8 lc rgb 'black'";
  for (const auto& rs : cx.sets) {
    std::set<std::string> drawn;
    const std::string primary = primary_link(rs);
    for (const auto& c : crossovers(rs)) {
      table += row({lbl(rs), txt(c.rec.label() + " (" + c.rec.mode + ")"), txt(c.link), fmt(c.tokens.front()) + ".." + fmt(c.tokens.back()),
                    std::to_string(c.tokens.size()), c.c.text, c.dropped ? std::to_string(c.dropped) : "0"});
      // The chart keeps to one page per call and the device's own fetch (the table has every combination).
      if (c.rec.pages != 1 || c.link != primary) continue;
      if (drawn.insert("r" + c.rec.label()).second) {
        Line l;
        l.title = rs.label + " recompute " + c.rec.label();
        for (std::size_t i = 0; i < c.rec.tokens.size(); ++i) l.pts.emplace_back(c.rec.tokens[i], c.rec.secs[i] * 1e6);
        p.lines.push_back(l);
      }
      Line x;
      x.title = rs.label + " " + c.link + " for " + c.rec.label();
      x.style = "linespoints dt 2";
      for (std::size_t i = 0; i < c.tokens.size(); ++i) x.pts.emplace_back(c.tokens[i], c.xfer_s[i] * 1e6);
      p.lines.push_back(x);
      if (c.c.found) {
        const auto y = interpolate(c.tokens, c.rec_s, c.c.x);
        if (y) cross.pts.emplace_back(c.c.x, *y * 1e6);
      }
    }
  }
  if (!cross.pts.empty()) p.lines.push_back(cross);
  if (table.empty()) {
    s += "Not measured: no frontier-study recompute rows with a fetch measured at the same page size.\n\n";
  } else {
    s += chart_ref(cx, p);
    s += "Transfer time at each page's K/V bytes is interpolated linearly between measured copy sizes; pages outside "
         "the measured sizes are dropped (last column). Crossovers are interpolated between measured token counts.\n\n";
    s += header({"device", "recompute", "fetch", "tokens measured", "points", "crossover", "dropped"}) + table + "\n";
  }
  // The GPU answer from spec sheets: what the model predicts where no GPU was measured.
  if (!cx.gpus_error.empty() || !cx.shapes_error.empty()) {
    s += "Model predictions not available: " + txt(cx.gpus_error + cx.shapes_error) + "\n\n";
    return s;
  }
  const Shape* m = nullptr;
  for (const auto& sh : cx.shapes)
    if (sh.name == cx.o.model) m = &sh;
  if (!m) return s + "Model predictions not available: model " + txt(cx.o.model) + " not in data/models.json\n\n";
  s += "### Model: recompute from bf16 X (P=1) against a pinned host fetch, " + txt(m->name) + ", spec-sheet peaks\n\n";
  s += header({"GPU", "layers", "recompute 128 tok (us)", "fetch 128 tok (us)", "predicted crossover"});
  const std::vector<double> Ts = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  for (const auto& g : cx.gpus) {
    for (double L : {1.0, 4.0}) {
      std::vector<double> r, t;
      for (double T : Ts) {
        r.push_back(L * recompute_x(g, *m, T, 1, 16).seconds);
        t.push_back(transfer(g, kv_bytes_per_layer(*m, T) * L, static_cast<int>(L), g.host_link_gbps).seconds);
      }
      const auto c = find_crossover(Ts, r, t, "recompute", "fetch", "tokens", "evaluated");
      s += row({txt(g.name), fmt(L), fmt(r[3] * 1e6), fmt(t[3] * 1e6), c.text});
    }
  }
  return s + "\n";
}

std::string map_table(const GpuSpec& g, const Shape& m, const std::string& label, Ctx& cx, const std::string& chart,
                      double reuse, const ResultSet* measured = nullptr) {
  ActionOptions o;
  o.reuse = {reuse};
  o.measured = measured;
  std::vector<ActionClass> t;
  try {
    t = action_table(g, m, o);
  } catch (const UsageError& e) {
    return "- " + txt(label) + ": not computed (" + txt(e.what()) + ")\n\n";
  }
  std::vector<double> Ls;
  for (const auto& c : t)
    if (std::find(Ls.begin(), Ls.end(), c.layers) == Ls.end()) Ls.push_back(c.layers);
  std::string s = "### " + txt(label) + " (" + txt(m.name) + ", decode, reuse probability " + fmt(reuse) + ")\n\n";
  std::vector<std::string> h = {"tokens \\ layers"};
  for (double L : Ls) h.push_back(fmt(L));
  s += header(h);
  Plot p{chart, "Cheapest action: " + label + ", " + m.name + ", decode, reuse " + fmt(reuse), "tokens per page", "layers", true,
         true, {}, {}};
  std::map<std::string, Line> by_action;
  std::vector<double> Ts;
  for (const auto& c : t)
    if (c.phase == "decode" && std::find(Ts.begin(), Ts.end(), c.tokens) == Ts.end()) Ts.push_back(c.tokens);
  for (double T : Ts) {
    std::vector<std::string> cells = {fmt(T)};
    for (double L : Ls)
      for (const auto& c : t)
        if (c.phase == "decode" && c.tokens == T && c.layers == L) {
          std::string src;
          for (const auto& a : c.costs)
            if (a.action == c.cheapest && a.source != "model") src = " (" + a.source + ")";
          cells.push_back(c.cheapest + src);
          auto& l = by_action[c.cheapest];
          l.title = c.cheapest;
          l.style = "points pt 5 ps 3";
          l.pts.emplace_back(T, L);
        }
    s += row(cells);
  }
  for (auto& [k, l] : by_action) p.lines.push_back(l);
  if (!Ts.empty() && !Ls.empty()) {
    p.extra.push_back("set xrange [" + fmt(Ts.front() / 1.5) + ":" + fmt(Ts.back() * 1.5) + "]");
    p.extra.push_back("set yrange [" + fmt(Ls.front() / 1.5) + ":" + fmt(Ls.back() * 1.5) + "]");
  }
  s += "\n";
  if (!chart.empty()) s += chart_ref(cx, p);
  return s;
}

std::string section_map(Ctx& cx) {
  std::string s = "## 4. Frontier map: tokens per page x layers -> cheapest action\n\n";
  if (!cx.gpus_error.empty() || !cx.shapes_error.empty())
    return s + "Not available: " + txt(cx.gpus_error + cx.shapes_error) + "\n\n";
  const Shape* m = nullptr;
  for (const auto& sh : cx.shapes)
    if (sh.name == cx.o.model) m = &sh;
  if (!m) return s + "Not available: model " + txt(cx.o.model) + " not in data/models.json\n\n";
  s += "Costs per page in microseconds: reuse probability x reuse cost + one-time cost + HBM price x resident MiB "
       "(price: the time to fetch 1 MiB over the host link). `kvf model --json` writes the full table.\n\n";
  bool any_gpu = false;
  int i = 0;
  for (const auto& rs : cx.sets) {
    ++i;
    if (rs.backend != "cuda") continue;
    any_gpu = true;
    const GpuSpec g = spec_from_results(rs, cx.gpus);
    for (double p : {0.1, 0.5, 0.9})
      s += map_table(g, *m, printable_text(rs.label, kMaxLabelText) + ", calibrated, measured costs where present", cx,
                     p == 0.5 ? "frontier_map_" + std::to_string(i) : "", p, &rs);
  }
  if (!any_gpu) {
    try {
      const GpuSpec& g = find_gpu(cx.gpus, cx.o.spec_gpu);
      s += "No GPU results given: the map below is the model's prediction from spec-sheet peaks (not measured).\n\n";
      for (double p : {0.1, 0.5, 0.9})
        s += map_table(g, *m, g.name + " spec sheet", cx, p == 0.5 ? "frontier_map_spec" : "", p);
    } catch (const UsageError& e) {
      s += "- " + txt(e.what()) + "\n\n";
    }
  }
  return s;
}

std::string section_idle(Ctx& cx) {
  std::string s = "## 5. Idleness in decode\n\n";
  Plot p{"idleness", "Idleness against batch (median over decode ranges; CPU: 1 - achieved/GEMM ceiling)", "batch",
         "idle %", true, false, {}, {"set yrange [0:100]"}};
  Plot ts{"pm_sampling", "PM sampling time series", "time (ms)", "value", false, false, {}, {}};
  std::string table;
  std::size_t pm = 0;
  for (const auto& rs : cx.sets) {
    std::map<std::string, Line> lines;
    for (const auto& st : idle_stats(rs)) {
      table += row({lbl(rs), txt(st.case_name), st.batch ? fmt(*st.batch) : "-", txt(st.metric), fmt(st.median),
                    std::to_string(st.ranges)});
      if (st.batch) {
        auto& l = lines[st.metric];
        l.title = rs.label + " " + st.metric;
        l.pts.emplace_back(*st.batch, st.median);
      }
    }
    for (auto& [k, l] : lines) {
      std::sort(l.pts.begin(), l.pts.end());
      p.lines.push_back(l);
    }
    std::map<std::string, Line> series;
    std::optional<double> t0;
    for (const auto& c : rs.counters)
      if (c.source == "pm_sampling" && c.t_start_ns && (!t0 || *c.t_start_ns < *t0)) t0 = c.t_start_ns;
    for (const auto& c : rs.counters) {
      if (c.source != "pm_sampling" || !c.t_start_ns || !c.value) continue;
      auto& l = series[c.metric];
      l.title = rs.label + " " + c.metric;
      l.style = "lines";
      l.pts.emplace_back((*c.t_start_ns - *t0) / 1e6, *c.value);
      ++pm;
    }
    for (auto& [k, l] : series) ts.lines.push_back(l);
  }
  if (table.empty() && pm == 0)
    return s + "Not measured: no counters.csv with kvf:idle_* rows or PM samples (the idleness study writes them; on a "
               "GPU after `kvf counters`).\n\n";
  s += chart_ref(cx, p) + chart_ref(cx, ts);
  if (!table.empty())
    s += "Definitions: kvf:idle_sm_pct = no resident warp (memory waits count as busy), kvf:idle_issue_pct = issue "
         "slots idle, kvf:idle_tensor_pct = tensor pipe idle (GPU, CUPTI, one range per decode step); "
         "kvf:idle_compute_pct = 1 - achieved FLOP/s over the GEMM ceiling (CPU model).\n\n" +
         header({"device", "case", "batch", "definition", "median idle %", "ranges"}) + table;
  s += "\nPM samples: " + std::to_string(pm) + "\n\n";
  return s;
}

std::string section_predicted(Ctx& cx) {
  std::string s = "## 6. Measured against model-predicted, every arm\n\n";
  if (!cx.gpus_error.empty()) return s + "Not available: " + txt(cx.gpus_error) + "\n\n";
  Plot p{"predicted", "Measured vs predicted (median, us)", "predicted (us)", "measured (us)", true, true, {}, {}, 10};
  std::string table, ceilings;
  double lo = 1e300, hi = 0;
  for (const auto& rs : cx.sets) {
    const GpuSpec g = spec_from_results(rs, cx.gpus);
    ceilings += "- " + lbl(rs) + ": memory " + fmt(g.hbm_tbps * 1000) + " GB/s, compute " + fmt(g.bf16_tflops) +
                " TFLOP/s, host link " + fmt(g.host_link_gbps) + " GB/s, launch " + fmt(g.launch_us) + " us, per copy " +
                fmt(g.copy_fixed_us) + " us, disk " +
                (g.disk_gbps > 0 ? fmt(g.disk_gbps) + " GB/s + " + fmt(g.disk_latency_us) + " us per read"
                                 : std::string("- (no disk figure: no file-tier rows)")) +
                "; measured: " + std::to_string(g.calibration.size()) + " field(s)";
    for (const auto& c : g.calibration) ceilings += "; " + txt(c);
    ceilings += "\n";
    std::map<std::string, Line> lines;
    const RunIndex index(rs);
    for (const auto& r : rs.cases) {
      if (!r.measured()) continue;
      std::string why;
      const auto pr = predict_row(g, r, &why, index, cx.shapes_error.empty() ? &cx.shapes : nullptr);
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
  s += "Ceilings used (spec sheet, replaced by the ceilings measured in the same directory; the disk figure is never "
       "a spec: it is fitted on the directory's file-tier rows or taken from its dd_direct row):\n\n" + ceilings + "\n";
  s += "File-tier rows: reads x disk latency + bytes / disk bandwidth. Overlap rows: max(recompute share, fetch share) + "
       "1 sync, against the sum. Co-run rows: bandwidth sharing, decode bytes / min(alone rate, memory bandwidth - "
       "co-runner bytes/time from its alone row in the same run). These are models: docs/report.md states each.\n\n";
  s += chart_ref(cx, p);
  s += header({"device", "study", "case", "mode", "measured us (median)", "q1..q3 us", "predicted us", "predicted/measured",
               "model term"}) +
       table;
  return s + "\n";
}

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
  const std::string pre = "f" + std::to_string(n) + "_";
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

Ctx make_ctx(const std::vector<ResultSet>& sets, const ReportOptions& o) {
  Ctx cx{sets, o, {}, {}, {}, {}, {}};
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
  s += section_inputs(cx);
  s += section_verdicts(cx);
  s += section_gather(cx);
  s += section_block_token(cx);
  s += section_frontier(cx);
  s += section_map(cx);
  s += section_idle(cx);
  s += section_predicted(cx);
  if (!chart_notes.empty()) {
    s += "## Charts\n\n";
    for (const auto& n : chart_notes) s += "- " + n + "\n";
    s += "\n";
  }
  return s;
}

}  // namespace

std::string render_markdown(const std::vector<ResultSet>& sets, const ReportOptions& o,
                            const std::vector<std::string>& chart_notes) {
  Ctx cx = make_ctx(sets, o);
  return render(cx, chart_notes);
}

std::string markdown_to_html(const std::string& md, const std::string& dir, const std::vector<std::string>& drawn) {
  return to_html(md, fs::path(dir), drawn);
}

ReportResult write_report(const std::vector<ResultSet>& sets, const ReportOptions& o) {
  ReportResult res;
  const fs::path dir = o.out_dir.empty() ? fs::path(sets.at(0).dir) / "report" : fs::path(o.out_dir);
  std::error_code ec;
  // The default report directory lies inside a results directory someone else may have made: a symlink
  // there would send every file the report writes (and gnuplot's output) somewhere else.
  if (o.out_dir.empty() && fs::is_symlink(dir, ec))
    throw UsageError(dir.string() + ": is a symbolic link (refused: the report writes only into a real directory; "
                     "pass --out DIR)");
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(dir.string() + ": cannot create the report directory (" + ec.message() + ")");
  if (!fs::is_directory(dir, ec)) throw UsageError(dir.string() + ": not a directory");
  res.dir = dir.string();
  // First pass collects the charts; their notes (gnuplot ran or not) go into the markdown of the second.
  Ctx cx = make_ctx(sets, o);
  (void)render(cx, {});
  std::vector<std::string> notes, drawn;
  ::unlink((dir / "gnuplot.log").c_str());
  for (const auto& p : cx.plots) {
    write_plot(p, dir);
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
      const std::string err = run_gnuplot(o.gnuplot, dir, p.name + ".gp");
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
  Ctx cx2 = make_ctx(sets, o);
  const std::string md = render(cx2, notes);
  write_new_file(dir / "report.md", md);
  res.files.push_back((dir / "report.md").string());
  write_new_file(dir / "report.html", to_html(md, dir, drawn));
  res.files.push_back((dir / "report.html").string());
  return res;
}

}  // namespace kvf::report
