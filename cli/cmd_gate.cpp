// `kvf gate`: compare a current result set with a baseline, or two builds run alternately (--ab, gate_ab.cpp),
// and fail CI only for real regressions. The logic lives in analysis/gate (kvf/gate.hpp); this file is flags,
// output and the exit code.
//   exit 0: no regression, 1: a case is SLOWER (or MISSING with --fail-on-missing), 2: bad input.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "commands.hpp"
#include "gate_ab.hpp"
#include "kvf/errors.hpp"
#include "kvf/gate.hpp"
#include "model_inputs.hpp"
#include "read_limits.hpp"
#include "run_flags.hpp"

namespace kvf::cli {

namespace {

// The run a path names: a results directory, or the directory of its cases.csv / samples.csv / meta.json.
std::filesystem::path run_of(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) p = path;
  const std::string file = p.filename().string();
  if (file == "cases.csv" || file == "samples.csv" || file == "meta.json") p = p.parent_path();
  return p;
}

// Two result sets holding the same samples in every case they share, two or more: one run twice (a copy, perhaps
// with cases dropped or added), whatever the paths say. Independent timings of a case repeat bit for bit only by
// chance (a coarse timer, a few samples), never over several cases at once. Returns the cases shared; 0: no copy.
std::size_t same_samples(const gate::ResultSet& a, const gate::ResultSet& b) {
  std::map<gate::CaseKey, const std::vector<double>*> in_a;
  for (const auto& c : a.cases) in_a.emplace(c.key, &c.samples);
  std::size_t shared = 0;
  for (const auto& c : b.cases) {
    const auto it = in_a.find(c.key);
    if (it == in_a.end() || (it->second->empty() && c.samples.empty())) continue;
    if (*it->second != c.samples) return 0;
    ++shared;
  }
  return shared >= 2 ? shared : 0;
}

// The stored-baseline mode: one or more baseline runs against one current run. A run counted twice (a path given
// twice, a file of a run beside its directory, a copy) would look twice as certain: refused.
gate::GateReport stored_gate(const std::vector<std::string>& baselines, const std::string& current,
                             const gate::GateOptions& opts) {
  std::vector<std::pair<std::filesystem::path, std::string>> seen;
  for (const auto& path : baselines) {
    const auto run = run_of(path);
    for (const auto& [other, given] : seen)
      if (other == run)
        throw UsageError("--baseline " + path + ": the same run as --baseline " + given +
                         " (allowed: each baseline run once)");
    seen.emplace_back(run, path);
  }
  for (const auto& [other, given] : seen)
    if (other == run_of(current))
      throw UsageError("--current " + current + ": the same run as --baseline " + given +
                       " (allowed: a run that is not in the baseline)");
  std::vector<gate::ResultSet> runs;
  for (const auto& b : baselines) {
    try {
      runs.push_back(gate::load_results(b));
    } catch (const UsageError& e) {
      throw UsageError(std::string("--baseline: ") + e.what());
    }
  }
  gate::ResultSet cur;
  try {
    cur = gate::load_results(current);
  } catch (const UsageError& e) {
    throw UsageError(std::string("--current: ") + e.what());
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      if (const std::size_t n = same_samples(runs[j], runs[i]))
        throw UsageError("--baseline " + baselines[i] + ": the same samples as --baseline " + baselines[j] +
                         " in all " + std::to_string(n) +
                         " cases they share (a copy of one run; allowed: each baseline run once)");
    if (const std::size_t n = same_samples(runs[i], cur))
      throw UsageError("--current " + current + ": the same samples as --baseline " + baselines[i] + " in all " +
                       std::to_string(n) + " cases they share (a copy of a baseline run; allowed: a run not in the "
                       "baseline)");
  }
  gate::ResultSet base = gate::merge_runs(std::move(runs));
  return gate::run_gate(base, cur, opts);
}

}  // namespace

