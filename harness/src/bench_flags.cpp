// The command line of a bench binary: the harness's flags (--out, --backend, --quick, --list, measurement
// limits), the study's own, and the Google Benchmark flags it passes through.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "bench_detail.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "kvf/study_flags.hpp"

namespace kvf {

namespace {
// A flag given without its value takes the next word as it ("--contexts --parts attention"); say that, rather than
// judging "--parts" as a context. No value of a study flag starts with "--" and a letter.
const CLI::Validator kNotAFlag(
    [](std::string& v) -> std::string {
      if (v.size() > 2 && v[0] == '-' && v[1] == '-' && std::isalpha(static_cast<unsigned char>(v[2])))
        return "no value given (the next word, " + v + ", is a flag)";
      return {};
    },
    "", "not a flag");
}  // namespace

void refuse_flags_as_values(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    // First, before the option's own checks (transform puts it at the front): "--alpha --rounds 5" is a value
    // forgotten, not "'--rounds' is not a number".
    if (!o->get_lnames().empty() && o->get_expected_min() > 0) o->transform(kNotAFlag);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_flags_as_values(*sub);
}

void StudyFlags::text(const std::string& name, std::string& value, const std::string& help) {
  app_->add_option(name, value, help);
}
void StudyFlags::list(const std::string& name, std::vector<std::string>& values, const std::string& help) {
  app_->add_option(name, values, help)->delimiter(',');
}
void StudyFlags::flag(const std::string& name, bool& on, const std::string& help) { app_->add_flag(name, on, help); }
void StudyFlags::footer(const std::string& text) { app_->footer(text); }
bool StudyFlags::given(const std::string& name) const { return app_ && app_->count(name) > 0; }

bool parse_own_flags(int argc, char** argv, const std::function<void(StudyFlags&)>& declare) {
  CLI::App app;
  StudyFlags flags(app);
  declare(flags);
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    return false;
  }
  return true;
}

}  // namespace kvf

namespace kvf::bench {

namespace {
constexpr std::size_t kMaxFilterChars = 1000;  // std::regex compiles recursively: a huge pattern overflows the stack

std::string fmt_bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

// A number in [lo, hi], all of the text (no hex, no sign prefix, no trailing unit); NaN and infinities
// are refused here because a range check (v < lo || v > hi) lets NaN through.
std::optional<double> parse_number_in(std::string_view v, double lo, double hi, bool whole) {
  if (whole) {
    long long x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc{} || p != v.data() + v.size() || v.empty()) return std::nullopt;
    if (static_cast<double>(x) < lo || static_cast<double>(x) > hi) return std::nullopt;
    return static_cast<double>(x);
  }
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x, std::chars_format::general);
  if (ec != std::errc{} || p != v.data() + v.size() || v.empty() || !std::isfinite(x) || x < lo || x > hi)
    return std::nullopt;
  return x;
}
std::string range_text(double lo, double hi, bool whole, const char* unit) {
  return std::string(whole ? "a whole number" : "a number") + " in [" + fmt_bound(lo) + ", " + fmt_bound(hi) + "]" +
         (unit && *unit ? std::string(" ") + unit : std::string{});
}
// CLI11 prefixes the flag: "--budget: 'nan' is not a number in [0.001, 3600] seconds".
CLI::Validator number_in(double lo, double hi, bool whole, const char* unit = "") {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        if (parse_number_in(v, lo, hi, whole)) return {};
        return "'" + v + "' is not " + range_text(lo, hi, whole, unit);
      },
      range_text(lo, hi, whole, unit));
}
CLI::Validator non_empty(const char* what) {
  return CLI::Validator(
      [what](std::string& v) -> std::string { return v.empty() ? std::string("'' is empty; give ") + what : std::string{}; },
      "");
}

