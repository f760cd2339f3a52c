// meta.json: the bounded JSON reader and the gate's device-name walk on the tree, typed access to the
// keys the report reads, then `kvf gate` and `kvf report` (loader, report.md/.html, .gp files with charts
// off) on results directories holding the input beside fixed CSV files.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "gate_checks.hpp"
#include "kvf/input.hpp"
#include "kvf/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  fuzz::init_limits();
  const auto in = fuzz::text(data, size);

  fuzz::expect_usage_errors([&] {
    const nlohmann::json j = parse_json_input(in, "meta.json");
    for (const auto& name : gate::meta_device_names(j)) fuzz::check_escapers(name);
    if (!j.is_object()) return;
    fuzz::expect_usage_errors([&] { (void)json_string(j, "suite_version", "meta.json", "suite_version"); });
    if (j.contains("device") && j["device"].is_object()) {
      const auto& d = j["device"];
      fuzz::expect_usage_errors([&] { (void)json_integer(d, "llc_bytes", "meta.json", "device.llc_bytes", 0, std::int64_t{1} << 50); });
      fuzz::expect_usage_errors([&] { (void)json_number(d, "compute_units", "meta.json", "device.compute_units", 0, 1e6); });
      fuzz::expect_usage_errors([&] {
        if (auto v = json_number(d, "llc_bytes", "meta.json", "device.llc_bytes", -1e300, 1e300))
          (void)checked_integer(*v, 0, std::int64_t{1} << 50, "meta.json: device.llc_bytes");
      });
    }
  });

  const auto gdir = fuzz::results_dir("gate", {{"cases.csv", "gate/cases.csv"}, {"samples.csv", "gate/samples.csv"}},
                                      "meta.json", in);
  fuzz::expect_usage_errors([&] { fuzz::exercise_gate(gate::load_results(gdir.string())); });

  const auto rdir = fuzz::results_dir(
      "report",
      {{"cases.csv", "report/cases.csv"}, {"samples.csv", "report/samples.csv"}, {"counters.csv", "report/counters.csv"}},
      "meta.json", in);
  fuzz::expect_usage_errors([&] { fuzz::check_report(report::load_results(rdir.string())); });
  return 0;
}
