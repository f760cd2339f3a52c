// The gate on a loaded result set: compare it with itself, with a fixed baseline, and as a merged
// baseline; format every output. A UsageError (nothing comparable, too few samples) is expected.
#pragma once
#include "fuzz_common.hpp"
#include "kvf/gate.hpp"

namespace kvf::fuzz {

inline void exercise_gate(const kvf::gate::ResultSet& base, const kvf::gate::ResultSet& cur) {
  using namespace kvf::gate;
  GateOptions o;
  o.allow_device_mismatch = true;  // the fixed baseline names its own device
  expect_usage_errors([&] {
    const GateReport r = run_gate(base, cur, o);
    (void)summary_line(r);
    (void)format_markdown(r, o);
    (void)format_csv(r);
  });
}

inline void exercise_gate(const kvf::gate::ResultSet& rs) {
  exercise_gate(rs, rs);
  expect_usage_errors([&] { exercise_gate(kvf::gate::merge_runs({rs, rs}), rs); });
}

}  // namespace kvf::fuzz
