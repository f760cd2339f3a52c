// The frontier's sections: recompute against transfer by tokens per page (measured crossovers, then the model's
// for every GPU in gpus.json), and the frontier map (cheapest action per page class, calibrated per GPU
// directory, else from --spec-gpu's spec sheet).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "kvf/study_report.hpp"
#include "parts.hpp"
#include "series.hpp"

namespace kvf::report::frontier {

using namespace md;

namespace {

std::string map_table(const GpuSpec& g, const Shape& m, const std::string& label, ReportContext& cx, const std::string& chart,
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
  p.xunit = AxisUnit::tokens;
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
    // the layer counts of the grid as the axis's ticks (a log axis of its own would label only 1 and 10)
    std::string ytics;
    for (double L : Ls) ytics += (ytics.empty() ? "set ytics (" : ", ") + fmt(L);
    p.extra.push_back(ytics + ")");
    p.extra.push_back("set mytics 1");
  }
  s += "\n";
  if (!chart.empty()) s += cx.chart(p);
  return s;
}

// A chart's file stem for one model: prefix + the model name with every other character than [A-Za-z0-9] as
// '_', cut to the report core's kMaxChartName, and made unique among `taken` with a counter (model names are
// free text: a long Hugging Face id, or two names that differ only in punctuation, must not abort the report or
// overwrite each other's chart).
std::string chart_stem(const std::string& prefix, const std::string& model, std::set<std::string>& taken) {
  std::string stem;
  for (char ch : model) stem += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  if (stem.empty()) stem = "model";
  std::string name = (prefix + stem).substr(0, kMaxChartName);
  for (int n = 2; !taken.insert(name).second; ++n) {
    const std::string tail = "_" + std::to_string(n);
    name = (prefix + stem).substr(0, kMaxChartName - tail.size()) + tail;
  }
  return name;
}

}  // namespace

// The overlap arm beside its alone rows: did recomputing part of a page while the rest is fetched beat doing both
// in turn? Shares of the alone rows in proportion to tokens (fixed costs do not scale: a first look, as the
// measured-against-predicted section's model cell of the same rows says).
std::string overlap_table(ReportContext& cx) {
  std::string t;
  for (const auto& rs : cx.sets) {
    // (model, tokens, mode) -> recompute_tokens -> row
    std::map<std::tuple<std::string, double, std::string>, std::map<double, const CaseRow*>> by_page;
    for (const auto* r : rs.rows("frontier")) {
      if (r->param("arm") != "overlap" || r->param("launch") == "graph") continue;
      const auto T = r->num("tokens"), rr = r->num("recompute_tokens");
      if (T && rr && r->median_s) by_page[{r->param("model"), *T, r->mode}][*rr] = r;
    }
    for (const auto& [page, rows] : by_page) {
      const auto& [model, T, mode] = page;
      const auto f0 = rows.find(0.0), f1 = rows.find(T);
      if (f0 == rows.end() || f1 == rows.end()) continue;
      const CaseRow &a0 = *f0->second, &a1 = *f1->second;
      const auto q1 = [](const CaseRow& x) { return x.q1_s.value_or(*x.median_s); };
      for (const auto& [rr, r] : rows) {
        if (rr <= 0 || rr >= T) continue;
        const double fetch = (T - rr) / T * *a0.median_s, rec = rr / T * *a1.median_s;
        const double serial = fetch + rec, ideal = std::max(fetch, rec), m = *r->median_s;
        // A gain only where the row's q3 is below serial made of the alone rows' q1s.
        const bool gain = r->q3_s.value_or(m) < (T - rr) / T * q1(a0) + rr / T * q1(a1);
        const bool busy = r->note.find("machine busy") != std::string::npos;
        t += row({lbl(rs), txt(model) + ", " + tokens(T) + " tokens", txt(mode) + (busy ? " (machine busy)" : ""),
                  fmt(rr / T), fmt(m * 1e6), fmt(fetch * 1e6), fmt(rec * 1e6), fmt(serial * 1e6), fmt(ideal * 1e6),
                  fmt(serial / m), gain ? "gain" : "none shown"});
      }
    }
  }
  if (t.empty()) return "";
  return "### Recompute beside a fetch (overlap arm)\n\nPart of a page recomputed (fraction f of its tokens) while a "
         "second thread (CPU) or stream (GPU) fetches the rest, against the same page's alone rows of this run: the "
         "fetch share (1 - f) x t(f=0) and the recompute share f x t(f=1), in turn (serial) or fully overlapped (the "
         "longer). Shares are in proportion to tokens, and fixed costs (a read's start, the weights a recompute "
         "reads) do not scale, so serial understates doing both in turn: a first look, which section \"Measured "
         "against model-predicted\" predicts row by row from the model. The last column says \"gain\" only where "
         "the row's q3 is below serial made of the alone rows' q1s; at or below 1 no gain is shown.\n\n" +
         header({"device", "page", "mode", "f", "measured (us)", "fetch share (us)", "recompute share (us)",
                 "serial (us)", "overlapped (us)", "serial / measured", "beyond spreads"}) +
         t + "\n";
}

