// Placeholder: `kvf report` (report) is not built yet (issue 6). It says so and exits 2 rather
// than pretending; the slice that builds it replaces this file.
#include <cstdio>

#include "commands.hpp"
#include "kvf/errors.hpp"

namespace kvf::cli {

void add_report(CLI::App& app) {
  auto* sub = app.add_subcommand("report", "not available yet: report (issue 6)");
  sub->allow_extras();
  sub->callback([] {
    std::fprintf(stderr, "kvf report: not available: the report is not built yet (issue 6)\n");
    exit_with(kExitUsage);
  });
}

}  // namespace kvf::cli
