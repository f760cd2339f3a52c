// Placeholder: `kvf counters` (counter re-evaluation) is not built yet (issue 5). It says so and exits 2 rather
// than pretending; the slice that builds it replaces this file.
#include <cstdio>

#include "commands.hpp"
#include "kvf/errors.hpp"

namespace kvf::cli {

void add_counters(CLI::App& app) {
  auto* sub = app.add_subcommand("counters", "not available yet: counter re-evaluation (issue 5)");
  sub->allow_extras();
  sub->callback([] {
    std::fprintf(stderr, "kvf counters: not available: the counter re-evaluation is not built yet (issue 5)\n");
    exit_with(kExitUsage);
  });
}

}  // namespace kvf::cli
