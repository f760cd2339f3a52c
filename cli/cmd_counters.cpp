// `kvf counters DIR`: re-evaluate the counter images a study saved under DIR/counters/ (range profiler, PM sampling)
// and its kernel records (Activity API) with the CUPTI Profiler Host API alone (no GPU), and (re)write
// DIR/counters.csv. Format: harness/cupti/include/kvf/cupti/counters_io.hpp.
//   exit 0: written; 2: DIR/counters missing, or a file a manifest names is missing or unreadable.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "kvf/errors.hpp"
#if defined(HAVE_KVF_CUPTI)
#include "kvf/cupti/counters_io.hpp"
#endif

namespace kvf::cli {

void add_counters(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "counters",
      "Re-evaluate the saved counter images of a results directory (no GPU needed) and rewrite DIR/counters.csv");
  sub->add_option("DIR", *dir, "Results directory holding counters/ (chip.txt, *.json, *.config, *.counterdata)")
      ->required();
  sub->callback([dir] {
#if !defined(HAVE_KVF_CUPTI)
    std::fprintf(stderr, "kvf counters: not available: this build has no CUDA/CUPTI (configure with nvcc present)\n");
    exit_with(kExitUsage);
#else
    const auto sum = kvf::cupti::evaluate_dir(*dir);  // UsageError -> exit 2 with the file name
    std::printf("%s: %zu rows from %zu captures\n", sum.csv.string().c_str(), sum.rows, sum.captures);
    exit_with(kExitOk);
#endif
  });
}

}  // namespace kvf::cli
