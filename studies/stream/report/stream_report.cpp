// The stream study in the report: no section or claim of its own; it is the ceiling the others are stated
// against (memory bandwidth from op=read, the host link from op=h2d_pinned), and its rows are predicted as
// bytes over memory or over the host link.
#include "kvf/study_report.hpp"

namespace kvf::report {

StudyReport stream_report() {
  StudyReport s;
  s.study = "stream";
  s.arm_column = "op";
  s.terms = {
      {{"zero_copy_read"}, [](Predictor& p) { return p.link(p.g.host_link_gbps, "host link (SM reads)", 0); }},
      {{"launch"}, [](Predictor& p) { return p.none("launch floor: a fixed cost the roofline has no term for"); }},
      {{},
       [](Predictor& p) {
         const std::string& op = p.r.param("op");
         if (op.rfind("h2d", 0) == 0 || op.rfind("d2h", 0) == 0) return p.link(p.g.host_link_gbps, "host link", 1);
         return p.roof(0, "bytes / memory bandwidth");
       }},
  };
  // Memory bandwidth: the better of this read and the idleness study's read_ceiling (rank 0 both); the host link is
  // the frontier's copy-size fit first (rank 0 there).
  s.calibration = {best_row_term("hbm_tbps", 0, "stream", {{"op", "read"}}, false, 1000, true),
                   best_row_term("host_link_gbps", 1, "stream", {{"op", "h2d_pinned"}}, false, 1, true)};
  return s;
}

}  // namespace kvf::report
