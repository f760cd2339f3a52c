#include "series.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace kvf::report::frontier {

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
    std::map<double, const CaseRow*> pts;  // first row of each size, in file order
    for (const auto* r : rows) {
      auto b = r->num("copy_bytes");
      if (!b) b = r->bytes;
      if (b && !pts.count(*b)) pts[*b] = r;
    }
    XferSeries s;
    s.link = arm;
    s.mode = mode;
    for (const auto& [b, r] : pts) {
      s.bytes.push_back(b);
      s.secs.push_back(*r->median_s);
      s.lo.push_back(r->q1_s.value_or(*r->median_s));
      s.hi.push_back(r->q3_s.value_or(*r->median_s));
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

std::optional<Timed> fetch_at(const XferSeries& f, double bytes) {
  const auto m = interpolate(f.bytes, f.secs, bytes), lo = interpolate(f.bytes, f.lo, bytes),
             hi = interpolate(f.bytes, f.hi, bytes);
  if (!m || !lo || !hi) return std::nullopt;
  return Timed{*m, *lo, *hi};
}

int faster_beyond_spread(const Timed& a, const Timed& b) { return a.hi < b.lo ? -1 : a.lo > b.hi ? 1 : 0; }

std::string spread_text(const Timed& t) {
  return fmt(t.median * 1e6) + " us (q1..q3 " + fmt(t.lo * 1e6) + ".." + fmt(t.hi * 1e6) + " us)";
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
      if (r->param("launch") == "graph") continue;  // the series are eager, as every row was before the launch axis
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
        s.gemm = r->param("gemm");
        s.mode = mode;
        s.layers = r->num("layers").value_or(1);
        s.pages = r->num("pages").value_or(1);
        it = groups.emplace(key, s).first;
      }
      RecSeries& s = it->second;
      if (s.mode != mode) continue;  // cold rows already made this series
      if (!seen[key].insert(*T).second) continue;
      s.tokens.push_back(*T);
      const double per_page = std::max(1.0, s.pages);  // a call recomputes P pages
      s.secs.push_back(*r->median_s / per_page);
      s.lo.push_back(r->q1_s.value_or(*r->median_s) / per_page);
      s.hi.push_back(r->q3_s.value_or(*r->median_s) / per_page);
      s.kv_bytes.push_back(r->num("kv_bytes_per_page").value_or(0));
      s.resident.push_back(r->num("resident_bytes_per_page").value_or(0));
      s.notes.push_back(r->note);
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
      t.lo[i] = s.lo[idx[i]];
      t.hi[i] = s.hi[idx[i]];
      t.kv_bytes[i] = s.kv_bytes[idx[i]];
      t.resident[i] = s.resident[idx[i]];
      t.notes[i] = s.notes[idx[i]];
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

}  // namespace kvf::report::frontier