// --benchmark_repetitions=N, the one Google Benchmark flag bench_main reads itself (a row per repetition).
constexpr int kMaxRepetitions = 1000;
std::optional<int> repetitions_flag(int argc, char** argv, std::string* bad) {
  int reps = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--benchmark_repetitions=", 24) != 0) continue;
    const auto v = parse_number_in(a + 24, 1, kMaxRepetitions, true);
    if (!v) {
      *bad = std::string("--benchmark_repetitions '") + (a + 24) + "' is not " +
             range_text(1, kMaxRepetitions, true, "");
      return std::nullopt;
    }
    reps = static_cast<int>(*v);
  }
  return reps;
}

// Google Benchmark's reading of a boolean flag's value (IsTruthyFlagValue): a bare flag is true.
bool benchmark_truthy(const std::string& v) {
  if (v.size() == 1) {
    const char c = v[0];
    return std::isalnum(static_cast<unsigned char>(c)) && std::string_view("0fFnN").find(c) == std::string_view::npos;
  }
  std::string lower;
  for (const char c : v) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v.empty() || !(lower == "false" || lower == "no" || lower == "off");
}

// Random interleaving (the flag, or Google Benchmark's environment variable for it) shuffles every case's cold and
// hot runs across cases. A study's cases share buffers that each case's setup prepares in registration order (the
// access study's K/V: one shape at a time), so a shuffled order would time a case on another's buffers: refused.
std::string refuse_random_interleaving(int argc, char** argv) {
  constexpr std::string_view key = "--benchmark_enable_random_interleaving";
  std::string given;
  if (const char* e = std::getenv("BENCHMARK_ENABLE_RANDOM_INTERLEAVING"); e && benchmark_truthy(e))
    given = std::string("BENCHMARK_ENABLE_RANDOM_INTERLEAVING=") + e;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.substr(0, key.size()) != key || (a.size() > key.size() && a[key.size()] != '=')) continue;
    const std::string value = a.size() > key.size() ? std::string(a.substr(key.size() + 1)) : std::string();
    given = benchmark_truthy(value) ? std::string(a) : std::string();
  }
  if (given.empty()) return {};
  return given + ": not supported: the cases of a study share buffers that each case's setup prepares in "
                 "registration order, so a shuffled order would time a case on another's buffers; repeat with "
                 "--benchmark_repetitions=N, alternate two builds with kvf gate --ab";
}

// Google Benchmark's output flags, checked before it sees them: a format it does not know makes it print its usage
// and exit 0 (a CI job would pass having measured nothing), --benchmark_list_tests lists and measures nothing the
// same way, and an --benchmark_out it cannot open fails after the results directory exists (left "running").
// Returns the refusal, "" when fine.
std::string check_benchmark_output_flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const std::size_t eq = a.find('=');
    const std::string_view key = a.substr(0, eq), value = eq == std::string_view::npos ? "" : a.substr(eq + 1);
    if (key == "--benchmark_list_tests")
      return std::string(a) + ": not supported: it lists and measures nothing; --list prints this bench's cases";
    if (key == "--benchmark_format" || key == "--benchmark_out_format") {
      if (value != "json" && value != "console" && value != "csv")
        return std::string(key) + "=" + std::string(value) + ": allowed json, console, csv";
    }
    if (key == "--benchmark_out") {
      const std::string typed = "--benchmark_out=" + std::string(value);
      if (value.empty()) return typed + ": expected a file name";
      if (const std::string problem = out_file_problem(std::string(value)); !problem.empty())
        return typed + ": " + problem;
      // Google Benchmark opens the file itself for writing (no rename over it): an existing one must be writable.
      if (std::filesystem::exists(std::string(value)) && ::access(std::string(value).c_str(), W_OK) != 0)
        return typed + ": not writable (allowed: a file in a writable directory)";
    }
  }
  return {};
}

