// The parameter columns the access bench derives per row: sizes, what the kernel was granted, and the CPU FMA floor
// that grows with ctx. They describe a row, not its configuration: the access plug-in's claim-5 groups and the
// attention plug-in's join of access rows both leave them out of their keys, so a new derived column is named here
// once (it was two lists that had to be kept alike).
#pragma once
#include <set>
#include <string>

namespace kvf::report {

inline const std::set<std::string>& access_derived_columns() {
  static const std::set<std::string> columns = {
      "budget_tokens", "working_set_bytes", "working_set_vs_llc", "kv_bytes",     "llc_bytes",
      "huge_backed_pct", "fma_floor_s",     "fma_peak_gflops",    "fma_peak_isa", "fma_floor_basis"};
  return columns;
}

}  // namespace kvf::report