// One chart per (directory, model): that model's recompute arms at one page per call against the device's own
// fetch at the same page sizes, crossovers marked and labelled with their token count (small multiples instead of
// every series on one plot). The table has every combination, folded.
std::string section_frontier(ReportContext& cx) {
  std::string s, table, charts;
  int set_no = 0;
  for (const auto& rs : cx.sets) {
    ++set_no;
    const std::string primary = primary_link(rs);
    std::map<std::string, Plot> by_model;
    std::map<std::string, Line> cross;
    std::map<std::string, std::map<std::string, Line>> fetch;  // model -> fetch line per K/V bytes per token
    std::map<std::string, std::set<std::string>> drawn;
    std::set<std::string> stems;  // chart names taken in this directory
    for (const auto& c : crossovers(rs)) {
      table += row({lbl(rs), txt(c.rec.label() + " (" + c.rec.mode + ")"), txt(c.link),
                    tokens(c.tokens.front()) + ".." + tokens(c.tokens.back()), std::to_string(c.tokens.size()), c.c.text,
                    c.dropped ? std::to_string(c.dropped) : "0"});
      if (c.rec.pages != 1 || c.link != primary) continue;
      auto [it, fresh] = by_model.try_emplace(c.rec.model);
      Plot& p = it->second;
      if (fresh) {
        p = Plot{chart_stem("recompute_transfer_" + std::to_string(set_no) + "_", c.rec.model, stems),
                 (cx.sets.size() > 1 ? rs.label + ": " : "") + c.rec.model + ", one page per call: recompute vs " + primary,
                 "tokens per page", "median time per page (us)", true, true, {}, {}};
        p.xunit = AxisUnit::tokens;
      }
      const std::string arm = c.rec.arm + (c.rec.xdtype.empty() ? "" : " " + c.rec.xdtype) +
                              (c.rec.layers != 1 ? " L" + fmt(c.rec.layers) : "") +
                              (c.rec.prefix.empty() ? "" : " N" + c.rec.prefix);
      if (drawn[c.rec.model].insert("r" + arm).second) {
        Line l;
        l.title = "recompute " + arm;
        for (std::size_t i = 0; i < c.rec.tokens.size(); ++i) l.pts.emplace_back(c.rec.tokens[i], c.rec.secs[i] * 1e6);
        p.lines.push_back(l);
      }
      // One fetch line per K/V bytes per token (x and xq share the bf16 K/V; MLA's latent differs), the series
      // with the most measured page sizes.
      if (!c.rec.tokens.empty() && c.rec.tokens.front() > 0) {
        Line x;
        x.title = primary + " (" + bytes(c.rec.kv_bytes.front() / c.rec.tokens.front()) + " per token)";
        x.style = "linespoints dt 2";
        for (std::size_t i = 0; i < c.tokens.size(); ++i) x.pts.emplace_back(c.tokens[i], c.xfer_s[i] * 1e6);
        Line& f = fetch[c.rec.model][x.title];
        if (x.pts.size() > f.pts.size()) f = x;
      }
      if (c.c.found)
        if (const auto y = interpolate(c.tokens, c.rec_s, c.c.x)) {
          Line& cl = cross[c.rec.model];
          cl.pts.emplace_back(c.c.x, *y * 1e6);
          cl.labels.push_back(fmt(std::round(c.c.x)) + " tok");
        }
    }
    for (auto& [model, p] : by_model) {
      for (auto& [title, f] : fetch[model]) p.lines.push_back(f);
      if (auto it = cross.find(model); it != cross.end()) {
        Line marks = it->second;
        marks.title = "crossover";
        marks.style = "points pt 7 ps 1.6 lc rgb 'black'";
        marks.labels.clear();
        p.lines.push_back(marks);
        Line labels = it->second;
        labels.title = "";
        labels.style = "offset 0,1.2 font ',9'";  // with labels; an empty title keeps it out of the key
        p.lines.push_back(labels);
      }
      charts += cx.chart(p);
    }
  }
  if (table.empty()) {
    s += "Not measured: no frontier-study recompute rows with a fetch measured at the same page size.\n\n";
  } else {
    s += charts;
    s += "Transfer time at each page's K/V bytes is interpolated linearly between measured copy sizes; pages outside "
         "the measured sizes are dropped (last column). Crossovers are interpolated between measured token counts.\n\n";
    s += fold("Every recompute series against every fetch",
              header({"device", "recompute", "fetch", "tokens measured", "points", "crossover", "dropped"}) + table);
  }
  s += overlap_table(cx);
  // The GPU answer from spec sheets: what the model predicts where no GPU was measured.
  if (!cx.gpus_error.empty() || !cx.shapes_error.empty()) {
    s += "Model predictions not available: " + txt(cx.gpus_error + cx.shapes_error) + "\n\n";
    return s;
  }
  const Shape* m = cx.model();
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

std::string section_map(ReportContext& cx) {
  std::string s;
  if (!cx.gpus_error.empty() || !cx.shapes_error.empty())
    return s + "Not available: " + txt(cx.gpus_error + cx.shapes_error) + "\n\n";
  const Shape* m = cx.model();
  if (!m) return s + "Not available: model " + txt(cx.o.model) + " not in data/models.json\n\n";
  s += "Costs per page in microseconds: reuse probability x reuse cost + one-time cost + HBM price x resident MiB "
       "(price: the time to fetch 1 MiB over the host link). `kvf model --json` writes the full table.\n\n";
  bool any_gpu = false;
  int i = 0;
  for (const auto& rs : cx.sets) {
    ++i;
    if (rs.backend != "cuda") continue;
    any_gpu = true;
    const GpuSpec g = cx.spec_of(rs);
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

// Page one: the map of section 4 in one line per reuse probability, consecutive page sizes with the same
// cheapest action at every layer count run together ("keep at 16-64 tokens, compress_int4 at 128-4096").
namespace {
std::string one_reuse_line(const std::vector<ActionClass>& t) {
  std::vector<std::pair<double, std::string>> by_tokens;  // page size -> its action, "mixed" across layers
  for (const auto& c : t) {
    if (c.phase != "decode") continue;
    auto it = std::find_if(by_tokens.begin(), by_tokens.end(), [&](const auto& e) { return e.first == c.tokens; });
    if (it == by_tokens.end()) by_tokens.emplace_back(c.tokens, c.cheapest);
    else if (it->second != c.cheapest) it->second = "depends on the layer count (section 4)";
  }
  std::string line;
  for (std::size_t i = 0; i < by_tokens.size();) {
    std::size_t j = i;
    while (j + 1 < by_tokens.size() && by_tokens[j + 1].second == by_tokens[i].second) ++j;
    const std::string range = i == j ? tokens(by_tokens[i].first) : tokens(by_tokens[i].first) + "-" +
                                                                      tokens(by_tokens[j].first);
    line += (line.empty() ? "" : ", ") + ("**" + by_tokens[i].second + "**") + " at " + range + " tokens";
    i = j + 1;
  }
  return line;
}
}  // namespace

std::string summary(ReportContext& cx) {
  const Shape* m = cx.model();
  if (!cx.gpus_error.empty() || !cx.shapes_error.empty() || !m) return "";
  auto lines = [&](const GpuSpec& g, const std::string& label, const ResultSet* measured) {
    // The price of holding a page decides keep against demote and evict: said with the answer it decides.
    std::string s = "- " + label + ", HBM held priced at " + fmt(hbm_price(g, ActionOptions{})) +
                    " us per MiB (the time to fetch 1 MiB over its host link; `kvf model --hbm-price` sets another):";
    for (double p : {0.1, 0.5, 0.9}) {
      ActionOptions o;
      o.reuse = {p};
      o.measured = measured;
      try {
        s += " reuse " + fmt(p) + ": " + one_reuse_line(action_table(g, *m, o)) + (p < 0.9 ? ";" : ".");
      } catch (const UsageError& e) {
        return "- " + label + ": not computed (" + txt(e.what()) + ")\n";
      }
    }
    return s + "\n";
  };
  std::string s = "**What to do with a KV page** (" + txt(m->name) +
                  ", decode, cheapest action per page by the reuse probability of the page; section 4 has the map "
                  "and its terms):\n\n";
  bool any_gpu = false;
  for (const auto& rs : cx.sets)
    if (rs.backend == "cuda") {
      any_gpu = true;
      s += lines(cx.spec_of(rs), lbl(rs) + ", calibrated, measured costs where present", &rs);
    }
  if (!any_gpu) {
    try {
      const GpuSpec& g = find_gpu(cx.gpus, cx.o.spec_gpu);
      s += lines(g, txt(g.name) + " spec sheet (no GPU results given: the model's prediction, not measured)", nullptr);
    } catch (const UsageError& e) {
      s += "- " + txt(e.what()) + "\n";
    }
  }
  return s + "\n";
}

}  // namespace kvf::report::frontier
