// The CPU idleness model's rows of counters.csv: what a CPU case of the idleness study records beside its
// timings, in the harness's one row type (kvf/result_tables.hpp), so `kvf report` reads them like the GPU's
// CUPTI rows (docs/idleness.md, "Counters").
#pragma once
#include <string>
#include <vector>

#include "decode.hpp"
#include "kvf/result_tables.hpp"

namespace kvf::idleness {

// The key of a CPU case's rows for kvf::metric_row: source and capture `source`, range = the mode, range_index 0
// for cold and 1 for hot, no GPU timestamps.
kvf::CounterRow cpu_row_key(const std::string& study, const std::string& case_name, const std::string& source,
                            const std::string& mode, const std::string& chip);
// The idleness figures of one case and mode as rows of source "cpu_model".
std::vector<kvf::CounterRow> cpu_rows(const std::string& study, const std::string& case_name, const std::string& mode,
                                      const std::string& chip, const kvf::decode::CpuIdleness& x);

}  // namespace kvf::idleness
