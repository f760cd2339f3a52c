// bench_main: everything a bench binary does besides defining its cases.
//
// Google Benchmark drives the run: one registered benchmark per (case, mode), manual time, one
// iteration whose time is the median of our own samples (so --benchmark_out JSON carries medians
// for compare.py). Our measurement loop (measure.hpp) takes the samples; KvfReporter, a pluggable
// Google Benchmark reporter, writes each finished case to the results directory and then lets the
// console reporter print it.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <thread>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/measure.hpp"
#include "kvf/nvtx.hpp"
#include "kvf/results.hpp"
#include "kvf/study.hpp"

namespace kvf {

namespace {
// The 1-minute load average (/proc/loadavg), or -1 where unreadable.
double load_average_1m() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  if (!(in >> l)) return -1;
  return l;
}
// What a reader needs to judge a shared machine: the load and the OpenMP wait policy the process started with
// (libgomp reads it at load time; spinning workers of an idle team take cores from other threads on a loaded box).
nlohmann::json machine_load_json() {
  auto env = [](const char* n) -> nlohmann::json {
    const char* v = std::getenv(n);
    return v ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  return {{"loadavg_1m", load_average_1m()},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"OMP_WAIT_POLICY", env("OMP_WAIT_POLICY")},
          {"GOMP_SPINCOUNT", env("GOMP_SPINCOUNT")},
          {"OMP_NUM_THREADS", env("OMP_NUM_THREADS")}};
}

class SkippedCase final : public Case {
 public:
  std::string reason;
  void run(Backend&) override {}
};

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

constexpr std::size_t kMaxFilterChars = 1000;  // std::regex compiles recursively: a huge pattern overflows the stack

std::string default_out_dir(const std::string& study) {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
  return "results/runs/" + std::string(buf) + "-" + study;
}

std::string os_name() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      auto v = line.substr(12);
      v.erase(std::remove(v.begin(), v.end(), '"'), v.end());
      return v;
    }
  return "unknown";
}

std::string join_args(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s.push_back(' ');
    s += argv[i];
  }
  return s;
}

std::string fmt_eta(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

void print_error(const std::string& prog, const std::string& msg) {
  std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), one_line(msg).c_str());
}

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

// stdout carries the console table and --list: a failed write there (a full disk, `> /dev/full`) is
// an error of the run, said on stderr, not an abort and not a silent exit 0.
std::string stdout_failure() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return {};
  return std::string("stdout: write failed") + (err ? std::string(": ") + std::strerror(err) : std::string{});
}

struct Pending {
  CaseRecord rec;
  std::vector<Sample> samples;
};

// Writes finished cases (rows are flushed as each case ends), then prints through the console reporter.
class KvfReporter final : public benchmark::ConsoleReporter {
 public:
  KvfReporter(ResultsDir& dir, std::map<std::string, std::vector<Pending>>& pending)
      : ConsoleReporter(isatty(1) ? OO_ColorTabular : OO_Tabular), dir_(dir), pending_(pending) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      flush(r.run_name.function_name);  // the registered name, without "/iterations:1/manual_time"
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void flush(const std::string& name) {
    auto it = pending_.find(name);
    if (it == pending_.end()) return;
    for (auto& p : it->second) dir_.write_case(p.rec, p.samples);
    pending_.erase(it);
  }
  void flush_all() {
    while (!pending_.empty()) flush(pending_.begin()->first);
  }

 private:
  ResultsDir& dir_;
  std::map<std::string, std::vector<Pending>>& pending_;
};

}  // namespace

std::unique_ptr<Case> skipped_case(std::string name, std::vector<Param> params, std::string reason) {
  auto c = std::make_unique<SkippedCase>();
  c->name = std::move(name);
  c->params = std::move(params);
  c->reason = std::move(reason);
  c->est_seconds = 0;
  return c;
}

