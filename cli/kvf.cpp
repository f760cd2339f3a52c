// kvf: the one CLI of the suite. `kvf --help` lists the subcommands.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"

namespace kvf::cli {
namespace {
int g_exit = 0;
}
void exit_with(int code) { g_exit = code; }
int pending_exit() { return g_exit; }
}  // namespace kvf::cli

int main(int argc, char** argv) {
  CLI::App app{"kvf: KV-cache memory microbenchmarks (access, frontier, idleness), reports and a CI gate"};
  app.set_version_flag("--version", std::string("kvfrontier ") + kvf::suite_version() + " (" + kvf::git_sha() + ")");
  app.require_subcommand(1);
  kvf::cli::add_run(app);
  kvf::cli::add_gate(app);
  kvf::cli::add_metrics(app);
  kvf::cli::add_counters(app);
  kvf::cli::add_report(app);
  kvf::cli::add_model(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the bad value; exit 2 for every usage error (CLI11's own codes vary).
    std::fprintf(stderr, "kvf: error: %s (see kvf --help)\n", e.what());
    return kvf::kExitUsage;
  } catch (const kvf::UsageError& e) {
    std::fprintf(stderr, "kvf: error: %s\n", e.what());
    return kvf::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvf: error: %s\n", e.what());
    return kvf::kExitFailure;
  }
  return kvf::cli::pending_exit();
}
