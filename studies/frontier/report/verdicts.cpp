// The frontier's claims (docs/report.md "Verdict rules" 1, 3, 4), judged on measured rows only, and what the
// model predicts for claims 1 and 3 beside them.
#include <algorithm>
#include <cmath>
#include <map>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "parts.hpp"
#include "series.hpp"

namespace kvf::report::frontier {

namespace {

const char* kClaim1 = "Recompute ~50 us vs fetch ~200 us at 128 tokens / 1 layer";
const char* kRule1 =
    "GPU only. arm=x bf16, tokens=128, layers=1, pages=1 (Llama-3.1-8B when measured, else the first model), cold when "
    "measured, else hot (the modes are printed); fetch = "
    "h2d_pinned at the page's K/V bytes (interpolated between measured copy sizes, its q1 and q3 alike). Not "
    "established when the two rows' q1..q3 spreads overlap; supported iff recompute is faster beyond them and "
    "recompute in [25, 100] us and fetch in [100, 400] us (within 2x of the claimed figures); else refuted. The figures "
    "add the regime: each side's fitted fixed cost (t = a + T x per-token cost) and the share of it at 128 tokens.";
const char* kClaim3 = "Recompute wins for small pages and few layers";
const char* kRule3 =
    "Recompute arm x bf16, P=1, L=1 (preferred model as claim 1) against the device's fetch (GPU: h2d_pinned, CPU: file_page), "
    "at >= 2 token counts with both measured. Not established when at the smallest page the two rows' q1..q3 spreads "
    "overlap. Supported iff recompute is faster than fetch beyond them at the smallest page and the ratio "
    "recompute/fetch is larger at the largest page than at the smallest (the advantage shrinks with page size), and, where the "
    "through-layers arm is measured at >= 2 layer counts (P=1, one page size, fetch at its K/V bytes), recompute/fetch is "
    "larger at the most layers than at the fewest; else refuted. Stated in both regimes: below N tokens (where the larger "
    "fixed cost still exceeds its bandwidth term) the per-operation fixed costs decide (a_recompute vs a_fetch, fitted on "
    "this host: they move from host to host), above it recompute/fetch tends to the ratio of per-token costs; the claim "
    "is about the fixed-cost regime. CPU results add recompute/fetch against host memory (dram_copy) at the smallest "
    "and largest page, beside the verdict, not in it.";
const char* kClaim4 = "XQuant-style X caching beats fetching K/V at equal memory";
const char* kRule4 =
    "Rows arm=xq (int8/int4 X) at equal memory: resident_bytes_per_page <= kv_bytes_per_page (no more memory than the "
    "bf16 K/V). Batched against batched: a call recomputing P pages (per page: call / P) against the same P pages' K/V "
    "fetched in one copy (per page: fetch(P x K/V bytes) / P, interpolated between measured copy sizes, link as claim 3). "
    "Per X form, its best such pair; supported iff some form recomputes faster beyond the two rows' q1..q3 spreads "
    "(fetch interpolated alike), not established iff none does and some pair's spreads overlap, refuted iff eligible "
    "pairs exist and fetch is faster beyond the spread in each, or no xq row is within the K/V's memory. Each form's "
    "K/V error (from its row's note) is stated beside it.";

const RecSeries* pick_x(const std::vector<RecSeries>& all, double layers, double pages) {
  const RecSeries* first = nullptr;
  for (const auto& s : all) {
    if (s.arm != "x" || (s.xdtype != "bf16" && !s.xdtype.empty()) || s.layers != layers || s.pages != pages) continue;
    if (s.model == "Llama-3.1-8B") return &s;
    if (!first) first = &s;
  }
  return first;
}

// Both sides as t = a + T x b: recompute over its token counts (x bf16 P1 L1), fetch over the copy sizes it was
// measured at (bytes -> tokens through the series' K/V bytes per token). Below N = max(a_rec / b_rec, a_fetch /
// b_fetch) tokens a fixed cost is still the larger part of its side: the fixed-cost regime.
struct Regimes {
  bool fitted = false;
  double a_rec = 0, b_rec = 0, a_fetch = 0, b_fetch = 0, n_tokens = 0;  // seconds, seconds per token
};
Regimes regimes(const RecSeries& x, const XferSeries& f) {
  Regimes g;
  if (x.tokens.size() < 2 || f.bytes.size() < 2 || x.kv_bytes.empty() || x.tokens.front() <= 0) return g;
  const double kv_per_token = x.kv_bytes.front() / x.tokens.front();
  std::vector<std::pair<double, double>> r, t;
  for (std::size_t i = 0; i < x.tokens.size(); ++i) r.emplace_back(x.tokens[i], x.secs[i]);
  for (std::size_t i = 0; i < f.bytes.size(); ++i) t.emplace_back(f.bytes[i] / kv_per_token, f.secs[i]);
  const auto fr = fit_affine(r), ft = fit_affine(t);
  if (!fr || !ft || kv_per_token <= 0) return g;
  g.fitted = true;
  g.a_rec = std::max(0.0, fr->first);
  g.b_rec = fr->second;
  g.a_fetch = std::max(0.0, ft->first);
  g.b_fetch = ft->second;
  g.n_tokens = std::max(g.a_rec / g.b_rec, g.a_fetch / g.b_fetch);
  return g;
}

std::string regimes_text(const Regimes& g, const std::string& link) {
  if (!g.fitted) return "regimes: not fitted (fewer than 2 sizes on a side)";
  return "below " + md::tokens(std::round(g.n_tokens)) + " tokens the fixed cost decides: recompute " +
         us_text(g.a_rec) + " vs " + link + " " + us_text(g.a_fetch) +
         " per operation on this host (a copy's start cost differs between hosts); at large pages, where "
         "per-token costs decide, recompute/fetch = " + fmt(g.b_rec / g.b_fetch) + " (per-token costs " +
         fmt(g.b_rec * 1e9) + " vs " + fmt(g.b_fetch * 1e9) + " ns); the claim (small pages) is about the fixed-cost "
         "regime";
}

// A CPU verdict resting on the OpenBLAS fp32 fallback (no bf16 matmul in this host's oneDNN) is not the bf16 path an
// engine runs: it reads twice the weight bytes, at another FLOP rate.
std::string fallback_text(const RecSeries& s) {
  return s.gemm == "openblas_fp32" ? "; recompute ran OpenBLAS fp32 (this CPU's oneDNN has no bf16 matmul): fp32 "
                                     "weights, not the bf16 path an engine on a bf16-capable CPU runs"
                                   : "";
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
  const auto fetch_t = fetch_at(*f, x->kv_bytes[i]);
  if (!fetch_t) {
    v.figures = "page of " + fmt(x->kv_bytes[i]) + " B outside the measured copy sizes";
    return v;
  }
  const double rec = x->secs[i], fetch = fetch_t->median;
  const int sign = faster_beyond_spread(x->timed(i), *fetch_t);
  const bool ok = sign < 0 && rec >= 25e-6 && rec <= 100e-6 && fetch >= 100e-6 && fetch <= 400e-6;
  // Inside the spread the order of the two is no sign, whatever the claimed figures (docs/report.md, noise).
  v.verdict = sign == 0 ? "not established" : ok ? "supported" : "refuted";
  v.figures = x->model + ": recompute " + spread_text(x->timed(i)) + " (" + x->mode + "), fetch " +
              spread_text(*fetch_t) + " (" + f->mode + ")" +
              (sign == 0 ? ": inside each other's q1..q3 spread, no sign" : "");
  const Regimes g = regimes(*x, *f);
  if (g.fitted) {
    const double share_rec = g.a_rec / rec, share_fetch = g.a_fetch / fetch;
    v.figures += "; fitted fixed costs " + us_text(g.a_rec) + " (recompute) and " + us_text(g.a_fetch) + " (fetch) are " +
                 fmt(100 * share_rec) + "% and " + fmt(100 * share_fetch) + "% of them at 128 tokens" +
                 (share_rec > 0.5 && share_fetch > 0.5 ? ": a comparison of fixed costs" : "");
  }
  return v;
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
  std::optional<int> first_sign;  // at the smallest page, beyond the rows' spread (faster_beyond_spread)
  std::string first_spread;
  for (std::size_t i = 0; i < x->tokens.size(); ++i)
    if (auto ft = fetch_at(*f, x->kv_bytes[i])) {
      if (!first_sign) {
        first_sign = faster_beyond_spread(x->timed(i), *ft);
        first_spread = "recompute " + spread_text(x->timed(i)) + " / fetch " + spread_text(*ft);
      }
      T.push_back(x->tokens[i]);
      r.push_back(x->secs[i]);
      t.push_back(ft->median);
    }
  if (T.size() < 2) {
    v.figures = std::to_string(T.size()) + " token count(s) with both recompute and " + link + " measured; 2 needed";
    return v;
  }
  const double r0 = r.front() / t.front(), r1 = r.back() / t.back();
  bool ok = *first_sign < 0 && r1 > r0;
  const auto c = find_crossover(T, r, t, "recompute", link, "tokens");
  v.figures = x->model + " vs " + link + " (recompute " + x->mode + ", fetch " + f->mode + "): T=" + fmt(T.front()) +
              " recompute " + us_text(r.front()) + " / fetch " +
              us_text(t.front()) + "; T=" + fmt(T.back()) + " " + us_text(r.back()) + " / " + us_text(t.back()) + "; crossover " + c.text +
              "; " + regimes_text(regimes(*x, *f), link) + fallback_text(*x);
  // A CPU offload's first tier is host memory, not the disk the verdict reads: its ratio beside, not in, the verdict.
  if (rs.backend != "cuda")
    if (const XferSeries* dram = find_xfer(xs, "dram_copy")) {
      std::string said;
      for (const std::size_t i : {std::size_t(0), x->tokens.size() - 1})
        if (auto ft = fetch_at(*dram, x->kv_bytes[i]); ft && ft->median > 0)
          said += (said.empty() ? "" : ", ") + ("T=" + fmt(x->tokens[i]) + " " + fmt(x->secs[i] / ft->median));
      if (!said.empty()) v.figures += "; beside host memory (dram_copy, " + dram->mode + "): recompute/fetch " + said;
    }
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
  // At the smallest page inside each other's spread: the first half of the claim has no sign.
  if (*first_sign == 0) {
    v.verdict = "not established";
    v.figures += "; at T=" + fmt(T.front()) + " " + first_spread + ": inside each other's q1..q3 spread, no sign";
  }
  return v;
}

// "K/V error vs the bf16-X reference: rms 6.3%, max 26.5% of the K/V rms" -> "K/V error rms 6.3%, max 26.5%".
std::string kv_error_of(const std::string& note) {
  const std::string key = "K/V error vs the bf16-X reference: ";
  const auto at = note.find(key);
  if (at == std::string::npos) return "K/V error not stated in the row";
  std::string e = note.substr(at + key.size());
  if (const auto end = e.find(';'); end != std::string::npos) e.resize(end);
  return "K/V error " + e;
}

Verdict claim4(const ResultSet& rs) {
  Verdict v{kClaim4, rs.label, "not measured", "", kRule4};
  const auto recs = recompute_series(rs);
  const auto xs = transfer_series(rs);
  const std::string link = primary_link(rs);
  const XferSeries* f = find_xfer(xs, link);
  struct Best {
    double ratio = 1e300;
    int sign = 0;  // faster_beyond_spread(recompute, fetch)
    std::string text;
  };
  std::map<std::string, Best> best;  // per X form (int8, int4): its best batched pair at equal memory
  bool any_xq = false, any_sized = false, within_memory = false;
  for (const auto& s : recs) {
    if (s.arm != "xq") continue;
    any_xq = true;
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      if (s.resident[i] <= 0 || s.kv_bytes[i] <= 0) continue;  // a column absent: nothing to compare
      any_sized = true;
      if (s.resident[i] > s.kv_bytes[i]) continue;
      within_memory = true;
      if (!f) continue;
      const auto batch = fetch_at(*f, s.pages * s.kv_bytes[i]);  // the P pages in one copy
      if (!batch) continue;
      const Timed per_page{batch->median / s.pages, batch->lo / s.pages, batch->hi / s.pages};
      const double fetch = per_page.median, ratio = s.secs[i] / fetch;
      auto& b = best[s.xdtype];
      if (ratio < b.ratio) {
        b.ratio = ratio;
        b.sign = faster_beyond_spread(s.timed(i), per_page);
        b.text = s.model + " " + s.xdtype + " X, T=" + fmt(s.tokens[i]) + " P" + fmt(s.pages) + " (recompute " +
                 s.mode + ", fetch " + f->mode + "): resident " +
                 md::bytes(s.resident[i]) + " vs K/V " + md::bytes(s.kv_bytes[i]) + " per page; recompute " +
                 us_text(s.secs[i]) + " vs " + link + " of the " + fmt(s.pages) + " pages in one copy " +
                 us_text(fetch) + " per page (" + fmt(ratio) + "x" +
                 (b.sign == 0 ? ", inside each other's q1..q3 spread" : "") + "); " + kv_error_of(s.notes[i]) +
                 fallback_text(s);
      }
    }
  }
  if (!any_xq) {
    v.figures = "no xq rows";
    return v;
  }
  if (!any_sized) {  // not measured: no row says both what it keeps and what it replaces
    v.figures = "no xq row with both resident_bytes_per_page and kv_bytes_per_page";
    return v;
  }
  if (!within_memory) {
    v.verdict = "refuted";
    v.figures = "every quantized X is larger than the bf16 K/V it replaces";
    return v;
  }
  if (best.empty()) {
    v.figures = f ? "no " + link + " measurement at the xq batches' K/V sizes (P x K/V bytes)" : "no " + link + " rows";
    return v;
  }
  bool faster = false, unsure = false;
  for (const auto& [form, b] : best) {
    faster = faster || b.sign < 0;
    unsure = unsure || b.sign == 0;
    v.figures += (v.figures.empty() ? "" : "; ") + b.text;
  }
  v.verdict = faster ? "supported" : unsure ? "not established" : "refuted";
  return v;
}

// What the model says for a claim on a directory's device (GPU: calibrated with the directory; CPU: the
// --spec-gpu spec sheet, labelled). Never used for the verdict itself.
std::string model_says(const ReportContext& cx, const ResultSet& rs, bool claim1) {
  if (!cx.gpus_error.empty() || !cx.shapes_error.empty()) return "-";
  const Shape* m = cx.model();
  if (!m) return "-";
  GpuSpec g;
  std::string tag;
  try {
    if (rs.backend == "cuda") {
      g = cx.spec_of(rs);
      tag = "calibrated";
    } else {
      g = find_gpu(cx.gpus, cx.o.spec_gpu);
      tag = g.name + " spec sheet";
    }
    if (claim1)
      return md::txt(m->name + ", " + tag) + ": recompute " + fmt(recompute_x(g, *m, 128, 1, 16).seconds * 1e6) +
             " us, fetch " + fmt(transfer(g, kv_bytes_per_layer(*m, 128), 1, g.host_link_gbps).seconds * 1e6) + " us";
    const std::vector<double> Ts = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    std::vector<double> r, t;
    for (double T : Ts) {
      r.push_back(recompute_x(g, *m, T, 1, 16).seconds);
      t.push_back(transfer(g, kv_bytes_per_layer(*m, T), 1, g.host_link_gbps).seconds);
    }
    return md::txt(m->name + ", " + tag + ": crossover " +
                   find_crossover(Ts, r, t, "recompute", "fetch", "tokens", "evaluated").text);
  } catch (const UsageError& e) {
    return "- (" + md::txt(e.what()) + ")";
  }
}

}  // namespace

std::vector<VerdictRule> verdict_rules() {
  const auto one = [](Verdict (*claim)(const ResultSet&)) {
    return [claim](const ResultSet& rs) { return std::vector<Verdict>{claim(rs)}; };
  };
  return {
      {1, kClaim1, one(claim1), [](const ReportContext& cx, const ResultSet& rs) { return model_says(cx, rs, true); }},
      {3, kClaim3, one(claim3), [](const ReportContext& cx, const ResultSet& rs) { return model_says(cx, rs, false); }},
      {4, kClaim4, one(claim4), nullptr},
  };
}

}  // namespace kvf::report::frontier