namespace {

int run_study(int argc, char** argv, Study& study) {
  // Before any other thread exists (OpenMP, CUDA): they inherit the blocked termination signals.
  guard_termination_signals();
  // Past a file size limit (ulimit -f) a write fails with EFBIG, which the writers report, instead of
  // SIGXFSZ killing the process in the middle of a row.
  ::signal(SIGXFSZ, SIG_IGN);
  const std::string prog = "bench_" + study.name();
  const std::string command = join_args(argc, argv);

  std::string out_dir, backend_choice = "auto", case_filter, list_format;
  bool quick = false, no_cold = false, no_hot = false;
  double noise_pct = 1.0;
  MeasureConfig cfg;
  CLI::App app{prog + ": the " + study.name() +
               " study of kvfrontier. Google Benchmark flags (--benchmark_filter, --benchmark_out=FILE "
               "--benchmark_out_format=json, --benchmark_repetitions) are accepted too."};
  app.add_option("--out", out_dir, "results directory; created, rows appended (default results/runs/<utc>-<study>)")
      ->check(non_empty("a directory (leave the flag out for the default)"));
  app.add_option("--backend", backend_choice, "auto | cpu | cuda (auto: CUDA when a usable GPU is present)")
      ->check(non_empty("auto, cpu or cuda"));
  app.add_flag("--quick", quick, "the quick subset: a few cases, seconds (budget 0.1 s unless --budget is given)");
  app.add_option("--list", list_format, "print the cases (text or json) with estimated seconds and exit")
      ->expected(0, 1)
      ->default_str("text")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "text" || v == "json" ? std::string{} : "'" + v + "': allowed formats are text and json";
          },
          "text|json"));
  app.add_option("--case-filter", case_filter,
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
  app.add_option("--warmup", cfg.warmup, "untimed executions before each mode's samples (default 2)")
      ->check(number_in(0, 1000, true));
  app.add_option("--min-samples", cfg.stop.min_samples, "samples per mode at least (default 5)")
      ->check(number_in(1, 1000000, true));
  app.add_option("--max-samples", cfg.stop.max_samples, "samples per mode at most (default 1000)")
      ->check(number_in(1, 1000000, true));
  app.add_option("--noise", noise_pct,
                 "stop when the relative standard error of the mean is at most this, percent (default 1)")
      ->check(number_in(0.001, 100.0, false, "percent"));
  app.add_option("--budget", cfg.stop.budget_s, "seconds of samples per case and mode at most (default 0.5)")
      ->check(number_in(0.001, 3600.0, false, "seconds"));
  app.add_flag("--no-cold", no_cold, "skip cold samples (caches flushed before each)");
  app.add_flag("--no-hot", no_hot, "skip hot samples");
  study.add_options(app);

  // Our help first: Google Benchmark would print only its own.
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s", app.help().c_str());
      if (const std::string f = stdout_failure(); !f.empty()) {
        print_error(prog, f);
        return kExitFailure;
      }
      return kExitOk;
    }

  std::string bad_reps;
  const auto reps_flag = repetitions_flag(argc, argv, &bad_reps);
  if (!reps_flag) {
    print_error(prog, bad_reps);
    return kExitUsage;
  }
  const int reps = *reps_flag;
  // Takes the --benchmark_* flags it knows out of argv; one it cannot parse stays there for CLI11 to refuse.
  const std::string benchmark_said = initialize_benchmark(&argc, argv);
  try {
    app.parse(argc, argv);
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
  if (cfg.stop.min_samples > cfg.stop.max_samples) {
    print_error(prog, "--min-samples " + std::to_string(cfg.stop.min_samples) + " exceeds --max-samples " +
                          std::to_string(cfg.stop.max_samples));
    return kExitUsage;
  }
  if (no_cold && no_hot) {
    std::fprintf(stderr, "%s: error: --no-cold and --no-hot together leave nothing to measure\n", prog.c_str());
    return kExitUsage;
  }
  const bool listing = app.count("--list") > 0;
  // A bare --list reads as "text" (its default); an empty value given on purpose does not reach the validator.
  if (listing && list_format != "text" && list_format != "json") {
    print_error(prog, "--list '" + list_format + "': allowed formats are text and json");
    return kExitUsage;
  }
  std::regex filter_re;  // checked before the backend starts: a typo should not cost a device probe
  if (!case_filter.empty()) {
    try {
      filter_re = std::regex(case_filter);
    } catch (const std::regex_error& e) {
      print_error(prog, "--case-filter '" + case_filter + "': not a valid regular expression (" + e.what() + ")");
      return kExitUsage;
    }
  }
  cfg.stop.target_rel_error = noise_pct / 100.0;
  // --quick is a smoke run: a shorter budget unless one was asked for.
  if (quick && app.count("--budget") == 0) cfg.stop.budget_s = 0.1;

  std::unique_ptr<Backend> be;
  std::vector<std::unique_ptr<Case>> cases;
  try {
    std::string note;
    be = make_backend(backend_choice, &note);
    StudyContext ctx{be.get(), quick};
    cases = study.cases(ctx);
    // After the study checked its flags: a bad flag is one line on stderr, not a backend note and then it.
    std::fprintf(stderr, "%s: %s\n", prog.c_str(), note.c_str());
    if (!case_filter.empty()) {
      const std::regex& re = filter_re;
      // A kept case keeps the cases of this study that provide its ceilings (`ceiling` and `uses`): a filtered run
      // still states its figures against ceilings measured in the same run. They run first, as listed.
      std::vector<CeilingRef> needed;
      for (const auto& c : cases) {
        if (!std::regex_search(c->name, re)) continue;
        if (c->ceiling && c->ceiling->study == study.name()) needed.push_back(*c->ceiling);
        for (const auto& u : c->uses)
          if (u.study == study.name()) needed.push_back(u);
      }
      auto provides = [&needed](const Case& c) {
        for (const auto& ref : needed) {
          bool all = !ref.match.empty();
          for (const auto& m : ref.match) {
            bool found = false;
            for (const auto& p : c.params) found = found || (p.name == m.name && p.value == m.value);
            all = all && found;
          }
          if (all) return true;
        }
        return false;
      };
      std::erase_if(cases, [&](const auto& c) {
        return !std::regex_search(c->name, re) && (dynamic_cast<SkippedCase*>(c.get()) || !provides(*c));
      });
    }
  } catch (const UsageError& e) {
    print_error(prog, e.what());
    return kExitUsage;
  }
  for (auto& c : cases) {
    if (no_cold) c->cold = false;
    if (no_hot) c->hot = false;
  }
  std::erase_if(cases, [](const auto& c) { return !c->cold && !c->hot && !dynamic_cast<SkippedCase*>(c.get()); });

  double total_est = 0;
  for (const auto& c : cases) total_est += c->est_seconds;
  if (listing) {
    for (const auto& c : cases) {
      nlohmann::json params = nlohmann::json::object();
      for (const auto& p : c->params) params[p.name] = p.value;
      const auto* sk = dynamic_cast<const SkippedCase*>(c.get());
      if (list_format == "json") {
        nlohmann::json j = {{"study", study.name()}, {"case", c->name}, {"est_seconds", c->est_seconds},
                            {"cold", c->cold}, {"hot", c->hot}, {"params", params}};
        if (sk) j["skipped"] = sk->reason;
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%-60s %8.2fs%s\n", (study.name() + "/" + c->name).c_str(), c->est_seconds,
                    sk ? ("  (skipped: " + sk->reason + ")").c_str() : "");
      }
    }
    if (list_format == "text")
      std::printf("%zu cases, estimated %.0f s on backend %s\n", cases.size(), total_est, be->name().c_str());
    if (const std::string f = stdout_failure(); !f.empty()) {
      print_error(prog, f);
      return kExitFailure;
    }
    return kExitOk;
  }
  if (cases.empty()) {
    std::fprintf(stderr, "%s: error: no cases to run (check --case-filter)\n", prog.c_str());
    return kExitUsage;
  }

  if (out_dir.empty()) out_dir = default_out_dir(study.name());
  std::unique_ptr<ResultsDir> dir;
  try {
    dir = std::make_unique<ResultsDir>(out_dir);
    dir->update_meta([&](nlohmann::json& m) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      if (!m.contains("host")) m["host"] = {{"hostname", host}, {"os", os_name()}};
      if (!m.contains("device")) m["device"] = be->info().to_json();
      if (!m.contains("created_utc")) m["created_utc"] = utc_now();
      m["studies"][study.name()] = {{"backend", be->name()},
                                    {"device", be->info().to_json()},
                                    {"command", command},
                                    {"started_utc", utc_now()},
                                    {"status", "running"},
                                    {"cases", cases.size()},
                                    {"measure",
                                     {{"warmup", cfg.warmup},
                                      {"min_samples", cfg.stop.min_samples},
                                      {"max_samples", cfg.stop.max_samples},
                                      {"target_rel_error", cfg.stop.target_rel_error},
                                      {"budget_s", cfg.stop.budget_s},
                                      {"throttle_fraction", cfg.throttle_fraction},
                                      {"flush_bytes", be->flush_bytes()}}},
                                    {"machine_load", machine_load_json()}};
    });
    if (const double l = load_average_1m(); l > 1.25 * std::thread::hardware_concurrency())
      std::fprintf(stderr,
                   "%s: note: the machine is loaded (1-minute load %.1f on %u hardware threads): timings will be "
                   "noisy; compare ratios within one run, or re-run on a quiet machine (load recorded in meta.json)\n",
                   prog.c_str(), l, std::thread::hardware_concurrency());
  } catch (const UsageError& e) {
    print_error(prog, e.what());
    return kExitUsage;
  } catch (const WriteError& e) {
    print_error(prog, e.what());
    return kExitFailure;
  }
  std::fprintf(stderr, "%s: results in %s\n", prog.c_str(), dir->path().c_str());
  // Google Benchmark's JSON (--benchmark_out) carries the device so `kvf gate` can refuse a mismatch.
  benchmark::AddCustomContext("kvf_device", be->info().name);
  benchmark::AddCustomContext("kvf_backend", be->name());
  benchmark::AddCustomContext("kvf_study", study.name());

  // Per-case state across its (mode x repetition) benchmark invocations.
  struct CaseState {
    bool set_up = false;
    int runs_left = 0;
  };
  std::vector<CaseState> state(cases.size());
  std::map<std::string, std::vector<Pending>> pending;
  std::map<std::string, int> invocations;
  int exit_code = kExitOk;
  std::string stop_study;  // set by a verify failure or bad input: later cases are not run
  const bool tty = isatty(2);
  const auto run_start = std::chrono::steady_clock::now();
  double est_done = 0;
  std::size_t done = 0, total_runs = 0;
  for (const auto& c : cases) total_runs += (c->cold ? 1 : 0) + (c->hot ? 1 : 0) + (dynamic_cast<SkippedCase*>(c.get()) ? 1 : 0);

  for (std::size_t i = 0; i < cases.size(); ++i) {
    Case* c = cases[i].get();
    auto* skipped = dynamic_cast<SkippedCase*>(c);
    std::vector<std::string> modes;
    if (c->cold) modes.push_back("cold");
    if (c->hot) modes.push_back("hot");
    state[i].runs_left = static_cast<int>(modes.size()) * reps;
    for (const auto& mode : modes) {
      const std::string bname = study.name() + "/" + c->name + "/" + mode;
      auto fn = [&, i, c, skipped, mode, bname](benchmark::State& st) {
        const double share = c->est_seconds / std::max<std::size_t>(1, (c->cold ? 1 : 0) + (c->hot ? 1 : 0));
        if (tty) {
          const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
          const double scale = est_done > 0 ? spent / est_done : 1.0;
          std::fprintf(stderr, "[%zu/%zu] %s  ETA %s\n", done + 1, total_runs, bname.c_str(),
                       fmt_eta((total_est - est_done) * scale).c_str());
        }
        ++done;
        est_done += share;
        Pending p;
        CaseRecord& rec = p.rec;
        rec.study = study.name();
        rec.case_name = c->name;
        rec.backend = be->name();
        rec.device = be->info().name;
        rec.mode = mode;
        rec.params = c->params;
        // With --benchmark_repetitions each repetition is a full measurement of its own row.
        if (reps > 1) rec.params.push_back({"rep", std::to_string(invocations[bname]++)});
        rec.bytes = c->bytes;
        rec.flops = c->flops;
        rec.verified = c->has_verify() ? "yes" : "n/a";
        rec.note = c->note;
        if (c->ceiling) rec.ceiling = c->ceiling->label();
        auto finish_case = [&] {
          if (--state[i].runs_left <= 0 && state[i].set_up) {
            c->teardown(*be);
            state[i].set_up = false;
          }
        };
        if (skipped || !stop_study.empty()) {
          rec.note = skipped ? "skipped: " + skipped->reason : "not run: " + stop_study;
          rec.verified = "n/a";
          st.SkipWithError(rec.note.c_str());  // before the move: rec lives in p
          pending[bname].push_back(std::move(p));
          finish_case();
          return;
        }
        try {
          if (!state[i].set_up) {
            c->setup(*be);
            state[i].set_up = true;
            if (c->has_verify()) c->verify(*be);
          }
          Measurement m;
          {
            NvtxRange range(bname);
            m = measure(
                *be, mode, cfg, [&] { c->run(*be); }, c->time_opts, [&] { c->before_sample(*be); });
          }
          std::vector<double> kept;
          for (const auto& s : m.samples)
            if (!s.throttled) kept.push_back(s.seconds);
          if (kept.empty())
            for (const auto& s : m.samples) kept.push_back(s.seconds);
          rec.summary = summarize(kept);
          rec.stop_reason = to_string(m.stop);
          rec.throttled_samples = m.throttled;
          const double med = rec.summary.median;
          rec.gbps = med > 0 ? c->bytes / med / 1e9 : 0;
          rec.tflops = med > 0 ? c->flops / med / 1e12 : 0;
          if (c->ceiling) {
            const double rate = c->ceiling->metric == "tflops" ? rec.tflops : rec.gbps;
            auto ceil = find_ceiling(dir->path(), *c->ceiling, mode);
            bool self = c->ceiling->study == study.name();
            for (const auto& want : c->ceiling->match) {
              const auto it = std::find_if(c->params.begin(), c->params.end(),
                                           [&](const Param& q) { return q.name == want.name; });
              self = self && it != c->params.end() && it->value == want.value;
            }
            if (self && (!ceil || rate > *ceil)) ceil = rate;
            if (ceil && *ceil > 0) {
              rec.ceiling_value = *ceil;
              rec.pct_of_ceiling = 100.0 * rate / *ceil;
            }
          }
          const std::string extra = c->after_measure(*be, rec.summary, mode);
          if (!extra.empty()) rec.note = rec.note.empty() ? extra : rec.note + "; " + extra;
          p.samples = std::move(m.samples);
          for (auto _ : st) st.SetIterationTime(med);
          st.counters["samples"] = static_cast<double>(rec.summary.n);
          st.counters["rel_stdev"] = rec.summary.rel_stdev;
          if (c->bytes > 0) st.counters["GBps"] = rec.gbps;
          if (c->flops > 0) st.counters["TFLOPs"] = rec.tflops;
          if (rec.pct_of_ceiling) st.counters["pct_ceiling"] = *rec.pct_of_ceiling;
          pending[bname].push_back(std::move(p));
        } catch (const VerifyError& e) {
          stop_study = std::string("verify failed in ") + c->name;
          exit_code = kExitVerify;
          std::fprintf(stderr, "%s: VERIFY FAILED: %s: %s; the study stops here, no timing of it is trusted\n",
                       prog.c_str(), c->name.c_str(), e.what());
          rec.verified = "no";
          rec.note = std::string("verify failed: ") + e.what();
          st.SkipWithError(rec.note.c_str());  // before the move: rec lives in p
          pending[bname].push_back(std::move(p));
        } catch (const WriteError&) {
          throw;  // a full disk ends the run (below), not just this case
        } catch (const UsageError& e) {
          stop_study = std::string("bad input in ") + c->name;
          exit_code = kExitUsage;
          print_error(prog, e.what());
          rec.note = std::string("error: ") + e.what();
          st.SkipWithError(rec.note.c_str());  // before the move: rec lives in p
          pending[bname].push_back(std::move(p));
        } catch (const std::exception& e) {
          if (exit_code == kExitOk) exit_code = kExitFailure;
          print_error(prog, "case " + c->name + " failed: " + e.what());
          rec.note = std::string("error: ") + e.what();
          st.SkipWithError(rec.note.c_str());  // before the move: rec lives in p
          pending[bname].push_back(std::move(p));
        }
        finish_case();
      };
      auto* b = benchmark::RegisterBenchmark(bname.c_str(), fn);
      b->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
    }
  }

  KvfReporter reporter(*dir, pending);
  // A failed results write (full disk, EIO, the file size limit) ends the run: the files hold whole rows
  // only (ResultsDir cuts a failed case off), and nothing more is measured that could not be kept.
  std::string write_failure;
  try {
    benchmark::RunSpecifiedBenchmarks(&reporter);
    reporter.flush_all();
  } catch (const WriteError& e) {
    write_failure = e.what();
  } catch (const std::exception& e) {
    print_error(prog, e.what());
    exit_code = kExitFailure;
    try {
      reporter.flush_all();
    } catch (const WriteError& w) {
      write_failure = w.what();
    } catch (const std::exception& w) {
      print_error(prog, w.what());
    }
  }
  benchmark::Shutdown();
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (state[i].set_up) cases[i]->teardown(*be);
  std::string status = exit_code == kExitOk ? "complete" : (stop_study.empty() ? "errors" : stop_study);
  if (!write_failure.empty()) {
    print_error(prog, write_failure);
    if (exit_code == kExitOk) exit_code = kExitFailure;
    status = "stopped: " + write_failure;
  }
  try {
    dir->update_meta([&](nlohmann::json& m) {
      auto& s = m["studies"][study.name()];
      s["finished_utc"] = utc_now();
      s["machine_load_at_end"] = machine_load_json();
      s["status"] = status;
    });
  } catch (const std::exception& e) {
    // meta.json keeps "running": it cannot be told more (the old file stays whole).
    if (write_failure.empty()) {
      print_error(prog, e.what());
      if (exit_code == kExitOk) exit_code = kExitFailure;
    }
  }
  if (const std::string f = stdout_failure(); !f.empty()) {
    print_error(prog, f + " (the results files are not affected)");
    if (exit_code == kExitOk) exit_code = kExitFailure;
  }
  if (write_failure.empty()) std::fprintf(stderr, "%s: results in %s\n", prog.c_str(), dir->path().c_str());
  return exit_code;
}

}  // namespace

// Last line of defence: whatever a study or a library throws ends in one line and an exit code, never
// in std::terminate (SIGABRT).
int bench_main(int argc, char** argv, Study& study) {
  std::string prog = "bench";
  try {
    prog = "bench_" + study.name();
    return run_study(argc, argv, study);
  } catch (const UsageError& e) {
    print_error(prog, e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error(prog, e.what());
    return kExitFailure;
  }
}

}  // namespace kvf
