// kvf: the one CLI of the suite. `kvf --help` lists the subcommands.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "run_flags.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "kvf/study_flags.hpp"

namespace kvf::cli {
namespace {
int g_exit = 0;
}
void exit_with(int code) { g_exit = code; }
int pending_exit() { return g_exit; }
}  // namespace kvf::cli

namespace {


void print_error(std::string_view msg) { std::fprintf(stderr, "kvf: error: %s\n", kvf::one_line(msg).c_str()); }

// Reports (gate Markdown, --list, help) go to stdout: a write failure there (`> /dev/full`, a full disk)
// must not end in exit 0 with a truncated file.
int check_stdout(int code) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return code;
  print_error(std::string("stdout: write failed") + (err ? std::string(": ") + std::strerror(err) : std::string{}));
  return code == kvf::kExitOk ? kvf::kExitFailure : code;
}

int run(int argc, char** argv) {
  CLI::App app{"kvf: KV-cache memory microbenchmarks (stream, access, frontier, idleness, remote), attention quality, "
               "a residency simulator, an analytic model, reports and a CI gate"};
  app.set_version_flag("--version", std::string("kvfrontier ") + kvf::suite_version() + " (" + kvf::git_sha() + ")");
  app.require_subcommand(1);
  kvf::cli::add_run(app);
  kvf::cli::add_gate(app);
  kvf::cli::add_metrics(app);
  kvf::cli::add_counters(app);
  kvf::cli::add_report(app);
  kvf::cli::add_model(app);
  kvf::cli::add_residency(app);
  kvf::cli::add_attention(app);
  kvf::refuse_flags_as_values(app);
  try {
    // A first word that names no command: CLI11 would say only "A subcommand is required".
    if (argc > 1 && argv[1][0] != '-') {
      std::string known;
      bool found = false;
      for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
        known += (known.empty() ? "" : ", ") + sub->get_name();
        found = found || sub->get_name() == argv[1];
      }
      if (!found) throw kvf::UsageError("unknown command " + kvf::shown_value(argv[1]) + ": allowed " + known);
    }
    // kvf run's --<study>.<flag> arguments are the benches', not CLI11's (run_flags.hpp).
    std::vector<char*> args = kvf::cli::take_study_flags(argc, argv);
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the bad value; exit 2 for every usage error (CLI11's own codes vary).
    // The help that lists the flag: the command's own (the top level lists no command's flags).
    std::string where = "kvf";
    for (const auto* sub : app.get_subcommands()) where += " " + sub->get_name();
    print_error(std::string(e.what()) + " (see " + where + " --help)");
    return kvf::kExitUsage;
  } catch (const kvf::UsageError& e) {
    print_error(e.what());
    return kvf::kExitUsage;
  } catch (const std::exception& e) {  // a write failure (kvf::WriteError) among them: exit 1
    print_error(e.what());
    return kvf::kExitFailure;
  }
  return kvf::cli::pending_exit();
}

}  // namespace

int main(int argc, char** argv) {
  // Past a file size limit (ulimit -f) a write fails with EFBIG, reported as a write failure, instead of
  // SIGXFSZ killing kvf in the middle of a file.
  std::signal(SIGXFSZ, SIG_IGN);
  return check_stdout(run(argc, argv));
}
