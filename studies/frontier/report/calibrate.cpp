// The ceilings the frontier study measures for every prediction: its GEMM ceiling, the host link and the
// per-copy fixed cost (a fit over its pinned H2D copy sizes), the disk tier and NVLink.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "parts.hpp"

namespace kvf::report::frontier {

namespace {

// Host link: t = a + n/B over the cold pinned H2D copy sizes, least squares of relative error (16 KiB to 64 MiB:
// a plain fit's intercept, 12.86 us on the H100 run, was above the whole 16 KiB copy's 10.46 us, and predicted it
// 26% high); the intercept is the fixed cost of a copy call when it is positive.
std::vector<Calibrated> host_link_fit(const ResultSet& rs) {
  std::vector<std::pair<double, double>> pts;
  for (const auto* r : rs.rows("frontier"))
    if (r->param("arm") == "h2d_pinned" && r->mode == "cold" && r->bytes && r->median_s && *r->median_s > 0)
      pts.emplace_back(*r->bytes, *r->median_s);
  const auto f = fit_affine(pts, true);
  if (!f) return {};
  const double gbps = 1.0 / f->second / 1e9;
  std::vector<Calibrated> out = {{"host_link_gbps", gbps,
                                  fmt(gbps) + " GB/s, fit t = a + n/B (relative error) over " +
                                      std::to_string(pts.size()) +
                                      " frontier h2d_pinned rows in " + rs.dir}};
  if (f->first > 0) {
    const double fixed_us = f->first * 1e6;
    out.push_back({"copy_fixed_us", fixed_us, fmt(fixed_us) + " us, intercept of the same fit"});
  }
  return out;
}

// Disk tier (CPU runs: O_DIRECT file reads). Per read t = a + n/B, fitted over the file_page rows (one read of
// copy_bytes from a random offset: latency + transfer) when they have 2 sizes or more; else over the file_direct
// rows (bytes / copy_bytes sequential reads into 4 KiB pages, like dd; per-read time = median * copy_bytes /
// bytes). Else the dd_direct baseline's bandwidth, latency 0 (dd's process start is inside its time).
std::vector<Calibrated> disk(const ResultSet& rs) {
  std::vector<std::pair<double, double>> dpts;
  std::set<double> dsizes;
  std::string darm;
  for (const char* want : {"file_page", "file_direct"}) {
    dpts.clear();
    dsizes.clear();
    for (const auto* r : rs.rows("frontier")) {
      if (r->param("arm") != want) continue;
      const auto cb = r->num("copy_bytes");
      if (!cb || *cb <= 0 || !r->bytes || *r->bytes < *cb) continue;
      dpts.emplace_back(*cb, *r->median_s / std::round(*r->bytes / *cb));
      dsizes.insert(*cb);
    }
    darm = want;
    if (dsizes.size() >= 2) break;
  }
  if (const auto f = fit_affine(dpts)) {
    const double gbps = 1.0 / f->second / 1e9, latency_us = std::max(0.0, f->first * 1e6);
    return {{"disk_gbps", gbps,
             fmt(gbps) + " GB/s, fit t = a + n/B per read over " + std::to_string(dpts.size()) + " frontier " + darm +
                 " rows (" + std::to_string(dsizes.size()) + " read sizes) in " + rs.dir},
            {"disk_latency_us", latency_us,
             f->first > 0 ? fmt(latency_us) + " us per read, intercept of the same fit"
                          : "0 us per read: the same fit's intercept is " + fmt(f->first * 1e6) + " us (negative), taken as 0"}};
  }
  if (const auto v = best_value(rs, "frontier", {{"arm", "dd_direct"}}, false))
    return {{"disk_gbps", v->first,
             fmt(v->first) + " GB/s, best frontier arm=dd_direct (" + v->second +
                 "; dd iflag=direct, process start included) in " + rs.dir},
            {"disk_latency_us", 0, "assumed: 0 us per read (fewer than 2 file-tier read sizes to fit a latency)"}};
  return {};
}

// A page's layers as back-to-back copies (GPU: pinned H2D, one call each): the granularity rows move one page as
// 1, 8, 32, 256, 512 copies. t = a + copies x c over the cold rows of the page with the most copy counts, least
// squares of relative error: c is what each further copy adds (the H100 run: 2.53 us, where one isolated
// copy's fixed cost is 10.6 us), so a page fetched one copy per layer no longer pays L whole fixed costs.
std::vector<Calibrated> copy_issue_fit(const ResultSet& rs) {
  if (rs.backend != "cuda") return {};  // the CPU rows are memcpy calls, not link copies
  std::map<double, std::vector<std::pair<double, double>>> by_page;  // page bytes -> (copies, seconds)
  for (const auto* r : rs.rows("frontier")) {
    const auto copies = r->num("copies"), page = r->num("page_bytes");
    if (r->param("arm") == "granularity" && r->mode == "cold" && copies && page && r->median_s && *r->median_s > 0)
      by_page[*page].emplace_back(*copies, *r->median_s);
  }
  const std::vector<std::pair<double, double>>* best = nullptr;
  double best_page = 0;
  for (const auto& [page, pts] : by_page)
    if (!best || pts.size() > best->size()) best = &pts, best_page = page;
  if (!best) return {};
  const auto f = fit_affine(*best, true);
  if (!f) return {};
  const double us = f->second * 1e6;
  return {{"copy_issue_us", us,
           fmt(us) + " us per further copy, fit t = a + copies x c (relative error) over " +
               std::to_string(best->size()) + " frontier granularity rows of one " + md::bytes(best_page) +
               " page in " + rs.dir}};
}

}  // namespace

std::vector<CalibrationTerm> calibration_terms() {
  CalibrationTerm link{"host_link_gbps", 0, host_link_fit};
  CalibrationTerm disk_tier{"disk_gbps", 0, disk,
                            "the disk figure is never a spec: it is fitted on the directory's file-tier rows or taken "
                            "from its dd_direct row"};
  // The GEMM ceiling arm is made for it: before the idleness study's (rank 1).
  CalibrationTerm issue{"copy_issue_us", 0, copy_issue_fit};
  return {best_row_term("bf16_tflops", 0, "frontier", {{"arm", "gemm_ceiling"}}, true), link, issue, disk_tier,
          best_row_term("nvlink_gbps", 0, "frontier", {{"arm", "p2p"}}, false)};
}

}  // namespace kvf::report::frontier
