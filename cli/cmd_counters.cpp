// `kvf counters DIR`: re-evaluate the counter images a study saved under DIR/counters/ (range profiler, PM sampling)
// and its kernel records (Activity API) with the CUPTI Profiler Host API alone (no GPU), and (re)write
// DIR/counters.csv. Format: harness/cupti/include/kvf/cupti/counters_io.hpp.
//   exit 0: written; 2: DIR/counters missing, or a file a manifest names is missing or unreadable.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "read_limits.hpp"
#if defined(HAVE_KVF_CUPTI)
#include "kvf/cupti/counters_io.hpp"
#endif

namespace kvf::cli {

namespace {
// DIR before anything reads it: a directory, its counters/ a directory where present, and its counters.csv
// (rewritten here) a regular file where present, so a FIFO or a device never blocks or receives the table.
void check_results_dir(const std::string& dir) {
  if (dir.empty()) throw UsageError("DIR '': the results directory holding counters/ is needed");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw UsageError("DIR " + dir + ": no such directory (a results directory holding counters/)");
  if (!S_ISDIR(st.st_mode)) throw UsageError("DIR " + dir + ": " + file_kind(st.st_mode) + ", expected a results directory");
  const std::filesystem::path root(dir);
  if (::stat((root / "counters").c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw UsageError("DIR " + dir + ": counters is " + file_kind(st.st_mode) + ", expected a directory of counter images");
  if (::lstat((root / "counters.csv").c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw UsageError("DIR " + dir + ": counters.csv is " +
                     file_kind(st.st_mode) +
                     ", expected a regular file to rewrite");
}
}  // namespace

void add_counters(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "counters",
      "Re-evaluate the saved counter images of a results directory (no GPU needed) and rewrite DIR/counters.csv");
  sub->add_option("DIR", *dir, "Results directory holding counters/ (chip.txt, *.json, *.config, *.counterdata)")
      ->required();
  auto limits = add_read_limit_flags(sub);
  sub->callback([dir, limits] {
    limits->apply();
    check_results_dir(*dir);  // UsageError -> exit 2, in every build
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
