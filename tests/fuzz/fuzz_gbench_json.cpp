// Google Benchmark JSON (--benchmark_format=json, repetitions kept): `kvf gate` given the file (bounded
// JSON reader, load_gbench_json), then the gate against itself and against a fixed baseline.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "gate_checks.hpp"
#include "kvf/input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvf;
  fuzz::init_limits();
  const auto in = fuzz::text(data, size);

  const auto file = fuzz::scratch_dir("gbench") / "current.json";
  fuzz::write_file(file, in);
  fuzz::expect_usage_errors([&] {
    const gate::ResultSet rs = gate::load_results(file.string());
    static const gate::ResultSet base = [] {
      const auto b = fuzz::scratch_dir("gbench") / "baseline.json";
      fuzz::write_file(b, fuzz::companion("gbench/baseline.json"));
      return gate::load_results(b.string());
    }();
    fuzz::exercise_gate(rs);
    fuzz::exercise_gate(base, rs);
  });
  return 0;
}
