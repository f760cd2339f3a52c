// The attention study in the report (issue 19): for each results directory with bench_attention's output beside it
// (RESULTS/attention/, or one folder per run below it), H1's sink + local-window mass per layer, H3's entropy per
// layer and its boundary, what block, token and oracle selection keep per (keep, block size), the needle's kept mass,
// and the join with the access study's latency of the same selections in that directory (a recall-against-latency
// chart per run, each point a keep). Claims 7-9. The section is left out where no directory has such output.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include "kvf/attention_report.hpp"
#include "kvf/errors.hpp"
#include "kvf/study_report.hpp"

namespace kvf::report {

namespace {

using namespace md;
namespace at = attention;

// One run as read: the figures, or why not.
struct Read {
  std::filesystem::path dir;
  std::optional<at::Run> run;
  std::string error;
};

std::vector<Read> read_all(const ResultSet& rs) {
  std::vector<Read> out;
  for (const auto& d : at::find_runs(rs.dir)) {
    Read r{d, std::nullopt, ""};
    try {
      r.run = at::read_run(d, rs.dir);
    } catch (const UsageError& e) {
      r.error = e.what();
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string spread(const at::Spread& s) { return fmt(s.mean) + " [" + fmt(s.min) + ", " + fmt(s.max) + "]"; }

// Long per-layer tables fold: a 32-layer model would otherwise push the join below the fold.
std::string maybe_fold(const std::string& summary, const std::string& table, std::size_t rows) {
  return rows > 16 ? fold(summary, table) : "**" + summary + "**\n\n" + table + "\n";
}

std::string inputs_of(const at::Run& r) {
  std::string s = "Read from " + txt(r.dir.string()) + " (`bench_attention --out`): " + txt(r.model) + ", " + txt(r.source) +
                  ", prompt " + txt(r.prompt) + ": " + tokens(static_cast<double>(r.context)) + " tokens, the last " +
                  std::to_string(r.queries) + " query rows, " + std::to_string(r.layers.size()) + " layers captured; query heads " +
                  std::to_string(r.q_heads) + ", kv heads " + std::to_string(r.kv_heads) + ", head dim " +
                  std::to_string(r.head_dim) + ". Figures are means over the query rows (kernels/attention/quality/README.md).";
  if (!r.skipped.empty()) {
    std::string k;
    for (const auto& x : r.skipped) k += (k.empty() ? "" : "; ") + txt(x);
    s += " Budgets bench_attention left out: " + k + ".";
  }
  return s + "\n\n";
}

std::string h1_table(const at::Run& r) {
  const auto ws = at::windows(r);
  std::vector<std::string> head = {"layer"};
  std::vector<std::map<int, at::Spread>> cols;
  for (auto w : ws) {
    head.push_back("W = " + tokens(static_cast<double>(w)));
    cols.push_back(at::locality_by_layer(r, w));
  }
  std::map<int, bool> layers;
  for (const auto& c : cols)
    for (const auto& [l, sp] : c) layers[l] = true;
  std::string t = header(head);
  for (const auto& [l, _] : layers) {
    std::vector<std::string> cells = {std::to_string(l)};
    for (const auto& c : cols) cells.push_back(c.count(l) ? spread(c.at(l)) : "-");
    t += row(cells);
  }
  const std::int64_t sink = r.locality.empty() ? 0 : r.locality.front().sink;
  const auto w = at::h1_window(r);
  std::string s = maybe_fold("H1: mass on the sink block (" + std::to_string(sink) +
                                 " tokens) and the W latest keys per layer: mean over heads [min, max]",
                             t, layers.size());
  return s + "Claim 7 reads W = " + (w ? tokens(static_cast<double>(*w)) : std::string("- (none swept)")) +
         ", the largest swept window <= 1/8 of the context, against a layer mean of " + fmt(at::kH1Mass) + ".\n\n";
}

std::string h3_table(ReportContext& cx, const at::Run& r) {
  std::map<int, at::Spread> heads;
  for (const auto& e : r.entropy) {
    at::Spread& s = heads[e.layer];
    s.min = s.n ? std::min(s.min, e.normalized) : e.normalized;
    s.max = s.n ? std::max(s.max, e.normalized) : e.normalized;
    ++s.n;
  }
  const at::Boundary b = at::boundary(r);
  std::string t = header({"layer", "nats", "normalized (mean over heads)", "head min", "head max", "boundary"});
  for (const auto& l : r.layers) {
    std::string mark = l.layer == b.first_below ? "first below " + fmt(r.threshold) : "";
    if (l.layer == b.largest_drop) mark += (mark.empty() ? "" : "; ") + std::string("largest drop (") + fmt(b.drop) + ")";
    const auto h = heads.find(l.layer);
    t += row({std::to_string(l.layer), fmt(l.nats), fmt(l.normalized), h == heads.end() ? "-" : fmt(h->second.min),
              h == heads.end() ? "-" : fmt(h->second.max), mark});
  }
  std::string s = maybe_fold("H3: entropy per layer (normalized by ln of the visible keys: 1 uniform, 0 one-hot)", t,
                             r.layers.size());
  if (b.first_below != r.meta_first_below || b.largest_drop != r.meta_largest_drop) {
    const std::string w = (r.dir / "meta.json").string() + ": entropy_boundary (first_below " +
                          std::to_string(r.meta_first_below) + ", largest_drop " + std::to_string(r.meta_largest_drop) +
                          ") differs from layer_entropy.csv's (" + std::to_string(b.first_below) + ", " +
                          std::to_string(b.largest_drop) + "): the report uses the CSV's";
    cx.warn(w);
    s += txt(w) + ".\n\n";
  }
  return s;
}

std::string arm_cell(const at::SelectionPoint& p, const char* arm, bool error) {
  const auto it = p.arm.find(arm);
  if (it == p.arm.end()) return "-";
  if (!error) return fmt(it->second.recall);
  return it->second.error_n ? fmt(it->second.out_error) : "-";
}

std::string selection_table(const std::vector<at::SelectionPoint>& pts) {
  std::string t = header({"block", "keep", "budget (tokens)", "recall block", "recall token", "recall oracle",
                          "out error block", "out error token", "out error oracle"});
  for (const auto& p : pts)
    t += row({std::to_string(p.block), at::keep_text(p.keep), tokens(static_cast<double>(p.budget)),
              arm_cell(p, "block", false), arm_cell(p, "token", false), arm_cell(p, "oracle", false),
              arm_cell(p, "block", true), arm_cell(p, "token", true), arm_cell(p, "oracle", true)});
  return maybe_fold("Selection at equal token budgets: recall (attention mass kept) and relative output error, means "
                    "over layers and heads",
                    t, pts.size());
}

std::string needle_table(const at::Run& r) {
  if (r.needles.empty()) return "Needle: none planted in this run (`bench_attention --needle POS:LEN`).\n\n";
  struct Acc {
    double depth = 0, mass = 0;
    int n = 0;
    std::map<std::string, std::pair<double, double>> arm;  // kept_mass, all_kept sums
    std::map<std::string, int> arm_n;
  };
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, double>, Acc> by;  // pos, len, block, -keep
  for (const auto& x : r.needles) {
    Acc& a = by[{x.pos, x.len, x.block, -x.keep}];
    a.depth = x.depth_pct;
    a.mass += x.mass;  // the dense mass: the same in every arm's row
    ++a.n;
    a.arm[x.arm].first += x.kept_mass;
    a.arm[x.arm].second += x.all_kept;
    ++a.arm_n[x.arm];
  }
  std::string t = header({"needle (pos:len)", "depth", "block", "keep", "mass", "kept block", "kept token",
                          "kept oracle", "all kept block", "all kept token", "all kept oracle"});
  for (const auto& [k, a] : by) {
    std::vector<std::string> c = {std::to_string(std::get<0>(k)) + ":" + std::to_string(std::get<1>(k)),
                                  fmt(a.depth) + "%", std::to_string(std::get<2>(k)), at::keep_text(-std::get<3>(k)),
                                  a.n ? fmt(a.mass / a.n) : "-"};
    for (int which = 0; which < 2; ++which)
      for (const char* arm : {"block", "token", "oracle"}) {
        const auto it = a.arm.find(arm);
        c.push_back(it == a.arm.end() ? "-"
                                      : fmt((which ? it->second.second : it->second.first) / a.arm_n.at(arm)));
      }
    t += row(c);
  }
  return fold("Needle: its attention mass, the part each selection keeps, and the share of rows keeping all of it "
              "(means over layers and heads)",
              t);
}

std::string decode_table(const at::Run& r) {
  if (r.decodes.empty())
    return "Needle decoding: not run (`bench_attention --answer FILE` greedy-decodes a planted answer under each "
           "selection).\n\n";
  std::string t = header({"arm", "block", "keep", "budget", "exact match", "answer tokens matched"});
  int exact = 0;
  for (const auto& d : r.decodes) {
    exact += d.exact;
    t += row({d.arm, d.arm == "dense" ? "-" : std::to_string(d.block), d.arm == "dense" ? "-" : at::keep_text(d.keep),
              std::to_string(d.budget), d.exact ? "yes" : "no",
              std::to_string(d.matched_prefix) + " of " + std::to_string(d.answer_tokens)});
  }
  return fold("Needle decoding: the planted answer greedy-decoded with full attention and under each selection in "
              "every layer (" + std::to_string(exact) + " of " + std::to_string(r.decodes.size()) + " decodes exact)",
              t);
}

Plot pareto_plot(const at::Run& r, const at::Join& j, std::size_t k) {
  Plot p{"attention_pareto" + (k ? "_" + std::to_string(k + 1) : std::string()),
         "Recall against latency, each point a keep: " + r.model + ", " + tokens(static_cast<double>(r.context)) +
             " tokens",
         "latency (us, access study)", "recall (mean over layers and heads)", true, false, {}, {"set yrange [0:1.05]"}, 2,
         AxisUnit::plain, {}};
  std::map<std::pair<std::string, std::int64_t>, Line> series, labels;
  for (const auto& x : j.points)
    for (const char* arm : {"block", "token"}) {
      const CaseRow* row = std::string(arm) == "block" ? x.block : x.token;
      const double us = *row->median_s * 1e6, recall = x.point->arm.at(arm).recall;
      Line& l = series[{arm, x.point->block}];
      l.title = std::string(arm) + " B" + std::to_string(x.point->block);
      l.pts.emplace_back(us, recall);
      Line& t = labels[{arm, x.point->block}];
      t.style = "offset 0,1 font ',9'";  // with labels; an empty title keeps it out of the key
      t.pts.emplace_back(us, recall);
      // A point whose access rows are at another context than the run's says which.
      const double ctx = row->num("ctx").value_or(0);
      t.labels.push_back(at::keep_text(x.point->keep) +
                         (ctx != static_cast<double>(r.context) ? " @" + tokens(ctx) : std::string()));
    }
  // Each arm's line runs through its keeps in order (the trade-off as the budget grows), not by latency.
  for (auto& [key, l] : series) p.lines.push_back(l);
  for (auto& [key, l] : labels) p.lines.push_back(l);
  return p;
}

std::string join_part(ReportContext& cx, const at::Run& r, const ResultSet& rs, std::size_t& charts) {
  const auto pts = at::selection_points(r);
  const at::Join j = at::join_latency(r, pts, rs);
  if (j.points.empty()) return "latency: not available: " + txt(j.none) + ".\n\n";
  std::string t = header({"keep", "block", "recall block", "recall token", "block us", "token us", "token/block [95%]",
                          "sign", "access rows (block; token)", "shape", "differs from the run"});
  std::size_t differ = 0;
  for (const auto& x : j.points) {
    const Ratio& q = x.token_vs_block;
    std::string d;
    for (const auto& s : x.differs) d += (d.empty() ? "" : "; ") + s;
    differ += !x.differs.empty();
    t += row({at::keep_text(x.point->keep), std::to_string(x.point->block), fmt(x.point->arm.at("block").recall),
              fmt(x.point->arm.at("token").recall), us_text(*x.block->median_s), us_text(*x.token->median_s),
              txt(q.text()),
              std::string(!q.has_interval ? "no interval"
                          : q.a_slower()  ? "block faster"
                          : q.a_faster()  ? "token faster"
                                          : "no sign") +
                  (at::judged_context(x.block->num("ctx").value_or(0), static_cast<double>(r.context))
                       ? ""
                       : " (not judged: over " + fmt(at::kJudgedContextFactor) + "x from the run's context)"),
              txt(x.block->case_name) + "; " + txt(x.token->case_name), txt(x.shape), d.empty() ? "same" : txt(d)});
  }
  std::string s = cx.chart(pareto_plot(r, j, charts++));
  s += "**Quality against the access study's latency of the same selections** (recall from this run; latency from "
       "the access rows named, the closest shape this directory holds: context first, then heads and head dim, bf16, "
       "batch 1, per_head, HND, cold):\n\n" + t + "\n";
  if (differ)
    s += "The access rows' shape differs from the run's at " + std::to_string(differ) + " of " +
         std::to_string(j.points.size()) + " selections (last column): their latency is the kernel's at that shape, "
         "not at the run's.\n\n";
  return s;
}

// H3's "a boundary that generalizes": the boundary of each run (prompt, model) beside the directory, and how many
// runs share the most common layer. One run says nothing about it.
std::string boundary_across_runs(const std::vector<Read>& runs) {
  std::map<int, int> first_below, largest_drop;
  std::string t = header({"run", "rests on", "first below", "largest drop"});
  int n = 0;
  for (const auto& rd : runs) {
    if (!rd.run) continue;
    const at::Boundary b = at::boundary(*rd.run);
    ++n;
    ++first_below[b.first_below];
    ++largest_drop[b.largest_drop];
    auto layer = [](int l) { return l < 0 ? std::string("none") : "layer " + std::to_string(l); };
    t += row({txt(rd.dir.filename().string()), txt(rd.run->rests_on()), layer(b.first_below), layer(b.largest_drop)});
  }
  if (n < 2) return "";
  auto mode = [&](const std::map<int, int>& m) {
    const auto it = std::max_element(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    return (it->first < 0 ? std::string("none") : "layer " + std::to_string(it->first)) + " in " +
           std::to_string(it->second) + " of " + std::to_string(n) + " runs";
  };
  return "**The entropy boundary across runs** (H3: does it generalize across prompts and models?): first below the "
         "threshold at " + mode(first_below) + ", the largest drop at " + mode(largest_drop) + ".\n\n" + t + "\n";
}

std::string section_attention(ReportContext& cx) {
  std::string s;
  std::size_t charts = 0;
  for (const auto& rs : cx.sets) {
    const auto runs = read_all(rs);
    if (runs.empty()) continue;
    if (cx.sets.size() > 1) s += "### " + lbl(rs) + "\n\n";
    for (const auto& rd : runs) {
      if (runs.size() > 1) s += "#### Run " + txt(rd.dir.filename().string()) + "\n\n";
      if (!rd.run) {
        cx.warn(rd.error + " (the attention section says it is not available)");
        s += "Not available: " + txt(rd.error) + "\n\n";
        continue;
      }
      const at::Run& r = *rd.run;
      for (const auto& w : r.read_around) cx.warn(w);
      s += inputs_of(r) + h1_table(r) + h3_table(cx, r) + selection_table(at::selection_points(r)) + needle_table(r) + decode_table(r) +
           join_part(cx, r, rs, charts);
    }
    s += boundary_across_runs(runs);
  }
  return s;
}

// One verdict per run beside the directory; none where it has no attention output (those reports stay as they were).
template <class F>
std::vector<Verdict> per_run(const ResultSet& rs, F judge) {
  std::vector<Verdict> out;
  for (const auto& rd : read_all(rs)) out.push_back(judge(rd.run ? &*rd.run : nullptr, rd.error));
  return out;
}

}  // namespace

StudyReport attention_report() {
  StudyReport s;
  s.study = "attention";  // no cases.csv rows carry it: bench_attention writes its own files
  s.sections = {{"Attention quality of a checkpoint or a dump against the access study's latency (bench_attention)",
                 section_attention, [](const ReportContext& cx) {
                   for (const auto& rs : cx.sets)
                     if (!at::find_runs(rs.dir).empty()) return true;
                   return false;
                 }}};
  s.verdicts = {
      {7, at::kClaim7,
       [](const ResultSet& rs) {
         return per_run(rs, [&](const at::Run* r, const std::string& e) { return at::judge_h1(r, e, rs.label); });
       },
       nullptr},
      {8, at::kClaim8,
       [](const ResultSet& rs) {
         return per_run(rs, [&](const at::Run* r, const std::string& e) { return at::judge_h3(r, e, rs.label); });
       },
       nullptr},
      {9, at::kClaim9,
       [](const ResultSet& rs) {
         return per_run(rs, [&](const at::Run* r, const std::string& e) { return at::judge_bet(r, e, rs); });
       },
       nullptr}};
  // `kvf report D` on what `bench_attention --out D` wrote: its figures are the whole input.
  s.own_directory = [](const std::string& dir) -> std::optional<ResultSet> {
    if (!at::is_attention_output(dir)) return std::nullopt;
    ResultSet rs;
    rs.dir = dir;
    rs.device = std::filesystem::path(dir).filename().string();
    rs.backend = "bench_attention";
    rs.label = rs.device + " (" + rs.backend + ")";
    rs.missing.push_back("cases.csv: none here: a `bench_attention --out` directory (attention figures of one "
                         "model), not a run of the suite: the latency join and every other claim are not measured");
    return rs;
  };
  return s;
}

}  // namespace kvf::report
