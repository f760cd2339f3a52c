// counters.csv (CUPTI counters of the idleness study): the in-memory CSV reader, then `kvf report` (loader,
// the idleness section, report.md/.html, .gp files with charts off) on a results directory holding the input
// beside a fixed cases.csv, samples.csv and meta.json.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "kvf/report.hpp"
#include "kvf/table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  fuzz::init_limits();
  const auto in = fuzz::text(data, size);

  fuzz::expect_usage_errors([&] {
    const CsvTable t = parse_csv_text(in, "counters.csv");
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      fuzz::require(t.rows[r].size() == t.header.size(), "CsvTable: a row of another width than the header");
      for (const char* c : {"value", "t_start_ns", "t_end_ns"})
        if (t.column(c)) fuzz::expect_usage_errors([&] { (void)parse_number(t, r, c); });
      if (t.column("range_index"))
        fuzz::expect_usage_errors([&] { (void)parse_integer(t, r, "range_index", 0, std::int64_t{1} << 53); });
    }
  });

  const auto rdir = fuzz::results_dir(
      "report",
      {{"cases.csv", "report/cases.csv"}, {"samples.csv", "report/samples.csv"}, {"meta.json", "report/meta.json"}},
      "counters.csv", in);
  fuzz::expect_usage_errors([&] {
    const report::ResultSet rs = report::load_results(rdir.string());
    for (std::size_t i = 0; i < rs.counters.size() && i < 8; ++i)
      for (const std::string* s : {&rs.counters[i].metric, &rs.counters[i].range, &rs.counters[i].chip})
        fuzz::check_escapers(*s);
    fuzz::check_report(rs);
  });
  return 0;
}
