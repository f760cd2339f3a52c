// The frontier study in the report: recompute against transfer (section 3), the frontier map (section 4),
// claims 1, 3 and 4, a model term per arm, and the ceilings it measures (GEMM, host link, disk, NVLink).
#include "parts.hpp"

namespace kvf::report {

StudyReport frontier_report() {
  StudyReport s;
  s.study = "frontier";
  s.sections = {{"Recompute against transfer, by tokens per page", frontier::section_frontier},
                {"Frontier map: tokens per page x layers -> cheapest action", frontier::section_map}};
  s.summary = frontier::summary;
  s.verdicts = frontier::verdict_rules();
  s.terms = frontier::model_terms();
  s.calibration = frontier::calibration_terms();
  s.model_note =
      "File-tier rows: reads x disk latency + bytes / disk bandwidth. Overlap rows: max(recompute share, fetch share) + "
      "1 sync, against the sum. Co-run rows: bandwidth sharing, decode bytes / min(alone rate, memory bandwidth - "
      "co-runner bytes/time from its alone row in the same run).";
  return s;
}

}  // namespace kvf::report
