// Internal: measured series the report and the verdicts share (recompute vs transfer, access arms).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kvf/report.hpp"

namespace kvf::report::detail {

// Fetch arms of the frontier study: (copy bytes -> seconds), one mode (cold when measured, else hot).
struct XferSeries {
  std::string link, mode;
  std::vector<double> bytes, secs;
};
std::vector<XferSeries> transfer_series(const ResultSet& rs);
const XferSeries* find_xfer(const std::vector<XferSeries>& all, const std::string& link);
// The fetch a page would take on this device: h2d_pinned on a GPU, the SSD tier (file_page) on a CPU.
std::string primary_link(const ResultSet& rs);

// Recompute arms of the frontier study over tokens per page, one series per (model, arm, xdtype, layers, pages,
// prefix). secs is per page: the call's median divided by its P pages.
struct RecSeries {
  std::string model, arm, xdtype, mode, prefix;
  double layers = 1, pages = 1;
  std::vector<double> tokens, secs, kv_bytes, resident;
  std::string label() const;
};
std::vector<RecSeries> recompute_series(const ResultSet& rs);

struct CrossRow {
  RecSeries rec;
  std::string link;
  std::vector<double> tokens, rec_s, xfer_s;
  std::size_t dropped = 0;  // tokens whose page size lies outside the measured copy sizes
  Crossover c;
};
std::vector<CrossRow> crossovers(const ResultSet& rs);

// Access study, attention part: per group (every parameter but arm/block/scatter/ctx and derived sizes),
// per ctx: the best contiguous-block median and the scattered-token median.
struct AccessGroup {
  std::string key, mode, keep;
  std::vector<double> ctx, block_s, token_s, ws_vs_llc;
};
std::vector<AccessGroup> access_groups(const ResultSet& rs);
// ctx at which the working set crosses the LLC/L2 (interpolated), when the group's range crosses it.
std::optional<double> knee_ctx(const AccessGroup& g);

// Idleness: per (case, definition) the median over ranges of kvf:idle_*_pct.
struct IdleStat {
  std::string case_name, metric;
  std::optional<double> batch;
  double median = 0;
  std::size_t ranges = 0;
};
std::vector<IdleStat> idle_stats(const ResultSet& rs);
double median_of(std::vector<double> v);

}  // namespace kvf::report::detail
