// Private to run_plan.cpp, run_ceilings.cpp and gate_ab.cpp (which runs the same --list pass).
#pragma once
#include <string>
#include <vector>

#include "run_plan.hpp"

namespace kvf::cli {

// A forwarded signal came while the plan was made: nothing ran, kvf stops.
struct RunStopped {};

// A bench refused its command line in the --list pass: one line naming the flag as it was given to kvf run
// (--access.frob, or the flags after --) and the study, with the bench's own words. UsageError for exit 2.
[[noreturn]] void throw_bench_refusal(const std::string& study, const std::vector<std::string>& pass, int rc,
                                      const std::string& err);

// Which stream cases the other studies' kept cases are stated against (their --list "ceilings").
struct StreamNeed {
  bool drop = false;   // none: stream does not run
  std::string filter;  // a --case-filter naming the needed cases; "" when all of stream runs
  std::string note;    // the line that says which and why
};
StreamNeed stream_need(const std::vector<StudyPlan>& others, const StudyPlan& stream);

}  // namespace kvf::cli
