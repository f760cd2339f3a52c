// Placeholder: `kvf metrics` (CUPTI metric sets) is not built yet (issue 5). It says so and exits 2 rather
// than pretending; the slice that builds it replaces this file.
#include <cstdio>

#include "commands.hpp"
#include "kvf/errors.hpp"

namespace kvf::cli {

void add_metrics(CLI::App& app) {
  auto* sub = app.add_subcommand("metrics", "not available yet: CUPTI metric sets (issue 5)");
  sub->allow_extras();
  sub->callback([] {
    std::fprintf(stderr, "kvf metrics: not available: the CUPTI metric sets is not built yet (issue 5)\n");
    exit_with(kExitUsage);
  });
}

}  // namespace kvf::cli
