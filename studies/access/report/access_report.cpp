// The access study in the report: gather bandwidth against run length (section), contiguous blocks against
// scattered tokens by context (section, and claim 5), every row predicted by the roofline of its bytes and
// flops.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kvf/access_columns.hpp"
#include "kvf/study_report.hpp"

namespace kvf::report {

namespace {

using namespace md;

const char* kClaim5 = "Contiguous blocks beat scattered tokens and the gap widens with context length";
const char* kRule5 =
    "Access study, part=attention, per group (same keep, dtype, layout, selection, shape, mode; uniform scatter; at "
    "each context the block size with the fastest block row, against the token row of that block size; in a group "
    "measured at >= 2 contexts, among the block sizes measured at all of them, so a context with more sizes swept "
    "is not a best of more, and where no size is, the best at each). At each (group, ctx) token/block is a sign only "
    "when its 95% bootstrap interval excludes 1 (docs/report.md, noise); cold groups only where the run has them "
    "(hot points are counted beside the verdict: hot rows of small contexts read the cache); every group's points "
    "count for which is faster, the groups with >= 2 contexts for the gap: it widens in a group when the interval at "
    "the largest ctx lies above the one at the smallest. Supported iff block is faster at every point and the gap "
    "widens in every group with >= 2 contexts; refuted iff token is faster at some point and block at none, or the "
    "gap narrows in every such group; not established when no point shows a sign; mixed otherwise (the figures count "
    "each, and give the spread of token rows of equal work at other block sizes: drift between rows that the "
    "intervals do not hold). Not measured without a group at >= 2 contexts.";

// Attention part: per group (every parameter but arm/block/scatter/ctx and derived sizes), per ctx: the block size
// whose contiguous-block median is best among those with a scattered-token row too, and that token row (same block
// size: the same sink and latest blocks, the same budget). The fastest token row of any block size or selection
// would make the token side a best-of-N where sweeps add rows.
struct AccessGroup {
  std::string key, mode, keep;
  std::map<std::string, std::string> params;  // what makes the group (mode included), for the table's keys
  std::vector<double> ctx, block_s, token_s, ws_vs_llc;
  std::vector<Ratio> token_vs_block;  // per ctx: token / best block, with the noise interval
  std::vector<std::string> block;     // per ctx: the block size of that best block row
  // How far apart rows of nearly the same work land in this run and mode, which no row's own interval shows (the
  // machine drifts between rows): the widest spread (max / min of medians) among token rows of equal bytes and
  // flops, the same context and budget at other block sizes (their sink and latest blocks, 2B contiguous tokens,
  // differ, so a little of it is the access pattern); 0 where none repeat. Stated beside the signs, not in them.
  double token_spread = 0;
};

std::vector<AccessGroup> access_groups(const ResultSet& rs) {
  // The arm and the axes a group spans, and what the bench derives per row: not the group's.
  static const std::set<std::string> skip = [] {
    auto s = access_derived_columns();
    s.insert({"arm", "block", "scatter", "ctx"});
    return s;
  }();
  struct Acc {
    AccessGroup g;
    std::map<double, std::map<std::string, const CaseRow*>> block, token;  // ctx -> block size -> row
    std::map<double, double> ws;
  };
  std::map<std::string, Acc> groups;
  for (const auto* r : rs.rows("access")) {
    if (r->param("part") != "attention" || r->param("launch") == "graph") continue;  // eager rows make the groups
    const std::string arm = r->param("arm");
    if (arm != "block" && arm != "token") continue;
    const auto ctx = r->num("ctx");
    if (!ctx) continue;
    if (arm == "token" && !r->param("scatter").empty() && r->param("scatter") != "uniform") continue;
    std::string key = "mode=" + r->mode;
    for (const auto& [k, v] : r->params)
      if (!skip.count(k)) key += "," + k + "=" + v;
    auto& a = groups[key];
    a.g.key = key;
    a.g.mode = r->mode;
    a.g.keep = r->param("keep");
    if (a.g.params.empty()) {
      a.g.params["mode"] = r->mode;
      for (const auto& [k, v] : r->params)
        if (!skip.count(k)) a.g.params[k] = v;
    }
    (arm == "block" ? a.block : a.token)[*ctx].emplace(r->param("block"), r);
    if (auto w = r->num("working_set_vs_llc")) a.ws[*ctx] = std::max(a.ws[*ctx], *w);
  }
  std::vector<AccessGroup> out;
  for (auto& entry : groups) {
    Acc& a = entry.second;  // not a structured binding: the lambda below captures it (clang 14 refuses those)
    // The token row a block row of this size and context is compared with (one that names no block size fits any).
    auto token_row = [&](double c, const std::string& size) -> const CaseRow* {
      const auto tokens = a.token.find(c);
      if (tokens == a.token.end()) return nullptr;
      auto tr = tokens->second.find(size);
      if (tr == tokens->second.end()) tr = tokens->second.find("");
      return tr == tokens->second.end() ? nullptr : tr->second;
    };
    // Block sizes with a pair at every context of the group: the best of those at each, where there are any (the
    // default grid sweeps five sizes at 64K and one elsewhere: a best of five beside a best of one made a widening).
    std::set<std::string> everywhere;
    bool first = true;
    for (const auto& [c, blocks] : a.block) {
      std::set<std::string> here;
      for (const auto& [size, row] : blocks)
        if (token_row(c, size)) here.insert(size);
      if (here.empty()) continue;
      if (first) everywhere = here;
      else std::erase_if(everywhere, [&](const std::string& size) { return !here.count(size); });
      first = false;
    }
    for (const auto& [c, blocks] : a.block) {
      const CaseRow *b = nullptr, *t = nullptr;
      std::string chosen;
      for (const auto& [size, row] : blocks) {
        if (!everywhere.empty() && !everywhere.count(size)) continue;
        const CaseRow* tr = token_row(c, size);
        if (tr && (!b || *row->median_s < *b->median_s)) b = row, t = tr, chosen = size;
      }
      if (!b) continue;
      a.g.block.push_back(chosen);
      a.g.ctx.push_back(c);
      a.g.block_s.push_back(*b->median_s);
      a.g.token_s.push_back(*t->median_s);
      a.g.token_vs_block.push_back(median_ratio(*t, *b));
      a.g.ws_vs_llc.push_back(a.ws.count(c) ? a.ws[c] : 0);
    }
    if (!a.g.ctx.empty()) out.push_back(a.g);
  }
  std::map<std::string, double> spread;  // per mode
  for (const auto& [k, a] : groups)
    for (const auto& [c, rows] : a.token) {
      std::map<std::pair<double, double>, std::pair<double, double>> equal_work;  // (bytes, flops) -> (min, max)
      for (const auto& [size, r] : rows) {
        if (!r->bytes || !r->flops) continue;
        auto [it, fresh] = equal_work.try_emplace({*r->bytes, *r->flops}, *r->median_s, *r->median_s);
        if (!fresh) it->second = {std::min(it->second.first, *r->median_s), std::max(it->second.second, *r->median_s)};
      }
      for (const auto& [work, range] : equal_work)
        if (range.first > 0) spread[a.g.mode] = std::max(spread[a.g.mode], range.second / range.first - 1);
    }
  for (auto& g : out) g.token_spread = spread[g.mode];
  return out;
}

std::optional<double> knee_ctx(const AccessGroup& g) {
  for (std::size_t i = 0; i + 1 < g.ctx.size(); ++i) {
    const double a = g.ws_vs_llc[i], b = g.ws_vs_llc[i + 1];
    if (a > 0 && a <= 1 && b > 1) return g.ctx[i] + (g.ctx[i + 1] - g.ctx[i]) * (1 - a) / (b - a);
  }
  return std::nullopt;
}

std::string sign_word(const Ratio& r) {
  if (!r.has_interval) return "no interval";
  return r.a_slower() ? "block faster" : r.a_faster() ? "token faster" : "no measurable difference";
}

// One panel per (directory, mode): gather bandwidth by run length, against two ceilings of the same run drawn
// and labelled, the same kernel reading sequentially and the stream read ceiling.
std::string section_gather(ReportContext& cx) {
  std::string s;
  Plot p{"gather", "Gather bandwidth against run length", "run length", "bandwidth (GB/s)", true, false, {}, {"set yrange [0:*]"}};
  p.xunit = AxisUnit::bytes;
  p.panel_by = {"device", "mode"};
  std::string table;
  for (const auto& rs : cx.sets) {
    std::map<std::map<std::string, std::string>, Line> lines;
    std::map<std::string, double> ceiling;  // per mode: the stream read ceiling of the same run
    // Axes the rows of one run may sweep (--huge-pages both, --prefetch both): a series and a reference line each.
    std::set<std::string> huge, prefetch;
    for (const auto* r : rs.rows("access"))
      if (r->param("part") == "gather") huge.insert(r->param("huge")), prefetch.insert(r->param("prefetch"));
    for (const auto* r : rs.rows("access")) {
      if (r->param("part") != "gather") continue;
      const auto rb = r->num("run_bytes");
      if (!rb || !r->gbps) continue;
      std::map<std::string, std::string> key = {{"device", rs.label}, {"mode", r->mode}, {"huge", r->param("huge")}};
      if (prefetch.size() > 1) key["prefetch"] = r->param("prefetch");
      if (r->param("arm") == "sequential") {
        // one run length: the same kernel's best case, a reference rather than a series
        Line q;
        q.ref = Line::Ref::horizontal;
        q.key = key;
        q.title = "sequential, same kernel" + (huge.size() > 1 ? ", huge=" + r->param("huge") : "") +
                  (prefetch.size() > 1 ? ", prefetch=" + r->param("prefetch") : "") + ": " + rate(*r->gbps);
        q.pts = {{*rb, *r->gbps}};
        p.lines.push_back(q);
      } else {
        // The plain loop (CPU) is its own line: the control the tuned gather is read against.
        auto lkey = key;
        lkey["arm"] = r->param("arm");
        auto& l = lines[lkey];
        l.title = r->param("arm") == "plain" ? "plain loop (control)" : r->param("arm");
        l.key = key;
        l.pts.emplace_back(*rb, *r->gbps);
      }
      if (r->ceiling_value) ceiling[r->mode] = std::max(ceiling[r->mode], *r->ceiling_value);
      const std::string pf = r->param("prefetch");
      table += row({lbl(rs), txt(r->param("arm")), txt(r->param("huge")), pf.empty() ? "-" : txt(pf), txt(r->mode),
                    bytes(*rb), rate(*r->gbps), r->ceiling_value ? fmt(100 * *r->gbps / *r->ceiling_value) : "-"});
    }
    for (auto& [k, l] : lines) {
      std::sort(l.pts.begin(), l.pts.end());
      p.lines.push_back(l);
    }
    for (const auto& [mode, c] : ceiling) {
      Line q;
      q.ref = Line::Ref::horizontal;
      q.key = {{"device", rs.label}, {"mode", mode}};
      q.title = "stream read ceiling " + rate(c);
      q.pts = {{0, c}};
      p.lines.push_back(q);
    }
  }
  if (table.empty()) return s + "Not measured: no access-study gather rows (part=gather) in any directory.\n\n";
  s += cx.chart(p);
  for (const auto& rs : cx.sets)
    s += ceiling_beaten(rs, "access", "stream:op=read:gbps", "stream read ceiling", {{"part", "gather"}});
  s += header({"device", "arm", "huge pages", "software prefetch", "mode", "run length", "bandwidth",
               "% of stream read ceiling"}) +
       table;
  return s + "\n";
}

// CPU rows measured beside a control of their own: a gather against the plain loop over the same runs (arm=plain),
// a dense attention row against the plain read of its own K and V in its order (arm=read). The control against
// the stream read ceiling is what the access pattern allows a plain loop; the row against its control is what
// the kernel adds (above 1) or loses. Matched on every column that shapes the bytes read, in the same mode. A
// subsection of the section of its rows (arm: gather or dense), "" where no row has its control.
// with_fma_floor (dense rows): two last columns, the compute control's time (arm=compute: the row's loop in cache,
// hot, matched on the same shape) and the row's FMA floor (fma_floor_s: its products at the fp32 FMA peak measured
// in the run, fma_floor_basis), each as a percentage of the row's median time, "-" where the row has none.
std::string controls_table(ReportContext& cx, const std::string& arm, const std::string& control,
                           bool with_fma_floor = false) {
  static const char* const shape[] = {"part", "ctx", "layout", "dtype", "head_dim", "hq", "hkv", "batch",
                                      "placement", "page_tokens", "huge", "pool_mib", "run_bytes"};
  const auto key = [](const CaseRow& r) {
    std::string k = r.mode;
    for (const char* c : shape) k += '\x1f' + r.param(c);
    return k;
  };
  const auto pct = [](const CaseRow& r) {
    return r.ceiling_value && *r.ceiling_value > 0 ? fmt(100 * *r.gbps / *r.ceiling_value) : std::string("-");
  };
  const auto shape_key = [&](const CaseRow& r) { return key(r).substr(r.mode.size()); };  // any mode
  std::string table;
  for (const auto& rs : cx.sets) {
    std::map<std::string, const CaseRow*> controls, compute;
    for (const auto* r : rs.rows("access")) {
      if (r->param("arm") == control && r->gbps && *r->gbps > 0 && r->invalid.empty()) controls[key(*r)] = r;
      if (with_fma_floor && r->param("arm") == "compute" && r->median_s && *r->median_s > 0 && r->invalid.empty())
        compute[shape_key(*r)] = r;
    }
    for (const auto* r : rs.rows("access")) {
      if (r->param("arm") != arm || !r->gbps || !r->invalid.empty()) continue;
      const auto it = controls.find(key(*r));
      if (it == controls.end()) continue;
      const CaseRow& c = *it->second;
      std::vector<std::string> cells = {lbl(rs),         txt(r->case_name), txt(r->mode), rate(*r->gbps), pct(*r),
                                        rate(*c.gbps), pct(c),            fmt(*r->gbps / *c.gbps)};
      if (with_fma_floor) {
        const auto cc = compute.find(shape_key(*r));
        cells.push_back(cc != compute.end() && r->median_s && *r->median_s > 0
                            ? fmt(100 * *cc->second->median_s / *r->median_s)
                            : "-");
        const auto floor = r->num("fma_floor_s");
        // A floor above the row's own time is no floor: the run's FMA peak was measured low (a loaded machine).
        const double floor_pct = floor && r->median_s && *r->median_s > 0 ? 100 * *floor / *r->median_s : -1;
        cells.push_back(floor_pct < 0    ? "-"
                        : floor_pct > 100 ? fmt(floor_pct) + " (no floor: the run's FMA peak, " +
                                                r->param("fma_peak_gflops") + " GFLOP/s, was measured low)"
                                          : fmt(floor_pct));
      }
      table += row(cells);
    }
  }
  if (table.empty()) return "";
  std::vector<std::string> cols = {"device", "case", "mode", "bandwidth", "% of stream read ceiling",
                                   "control bandwidth", "control % of ceiling", "row / control"};
  if (with_fma_floor) cols.insert(cols.end(), {"compute control % of time", "FMA floor % of time"});
  return header(cols) + table + "\n";
}

std::string gather_controls(ReportContext& cx) {
  const std::string t = controls_table(cx, "gather", "plain");
  if (t.empty()) return "";
  return "### The gather against its control\n\nThe control (`plain`, CPU) reads the same runs in the same order "
         "with a plain OpenMP loop: no intrinsics, no software prefetch. Below 1 the tuned gather lost to it.\n\n" + t;
}

std::string dense_controls(ReportContext& cx) {
  const std::string t = controls_table(cx, "dense", "read", true);
  if (t.empty()) return "";
  std::string beaten;
  for (const auto& rs : cx.sets)
    beaten += ceiling_beaten(rs, "access", "stream:op=read:gbps", "stream read ceiling", {{"part", "attention"}});
  return "### Dense attention against the read of its own bytes\n\nThe control (`read`, CPU) reads the dense "
         "row's K and V once, chunk by chunk in its order and placement, with a plain OpenMP loop and no compute. "
         "Against the stream read ceiling it is what the access pattern allows (a paged cache in shuffled page "
         "order is not a sequential read); the dense row over it is what the kernel adds (above 1: its software "
         "prefetch reads the pattern faster than the plain loop) or what its compute costs. The compute control "
         "(`compute`, CPU, hot) runs the row's loop over the same tokens folded into 256 KiB of K and V that stay in "
         "cache: near 100 the row is bound by its own arithmetic and instructions, and the read and the compute "
         "overlapped perfectly would take the longer of the control's time and the read control's. The last column "
         "is the time the row's QK and PV products alone would take with every FMA pipe busy (its flops at the fp32 "
         "FMA peak measured in the same run, at the vector width the kernel runs): near 100 the row is bound by "
         "arithmetic, and no read ceiling is within its reach.\n\n" + beaten + t;
}

// a < b with runs of digits compared as numbers ("ctx=4096" before "ctx=65536"), so shapes list in context order;
// strings equal that way ("07" and "7") fall back to byte order, so no two keys are equivalent.
bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      const std::size_t i0 = i, j0 = j;
      while (i < a.size() && digit(a[i])) ++i;
      while (j < b.size() && digit(b[j])) ++j;
      std::string x = a.substr(i0, i - i0), y = b.substr(j0, j - j0);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;
}
struct NaturalLess {
  bool operator()(const std::string& a, const std::string& b) const { return natural_less(a, b); }
};

// GPU attention rows of one shape measured with several kernels (--attn-loads: auto, mma, smem, regs; the column is
// absent on CPU rows): their medians side by side, each row matched on every other column and the mode, so a
// kernel's gain is read within one run. "" where no shape has two kernels.
std::string attention_kernels(ReportContext& cx) {
  static const char* const kLoads[] = {"auto", "mma", "smem", "regs"};
  std::string table;
  for (const auto& rs : cx.sets) {
    // shape -> loads -> row, shapes in natural order (contexts and sizes as numbers)
    std::map<std::string, std::map<std::string, const CaseRow*>, NaturalLess> by_shape;
    for (const auto* r : rs.rows("access")) {
      const std::string loads = r->param("loads");
      if (loads.empty() || !r->median_s || !r->invalid.empty()) continue;
      std::string k = r->mode;
      for (const auto& [name, value] : r->params)
        if (name != "loads") k += '\x1f' + name + '=' + value;
      by_shape[k][loads] = r;
    }
    for (const auto& [k, rows] : by_shape) {
      if (rows.size() < 2) continue;
      const CaseRow& first = *rows.begin()->second;
      std::string name = first.case_name;  // the configuration: a row's name without its kernel's suffix
      const std::string suffix = "/" + first.param("loads");
      if (const auto at = name.find(suffix); at != std::string::npos) name.erase(at, suffix.size());
      std::vector<std::string> cells = {lbl(rs), txt(name), txt(first.mode)};
      std::string fastest;
      double best = 0;
      for (const char* l : kLoads) {
        const auto it = rows.find(l);
        cells.push_back(it == rows.end() ? std::string("-") : fmt(*it->second->median_s * 1e6));
        if (it != rows.end() && (fastest.empty() || *it->second->median_s < best)) {
          best = *it->second->median_s;
          fastest = l;
        }
      }
      cells.push_back(fastest);
      table += row(cells);
    }
  }
  if (table.empty()) return "";
  return "### GPU attention kernels side by side\n\nThe same attention row timed with each kernel asked for "
         "(`--attn-loads`): mma (tensor cores), smem (CUDA-core math, K/V through a shared-memory ring), regs "
         "(CUDA-core math, K/V straight into registers), and auto (the default: mma for every K/V type; "
         "its note names the kernel). Medians in microseconds, matched on every other column and the mode.\n\n" +
         header({"device", "configuration", "mode", "auto (us)", "mma (us)", "smem (us)", "regs (us)", "fastest"}) +
         table + "\n";
}

// The chart answers claim 5 with the evidence the rule reads: token/block with its 95% interval against
// context, one panel per group measured at >= 2 contexts, "no difference" and the L2/LLC knee drawn.
Plot block_token_plot(const std::vector<std::pair<const ResultSet*, std::vector<AccessGroup>>>& per_set, int& drawn,
                      int& swept) {
  Plot p{"block_token", "Scattered tokens against contiguous blocks, by context", "context (tokens)",
         "token / best block latency (> 1: blocks faster)", true, false, {}, {}};
  p.xunit = AxisUnit::tokens;
  Line one;
  one.ref = Line::Ref::horizontal;
  one.title = "1: no difference";
  one.pts = {{0, 1}};
  p.lines.push_back(one);
  constexpr int kMaxPanels = 6;
  for (const auto& [rs, groups] : per_set)
    for (const auto& g : groups) {
      if (g.ctx.size() < 2) continue;
      ++swept;
      if (drawn >= kMaxPanels) continue;
      ++drawn;
      Line l;
      l.title = "token / block, 95% interval";
      l.style = "yerrorlines";
      l.key = g.params;
      l.key["device"] = rs->label;
      for (const auto& [k, v] : l.key)
        if (std::find(p.panel_by.begin(), p.panel_by.end(), k) == p.panel_by.end()) p.panel_by.push_back(k);
      for (std::size_t i = 0; i < g.ctx.size(); ++i) {
        const Ratio& q = g.token_vs_block[i];
        l.pts.emplace_back(g.ctx[i], q.value);
        l.yerr.emplace_back(q.has_interval ? q.lo : q.value, q.has_interval ? q.hi : q.value);
      }
      p.lines.push_back(l);
      if (auto k = knee_ctx(g)) {
        Line knee;
        knee.ref = Line::Ref::vertical;
        knee.key = l.key;
        knee.title = "working set = L2/LLC";
        knee.pts = {{*k, 0}};
        p.lines.push_back(knee);
      }
    }
  return p;
}

std::string section_block_token(ReportContext& cx) {
  std::string s;
  std::string table, knees, fixed;
  std::vector<std::pair<const ResultSet*, std::vector<AccessGroup>>> per_set;
  for (const auto& rs : cx.sets) {
    per_set.emplace_back(&rs, access_groups(rs));
    const auto& groups = per_set.back().second;
    // The parameters every group shares are stated once; rows name only what differs.
    std::vector<std::map<std::string, std::string>> params;
    for (const auto& g : groups) params.push_back(g.params);
    const Grouping gp = group_params(params);
    if (!groups.empty() && !gp.fixed.empty()) fixed += "- " + lbl(rs) + ": " + txt(gp.fixed) + "\n";
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const auto& g = groups[gi];
      const std::string& key = gp.keys[gi];
      for (std::size_t i = 0; i < g.ctx.size(); ++i)
        table += row({lbl(rs), txt(key), tokens(g.ctx[i]),
                      fmt(g.block_s[i] * 1e6) + (g.block[i].empty() ? "" : " (B" + txt(g.block[i]) + ")"),
                      fmt(g.token_s[i] * 1e6),
                      txt(g.token_vs_block[i].text()), sign_word(g.token_vs_block[i]),
                      g.ws_vs_llc[i] > 0 ? fmt(g.ws_vs_llc[i]) : "-"});
      if (auto k = knee_ctx(g))
        knees += "- " + lbl(rs) + " " + txt(key) + ": working set crosses the LLC/L2 at " + tokens(std::round(*k)) +
                 " tokens\n";
    }
  }
  if (table.empty()) return s + "Not measured: no access-study attention rows with both block and token arms.\n\n";
  int drawn = 0, swept = 0;
  s += cx.chart(block_token_plot(per_set, drawn, swept));
  if (swept == 0)
    s += "No chart: no group is measured at two or more contexts (claim 5 needs them); every group is in the table.\n\n";
  else if (drawn < swept)
    s += "The chart draws the first " + std::to_string(drawn) + " of " + std::to_string(swept) +
         " groups measured at two or more contexts; the table has every group.\n\n";
  if (!fixed.empty()) s += "Fixed in every row below:\n\n" + fixed + "\n";
  s += fold("Latency per group and context (token/block with its 95% bootstrap interval)",
            header({"device", "group", "context", "block us (best block size)", "token us", "token/block [95%]",
                    "sign", "working set / LLC"}) +
                table);
  std::string spreads;
  for (const auto& [rs, groups] : per_set) {
    std::map<std::string, double> by_mode;
    for (const auto& g : groups) by_mode[g.mode] = std::max(by_mode[g.mode], g.token_spread);
    for (const auto& [mode, x] : by_mode)
      if (x > 0) spreads += (spreads.empty() ? "" : "; ") + lbl(*rs) + " " + txt(mode) + " " + fmt(100 * x) + "%";
  }
  if (!spreads.empty())
    s += "Drift between rows: token rows of equal bytes and flops at other block sizes (the same context and budget) "
         "spread by " + spreads + " (max / min of their medians). The intervals above hold each row's own samples "
         "only: a difference of that size between two rows measured at different times may be the machine's "
         "drift.\n\n";
  s += "L2/LLC knee (dotted lines in the chart):\n\n" + (knees.empty() ? "- no group's context range crosses the LLC/L2\n" : knees);
  return s + "\n";
}

