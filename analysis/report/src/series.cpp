#include "series.hpp"

#include <algorithm>
#include <set>

namespace kvf::report::detail {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {
const std::vector<std::string> kFetchArms = {"h2d_pinned", "h2d_pageable", "zero_copy", "p2p", "file_page", "dram_copy"};

// Rows of one arm in one mode: cold when any cold row exists, else hot.
template <class Pred>
std::pair<std::string, std::vector<const CaseRow*>> pick_mode(const ResultSet& rs, const std::string& study, Pred pred) {
  std::vector<const CaseRow*> cold, hot;
  for (const auto* r : rs.rows(study))
    if (pred(*r)) (r->mode == "cold" ? cold : hot).push_back(r);
  if (!cold.empty()) return {"cold", cold};
  return {"hot", hot};
}
}  // namespace

std::vector<XferSeries> transfer_series(const ResultSet& rs) {
  std::vector<XferSeries> out;
  for (const auto& arm : kFetchArms) {
    auto [mode, rows] = pick_mode(rs, "frontier", [&](const CaseRow& r) { return r.param("arm") == arm; });
    if (rows.empty()) continue;
    std::map<double, double> pts;  // first row of each size, in file order
    for (const auto* r : rows) {
      auto b = r->num("copy_bytes");
      if (!b) b = r->bytes;
      if (b && !pts.count(*b)) pts[*b] = *r->median_s;
    }
    XferSeries s;
    s.link = arm;
    s.mode = mode;
    for (const auto& [b, t] : pts) {
      s.bytes.push_back(b);
      s.secs.push_back(t);
    }
    out.push_back(std::move(s));
  }
  return out;
}

const XferSeries* find_xfer(const std::vector<XferSeries>& all, const std::string& link) {
  for (const auto& s : all)
    if (s.link == link) return &s;
  return nullptr;
}

std::string primary_link(const ResultSet& rs) { return rs.backend == "cuda" ? "h2d_pinned" : "file_page"; }

std::string RecSeries::label() const {
  std::string s = model + " " + arm;
  if (!xdtype.empty()) s += "/" + xdtype;
  s += " L" + fmt(layers) + " P" + fmt(pages);
  if (!prefix.empty()) s += " N" + prefix;
  return s;
}

std::vector<RecSeries> recompute_series(const ResultSet& rs) {
  std::map<std::string, RecSeries> groups;  // ordered key: deterministic
  std::map<std::string, std::set<double>> seen;  // tokens already in each series (the first row of each wins)
  for (const char* mode : {"cold", "hot"}) {
    for (const auto* r : rs.rows("frontier")) {
      const std::string arm = r->param("arm");
      if (arm != "x" && arm != "xq" && arm != "layers" && arm != "mla_latent" && arm != "mla_up") continue;
      if (r->mode != mode) continue;
      const auto T = r->num("tokens");
      if (!T) continue;
      const std::string key = r->param("model") + "|" + arm + "|" + r->param("xdtype") + "|" + r->param("layers") + "|" +
                              r->param("pages") + "|" + r->param("prefix");
      auto it = groups.find(key);
      if (it == groups.end()) {
        RecSeries s;
        s.model = r->param("model");
        s.arm = arm;
        s.xdtype = r->param("xdtype");
        s.prefix = r->param("prefix");
        s.mode = mode;
        s.layers = r->num("layers").value_or(1);
        s.pages = r->num("pages").value_or(1);
        it = groups.emplace(key, s).first;
      }
      RecSeries& s = it->second;
      if (s.mode != mode) continue;  // cold rows already made this series
      if (!seen[key].insert(*T).second) continue;
      s.tokens.push_back(*T);
      s.secs.push_back(*r->median_s / std::max(1.0, s.pages));  // per page: a call recomputes P pages
      s.kv_bytes.push_back(r->num("kv_bytes_per_page").value_or(0));
      s.resident.push_back(r->num("resident_bytes_per_page").value_or(0));
    }
  }
  std::vector<RecSeries> out;
  for (auto& [k, s] : groups) {
    std::vector<std::size_t> idx(s.tokens.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&s = s](auto a, auto b) { return s.tokens[a] < s.tokens[b]; });
    RecSeries t = s;
    for (std::size_t i = 0; i < idx.size(); ++i) {
      t.tokens[i] = s.tokens[idx[i]];
      t.secs[i] = s.secs[idx[i]];
      t.kv_bytes[i] = s.kv_bytes[idx[i]];
      t.resident[i] = s.resident[idx[i]];
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<CrossRow> crossovers(const ResultSet& rs) {
  std::vector<CrossRow> out;
  const auto xs = transfer_series(rs);
  for (const auto& rec : recompute_series(rs)) {
    for (const auto& x : xs) {
      CrossRow row;
      row.rec = rec;
      row.link = x.link;
      for (std::size_t i = 0; i < rec.tokens.size(); ++i) {
        auto t = interpolate(x.bytes, x.secs, rec.kv_bytes[i]);
        if (!t || rec.kv_bytes[i] <= 0) {
          ++row.dropped;
          continue;
        }
        row.tokens.push_back(rec.tokens[i]);
        row.rec_s.push_back(rec.secs[i]);
        row.xfer_s.push_back(*t);
      }
      if (row.tokens.empty()) continue;
      row.c = find_crossover(row.tokens, row.rec_s, row.xfer_s, "recompute", "transfer", "tokens");
      out.push_back(std::move(row));
    }
  }
  return out;
}

std::vector<AccessGroup> access_groups(const ResultSet& rs) {
  static const std::set<std::string> skip = {"arm",        "block",     "scatter",           "ctx",
                                             "budget_tokens", "working_set_bytes", "working_set_vs_llc",
                                             "kv_bytes",  "select",    "llc_bytes"};
  struct Acc {
    AccessGroup g;
    std::map<double, double> block, token, ws;
  };
  std::map<std::string, Acc> groups;
  for (const auto* r : rs.rows("access")) {
    if (r->param("part") != "attention") continue;
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
    auto& m = arm == "block" ? a.block : a.token;
    auto it = m.find(*ctx);
    if (it == m.end() || *r->median_s < it->second) m[*ctx] = *r->median_s;  // best block size
    if (auto w = r->num("working_set_vs_llc")) a.ws[*ctx] = std::max(a.ws[*ctx], *w);
  }
  std::vector<AccessGroup> out;
  for (auto& [k, a] : groups) {
    for (const auto& [c, b] : a.block) {
      auto t = a.token.find(c);
      if (t == a.token.end()) continue;
      a.g.ctx.push_back(c);
      a.g.block_s.push_back(b);
      a.g.token_s.push_back(t->second);
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

std::vector<IdleStat> idle_stats(const ResultSet& rs) {
  std::map<std::pair<std::string, std::string>, std::vector<double>> vals;
  for (const auto& c : rs.counters) {
    if (!c.value) continue;
    const bool gpu = c.source == "range" && (c.metric == "kvf:idle_sm_pct" || c.metric == "kvf:idle_issue_pct" ||
                                             c.metric == "kvf:idle_tensor_pct");
    const bool cpu = c.source == "cpu_model" && c.metric == "kvf:idle_compute_pct";  // 1 - achieved / GEMM ceiling
    if (!gpu && !cpu) continue;
    vals[{c.case_name, c.metric}].push_back(*c.value);
  }
  // The batch of each case: its first row that has one. Looked up per (case, definition) below; a scan of
  // every row per key made the report quadratic in rows.
  std::map<std::string, double> batch_of;
  if (!vals.empty())
    for (const auto& r : rs.cases)
      if (!batch_of.count(r.case_name))
        if (const auto b = r.num("batch")) batch_of.emplace(r.case_name, *b);
  std::vector<IdleStat> out;
  for (const auto& [k, v] : vals) {
    IdleStat s;
    s.case_name = k.first;
    s.metric = k.second;
    s.median = median_of(v);
    s.ranges = v.size();
    if (const auto b = batch_of.find(k.first); b != batch_of.end()) s.batch = b->second;
    out.push_back(s);
  }
  return out;
}

}  // namespace kvf::report::detail
