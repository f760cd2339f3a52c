// Internal to kvf_report_core: the pieces render.cpp puts together.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "kvf/study_report.hpp"

namespace kvf::report {
namespace fs = std::filesystem;
}  // namespace kvf::report

namespace kvf::report::detail {

bool has_points(const Plot& p);  // a series (not only reference lines) has a point
bool safe_stem(const std::string& name);  // [A-Za-z0-9_-], 1 to kMaxChartName characters
// Writes a new file at `path`: whatever is there is unlinked first, then O_EXCL | O_NOFOLLOW. A write failure
// is std::runtime_error (exit 1), not bad input.
void write_new_file(const fs::path& path, const std::string& text);
// NAME.dat and NAME.gp of `p` in `dir` (std::logic_error when the name is not a plain file stem).
void write_plot(const Plot& p, const fs::path& dir);
// Runs gnuplot in `dir` on `gp`; output to gnuplot.log. Returns "" or why it failed.
std::string run_gnuplot(const std::string& gnuplot, const fs::path& dir, const std::string& gp);

// Every plug-in's verdicts with the rule that gave each: rules by number (stable: the study list's order on
// ties), each over the directories in command-line order.
struct Judged {
  const VerdictRule* rule;
  Verdict verdict;
};
std::vector<Judged> judge_all(const StudyReports& studies, const std::vector<ResultSet>& sets);

}  // namespace kvf::report::detail
