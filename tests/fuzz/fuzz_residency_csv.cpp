// residency.csv (what `kvf residency --out` writes; the report's Residency section reads it): the in-memory CSV
// reader, then `residency::read_replay` and `kvf report` (loader, every section with the replay, report.md/.html,
// .gp files with charts off) on a results directory holding the input as residency/residency.csv beside a fixed
// residency.json and the report's fixed CSV files, and on the replay's own directory (load_report_inputs).
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "kvf/report.hpp"
#include "kvf/residency_report.hpp"
#include "kvf/table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  fuzz::init_limits();
  const auto in = fuzz::text(data, size);

  fuzz::expect_usage_errors([&] {
    const CsvTable t = parse_csv_text(in, "residency.csv");
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      fuzz::require(t.rows[r].size() == t.header.size(), "CsvTable: a row of another width than the header");
      for (const char* c : {"hbm_gib", "host_gib", "hit_rate_hbm", "added_p99_us", "prefill_total_s"})
        if (t.column(c)) fuzz::expect_usage_errors([&] { (void)parse_number(t, r, c); });
      if (t.column("requests"))
        fuzz::expect_usage_errors([&] { (void)parse_integer(t, r, "requests", 0, std::int64_t{1} << 53); });
    }
  });

  const auto dir = fuzz::scratch_dir("residency_results");
  const auto replay = fuzz::scratch_dir("residency_results/residency");
  static bool made = false;
  if (!made) {
    for (const char* f : {"cases.csv", "samples.csv", "meta.json", "counters.csv"})
      fuzz::write_file(dir / f, fuzz::companion(std::string("report/") + f));
    fuzz::write_file(replay / "residency.json", fuzz::companion("residency/residency.json"));
    made = true;
  }
  fuzz::write_file(replay / "residency.csv", in);
  fuzz::expect_usage_errors([&] {
    const auto r = report::residency::read_replay(replay, dir);
    fuzz::require(!r.rows.empty(), "read_replay: a replay without rows");
    for (std::size_t i = 0; i < r.rows.size() && i < 8; ++i) fuzz::check_escapers(r.rows[i].policy);
  });
  // Beside a results directory a bad replay is a warning, never an error: the report must be written.
  const report::ResultSet rs = report::load_results(dir.string());  // the fixed companions: never bad input
  fuzz::require(fuzz::expect_usage_errors([&] { (void)report::render_markdown({rs}, report::ReportOptions{}, {}); }),
                "kvf report: a bad residency.csv beside the results stopped the report");
  fuzz::check_report(rs);
  fuzz::expect_usage_errors([&] {
    for (const auto& rs : report::load_report_inputs({replay.string()})) fuzz::check_report(rs);
  });
  return 0;
}
