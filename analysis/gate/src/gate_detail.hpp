// Private to analysis/gate/src: the small helpers both verdict files (verdict.cpp: stored baselines,
// paired_verdict.cpp: the A/B mode) use to fill in a case and its note.
#pragma once
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kvf/gate.hpp"
#include "kvf/stats.hpp"

namespace kvf::gate::detail {

// Checks threshold, alpha and min_samples (UsageError naming the flag) and compiles the filter (none when empty).
std::optional<std::regex> checked_options(const GateOptions& o);

inline std::string pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * f);
  return buf;
}
inline std::string num(double v, const char* fmt = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

inline double median_of(std::span<const double> xs) {
  std::vector<double> s(xs.begin(), xs.end());
  std::sort(s.begin(), s.end());
  return quantile_sorted(s, 0.5);
}

inline void append_note(std::string& note, const std::string& more) {
  if (more.empty()) return;
  if (!note.empty()) note += "; ";
  note += more;
}

// The device a case ran on: its own column, else the one device named by meta.json / the context.
inline std::string device_of(const CaseData& c, const ResultSet& rs) {
  std::string d = c.device;
  if (d.empty() && rs.meta_devices.size() == 1) d = *rs.meta_devices.begin();
  if (!d.empty() && !c.backend.empty()) d = c.backend + ":" + d;
  return d;
}

// Two devices as device_of gives them: equal, or equal once the backend is left out where one side has none (an
// empty backend column is an unknown backend, not another device).
inline bool same_device(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const auto bare = [](const std::string& d) {
    for (const char* be : {"cpu:", "cuda:"})
      if (d.rfind(be, 0) == 0) return std::make_pair(d.substr(std::char_traits<char>::length(be)), true);
    return std::make_pair(d, false);
  };
  const auto [da, ka] = bare(a);
  const auto [db, kb] = bare(b);
  return ka != kb && da == db;
}

inline std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "unknown" : out;
}

// Labels that collide (same study/case/mode, different parameters) get their parameters appended; then the
// cases are ordered by verdict (SLOWER first), then label.
inline void finish_labels_and_order(std::vector<CaseResult>& cases) {
  std::map<std::string, int> label_count;
  for (const auto& r : cases) ++label_count[r.label];
  for (auto& r : cases)
    if (label_count[r.label] > 1) r.label += " {" + r.key.params_string() + "}";
  std::stable_sort(cases.begin(), cases.end(), [](const CaseResult& a, const CaseResult& b) {
    if (a.verdict != b.verdict) return static_cast<int>(a.verdict) < static_cast<int>(b.verdict);
    return a.label < b.label;
  });
}

}  // namespace kvf::gate::detail
