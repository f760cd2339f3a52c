// kvf run's per-study flags: `--<study>.<flag> [value]` (or `--<study>.<flag>=value`) goes to that study's
// bench only, as `--<flag> [value]`; flags after `--` go to every bench. The one rule, in `kvf run --help`
// (kStudyFlagsHelp), README and docs.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::cli {

struct StudyFlag {
  std::string study, flag;  // "access", "contexts"
  std::vector<std::string> bench_args;  // {"--contexts", "4K"} or {"--contexts=4K"}
  std::string typed;        // "--access.contexts 4K", for messages and meta.json
};

extern const char* const kStudyFlagsHelp;

// Takes every --<study>.<flag> [value] out of a `kvf run` command line (up to a "--"): CLI11 never sees them,
// study_flags() returns them. A value is the next argument unless that is "--", starts with "--" or is a short
// option (-h); so a negative number is a value. Other command lines pass through untouched. Throws UsageError
// for an unknown study or a flag kvf run sets itself (--access.out).
std::vector<char*> take_study_flags(int argc, char** argv);

bool is_run_study(std::string_view name);  // a study of kStudies: a bench kvf run and kvf gate --ab start
// How to run a part of the suite that has results and a report section but no bench of kvf run (attention: a
// checkpoint or capture; residency: a request trace), "" for any other name.
std::string run_elsewhere(std::string_view name);
// "TYPED: unknown study; allowed: ..." or, for those parts, TYPED and how to run them.
std::string unknown_study(const std::string& typed, std::string_view name);
const std::vector<StudyFlag>& study_flags();
// What came after "--" on a `kvf run` or `kvf gate` command line (taken out with the per-study flags).
const std::vector<std::string>& flags_after_separator();

// Refuses, before anything runs, a per-study flag for a study that will not run (`why_not` says why), and flags
// after "--" that kvf run must set per study or itself (--case-filter, --device, --out, --backend).
void check_study_flags(const std::vector<std::string>& running,
                       const std::function<std::string(const std::string& study)>& why_not);
void check_pass_flags(const std::vector<std::string>& pass);

// The bench arguments of one study's flags, in the order given.
std::vector<std::string> bench_args_for(const std::string& study);
// The value of `--<study>.<flag>` (the last one given), or "" when absent.
std::string study_flag_value(const std::string& study, const std::string& flag);
// --benchmark_repetitions=N among these arguments (1 when absent or unreadable: the bench refuses a bad one).
int repetitions_in(const std::vector<std::string>& args);

}  // namespace kvf::cli
