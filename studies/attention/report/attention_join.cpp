// What the report computes from one bench_attention run: H1's mass per layer, H3's boundary, the selection
// figures per (keep, block), their join with the access study's latency of the same selections, and claims 7-9.
// Every verdict is computed here from the files' figures; none is read from a file or written in.
#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "kvf/access_columns.hpp"
#include "kvf/attention_report.hpp"
#include "kvf/study_report.hpp"

namespace kvf::report::attention {

const char* const kClaim7 = "H1: attention mass concentrates on the sink block and a local window";
const char* const kClaim8 = "H3: early layers have high-entropy attention, with a layer boundary where it drops";
const char* const kClaim9 = "Block selection: comparable quality to token selection at higher throughput";

namespace {

const char* kRule7 =
    "bench_attention's locality.csv beside the results (attention/): per captured layer, the mean over query heads of "
    "the probability on the sink block plus the W latest keys, W the largest swept window <= 1/8 of the context (the "
    "budget a 1/8 keep leaves). Supported iff that mean is >= 0.5 in every layer; refuted iff in none; mixed otherwise "
    "(the layers below named). One prompt: no noise interval. Not available without the files or such a window.";
const char* kRule8 =
    "bench_attention's layer_entropy.csv (mean over heads of the normalized entropy per layer) at the run's "
    "--entropy-threshold (meta.json): the boundary is the first layer below it. Supported iff the first captured layer "
    "is at or above the threshold, some later one is below it, and every layer from the boundary on stays below; mixed "
    "iff it drops and rises above again; refuted iff the first layer is already below or no layer is. Needs 2 captured "
    "layers. The largest drop between consecutive layers is printed with it; meta.json's own boundary is checked "
    "against the CSV's.";
const char* kRule9 =
    "Per selection (keep, block size) of bench_attention's selection.csv joined with the access study's block and "
    "uniform-token attention rows of the same keep and block size in the same results directory (the closest shape: "
    "context, then heads and head dim, bf16, batch 1, per_head, HND, cold). A point supports the claim when the block "
    "arm's recall (mean over layers and heads) is within 0.05 of the token arm's (or above it) and block is faster "
    "(token/block 95% bootstrap interval above 1); it refutes it when recall falls more than 0.05 short or token is "
    "faster. Supported iff every point supports; refuted iff none does and one refutes; not established iff none "
    "does and none refutes (latency inside the noise); mixed otherwise. A selection whose budget is the sink and "
    "latest blocks alone (2 x block) is left out, and counted: both arms keep the same tokens there, and the latency "
    "joined at another context is of a selection that is not. A selection whose access rows are more than 4x from the "
    "run's context is shown, not judged (latency ratios move with context), and counted. Not available without the "
    "files or without joined access rows.";

std::string layer_list(const std::vector<int>& ls) {
  std::string s;
  for (int l : ls) s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

std::optional<double> access_keep(const std::string& t) {
  try {
    std::size_t used = 0;
    const auto slash = t.find('/');
    double v = 0;
    if (slash == std::string::npos) {
      v = std::stod(t, &used);
      if (used != t.size()) return std::nullopt;
    } else {
      std::size_t u2 = 0;
      const double a = std::stod(t.substr(0, slash), &used), b = std::stod(t.substr(slash + 1), &u2);
      if (used != slash || u2 != t.size() - slash - 1 || !(b > 0)) return std::nullopt;
      v = a / b;
    }
    if (!(v > 0 && v <= 1)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool same_keep(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(a, b); }

// Access rows of one configuration (every parameter but the arm and the sizes derived from it, and the mode).
struct Group {
  std::map<std::string, std::string> params;
  std::string mode;
  double ctx = 0, keep = 0;
  std::int64_t block = 0;
  const CaseRow *block_row = nullptr, *token_row = nullptr;
};

std::vector<Group> access_groups(const ResultSet& rs) {
  static const std::set<std::string> derived = [] {
    auto s = access_derived_columns();  // what the access bench derives per row (its plug-in's list)
    s.insert({"arm", "scatter"});
    return s;
  }();
  std::map<std::string, Group> by;
  for (const auto* r : rs.rows("access")) {
    const std::string arm = r->param("arm");
    if (r->param("part") != "attention" || r->param("launch") == "graph" || (arm != "block" && arm != "token")) continue;
    if (arm == "token" && !r->param("scatter").empty() && r->param("scatter") != "uniform") continue;
    const auto ctx = r->num("ctx"), blk = r->num("block");
    const auto keep = access_keep(r->param("keep"));
    if (!ctx || !blk || !keep) continue;
    std::string key = r->mode;
    for (const auto& [k, v] : r->params)
      if (!derived.count(k)) key += '\x1f' + k + '=' + v;
    Group& g = by[key];
    if (g.mode.empty()) {
      g.mode = r->mode;
      for (const auto& [k, v] : r->params)
        if (!derived.count(k)) g.params[k] = v;
      g.ctx = *ctx;
      g.keep = *keep;
      g.block = static_cast<std::int64_t>(*blk);
    }
    const CaseRow*& slot = arm == "block" ? g.block_row : g.token_row;
    if (!slot) slot = r;
  }
  std::vector<Group> out;
  for (auto& [k, g] : by)
    if (g.block_row && g.token_row) out.push_back(g);
  return out;
}

std::string param_or(const Group& g, const char* k, const char* dflt) {
  const auto it = g.params.find(k);
  return it == g.params.end() || it->second.empty() ? dflt : it->second;
}

// What differs between the access group's shape and the run's, in the order of closeness.
std::vector<std::string> differences(const Group& g, const Run& r) {
  std::vector<std::string> d;
  if (g.ctx != static_cast<double>(r.context))
    d.push_back("context " + md::tokens(g.ctx) + " against the run's " + md::tokens(static_cast<double>(r.context)));
  const std::pair<const char*, std::int64_t> heads[] = {{"hq", r.q_heads}, {"hkv", r.kv_heads}, {"head_dim", r.head_dim}};
  for (const auto& [k, v] : heads) {
    const std::string a = param_or(g, k, "?");
    if (a != std::to_string(v)) d.push_back(std::string(k) + " " + a + " against the run's " + std::to_string(v));
  }
  return d;
}

auto closeness(const Group& g, const Run& r) {
  return std::make_tuple(std::abs(std::log2(g.ctx / static_cast<double>(r.context))), differences(g, r).size(),
                         param_or(g, "dtype", "bf16") != "bf16", param_or(g, "batch", "1") != "1",
                         param_or(g, "select", "per_head") != "per_head", param_or(g, "layout", "HND") != "HND",
                         g.mode != "cold");
}

std::string shape_text(const Group& g) {
  return "ctx " + md::tokens(g.ctx) + ", hq " + param_or(g, "hq", "?") + ", hkv " + param_or(g, "hkv", "?") +
         ", head_dim " + param_or(g, "head_dim", "?") + ", " + param_or(g, "dtype", "?") + ", " +
         param_or(g, "layout", "?") + ", batch " + param_or(g, "batch", "1") + ", " + param_or(g, "select", "?") + ", " +
         param_or(g, "placement", "?") + ", " + g.mode;
}

}  // namespace

std::vector<std::int64_t> windows(const Run& r) {
  std::set<std::int64_t> w;
  for (const auto& l : r.locality) w.insert(l.window);
  return {w.begin(), w.end()};
}

std::map<int, Spread> locality_by_layer(const Run& r, std::int64_t window) {
  std::map<int, Spread> out;
  for (const auto& l : r.locality) {
    if (l.window != window) continue;
    Spread& s = out[l.layer];
    s.min = s.n ? std::min(s.min, l.mass) : l.mass;
    s.max = s.n ? std::max(s.max, l.mass) : l.mass;
    s.mean += l.mass;
    ++s.n;
  }
  for (auto& [l, s] : out) s.mean /= s.n;
  return out;
}

std::optional<std::int64_t> h1_window(const Run& r) {
  std::optional<std::int64_t> best;
  for (auto w : windows(r))
    if (w > 0 && 8 * w <= r.context) best = w;
  return best;
}

Boundary boundary(const Run& r) {
  Boundary b;
  for (std::size_t i = 0; i < r.layers.size(); ++i) {
    if (b.first_below < 0 && r.layers[i].normalized < r.threshold) b.first_below = r.layers[i].layer;
    if (i > 0) {
      const double d = r.layers[i - 1].normalized - r.layers[i].normalized;
      if (d > 0 && d > b.drop) {
        b.drop = d;
        b.largest_drop = r.layers[i].layer;
      }
    }
  }
  return b;
}

std::vector<SelectionPoint> selection_points(const Run& r) {
  std::map<std::pair<std::int64_t, double>, SelectionPoint> by;  // (block, -keep): keep descending
  for (const auto& s : r.selection) {
    SelectionPoint& p = by[{s.block, -s.keep}];
    p.keep = s.keep;
    p.block = s.block;
    p.budget = std::max(p.budget, s.budget);
    ArmFigures& a = p.arm[s.arm];
    a.recall += s.recall;
    ++a.n;
    if (s.out_error) {
      a.out_error += *s.out_error;
      ++a.error_n;
    }
  }
  std::vector<SelectionPoint> out;
  for (auto& [k, p] : by) {
    for (auto& [arm, a] : p.arm) {
      a.recall /= a.n;
      if (a.error_n) a.out_error /= a.error_n;
    }
    out.push_back(p);
  }
  return out;
}

Join join_latency(const Run& r, const std::vector<SelectionPoint>& points, const ResultSet& rs) {
  Join j;
  const auto groups = access_groups(rs);
  if (groups.empty()) {
    j.none = "no access study rows in " + rs.dir + " (block and uniform token attention rows, part=attention)";
    return j;
  }
  for (const auto& p : points) {
    if (!p.arm.count("block") || !p.arm.count("token")) continue;
    const Group* best = nullptr;
    for (const auto& g : groups)
      if (g.block == p.block && same_keep(g.keep, p.keep) && (!best || closeness(g, r) < closeness(*best, r))) best = &g;
    if (!best) continue;
    Joined x;
    x.point = &p;
    x.block = best->block_row;
    x.token = best->token_row;
    x.token_vs_block = median_ratio(*x.token, *x.block);
    x.shape = shape_text(*best);
    x.differs = differences(*best, r);
    j.points.push_back(std::move(x));
  }
  if (j.points.empty()) {
    std::set<std::string> have;
    for (const auto& g : groups) have.insert("keep " + keep_text(g.keep) + " block " + std::to_string(g.block));
    std::string list;
    for (const auto& h : have) list += (list.empty() ? "" : ", ") + h;
    j.none = "no access study rows in " + rs.dir + " at this run's selections (same keep and block size); the access "
             "rows have " + list;
  }
  return j;
}

Verdict judge_h1(const Run* run, const std::string& error, const std::string& device) {
  Verdict v{kClaim7, device, "not available", "", kRule7};
  if (!run) {
    v.figures = error;
    return v;
  }
  const auto w = h1_window(*run);
  if (!w) {
    v.figures = run->rests_on() + ": no window in (0, " + md::tokens(run->context / 8.0) + "] tokens in locality.csv";
    return v;
  }
  const auto by = locality_by_layer(*run, *w);
  std::vector<int> below;
  double lowest = 2, sum = 0;
  int low_layer = -1;
  for (const auto& [l, s] : by) {
    if (s.mean < kH1Mass) below.push_back(l);
    if (s.mean < lowest) lowest = s.mean, low_layer = l;
    sum += s.mean;
  }
  const std::size_t n = by.size();
  v.verdict = below.empty() ? "supported" : below.size() == n ? "refuted" : "mixed";
  const std::int64_t sink = run->locality.empty() ? 0 : run->locality.front().sink;
  v.figures = run->rests_on() + ": sink " + std::to_string(sink) + " + window " + md::tokens(static_cast<double>(*w)) +
              " tokens: layer mean over heads >= " + fmt(kH1Mass) + " in " + std::to_string(n - below.size()) + " of " +
              std::to_string(n) + " layers; mean over layers " + fmt(sum / static_cast<double>(n)) + ", lowest " +
              fmt(lowest) + " (layer " + std::to_string(low_layer) + ")" +
              (below.empty() || below.size() == n ? "" : "; below: layers " + layer_list(below));
  return v;
}

Verdict judge_h3(const Run* run, const std::string& error, const std::string& device) {
  Verdict v{kClaim8, device, "not available", "", kRule8};
  if (!run) {
    v.figures = error;
    return v;
  }
  if (run->layers.size() < 2) {
    v.figures = run->rests_on() + ": fewer than 2 captured layers (a boundary needs two)";
    return v;
  }
  const Boundary b = boundary(*run);
  const double first = run->layers.front().normalized;
  std::vector<int> above_again;
  bool after = false;
  for (const auto& l : run->layers) {
    after = after || l.layer == b.first_below;
    if (after && l.normalized >= run->threshold) above_again.push_back(l.layer);
  }
  if (first < run->threshold || b.first_below < 0) v.verdict = "refuted";
  else v.verdict = above_again.empty() ? "supported" : "mixed";
  v.figures = run->rests_on() + ": normalized entropy " + fmt(first) + " in layer " +
              std::to_string(run->layers.front().layer) + ", threshold " + fmt(run->threshold) + "; boundary (first below) " +
              (b.first_below < 0 ? std::string("none") : "layer " + std::to_string(b.first_below)) + "; largest drop " +
              (b.largest_drop < 0 ? std::string("none")
                                  : fmt(b.drop) + " into layer " + std::to_string(b.largest_drop)) +
              (above_again.empty() ? "" : "; at or above the threshold again: layers " + layer_list(above_again));
  return v;
}

Verdict judge_bet(const Run* run, const std::string& error, const ResultSet& rs) {
  Verdict v{kClaim9, rs.label, "not available", "", kRule9};
  if (!run) {
    v.figures = error;
    return v;
  }
  const auto points = selection_points(*run);
  const Join j = join_latency(*run, points, rs);
  if (j.points.empty()) {
    v.figures = run->rests_on() + ": latency: not available: " + j.none;
    return v;
  }
  std::size_t support = 0, refute = 0, other_ctx = 0, other_shape = 0, degenerate = 0, far = 0;
  std::string each, far_ctx;
  for (const auto& x : j.points) {
    // Sink and latest blocks take the whole budget: the token arm has nothing of its own to choose.
    if (x.point->budget <= 2 * x.point->block) {
      ++degenerate;
      continue;
    }
    const double ctx = x.block->num("ctx").value_or(0), run_ctx = static_cast<double>(run->context);
    const std::string point_text = "; keep " + keep_text(x.point->keep) + " block " + std::to_string(x.point->block) +
                                   ": recall block " + fmt(x.point->arm.at("block").recall) + " token " +
                                   fmt(x.point->arm.at("token").recall) + ", token/block " + x.token_vs_block.text() +
                                   " at " + md::tokens(ctx);
    if (!judged_context(ctx, run_ctx)) {
      ++far;
      const std::string c = md::tokens(ctx);
      if (far_ctx.find(c) == std::string::npos) far_ctx += (far_ctx.empty() ? "" : ", ") + c;
      each += point_text + " (not judged)";
      continue;
    }
    const double gap = x.point->arm.at("token").recall - x.point->arm.at("block").recall;
    const bool comparable = gap <= kRecallWithin;
    const bool faster = x.token_vs_block.a_slower(), slower = x.token_vs_block.a_faster();
    support += comparable && faster;
    refute += !comparable || slower;
    other_ctx += ctx != run_ctx;
    other_shape += !x.differs.empty();
    each += point_text;
  }
  const std::size_t n = j.points.size() - degenerate - far;
  std::string left_out =
      degenerate ? "; " + std::to_string(degenerate) + " left out: budget = sink + latest blocks, both arms keep the "
                                                         "same tokens"
                 : std::string();
  if (far)
    left_out += "; " + std::to_string(far) + " not judged: the nearest access rows are at " + far_ctx + ", over " +
                fmt(kJudgedContextFactor) + "x from the run's " + md::tokens(static_cast<double>(run->context)) +
                " context";
  if (n == 0) {
    v.figures = run->rests_on() + ": no selection with tokens of its own to choose" +
                (far ? " and access rows near the run's context" : "") + left_out;
    return v;
  }
  v.verdict = support == n ? "supported" : support > 0 ? "mixed" : refute > 0 ? "refuted" : "not established";
  v.figures = run->rests_on() + ": " + std::to_string(n) + (n == 1 ? " selection" : " selections") + " joined, " +
              std::to_string(support) +
              " support, " + std::to_string(refute) + " refute" + left_out +
              (other_shape ? "; the access rows' shape differs from the run's at " + std::to_string(other_shape) +
                                 " (the context at " + std::to_string(other_ctx) + ")"
                           : "") +
              each;
  return v;
}

}  // namespace kvf::report::attention