void add_gate(CLI::App& app) {
  struct Args {
    std::vector<std::string> baselines;
    std::string current, format = "md";
    double threshold_pct = 5.0;
    gate::GateOptions opts;
    std::vector<std::string> ab_dirs;
    AbOptions ab;
    std::string round_stat = "min";
  };
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "gate",
      "Regression gate: compare --current with --baseline case by case, or (--ab BASE NEW) run two builds' benches "
      "alternately on this machine and compare them round by round; exit 1 only for a significant slowdown "
      "beyond the threshold (docs/gate.md)");
  sub->footer(
      "Stored baselines (kvf gate --baseline A --current B) suit a dedicated runner; on a shared one whole runs "
      "drift by more than a 5% regression, and --ab BASE_BUILD NEW_BUILD cancels that drift: e.g. kvf gate --ab "
      "build-base build --rounds 60 -- --no-cold --size 4MiB (a median of 34 s per gate on a busy 2-core VM, docs/gate.md). Test only: --inject-slowdown REGEX=FRACTION "
      "--allow-fault-injection slows the new build's matching cases, to measure the gate's power (docs/gate.md).");
  sub->add_option("--baseline", args->baselines,
                  "Baseline: a results directory (or its cases.csv / samples.csv), or Google Benchmark JSON "
                  "with --benchmark_repetitions. Repeat it (--baseline A1 --baseline A2 ...) for a baseline of "
                  "several runs (5 on a dedicated runner): the current run's median is then tested against the "
                  "runs' medians (Student's t, runs as the units); one run: its samples (Mann-Whitney U)")
      ->take_all()
      ->expected(1, -1);
  sub->add_option("--current", args->current, "Current results, same forms as --baseline");
  sub->add_option("--ab", args->ab_dirs,
                  "A/B mode: BASE_BUILD NEW_BUILD (build directories holding bin/bench_*, or install prefixes): both "
                  "builds' benches run alternately, round by round in a random balanced order (AB BA ...), on this "
                  "machine; each case is decided on its paired per-round ratios (Wilcoxon signed-rank, Holm over "
                  "cases), so machine drift cancels. Instead of --baseline/--current")
      ->expected(2);
  sub->add_option("--study", args->ab.studies, "With --ab: the studies to run, comma-separated (default stream)")
      ->delimiter(',');
  sub->add_option("--rounds", args->ab.rounds, "With --ab: rounds, each running both builds once; at least 2")
      ->capture_default_str();
  sub->add_option("--seed", args->ab.seed, "With --ab: the seed of the round order (default: drawn, and reported)");
  sub->add_option("--round-stat", args->round_stat,
                  "With --ab: each round's value per case: min (its fastest sample: another job only slows samples "
                  "down) or median")
      ->check(CLI::IsMember({"min", "median"}))
      ->capture_default_str();
  sub->add_flag("--quick", args->ab.quick, "With --ab: run the benches' quick subsets (as kvf run --quick)");
  sub->add_option("--keep-runs", args->ab.keep,
                  "With --ab: keep every round's results directory under DIR (a new or empty directory; default: a "
                  "temporary directory, removed)");
  sub->add_option("--inject-slowdown", args->ab.inject,
                  "TEST ONLY, with --ab and --allow-fault-injection: CASE_REGEX=FRACTION slows the new build's cases "
                  "whose study/case/mode matches by FRACTION (0.05 = 5%) inside their timed region; the report says so");
  sub->add_flag("--allow-fault-injection", args->opts.allow_fault_injection,
                "Allow a test-only fault injection: --inject-slowdown with --ab, or results that carry one (refused "
                "otherwise: they are not measurements)");
  // The flags after "--" reach no CLI11 option: take_study_flags (run_flags.hpp) takes them out first, since
  // CLI11 reads "--" after a list option (--ab A B) as the end of its values and the rest as kvf's own flags.
  sub->add_option("bench_flags", args->ab.pass, "With --ab, after --: flags given to every bench of both builds");
  sub->add_option("--threshold", args->threshold_pct,
                  "Smallest median change (percent) worth failing the build: both modes need the significant change "
                  "itself above it. A trailing % is accepted")
      ->transform([](std::string s) {
        if (!s.empty() && s.back() == '%') s.pop_back();
        return s;
      })
      // The same words as the gate's own check of 0 (verdict.cpp): "must be a percentage > 0".
      ->check(number_in(0.0, 1e6, "a percentage > 0, at most 1000000"))
      ->capture_default_str();
  sub->add_option("--alpha", args->opts.alpha,
                  "Significance level after Holm's correction over the cases: of the one-sided run-level t test "
                  "(stored baselines of 2+ runs; Mann-Whitney U for one run) or signed-rank test (--ab)")
      ->check(number_in(0.0, 1.0, "a level in (0, 1)"))
      ->capture_default_str();
  sub->add_option("--min-samples", args->opts.min_samples,
                  "Every compared case needs at least this many usable (unthrottled) samples on each side; "
                  "fewer is bad input (exit 2)")
      ->check(number_in(2, 1 << 30, "a whole number of samples from 2 to 1073741824", true))
      ->capture_default_str();
  sub->add_option("--filter", args->opts.filter,
                  "Only cases whose study/case/mode matches this regular expression (ECMAScript, searched)");
  sub->add_option("--format", args->format, "Output: md (a pull-request comment) or csv")
      ->check(CLI::IsMember({"md", "csv"}))
      ->capture_default_str();
  sub->add_flag("--fail-on-missing", args->opts.fail_on_missing,
                "Also exit 1 when a baseline case is missing from the current results, or measured in the baseline "
                "and skipped now");
  sub->add_flag("--allow-device-mismatch", args->opts.allow_device_mismatch,
                "Compare even when baseline and current ran on different devices, or pool baseline runs of different "
                "devices (refused otherwise)");
  auto limits = add_read_limit_flags(sub);
  sub->callback([args, limits, sub] {
    limits->apply();
    gate::GateReport report;
    const bool ab = !args->ab_dirs.empty();
    args->ab.pass.insert(args->ab.pass.end(), flags_after_separator().begin(), flags_after_separator().end());
    if (ab && (!args->baselines.empty() || !args->current.empty()))
      throw UsageError("--ab with --baseline/--current: the A/B mode measures both builds itself; give one or the other");
    if (!ab && (args->baselines.empty() || args->current.empty()))
      throw UsageError(std::string(args->baselines.empty() ? "--baseline" : "--current") +
                       " is required (or --ab BASE_BUILD NEW_BUILD)");
    if (!ab)
      for (const char* f : {"--study", "--rounds", "--seed", "--round-stat", "--quick", "--keep-runs", "--inject-slowdown"})
        if (sub->count(f) > 0) throw UsageError(std::string(f) + ": only with --ab BASE_BUILD NEW_BUILD");
    // Each round's samples are the bench's own stop rule's; --min-samples is the stored mode's check of a run.
    if (ab && sub->count("--min-samples") > 0)
      throw UsageError("--min-samples: only with --baseline/--current (with --ab, give the benches theirs after --: "
                       "-- --min-samples N)");
    if (!ab && !args->ab.pass.empty())
      throw UsageError("'" + args->ab.pass.front() + "': kvf gate takes no positional arguments (bench flags after -- "
                       "only with --ab)");
    try {
      args->opts.threshold = args->threshold_pct / 100.0;
      if (ab) {
        args->ab.base_dir = args->ab_dirs[0];
        args->ab.new_dir = args->ab_dirs[1];
        args->ab.seed_given = sub->count("--seed") > 0;
        args->ab.allow_fault_injection = args->opts.allow_fault_injection;
        args->opts.round_stat =
            args->round_stat == "median" ? gate::GateOptions::RoundStat::median : gate::GateOptions::RoundStat::min;
        try {
          report = run_ab(args->ab, args->opts);
        } catch (const AbStopped& s) {
          std::fprintf(stderr, "kvf gate --ab: stopped by signal %d; no verdict\n", s.sig);
          exit_with(128 + s.sig);
          return;
        }
      }
      if (!ab) report = stored_gate(args->baselines, args->current, args->opts);
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
    // The CSV has no place for what the Markdown says above its table (a device mismatch allowed, a one-run
    // baseline, torn rows): said on stderr, one line each, so a CI log keeps them.
    if (args->format == "csv")
      for (const auto& w : report.warnings) std::fprintf(stderr, "kvf gate: warning: %s\n", kvf::one_line(w).c_str());
    std::fprintf(stderr, "%s\n", gate::summary_line(report).c_str());
    exit_with(report.exit_code);
  });
}

}  // namespace kvf::cli
