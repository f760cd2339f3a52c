// Placeholder: `kvf gate` (regression gate) is not built yet (issue 7). It says so and exits 2 rather
// than pretending; the slice that builds it replaces this file.
#include <cstdio>

#include "commands.hpp"
#include "kvf/errors.hpp"

namespace kvf::cli {

void add_gate(CLI::App& app) {
  auto* sub = app.add_subcommand("gate", "not available yet: regression gate (issue 7)");
  sub->allow_extras();
  sub->callback([] {
    std::fprintf(stderr, "kvf gate: not available: the regression gate is not built yet (issue 7)\n");
    exit_with(kExitUsage);
  });
}

}  // namespace kvf::cli
