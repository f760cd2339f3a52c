// The frontier's measured series, shared by its sections, its verdicts and the action table's measured costs:
// fetch time per copy size, recompute time per page per token count, and where the two cross.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kvf/report.hpp"

namespace kvf::report::frontier {

// Fetch arms: (copy bytes -> seconds), one mode (cold when measured, else hot).
struct XferSeries {
  std::string link, mode;
  std::vector<double> bytes, secs;
  std::vector<double> lo, hi;  // each row's q1 and q3 (its median where cases.csv has none): the spread of its samples
};
std::vector<XferSeries> transfer_series(const ResultSet& rs);
const XferSeries* find_xfer(const std::vector<XferSeries>& all, const std::string& link);
// A fetch of `bytes` interpolated between measured copy sizes, with its spread (q1, q3 interpolated the same way).
struct Timed {
  double median = 0, lo = 0, hi = 0;
};
std::optional<Timed> fetch_at(const XferSeries& f, double bytes);
// Which of two timings is faster beyond the spread of their rows' samples: -1 a (a's q3 below b's q1), +1 b, 0 the
// q1..q3 ranges overlap (no sign: the verdicts call that "not established"). A spread, not a test: the frontier's
// rows are compared across interpolated copy sizes, where no pair of raw samples exists.
int faster_beyond_spread(const Timed& a, const Timed& b);
std::string spread_text(const Timed& t);  // "16.45 us (q1..q3 16.3..16.6 us)"
// The fetch a page would take on this device: h2d_pinned on a GPU, the SSD tier (file_page) on a CPU.
std::string primary_link(const ResultSet& rs);

// Recompute arms over tokens per page, one series per (model, arm, xdtype, layers, pages, prefix). secs is per
// page: the call's median divided by its P pages.
struct RecSeries {
  std::string model, arm, xdtype, mode, prefix;
  std::string gemm;  // the first row's `gemm` column: openblas_fp32 where this CPU's oneDNN had no bf16 matmul
  double layers = 1, pages = 1;
  std::vector<double> tokens, secs, kv_bytes, resident;
  std::vector<double> lo, hi;  // q1 and q3 per page (the median where cases.csv has none)
  std::vector<std::string> notes;  // each row's note (the xq rows state their K/V error there)
  std::string label() const;
  Timed timed(std::size_t i) const { return {secs[i], lo[i], hi[i]}; }  // token count i, per page, with its spread
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