Verdict claim5(const ResultSet& rs) {
  Verdict v{kClaim5, rs.label, "not measured", "", kRule5};
  const auto gs = access_groups(rs);
  // The claim is about memory: cold groups decide where the run has them. Hot rows of small contexts read the L2 or
  // LLC (H100: up to 64K), a regime of their own; they are counted beside the verdict, not in it.
  const bool any_cold = std::any_of(gs.begin(), gs.end(), [](const AccessGroup& g) {
    return g.mode == "cold" && g.ctx.size() >= 2;
  });
  std::size_t n = 0, one_ctx = 0, points = 0, block_faster = 0, token_faster = 0, no_sign = 0, no_interval = 0,
              widens = 0, narrows = 0, crosses_knee = 0, hot_points = 0, hot_block = 0, hot_token = 0;
  std::string why_none;  // of the first point without an interval
  double bound = 0;  // the widest interval half-width among points without a sign
  double judged_spread = 0;  // the between-row spread of the judged groups' mode
  std::string example;
  // Groups at one context say which is faster there (the figures count them apart); the widening needs two.
  const bool any_swept = std::any_of(gs.begin(), gs.end(), [](const AccessGroup& g) { return g.ctx.size() >= 2; });
  const AccessGroup *one_ctx_token = nullptr, *swept = nullptr;  // a one-context group where tokens won; a swept one
  for (const auto& g : gs) {
    if (any_cold && g.mode != "cold") {
      for (const auto& q : g.token_vs_block)
        ++hot_points, hot_block += q.a_slower(), hot_token += q.a_faster();
      continue;
    }
    if (g.ctx.size() < 2) ++one_ctx;
    else ++n;
    for (const auto& q : g.token_vs_block) {
      ++points;
      if (q.a_slower()) ++block_faster;
      else if (q.a_faster()) ++token_faster;
      else if (!q.has_interval) {
        ++no_interval;  // not "no measurable difference": its noise is unknown
        if (why_none.empty()) why_none = q.why_none;
      } else {
        ++no_sign;
        bound = std::max({bound, q.hi - 1, 1 - q.lo});
      }
    }
    if (g.ctx.size() < 2) {
      if (!one_ctx_token && g.token_vs_block.front().a_faster()) one_ctx_token = &g;
      continue;
    }
    if (!swept) swept = &g;
    const Ratio &first = g.token_vs_block.front(), &last = g.token_vs_block.back();
    const bool intervals = first.has_interval && last.has_interval;
    if (intervals && last.lo > first.hi) ++widens;
    if (intervals && last.hi < first.lo) ++narrows;
    if (knee_ctx(g)) ++crosses_knee;
    if (example.empty())
      example = "keep " + g.keep + " (" + g.mode + "): token/block " + first.text() + " at " + tokens(g.ctx.front()) +
                ", " + last.text() + " at " + tokens(g.ctx.back());
  }
  if (!any_swept) {
    v.figures = gs.empty() ? "no access attention rows with both block and token arms" : "fewer than 2 context lengths per group";
    return v;
  }
  if (block_faster == points && widens == n) v.verdict = "supported";
  else if ((token_faster > 0 && block_faster == 0) || narrows == n) v.verdict = "refuted";
  else if (block_faster == 0 && token_faster == 0) v.verdict = "not established";
  else v.verdict = "mixed";
  v.figures = std::to_string(n) + " groups" +
              (one_ctx ? " at 2+ contexts and " + std::to_string(one_ctx) +
                             " at one (counted for which is faster, not for the gap)"
                       : "") +
              ", " + std::to_string(points) + " (group, context) points: block faster at " +
              std::to_string(block_faster) + ", token faster at " + std::to_string(token_faster) +
              ", no measurable difference at " + std::to_string(no_sign) +
              (no_sign ? " (intervals within +-" + fmt(100 * bound) + "%)" : "") +
              (no_interval ? ", no interval at " + std::to_string(no_interval) + " (" + why_none + ")" : "") +
              "; gap widens in " +
              std::to_string(widens) + " groups, narrows in " + std::to_string(narrows) + ", neither established in " +
              std::to_string(n - widens - narrows) + "; " + std::to_string(crosses_knee) +
              " groups cross the LLC/L2 knee (a widening there may be the working set leaving cache); e.g. " + example;
  for (const auto& g : gs)
    if (!any_cold || g.mode == "cold") judged_spread = std::max(judged_spread, g.token_spread);
  if (judged_spread > 0)
    v.figures += "; caution: token rows of equal bytes and flops at other block sizes spread by " +
                 fmt(100 * judged_spread) + "% in this run (max / min of their medians), which the intervals, made "
                 "of each row's own samples, do not hold";
  if (one_ctx_token) {  // named by what differs from the swept group of the example
    std::string what;
    for (const auto& [k, val] : one_ctx_token->params)
      if (!swept || !swept->params.count(k) || swept->params.at(k) != val)
        what += (what.empty() ? "" : ", ") + k + "=" + val;
    v.figures += "; tokens faster with " + what + " at " + tokens(one_ctx_token->ctx.front()) + ": token/block " +
                 one_ctx_token->token_vs_block.front().text();
  }
  if (hot_points)
    v.figures += "; judged on cold groups only (hot ones, beside them: block faster at " + std::to_string(hot_block) +
                 ", token faster at " + std::to_string(hot_token) + " of " + std::to_string(hot_points) + " points)";
  return v;
}

}  // namespace

StudyReport access_report() {
  StudyReport s;
  s.study = "access";
  s.sections = {{"Gather bandwidth against run length",
                 [](ReportContext& cx) { return section_gather(cx) + gather_controls(cx); }},
                {"Contiguous blocks against scattered tokens, by context length",
                 [](ReportContext& cx) {
                   return section_block_token(cx) + dense_controls(cx) + attention_kernels(cx);
                 }}};
  s.verdicts = {{5, kClaim5, [](const ResultSet& rs) { return std::vector<Verdict>{claim5(rs)}; }, nullptr}};
  s.terms = {{{}, [](Predictor& p) { return p.roof(p.r.backend == "cuda" ? 1 : 0, "roofline(flops, bytes) of the row"); }}};
  return s;
}

}  // namespace kvf::report
