// What the three files of bench_main share (bench_main.cpp: the flow; bench_flags.cpp: the command line;
// bench_run.cpp: registering, measuring and writing the cases). Not a public header: studies see study.hpp.
#pragma once
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/measure.hpp"
#include "kvf/results.hpp"
#include "kvf/study.hpp"
#include "progress_fd.hpp"

namespace CLI {
class App;
}

namespace kvf::bench {

struct Flags {
  std::string out_dir, backend_choice = "auto", case_filter, list_format;
  std::string plan_device;  // --plan-device FILE: list for the device it describes (with --list only)
  std::string device_text;  // --device as typed
  DeviceChoice device;      // parsed before the backend starts
  bool quick = false, no_cold = false, no_hot = false;
  bool listing = false;  // --list given (list_format says how)
  double noise_pct = 1.0;
  MeasureConfig cfg;
  bool profile = false;  // --profile: one warm-up and one timed execution per case and mode, for ncu/nsys
  int reps = 1;  // --benchmark_repetitions: each repetition measures again; one row pools them (samples.csv
                 // keeps each sample's repetition)
  std::regex filter_re;  // --case-filter, compiled before the backend starts
  // --benchmark_filter, taken by the harness (Google Benchmark would drop the ceiling cases silently):
  // matched against the registered names study/case/mode; a leading '-' keeps what does not match.
  std::string benchmark_filter;
  std::optional<std::regex> benchmark_filter_re;
  bool benchmark_filter_negative = false;
  // --inject-slowdown CASE_REGEX=FRACTION (test only, with --allow-fault-injection; docs/gate.md): every
  // study/case/mode the regex finds is slowed by FRACTION inside its timed region, and says so in its row.
  std::string inject_text;
  std::optional<std::regex> inject_re;
  double inject_fraction = 0;
  bool allow_fault_injection = false;
};

// Whether --inject-slowdown slows this registered name (study/case/mode).
inline bool injected(const Flags& f, const std::string& bname) {
  return f.inject_re && std::regex_search(bname, *f.inject_re);
}
// The note a slowed row carries, and the marker `kvf gate` looks for in a row's note.
inline constexpr const char* kFaultInjectedMarker = "FAULT INJECTED";
// The note of a row whose samples other work interrupted (bench_run.cpp), which `kvf report` counts.
inline constexpr const char* kBusyMachineMarker = "machine busy";

// Adds the harness's and the study's flags to `app` and parses the command line (Google Benchmark takes
// its --benchmark_* flags out of argv first). Returns the exit code when the run ends here: --help
// printed, or a bad flag said in one line.
std::optional<int> parse_flags(int* argc, char** argv, Study& study, const std::string& prog, CLI::App& app, Flags& f);

void print_error(const std::string& prog, const std::string& msg);
// stdout carries the console table and --list: a failed write there is an error of the run ("" when none).
std::string stdout_failure();

// A case that is listed but cannot run here (skipped_case).
class SkippedCase final : public Case {
 public:
  std::string reason;
  void run(Backend&) override {}
};
inline bool is_skipped(const Case& c) { return dynamic_cast<const SkippedCase*>(&c) != nullptr; }

struct RunOutcome {
  int exit_code = kExitOk;
  std::string stop_study;     // why later cases were not run (verify failure, bad input); "" when none
  std::string write_failure;  // the results write that ended the run; "" when none
};
// Registers every (case, mode) with Google Benchmark, runs them, writes each finished case to `dir`, and
// tears every case down.
RunOutcome run_cases(const std::string& study, Backend& be, ResultsDir& dir, std::vector<std::unique_ptr<Case>>& cases,
                     const Flags& f, const std::string& prog);

}  // namespace kvf::bench
