// kvf run under --device all: a host-only study (its cases run on the CPU backend on every device) measures the
// same host each time, so it runs once, in the first GPU's directory.
#include <algorithm>

#include "run_plan.hpp"

namespace kvf::cli {

void measure_host_studies_once(std::vector<DevicePlan>& plans) {
  for (std::size_t i = 1; i < plans.size(); ++i) {
    DevicePlan& d = plans[i];
    if (d.backend == "cpu") continue;  // a CPU plan runs every study on the CPU: none is host-only there
    auto& s = d.studies;
    for (auto it = s.begin(); it != s.end();)
      if (it->backend == "cpu") {
        d.notes.push_back("kvf run: the " + it->study + " study runs on the CPU backend whatever the device: measured "
                          "once, in " + plans.front().out);
        it = s.erase(it);
      } else {
        ++it;
      }
  }
}

bool runs_on_cpu(const std::vector<DevicePlan>& plans) {
  return std::any_of(plans.begin(), plans.end(), [](const DevicePlan& d) {
    return d.backend == "cpu" ||
           std::any_of(d.studies.begin(), d.studies.end(), [](const StudyPlan& s) { return s.backend == "cpu"; });
  });
}

}  // namespace kvf::cli
