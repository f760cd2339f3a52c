// samples.csv: the in-memory CSV reader, then `kvf gate` (samples matched to a fixed cases.csv, compared
// with the Mann-Whitney U test) and `kvf report`'s loader on results directories holding the input.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "gate_checks.hpp"
#include "kvf/report.hpp"
#include "kvf/table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  fuzz::init_limits();
  const auto in = fuzz::text(data, size);

  fuzz::expect_usage_errors([&] {
    const CsvTable t = parse_csv_text(in, "samples.csv");
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
      fuzz::require(t.rows[r].size() == t.header.size(), "CsvTable: a row of another width than the header");
      if (t.column("seconds")) fuzz::expect_usage_errors([&] { (void)parse_number(t, r, "seconds"); });
      if (t.column("throttled")) fuzz::expect_usage_errors([&] { (void)parse_integer(t, r, "throttled", 0, 1); });
    }
  });

  const auto gdir = fuzz::results_dir("gate", {{"cases.csv", "gate/cases.csv"}, {"meta.json", "gate/meta.json"}},
                                      "samples.csv", in);
  fuzz::expect_usage_errors([&] {
    const gate::ResultSet rs = gate::load_results(gdir.string());
    static const gate::ResultSet base = [] {
      const auto bdir = fuzz::results_dir("gate-base", {{"cases.csv", "gate/cases.csv"}, {"meta.json", "gate/meta.json"}},
                                          "samples.csv", fuzz::companion("gate/samples.csv"));
      return gate::load_results(bdir.string());
    }();
    fuzz::exercise_gate(rs);
    fuzz::exercise_gate(base, rs);
  });

  const auto rdir = fuzz::results_dir(
      "report",
      {{"cases.csv", "report/cases.csv"}, {"meta.json", "report/meta.json"}, {"counters.csv", "report/counters.csv"}},
      "samples.csv", in);
  fuzz::expect_usage_errors([&] { (void)report::load_results(rdir.string()); });
  return 0;
}
