// Internal to kvf_report_frontier: the parts frontier_report.cpp puts into the study's StudyReport.
#pragma once
#include <string>
#include <vector>

#include "kvf/study_report.hpp"

namespace kvf::report::frontier {

std::string section_frontier(ReportContext& cx);  // 3. recompute against transfer, by tokens per page
std::string section_map(ReportContext& cx);       // 4. the frontier map
std::string summary(ReportContext& cx);           // page one: the map in a line per reuse probability
std::vector<VerdictRule> verdict_rules();         // claims 1, 3, 4
std::vector<ModelTerm> model_terms();             // every frontier arm
std::vector<CalibrationTerm> calibration_terms(); // GEMM ceiling, host link fit, disk, NVLink

}  // namespace kvf::report::frontier
