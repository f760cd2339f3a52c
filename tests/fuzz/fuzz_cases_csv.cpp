// cases.csv: the in-memory CSV reader with typed access to every field, then `kvf gate` on a results
// directory holding the input beside a fixed samples.csv and meta.json, then `kvf report` (loader, report.md,
// report.html, .gp/.dat files with charts off) on one beside a fixed meta.json and counters.csv.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "gate_checks.hpp"
#include "kvf/report.hpp"
#include "kvf/table.hpp"

namespace {

void typed_fields(const kvf::CsvTable& t) {
  using namespace kvf;
  fuzz::require(t.rows.size() == t.line.size(), "CsvTable: rows and line numbers differ in count");
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    fuzz::require(t.rows[r].size() == t.header.size(), "CsvTable: a row of another width than the header", t.where(r));
    for (const char* c : {"median_s", "q1_s", "q3_s", "bytes", "gbps"})
      if (t.column(c)) fuzz::expect_usage_errors([&] { (void)parse_number(t, r, c); });
    for (const char* c : {"samples", "throttled_samples"})
      if (t.column(c)) fuzz::expect_usage_errors([&] { (void)parse_integer(t, r, c, 0, std::int64_t{1} << 53); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  fuzz::init_limits();
  const auto in = fuzz::text(data, size);

  fuzz::expect_usage_errors([&] { typed_fields(parse_csv_text(in, "cases.csv")); });

  const auto gdir = fuzz::results_dir("gate", {{"samples.csv", "gate/samples.csv"}, {"meta.json", "gate/meta.json"}},
                                      "cases.csv", in);
  fuzz::expect_usage_errors([&] { fuzz::exercise_gate(gate::load_results(gdir.string())); });

  const auto rdir = fuzz::results_dir(
      "report", {{"meta.json", "report/meta.json"}, {"counters.csv", "report/counters.csv"}}, "cases.csv", in);
  fuzz::expect_usage_errors([&] {
    const report::ResultSet rs = report::load_results(rdir.string());
    for (std::size_t i = 0; i < rs.cases.size() && i < 8; ++i) {
      const auto& c = rs.cases[i];
      for (const std::string* s : {&c.study, &c.case_name, &c.device, &c.note}) fuzz::check_escapers(*s);
    }
    fuzz::check_report(rs);
  });
  return 0;
}
