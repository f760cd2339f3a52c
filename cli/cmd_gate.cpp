// `kvf gate`: compare a current result set with a baseline and fail CI only for real regressions.
// The logic lives in analysis/gate (kvf/gate.hpp); this file is flags, output and the exit code.
//   exit 0: no regression, 1: a case is SLOWER (or MISSING with --fail-on-missing), 2: bad input.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "commands.hpp"
#include "kvf/errors.hpp"
#include "kvf/gate.hpp"
#include "read_limits.hpp"

namespace kvf::cli {

void add_gate(CLI::App& app) {
  struct Args {
    std::vector<std::string> baselines;
    std::string current, format = "md";
    double threshold_pct = 5.0;
    gate::GateOptions opts;
  };
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "gate",
      "Regression gate: compare --current with --baseline case by case; exit 1 only for a significant slowdown "
      "beyond the threshold (docs/gate.md)");
  sub->add_option("--baseline", args->baselines,
                  "Baseline: a results directory (or its cases.csv / samples.csv), or Google Benchmark JSON "
                  "with --benchmark_repetitions. Repeat it (--baseline A1 --baseline A2 ...) for a baseline of "
                  "several runs: samples are pooled and how far whole runs moved widens the noise floor")
      ->required()
      ->take_all()
      ->expected(1, -1);
  sub->add_option("--current", args->current, "Current results, same forms as --baseline")->required();
  sub->add_option("--threshold", args->threshold_pct,
                  "Smallest median change (percent) that can fail the build; a trailing % is accepted")
      ->transform([](std::string s) {
        if (!s.empty() && s.back() == '%') s.pop_back();
        return s;
      })
      ->check(CLI::Range(0.0, 1e6).description("PCT > 0"))
      ->capture_default_str();
  sub->add_option("--alpha", args->opts.alpha, "Significance level of the two-sided Mann-Whitney U test")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--min-samples", args->opts.min_samples,
                  "Every compared case needs at least this many usable (unthrottled) samples on each side; "
                  "fewer is bad input (exit 2)")
      ->check(CLI::Range(2, 1 << 30))
      ->capture_default_str();
  sub->add_option("--filter", args->opts.filter,
                  "Only cases whose study/case/mode matches this regular expression (ECMAScript, searched)");
  sub->add_option("--format", args->format, "Output: md (a pull-request comment) or csv")
      ->check(CLI::IsMember({"md", "csv"}))
      ->capture_default_str();
  sub->add_flag("--fail-on-missing", args->opts.fail_on_missing,
                "Also exit 1 when a baseline case is missing from the current results");
  sub->add_flag("--allow-device-mismatch", args->opts.allow_device_mismatch,
                "Compare even when baseline and current ran on different devices (refused otherwise)");
  auto limits = add_read_limit_flags(sub);
  sub->callback([args, limits] {
    limits->apply();
    gate::GateReport report;
    try {
      args->opts.threshold = args->threshold_pct / 100.0;
      gate::ResultSet base, cur;
      std::vector<gate::ResultSet> runs;
      for (const auto& b : args->baselines) {
        try {
          runs.push_back(gate::load_results(b));
        } catch (const UsageError& e) {
          throw UsageError(std::string("--baseline: ") + e.what());
        }
      }
      base = gate::merge_runs(std::move(runs));
      try {
        cur = gate::load_results(args->current);
      } catch (const UsageError& e) {
        throw UsageError(std::string("--current: ") + e.what());
      }
      report = gate::run_gate(base, cur, args->opts);
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      // Exit 1 means "regression" to CI; anything else that stops the gate is bad input.
      throw UsageError(std::string("gate: ") + e.what());
    }
    const std::string out =
        args->format == "csv" ? gate::format_csv(report) : gate::format_markdown(report, args->opts);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", gate::summary_line(report).c_str());
    exit_with(report.exit_code);
  });
}

}  // namespace kvf::cli
