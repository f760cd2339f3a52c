// The access study in the report: gather bandwidth against run length (section), contiguous blocks against
// scattered tokens by context (section, and claim 5), every row predicted by the roofline of its bytes and
// flops.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kvf/study_report.hpp"

namespace kvf::report {

namespace {

using namespace md;

const char* kClaim5 = "Contiguous blocks beat scattered tokens and the gap widens with context length";
const char* kRule5 =
    "Access study, part=attention, per group (same keep, dtype, layout, shape, mode; best block size; uniform scatter) with "
    ">= 2 context lengths. At each (group, ctx) token/block is a sign only when its 95% bootstrap interval excludes 1 "
    "(docs/report.md, noise); the gap widens in a group when the interval at the largest ctx lies above the one at the "
    "smallest. Supported iff block is faster at every point and the gap widens in every group; refuted iff token is "
    "faster at some point and block at none, or the gap narrows in every group; mixed where both hold somewhere (the "
    "figures count each); not established when no point shows a sign.";

// Attention part: per group (every parameter but arm/block/scatter/ctx and derived sizes), per ctx: the best
// contiguous-block median and the scattered-token median.
struct AccessGroup {
  std::string key, mode, keep;
  std::map<std::string, std::string> params;  // what makes the group (mode included), for the table's keys
  std::vector<double> ctx, block_s, token_s, ws_vs_llc;
  std::vector<Ratio> token_vs_block;  // per ctx: token / best block, with the noise interval
};

std::vector<AccessGroup> access_groups(const ResultSet& rs) {
  static const std::set<std::string> skip = {"arm",        "block",     "scatter",           "ctx",
                                             "budget_tokens", "working_set_bytes", "working_set_vs_llc",
                                             "kv_bytes",  "select",    "llc_bytes"};
  struct Acc {
    AccessGroup g;
    std::map<double, const CaseRow*> block, token;
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
    auto& m = arm == "block" ? a.block : a.token;
    auto it = m.find(*ctx);
    if (it == m.end() || *r->median_s < *it->second->median_s) m[*ctx] = r;  // best block size
    if (auto w = r->num("working_set_vs_llc")) a.ws[*ctx] = std::max(a.ws[*ctx], *w);
  }
  std::vector<AccessGroup> out;
  for (auto& [k, a] : groups) {
    for (const auto& [c, b] : a.block) {
      auto t = a.token.find(c);
      if (t == a.token.end()) continue;
      a.g.ctx.push_back(c);
      a.g.block_s.push_back(*b->median_s);
      a.g.token_s.push_back(*t->second->median_s);
      a.g.token_vs_block.push_back(median_ratio(*t->second, *b));
      a.g.ws_vs_llc.push_back(a.ws.count(c) ? a.ws[c] : 0);
    }
    if (!a.g.ctx.empty()) out.push_back(a.g);
  }
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

std::string section_gather(ReportContext& cx) {
  std::string s;
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
      table += row({lbl(rs), txt(r->param("arm")), txt(r->param("huge")), txt(r->mode), bytes(*rb), rate(*r->gbps),
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
  s += cx.chart(p);
  s += header({"device", "arm", "huge pages", "mode", "run length", "bandwidth", "% of stream read ceiling"}) + table;
  return s + "\n";
}

std::string section_block_token(ReportContext& cx) {
  std::string s;
  Plot p{"block_token", "Attention latency: block vs token, by context", "context (tokens)", "median latency (us)", true,
         true, {}, {}};
  std::string table, knees, fixed;
  int knee_n = 0;
  for (const auto& rs : cx.sets) {
    const auto groups = access_groups(rs);
    // The parameters every group shares are stated once; rows and legends name only what differs.
    std::vector<std::map<std::string, std::string>> params;
    for (const auto& g : groups) params.push_back(g.params);
    const Grouping gp = group_params(params);
    if (!groups.empty() && !gp.fixed.empty()) fixed += "- " + lbl(rs) + ": " + txt(gp.fixed) + "\n";
    bool any_cold = false;
    for (const auto& g : groups) any_cold = any_cold || g.mode == "cold";
    int drawn = 0;
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const auto& g = groups[gi];
      const std::string& key = gp.keys[gi];
      // chart: cold groups when measured, at most 12 per directory; the table has every group
      const bool draw = (!any_cold || g.mode == "cold") && drawn < 12;
      if (draw) ++drawn;
      Line b, t;
      b.title = (cx.sets.size() > 1 ? rs.label + " " : "") + key + " block";
      t.title = (cx.sets.size() > 1 ? rs.label + " " : "") + key + " token";
      for (std::size_t i = 0; i < g.ctx.size(); ++i) {
        b.pts.emplace_back(g.ctx[i], g.block_s[i] * 1e6);
        t.pts.emplace_back(g.ctx[i], g.token_s[i] * 1e6);
        table += row({lbl(rs), txt(key), tokens(g.ctx[i]), fmt(g.block_s[i] * 1e6), fmt(g.token_s[i] * 1e6),
                      txt(g.token_vs_block[i].text()), sign_word(g.token_vs_block[i]),
                      g.ws_vs_llc[i] > 0 ? fmt(g.ws_vs_llc[i]) : "-"});
      }
      if (draw) {
        p.lines.push_back(b);
        p.lines.push_back(t);
      }
      if (auto k = knee_ctx(g)) {
        knees += "- " + lbl(rs) + " " + txt(key) + ": working set crosses the LLC/L2 at " + tokens(std::round(*k)) +
                 " tokens\n";
        if (knee_n++ < 8)
          p.extra.push_back("set arrow from " + fmt(*k) + ", graph 0 to " + fmt(*k) + ", graph 1 nohead dt 3 lc rgb 'gray'");
      }
    }
  }
  if (table.empty()) return s + "Not measured: no access-study attention rows with both block and token arms.\n\n";
  s += cx.chart(p);
  if (!fixed.empty()) s += "Fixed in every row below:\n\n" + fixed + "\n";
  s += fold("Latency per group and context (token/block with its 95% bootstrap interval)",
            header({"device", "group", "context", "block us (best block size)", "token us", "token/block [95%]",
                    "sign", "working set / LLC"}) +
                table);
  s += "L2/LLC knee (dotted lines in the chart):\n\n" + (knees.empty() ? "- no group's context range crosses the LLC/L2\n" : knees);
  return s + "\n";
}

Verdict claim5(const ResultSet& rs) {
  Verdict v{kClaim5, rs.label, "not measured", "", kRule5};
  const auto gs = access_groups(rs);
  std::size_t n = 0, points = 0, block_faster = 0, token_faster = 0, no_sign = 0, widens = 0, narrows = 0,
              crosses_knee = 0;
  double bound = 0;  // the widest interval half-width among points without a sign
  std::string example;
  for (const auto& g : gs) {
    if (g.ctx.size() < 2) continue;
    ++n;
    for (const auto& q : g.token_vs_block) {
      ++points;
      if (q.a_slower()) ++block_faster;
      else if (q.a_faster()) ++token_faster;
      else {
        ++no_sign;
        if (q.has_interval) bound = std::max({bound, q.hi - 1, 1 - q.lo});
      }
    }
    const Ratio &first = g.token_vs_block.front(), &last = g.token_vs_block.back();
    const bool intervals = first.has_interval && last.has_interval;
    if (intervals && last.lo > first.hi) ++widens;
    if (intervals && last.hi < first.lo) ++narrows;
    if (knee_ctx(g)) ++crosses_knee;
    if (example.empty())
      example = "keep " + g.keep + " (" + g.mode + "): token/block " + first.text() + " at " + tokens(g.ctx.front()) +
                ", " + last.text() + " at " + tokens(g.ctx.back());
  }
  if (n == 0) {
    v.figures = gs.empty() ? "no access attention rows with both block and token arms" : "fewer than 2 context lengths per group";
    return v;
  }
  if (block_faster == points && widens == n) v.verdict = "supported";
  else if ((token_faster > 0 && block_faster == 0) || narrows == n) v.verdict = "refuted";
  else if (block_faster == 0 && token_faster == 0) v.verdict = "not established";
  else v.verdict = "mixed";
  v.figures = std::to_string(n) + " groups, " + std::to_string(points) + " (group, context) points: block faster at " +
              std::to_string(block_faster) + ", token faster at " + std::to_string(token_faster) +
              ", no measurable difference at " + std::to_string(no_sign) +
              (no_sign ? " (intervals within +-" + fmt(100 * bound) + "%)" : "") + "; gap widens in " +
              std::to_string(widens) + " groups, narrows in " + std::to_string(narrows) + ", neither established in " +
              std::to_string(n - widens - narrows) + "; " + std::to_string(crosses_knee) +
              " groups cross the LLC/L2 knee (a widening there may be the working set leaving cache); e.g. " + example;
  return v;
}

}  // namespace

StudyReport access_report() {
  StudyReport s;
  s.study = "access";
  s.sections = {{"Gather bandwidth against run length", section_gather},
                {"Contiguous blocks against scattered tokens, by context length", section_block_token}};
  s.verdicts = {{5, kClaim5, [](const ResultSet& rs) { return std::vector<Verdict>{claim5(rs)}; }, nullptr}};
  s.terms = {{{}, [](Predictor& p) { return p.roof(p.r.backend == "cuda" ? 1 : 0, "roofline(flops, bytes) of the row"); }}};
  return s;
}

}  // namespace kvf::report
