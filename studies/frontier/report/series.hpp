// The frontier's measured series, shared by its sections, its verdicts and the action table's measured costs:
// fetch time per copy size, recompute time per page per token count, and where the two cross.
#pragma once
#include <string>
#include <vector>

#include "kvf/report.hpp"

namespace kvf::report::frontier {

// Fetch arms: (copy bytes -> seconds), one mode (cold when measured, else hot).
struct XferSeries {
  std::string link, mode;
  std::vector<double> bytes, secs;
};
std::vector<XferSeries> transfer_series(const ResultSet& rs);
const XferSeries* find_xfer(const std::vector<XferSeries>& all, const std::string& link);
// The fetch a page would take on this device: h2d_pinned on a GPU, the SSD tier (file_page) on a CPU.
std::string primary_link(const ResultSet& rs);

// Recompute arms over tokens per page, one series per (model, arm, xdtype, layers, pages, prefix). secs is per
// page: the call's median divided by its P pages.
struct RecSeries {
  std::string model, arm, xdtype, mode, prefix;
  double layers = 1, pages = 1;
  std::vector<double> tokens, secs, kv_bytes, resident;
  std::vector<std::string> notes;  // each row's note (the xq rows state their K/V error there)
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

}  // namespace kvf::report::frontier