// --benchmark_filter=RE is the harness's (Flags::benchmark_filter): taken out of argv before Google Benchmark
// sees it, which would otherwise drop every case that does not match, the ceilings included, and leave
// percent-of-ceiling empty without a word. Returns the refusal, "" when fine.
std::string take_benchmark_filter(int* argc, char** argv, Flags& f) {
  constexpr std::string_view key = "--benchmark_filter=";
  int out = 1;
  bool given = false;
  for (int i = 1; i < *argc; ++i) {
    const std::string_view a = argv[i];
    if (a.substr(0, key.size()) != key) {
      argv[out++] = argv[i];
      continue;
    }
    f.benchmark_filter = std::string(a.substr(key.size()));
    given = true;
  }
  *argc = out;
  argv[out] = nullptr;
  if (!given) return {};
  std::string re = f.benchmark_filter;
  f.benchmark_filter_negative = !re.empty() && re.front() == '-';
  if (f.benchmark_filter_negative) re.erase(0, 1);
  if (re.empty()) return "--benchmark_filter '" + f.benchmark_filter + "': empty; give a regular expression (leave the flag out for every case)";
  if (re.size() > kMaxFilterChars)
    return "--benchmark_filter: " + std::to_string(re.size()) + " characters; at most " + std::to_string(kMaxFilterChars);
  try {
    f.benchmark_filter_re = std::regex(re);
  } catch (const std::regex_error& e) {
    return "--benchmark_filter '" + f.benchmark_filter + "': not a valid regular expression (" + e.what() + ")";
  }
  return {};
}

// Google Benchmark prints its own complaint about a bad --benchmark_* value (and leaves the flag for us
// to refuse again): capture what it says while it parses, so the user gets one line.
std::string initialize_benchmark(int* argc, char** argv) {
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int cap = ::memfd_create("kvf-benchmark-init", MFD_CLOEXEC);
  if (saved < 0 || cap < 0 || ::dup2(cap, 2) < 0) {
    if (saved >= 0) ::close(saved);
    if (cap >= 0) ::close(cap);
    benchmark::Initialize(argc, argv);
    return {};
  }
  benchmark::Initialize(argc, argv);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string said;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = ::pread(cap, buf, sizeof buf, off)) > 0 && said.size() < 64 * 1024) {
    said.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  ::close(cap);
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  return said;
}

// --inject-slowdown CASE_REGEX=FRACTION: "" when absent or fine, else the one line that refuses it.
std::string parse_injection(Flags& f) {
  if (f.inject_text.empty()) return {};
  const std::string typed = "--inject-slowdown " + f.inject_text;
  if (!f.allow_fault_injection)
    return typed + ": a test-only fault injection (docs/gate.md), refused without --allow-fault-injection";
  const std::size_t eq = f.inject_text.rfind('=');
  if (eq == std::string::npos || eq == 0)
    return typed + ": expected CASE_REGEX=FRACTION, e.g. 'read/.*/hot=0.05'";
  const std::string re = f.inject_text.substr(0, eq);
  if (re.size() > kMaxFilterChars) return typed.substr(0, 40) + "...: the regex has more than 1000 characters";
  const auto frac = parse_number_in(std::string_view(f.inject_text).substr(eq + 1), 1e-6, 10.0, false);
  if (!frac) return typed + ": FRACTION must be a number in [1e-06, 10] (0.05 slows by 5%)";
  try {
    f.inject_re = std::regex(re);
  } catch (const std::regex_error& e) {
    return typed + ": '" + re + "' is not a valid regular expression (" + e.what() + ")";
  }
  f.inject_fraction = *frac;
  return {};
}

}  // namespace

