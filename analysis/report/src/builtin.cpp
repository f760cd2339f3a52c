// The entry points of kvf/report.hpp that use this build's plug-ins (study_reports(), generated from the
// study list): what `kvf report`, `kvf model` and the tests call.
#include <filesystem>

#include "kvf/input.hpp"
#include "kvf/study_report.hpp"

namespace kvf::report {

std::vector<std::string> calibrate(GpuSpec& g, const ResultSet& rs, bool host_tiers_only) {
  return calibrate(study_reports(), g, rs, host_tiers_only);
}

GpuSpec spec_from_results(const ResultSet& rs, const std::vector<GpuSpec>& gpus) {
  return spec_from_results(study_reports(), rs, gpus);
}

std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why, const ResultSet* run,
                                  const std::vector<Shape>* shapes) {
  if (!run) return predict_row(study_reports(), g, r, why, nullptr, shapes);
  const RunIndex index(*run);
  return predict_row(study_reports(), g, r, why, &index, shapes);
}

std::optional<double> predict_row(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex& run,
                                  const std::vector<Shape>* shapes) {
  return predict_row(study_reports(), g, r, why, &run, shapes);
}

std::vector<Verdict> verdicts(const std::vector<ResultSet>& sets) { return verdicts(study_reports(), sets); }

std::vector<ResultSet> load_report_inputs(const std::vector<std::string>& dirs) {
  return load_all(dirs, [](const std::string& dir) {
    if (!input_exists(std::filesystem::path(dir) / "cases.csv"))
      for (const auto& st : study_reports())
        if (st.own_directory)
          if (auto rs = st.own_directory(dir)) return std::move(*rs);
    return load_results(dir);
  });
}

std::string render_markdown(const std::vector<ResultSet>& sets, const ReportOptions& o,
                            const std::vector<std::string>& chart_notes) {
  return render_markdown(study_reports(), sets, o, chart_notes);
}

ReportResult write_report(const std::vector<ResultSet>& sets, const ReportOptions& o) {
  return write_report(study_reports(), sets, o);
}

}  // namespace kvf::report
