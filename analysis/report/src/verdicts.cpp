// Verdicts for the claims the suite was built to test. The rules are documented in docs/report.md and
// repeated in each Verdict::rule; a claim whose inputs are missing is "not measured", never guessed.
#include <algorithm>
#include <cmath>
#include <map>

#include "series.hpp"

namespace kvf::report {

using namespace detail;

namespace {

const char* kClaim1 = "Recompute ~50 us vs fetch ~200 us at 128 tokens / 1 layer";
const char* kRule1 =
    "GPU only. arm=x bf16, tokens=128, layers=1, pages=1 (Llama-3.1-8B when measured, else the first model), cold; fetch = "
    "h2d_pinned at the page's K/V bytes (interpolated between measured copy sizes). Supported iff recompute < fetch and "
    "recompute in [25, 100] us and fetch in [100, 400] us (within 2x of the claimed figures); else refuted.";
const char* kClaim2 = "More than 60% of the GPU is idle in decode";
const char* kRule2 =
    "Median over all decode ranges (counters.csv, source=range) of the definition's kvf:idle_*_pct; supported iff > 60.";
const char* kClaim3 = "Recompute wins for small pages and few layers";
const char* kRule3 =
    "Recompute arm x bf16, P=1, L=1 (preferred model as claim 1) against the device's fetch (GPU: h2d_pinned, CPU: file_page), "
    "at >= 2 token counts with both measured. Supported iff recompute < fetch at the smallest page and the ratio "
    "recompute/fetch is larger at the largest page than at the smallest (the advantage shrinks with page size), and, where the "
    "through-layers arm is measured at >= 2 layer counts (P=1, one page size, fetch at its K/V bytes), recompute/fetch is "
    "larger at the most layers than at the fewest; else refuted.";
const char* kClaim4 = "XQuant-style X caching beats fetching K/V at equal memory";
const char* kRule4 =
    "Rows arm=xq (int8/int4 X). Eligible: resident_bytes_per_page <= kv_bytes_per_page (no more memory than bf16 K/V) with "
    "a fetch time for the page's K/V bytes (link as claim 3). Supported iff some eligible row recomputes faster than the "
    "fetch; refuted iff eligible rows exist and none does, or no xq row is within the K/V's memory.";
const char* kClaim5 = "Contiguous blocks beat scattered tokens and the gap widens with context length";
const char* kRule5 =
    "Access study, part=attention, per group (same keep, dtype, layout, shape, mode; best block size; uniform scatter) with "
    ">= 2 context lengths. Supported iff in every group block < token at every ctx and token/block at the largest ctx > "
    "at the smallest; else refuted.";

std::string us(double s) { return fmt(s * 1e6) + " us"; }

const RecSeries* pick_x(const std::vector<RecSeries>& all, double layers, double pages) {
  const RecSeries* first = nullptr;
  for (const auto& s : all) {
    if (s.arm != "x" || (s.xdtype != "bf16" && !s.xdtype.empty()) || s.layers != layers || s.pages != pages) continue;
    if (s.model == "Llama-3.1-8B") return &s;
    if (!first) first = &s;
  }
  return first;
}

Verdict claim1(const ResultSet& rs) {
  Verdict v{kClaim1, rs.label, "not measured", "", kRule1};
  if (rs.backend != "cuda") {
    v.figures = "CPU results: the claim is about a GPU";
    return v;
  }
  const auto recs = recompute_series(rs);
  const RecSeries* x = pick_x(recs, 1, 1);
  const auto xs = transfer_series(rs);
  const XferSeries* f = find_xfer(xs, "h2d_pinned");
  if (!x || !f) {
    v.figures = !x ? "no x bf16 L1 P1 rows" : "no h2d_pinned rows";
    return v;
  }
  auto it = std::find(x->tokens.begin(), x->tokens.end(), 128.0);
  if (it == x->tokens.end()) {
    v.figures = "no 128-token row";
    return v;
  }
  const std::size_t i = static_cast<std::size_t>(it - x->tokens.begin());
  const auto fetch = interpolate(f->bytes, f->secs, x->kv_bytes[i]);
  if (!fetch) {
    v.figures = "page of " + fmt(x->kv_bytes[i]) + " B outside the measured copy sizes";
    return v;
  }
  const double rec = x->secs[i];
  const bool ok = rec < *fetch && rec >= 25e-6 && rec <= 100e-6 && *fetch >= 100e-6 && *fetch <= 400e-6;
  v.verdict = ok ? "supported" : "refuted";
  v.figures = x->model + ": recompute " + us(rec) + " (" + x->mode + "), fetch " + us(*fetch) + " (" + f->mode + ")";
  return v;
}

std::vector<Verdict> claim2(const ResultSet& rs) {
  std::vector<Verdict> out;
  const auto st = idle_stats(rs);
  for (const auto& [metric, name] : std::vector<std::pair<std::string, std::string>>{
           {"kvf:idle_sm_pct", "SM idle (no resident warp)"},
           {"kvf:idle_issue_pct", "issue slots idle"},
           {"kvf:idle_tensor_pct", "tensor pipe idle"}}) {
    Verdict v{std::string(kClaim2) + " - " + name, rs.label, "not measured", "", kRule2};
    std::vector<double> all;
    std::size_t ranges = 0;
    for (const auto& s : st)
      if (s.metric == metric) {
        all.push_back(s.median);
        ranges += s.ranges;
      }
    if (all.empty()) {
      v.figures = rs.backend == "cpu"  ? "CPU results: the claim is about a GPU (CPU compute idleness: section 5)"
                  : rs.has_counters    ? "no " + metric + " ranges in counters.csv"
                                       : "no counters.csv";
    } else {
      // median over ranges: recompute from the raw values, not the median of medians
      std::vector<double> raw;
      for (const auto& c : rs.counters)
        if (c.source == "range" && c.metric == metric && c.value) raw.push_back(*c.value);
      const double m = median_of(raw);
      v.verdict = m > 60 ? "supported" : "refuted";
      v.figures = "median " + fmt(m) + "% over " + std::to_string(raw.size()) + " ranges";
    }
    out.push_back(v);
  }
  return out;
}

Verdict claim3(const ResultSet& rs) {
  Verdict v{kClaim3, rs.label, "not measured", "", kRule3};
  const auto recs = recompute_series(rs);
  const RecSeries* x = pick_x(recs, 1, 1);
  const auto xs = transfer_series(rs);
  const std::string link = primary_link(rs);
  const XferSeries* f = find_xfer(xs, link);
  if (!x || !f) {
    v.figures = !x ? "no x bf16 L1 P1 rows" : "no " + link + " rows";
    return v;
  }
  std::vector<double> T, r, t;
  for (std::size_t i = 0; i < x->tokens.size(); ++i)
    if (auto ft = interpolate(f->bytes, f->secs, x->kv_bytes[i])) {
      T.push_back(x->tokens[i]);
      r.push_back(x->secs[i]);
      t.push_back(*ft);
    }
  if (T.size() < 2) {
    v.figures = std::to_string(T.size()) + " token count(s) with both recompute and " + link + " measured; 2 needed";
    return v;
  }
  const double r0 = r.front() / t.front(), r1 = r.back() / t.back();
  bool ok = r.front() < t.front() && r1 > r0;
  const auto c = find_crossover(T, r, t, "recompute", link, "tokens");
  v.figures = x->model + " vs " + link + ": T=" + fmt(T.front()) + " recompute " + us(r.front()) + " / fetch " +
              us(t.front()) + "; T=" + fmt(T.back()) + " " + us(r.back()) + " / " + us(t.back()) + "; crossover " + c.text;
  // Layers: the through-layers arm (from token ids, P=1, same model) at one page size, >= 2 layer counts.
  std::map<double, std::map<double, std::pair<double, double>>> by_t;  // T -> L -> (recompute, fetch)
  for (const auto& s : recs) {
    if (s.arm != "layers" || s.model != x->model || s.pages != 1) continue;
    for (std::size_t i = 0; i < s.tokens.size(); ++i)
      if (auto ft = interpolate(f->bytes, f->secs, s.kv_bytes[i])) by_t[s.tokens[i]].emplace(s.layers, std::make_pair(s.secs[i], *ft));
  }
  const std::map<double, std::pair<double, double>>* byl = nullptr;
  double tl = 0;
  for (const auto& [tt, m] : by_t)
    if (m.size() >= 2 && (!byl || tt == 128)) {
      byl = &m;
      tl = tt;
    }
  if (byl) {
    const auto& lo = byl->begin()->second;
    const auto& hi = byl->rbegin()->second;
    const bool l_ok = lo.first / lo.second < hi.first / hi.second;
    ok = ok && l_ok;
    v.figures += "; through-layers T=" + fmt(tl) + ": L=" + fmt(byl->begin()->first) + " recompute/fetch " +
                 fmt(lo.first / lo.second) + ", L=" + fmt(byl->rbegin()->first) + " " + fmt(hi.first / hi.second);
  } else {
    v.figures += "; layers: not measured (fewer than 2 layer counts of the through-layers arm with a fetch at their size)";
  }
  v.verdict = ok ? "supported" : "refuted";
  return v;
}

Verdict claim4(const ResultSet& rs) {
  Verdict v{kClaim4, rs.label, "not measured", "", kRule4};
  const auto recs = recompute_series(rs);
  const auto xs = transfer_series(rs);
  const std::string link = primary_link(rs);
  const XferSeries* f = find_xfer(xs, link);
  bool any_xq = false, eligible = false;
  std::string best_text;
  double best_ratio = 1e300;
  for (const auto& s : recs) {
    if (s.arm != "xq") continue;
    any_xq = true;
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      if (s.resident[i] <= 0 || s.kv_bytes[i] <= 0 || s.resident[i] > s.kv_bytes[i] || !f) continue;
      auto ft = interpolate(f->bytes, f->secs, s.kv_bytes[i]);
      if (!ft) continue;
      eligible = true;
      const double ratio = s.secs[i] / *ft;
      if (ratio < best_ratio) {
        best_ratio = ratio;
        best_text = s.model + " " + s.xdtype + " X, T=" + fmt(s.tokens[i]) + " P" + fmt(s.pages) + ": resident " +
                    fmt(s.resident[i]) + " B vs K/V " + fmt(s.kv_bytes[i]) + " B; recompute " + us(s.secs[i]) + " vs " +
                    link + " " + us(*ft);
      }
    }
  }
  if (!any_xq) {
    v.figures = "no xq rows";
    return v;
  }
  if (!f) {
    v.figures = "no " + link + " rows";
    return v;
  }
  if (!eligible) {
    // xq rows exist: either X is larger than the K/V it replaces, or no fetch at that page size
    bool smaller = false;
    for (const auto& s : recs)
      if (s.arm == "xq")
        for (std::size_t i = 0; i < s.tokens.size(); ++i) smaller = smaller || (s.resident[i] > 0 && s.resident[i] <= s.kv_bytes[i]);
    if (smaller) {
      v.figures = "no " + link + " measurement at the xq pages' K/V sizes";
      return v;
    }
    v.verdict = "refuted";
    v.figures = "every quantized X is larger than the bf16 K/V it replaces";
    return v;
  }
  v.verdict = best_ratio < 1 ? "supported" : "refuted";
  v.figures = best_text;
  return v;
}

Verdict claim5(const ResultSet& rs) {
  Verdict v{kClaim5, rs.label, "not measured", "", kRule5};
  const auto gs = access_groups(rs);
  std::size_t n = 0, fail_order = 0, fail_widen = 0, crosses_knee = 0;
  std::string example;
  for (const auto& g : gs) {
    if (g.ctx.size() < 2) continue;
    ++n;
    bool faster = true;
    for (std::size_t i = 0; i < g.ctx.size(); ++i) faster = faster && g.block_s[i] < g.token_s[i];
    const double r0 = g.token_s.front() / g.block_s.front(), r1 = g.token_s.back() / g.block_s.back();
    if (!faster) ++fail_order;
    if (!(r1 > r0)) ++fail_widen;
    if (knee_ctx(g)) ++crosses_knee;
    if (example.empty())
      example = "keep " + g.keep + " (" + g.mode + "): token/block " + fmt(r0) + "x at ctx " + fmt(g.ctx.front()) + ", " +
                fmt(r1) + "x at ctx " + fmt(g.ctx.back());
  }
  if (n == 0) {
    v.figures = gs.empty() ? "no access attention rows with both block and token arms" : "fewer than 2 context lengths per group";
    return v;
  }
  v.verdict = fail_order == 0 && fail_widen == 0 ? "supported" : "refuted";
  v.figures = std::to_string(n) + " groups; contiguous slower somewhere in " + std::to_string(fail_order) +
              "; gap not wider at the longest ctx in " + std::to_string(fail_widen) + "; " + std::to_string(crosses_knee) +
              " groups cross the LLC/L2 knee (the widening may be the working set leaving cache); e.g. " + example;
  return v;
}

}  // namespace

std::vector<Verdict> verdicts(const std::vector<ResultSet>& sets) {
  std::vector<Verdict> out;
  for (const auto& rs : sets) {
    out.push_back(claim1(rs));
    for (auto& v : claim2(rs)) out.push_back(v);
    out.push_back(claim3(rs));
    out.push_back(claim4(rs));
    out.push_back(claim5(rs));
  }
  // Grouped by claim, then by results directory (the order given on the command line).
  std::stable_sort(out.begin(), out.end(), [](const Verdict& a, const Verdict& b) {
    auto rank = [](const Verdict& v) {
      for (int i = 0; const char* c : {kClaim1, kClaim2, kClaim3, kClaim4, kClaim5}) {
        if (v.claim.rfind(c, 0) == 0) return i;
        ++i;
      }
      return 9;
    };
    return rank(a) < rank(b);
  });
  return out;
}

}  // namespace kvf::report