std::optional<int> parse_flags(int* argc, char** argv, Study& study, const std::string& prog, CLI::App& app, Flags& f) {
  app.add_option("--out", f.out_dir, "results directory; created, rows appended (default results/runs/<utc>-<study>)")
      ->check(non_empty("a directory (leave the flag out for the default)"));
  app.add_option("--backend", f.backend_choice, "auto | cpu | cuda (auto: CUDA when a usable GPU is present)")
      ->check(non_empty("auto, cpu or cuda"));
  app.add_option("--device", f.device_text,
                 "cpu, or a GPU ordinal among the visible GPUs (CUDA_VISIBLE_DEVICES applies; default 0 under cuda); "
                 "recorded in meta.json. For every GPU in turn: kvf run --device all")
      ->check(non_empty("cpu or a GPU ordinal (leave the flag out for the default)"));
  app.add_flag("--quick", f.quick, "the quick subset: a few cases, seconds (budget 0.1 s unless --budget is given)");
  app.add_option("--list", f.list_format, "print the cases (text or json) with estimated seconds and exit")
      ->expected(0, 1)
      ->default_str("text")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "text" || v == "json" ? std::string{} : "'" + v + "': allowed formats are text and json";
          },
          "text|json"));
  app.add_option("--plan-device", f.plan_device,
                 "with --list: the cases and estimates a run would have on the device described in this file (a "
                 "results directory's meta.json, or its \"device\" object), e.g. a GPU run planned on a laptop")
      ->check(non_empty("a meta.json file (leave the flag out to list for this machine)"));
  app.add_option("--case-filter", f.case_filter,
                 "only cases whose name matches this regular expression (and the cases of this study that "
                 "measure their ceilings)")
      ->check(non_empty("a regular expression (leave the flag out for every case)"))
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v.size() <= kMaxFilterChars ? std::string{}
                                               : std::to_string(v.size()) + " characters; at most " +
                                                     std::to_string(kMaxFilterChars);
          },
          ""));
  app.add_option("--warmup", f.cfg.warmup, "untimed executions before each mode's samples (default 2)")
      ->check(number_in(0, 1000, true));
  app.add_option("--min-samples", f.cfg.stop.min_samples, "samples per mode at least (default 5)")
      ->check(number_in(1, 1000000, true));
  app.add_option("--max-samples", f.cfg.stop.max_samples, "samples per mode at most (default 1000)")
      ->check(number_in(1, 1000000, true));
  app.add_option("--noise", f.noise_pct,
                 "stop when the relative standard error of the mean is at most this, percent (default 1)")
      ->check(number_in(0.001, 100.0, false, "percent"));
  app.add_option("--budget", f.cfg.stop.budget_s, "seconds of samples per case and mode at most (default 0.5)")
      ->check(number_in(0.001, 3600.0, false, "seconds"));
  app.add_flag("--profile", f.profile,
               "for a profiler (ncu, nsys, perf): one warm-up and one timed execution per case and mode, NVTX "
               "ranges as in a measurement; the rows say \"profile\" and are not scored by kvf report or gate");
  app.add_option("--inject-slowdown", f.inject_text,
                 "TEST ONLY (docs/gate.md): CASE_REGEX=FRACTION slows every study/case/mode the regex finds by "
                 "FRACTION (0.05: 5%), a busy wait inside the timed region proportional to the region's own time; "
                 "refused without --allow-fault-injection; the rows and meta.json say so; cpu backend only");
  app.add_flag("--allow-fault-injection", f.allow_fault_injection,
               "let --inject-slowdown slow this run (for measuring the gate's power; never for real results)");
  app.add_flag("--no-cold", f.no_cold, "skip cold samples (caches flushed before each)");
  app.add_flag("--no-hot", f.no_hot, "skip hot samples");
  StudyFlags study_flags(app);
  study.add_options(study_flags);

  // Our help first: Google Benchmark would print only its own.
  for (int i = 1; i < *argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s", app.help().c_str());
      if (const std::string failed = stdout_failure(); !failed.empty()) {
        print_error(prog, failed);
        return kExitFailure;
      }
      return kExitOk;
    }

  std::string bad_reps;
  const auto reps_flag = repetitions_flag(*argc, argv, &bad_reps);
  if (!reps_flag) {
    print_error(prog, bad_reps);
    return kExitUsage;
  }
  f.reps = *reps_flag;
  if (const std::string bad = refuse_random_interleaving(*argc, argv); !bad.empty()) {
    print_error(prog, bad);
    return kExitUsage;
  }
  if (const std::string bad = take_benchmark_filter(argc, argv, f); !bad.empty()) {
    print_error(prog, bad);
    return kExitUsage;
  }
  if (const std::string bad = check_benchmark_output_flags(*argc, argv); !bad.empty()) {
    print_error(prog, bad);
    return kExitUsage;
  }
  // Takes the --benchmark_* flags it knows out of argv; one it cannot parse stays there for CLI11 to refuse.
  const std::string benchmark_said = initialize_benchmark(argc, argv);
  refuse_flags_as_values(app);  // the harness's flags and the study's alike
  try {
    app.parse(*argc, argv);
  } catch (const CLI::ParseError& e) {
    // Exactly one line: CLI11's message (what it names may hold a line break) and Google Benchmark's
    // complaint about the same flag when it had one.
    std::string msg = e.what();
    if (!benchmark_said.empty()) msg += " (" + benchmark_said + ")";
    print_error(prog, msg + " (see " + prog + " --help)");
    return kExitUsage;
  }
  if (!benchmark_said.empty()) {  // it complained but took the flag after all: still one line, still refused
    print_error(prog, benchmark_said);
    return kExitUsage;
  }
  if (f.cfg.stop.min_samples > f.cfg.stop.max_samples) {
    print_error(prog, "--min-samples " + std::to_string(f.cfg.stop.min_samples) + " exceeds --max-samples " +
                          std::to_string(f.cfg.stop.max_samples));
    return kExitUsage;
  }
  if (f.no_cold && f.no_hot) {
    std::fprintf(stderr, "%s: error: --no-cold and --no-hot together leave nothing to measure\n", prog.c_str());
    return kExitUsage;
  }
  f.listing = app.count("--list") > 0;
  // A bare --list reads as "text" (its default); an empty value given on purpose does not reach the validator.
  if (f.listing && f.list_format != "text" && f.list_format != "json") {
    print_error(prog, "--list '" + f.list_format + "': allowed formats are text and json");
    return kExitUsage;
  }
  if (!f.plan_device.empty() && !f.listing) {
    print_error(prog, "--plan-device " + f.plan_device + ": plans a run, it measures nothing; give --list too");
    return kExitUsage;
  }
  if (app.count("--device") > 0) {
    try {
      f.device = parse_device(f.device_text, /*all_allowed=*/false);
    } catch (const UsageError& e) {
      print_error(prog, e.what());
      return kExitUsage;
    }
    if (!f.plan_device.empty()) {
      print_error(prog, "--plan-device with --device " + f.device_text + ": the device is the one the file describes");
      return kExitUsage;
    }
  }
  if (!f.plan_device.empty() && app.count("--backend") > 0) {
    print_error(prog, "--plan-device with --backend " + f.backend_choice + ": the backend is the one the file describes");
    return kExitUsage;
  }
  // checked before the backend starts: a typo should not cost a device probe
  if (!f.case_filter.empty()) {
    try {
      f.filter_re = std::regex(f.case_filter);
    } catch (const std::regex_error& e) {
      print_error(prog, "--case-filter '" + f.case_filter + "': not a valid regular expression (" + e.what() + ")");
      return kExitUsage;
    }
  }
  if (f.profile) {
    for (const char* sized : {"--warmup", "--min-samples", "--max-samples", "--budget", "--noise"})
      if (app.count(sized) > 0) {
        print_error(prog, std::string("--profile with ") + sized + ": a profile run is one warm-up and one execution; leave " +
                              sized + " out");
        return kExitUsage;
      }
    if (f.reps > 1) {
      print_error(prog, "--profile with --benchmark_repetitions=" + std::to_string(f.reps) +
                            ": a profile run executes each case once; leave one of them out");
      return kExitUsage;
    }
    f.cfg.warmup = 1;
    f.cfg.stop.min_samples = f.cfg.stop.max_samples = 1;
  }
  if (const std::string bad = parse_injection(f); !bad.empty()) {
    print_error(prog, bad);
    return kExitUsage;
  }
  f.cfg.stop.target_rel_error = f.noise_pct / 100.0;
  // --quick is a smoke run: a shorter budget unless one was asked for. It is also what CI gates on (README),
  // so the budget never leaves it fewer samples than `kvf gate` needs by default, on any LLC size.
  if (f.quick && app.count("--budget") == 0) f.cfg.stop.budget_s = kQuickBudgetS;
  if (f.quick) f.cfg.stop.budget_min_samples = StopRule{}.min_samples;
  return std::nullopt;
}

}  // namespace kvf::bench
