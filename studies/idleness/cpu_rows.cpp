#include "cpu_rows.hpp"

namespace kvf::idleness {

kvf::CounterRow cpu_row_key(const std::string& study, const std::string& case_name, const std::string& source,
                            const std::string& mode, const std::string& chip) {
  kvf::CounterRow key;
  key.study = study;
  key.case_name = case_name;
  key.source = key.capture = source;
  key.range_index = mode == "cold" ? 0 : 1;
  key.range = mode;
  key.chip = chip;
  return key;
}

std::vector<kvf::CounterRow> cpu_rows(const std::string& study, const std::string& case_name, const std::string& mode,
                                      const std::string& chip, const kvf::decode::CpuIdleness& x) {
  const kvf::CounterRow key = cpu_row_key(study, case_name, "cpu_model", mode, chip);
  return {kvf::metric_row(key, "kvf:step_s", x.step_s, "second"),
          kvf::metric_row(key, "kvf:achieved_gflops", x.achieved_gflops, "GFLOP/s"),
          kvf::metric_row(key, "kvf:gemm_ceiling_gflops", x.ceiling_gflops, "GFLOP/s"),
          kvf::metric_row(key, "kvf:idle_compute_pct", x.idle_compute_pct, "percent"),
          kvf::metric_row(key, "kvf:achieved_gbps", x.achieved_gbps, "GB/s"),
          kvf::metric_row(key, "kvf:read_ceiling_gbps", x.read_ceiling_gbps, "GB/s"),
          kvf::metric_row(key, "kvf:mem_use_pct", x.mem_use_pct, "percent")};
}

}  // namespace kvf::idleness
