// bench_main: everything a bench binary does besides defining its cases: the command line
// (bench_flags.cpp), choosing the backend and the cases, --list, meta.json, then measuring and writing the
// cases (bench_run.cpp).
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench_detail.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "kvf/study.hpp"

namespace kvf {

namespace bench {

void print_error(const std::string& prog, const std::string& msg) {
  std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), one_line(msg).c_str());
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

}  // namespace bench

std::unique_ptr<Case> skipped_case(std::string name, std::vector<Param> params, std::string reason) {
  auto c = std::make_unique<bench::SkippedCase>();
  c->name = std::move(name);
  c->params = std::move(params);
  c->reason = std::move(reason);
  c->est_seconds = 0;
  return c;
}

namespace {

using bench::Flags;
using bench::is_skipped;
using bench::print_error;
using bench::stdout_failure;

// The 1-minute load average (/proc/loadavg), or -1 where unreadable.
double load_average_1m() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  if (!(in >> l)) return -1;
  return l;
}
// What a reader needs to judge a shared machine: the load and the OpenMP wait policy the process started with
// (libgomp reads it at load time; spinning workers of an idle team take cores from other threads on a loaded box),
// and where its threads may run: the CPUs the process is allowed (taskset, a cgroup) and the OpenMP binding
// (OMP_PROC_BIND/OMP_PLACES as set, omp_get_proc_bind() as the runtime took them). A bench run alone leaves
// placement to them (the CPU arms run one thread per allowed CPU); kvf run sets them, one placement per run
// chosen on the host (--thread-placement, kvf/thread_placement.hpp). A bandwidth figure from a multi-socket host
// reads differently with threads spread or packed, so the row's directory says which.
nlohmann::json machine_load_json() {
  auto env = [](const char* n) -> nlohmann::json {
    const char* v = std::getenv(n);
    return v ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  static const char* const binds[] = {"false", "true", "master", "close", "spread"};
  const int pb = static_cast<int>(omp_get_proc_bind());
  // With binding on, the runtime has already pinned this thread to its first place, so its affinity is no
  // longer the process's: then the places say it (omp_num_places).
  cpu_set_t set;
  CPU_ZERO(&set);
  const nlohmann::json allowed = pb == 0 && sched_getaffinity(0, sizeof set, &set) == 0
                                     ? nlohmann::json(CPU_COUNT(&set)) : nlohmann::json(nullptr);
  return {{"loadavg_1m", load_average_1m()},
          {"hardware_threads", std::thread::hardware_concurrency()},
          {"cpus_allowed", allowed},
          {"OMP_WAIT_POLICY", env("OMP_WAIT_POLICY")},
          {"GOMP_SPINCOUNT", env("GOMP_SPINCOUNT")},
          {"OMP_NUM_THREADS", env("OMP_NUM_THREADS")},
          {"OMP_PROC_BIND", env("OMP_PROC_BIND")},
          {"OMP_PLACES", env("OMP_PLACES")},
          {"omp_proc_bind", pb >= 0 && pb < 5 ? nlohmann::json(binds[pb]) : nlohmann::json(pb)},
          {"omp_num_places", omp_get_num_places()}};
}

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

// With --case-filter or --benchmark_filter: the chosen cases, and the cases of this study that provide their
// ceilings (`ceiling` and `uses`), so that a filtered run still states its figures against ceilings measured in
// the same run. They run first, as listed. Returns how many cases were kept only as ceilings.
std::size_t filter_cases(std::vector<std::unique_ptr<Case>>& cases, const std::function<bool(const Case&)>& chosen,
                         const std::string& study) {
  std::vector<CeilingRef> needed;
  for (const auto& c : cases) {
    if (!chosen(*c)) continue;
    if (c->ceiling && c->ceiling->study == study) needed.push_back(*c->ceiling);
    for (const auto& u : c->uses)
      if (u.study == study) needed.push_back(u);
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
  std::size_t as_ceiling = 0;
  std::erase_if(cases, [&](const auto& c) {
    if (chosen(*c)) return false;
    const bool keep = !is_skipped(*c) && provides(*c);
    as_ceiling += keep ? 1 : 0;
    return !keep;
  });
  return as_ceiling;
}

// --benchmark_filter on the names Google Benchmark would register (study/case/mode): a case is chosen when one of
// its modes is; its other modes are dropped. Ceiling cases stay whole (their rows are what the others need).
void apply_benchmark_filter(std::vector<std::unique_ptr<Case>>& cases, const bench::Flags& f, const std::string& study,
                            const std::string& prog) {
  auto mode_chosen = [&](const Case& c, const char* mode) {
    const bool hit = std::regex_search(study + "/" + c.name + "/" + mode, *f.benchmark_filter_re);
    return hit != f.benchmark_filter_negative;
  };
  auto chosen = [&](const Case& c) { return (c.cold && mode_chosen(c, "cold")) || (c.hot && mode_chosen(c, "hot")); };
  std::vector<const Case*> picked;
  for (const auto& c : cases)
    if (chosen(*c)) picked.push_back(c.get());
  const std::size_t ceilings = filter_cases(cases, chosen, study);
  for (const auto& c : cases) {
    if (std::find(picked.begin(), picked.end(), c.get()) == picked.end()) continue;  // a ceiling: whole
    c->cold = c->cold && mode_chosen(*c, "cold");
    c->hot = c->hot && mode_chosen(*c, "hot");
  }
  std::fprintf(stderr, "%s: --benchmark_filter '%s' chose %zu cases%s\n", prog.c_str(), f.benchmark_filter.c_str(),
               picked.size(),
               ceilings ? (" and keeps the " + std::to_string(ceilings) + " ceiling cases of this study they are stated against").c_str()
                        : "");
}

// The studies estimate a case at the default sampling budget per mode (0.5 s, 0.1 s with --quick). Another --budget
// moves each mode's sampling by the difference where a case samples to its budget: added in full when larger (the
// time a case that does not converge may take), taken off in proportion when smaller (the estimate's sampling
// share is not known apart from its setup). --list, kvf run's plan and the progress line all show it.
void scale_estimates_to_budget(std::vector<std::unique_ptr<Case>>& cases, const Flags& f) {
  const double standard = f.quick ? kQuickBudgetS : StopRule{}.budget_s, budget = f.cfg.stop.budget_s;
  if (f.profile || budget == standard || !(standard > 0)) return;
  for (auto& c : cases) {
    if (is_skipped(*c)) continue;
    const double modes = (c->cold ? 1 : 0) + (c->hot ? 1 : 0);
    c->est_seconds = budget > standard ? c->est_seconds + modes * (budget - standard)
                                       : std::max(c->est_seconds * budget / standard,
                                                  c->est_seconds - modes * (standard - budget));
  }
}

// runs_on: the backend the cases run on (a host-only study's is the CPU's, whatever --backend or --plan-device say).
int print_list(const std::vector<std::unique_ptr<Case>>& cases, const std::string& study, const std::string& runs_on,
               const Flags& f, const std::string& prog) {
  double total_est = 0;
  for (const auto& c : cases) total_est += c->est_seconds;
  for (const auto& c : cases) {
    nlohmann::json params = nlohmann::json::object();
    for (const auto& p : c->params) params[p.name] = p.value;
    const auto* sk = dynamic_cast<const bench::SkippedCase*>(c.get());
    if (f.list_format == "json") {
      nlohmann::json j = {{"study", study}, {"case", c->name}, {"est_seconds", c->est_seconds},
                          {"cold", c->cold}, {"hot", c->hot}, {"backend", runs_on}, {"params", params}};
      if (sk) j["skipped"] = sk->reason;
      // What the case is stated against and reads (kvf run keeps these ceilings under a case filter).
      nlohmann::json ceilings = nlohmann::json::array();
      auto add_ref = [&ceilings](const CeilingRef& r) {
        nlohmann::json match = nlohmann::json::object();
        for (const auto& p : r.match) match[p.name] = p.value;
        ceilings.push_back({{"study", r.study}, {"match", match}, {"metric", r.metric}});
      };
      if (c->ceiling) add_ref(*c->ceiling);
      for (const auto& u : c->uses) add_ref(u);
      j["ceilings"] = ceilings;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-60s %8.2fs%s\n", (study + "/" + c->name).c_str(), c->est_seconds,
                  sk ? ("  (skipped: " + sk->reason + ")").c_str() : "");
    }
  }
  if (f.list_format == "text")
    std::printf("%zu cases, estimated %.0f s on backend %s\n", cases.size(), total_est, runs_on.c_str());
  if (const std::string failed = stdout_failure(); !failed.empty()) {
    print_error(prog, failed);
    return kExitFailure;
  }
  return kExitOk;
}

// Which device was asked for and which one ran: the ordinal is among the GPUs CUDA_VISIBLE_DEVICES leaves
// visible, so both are kept (ordinal 1 under CUDA_VISIBLE_DEVICES=2,3 is the machine's GPU 3).
nlohmann::json device_selection_json(const Backend& be, const bench::Flags& f) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const auto& x = be.info().extra;
  return {{"requested", f.device_text.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.device_text)},
          {"backend", be.name()},
          {"cuda_ordinal", x.contains("device_ordinal") ? x["device_ordinal"] : nlohmann::json(nullptr)},
          {"pci_bus_id", x.contains("pci_bus_id") ? x["pci_bus_id"] : nlohmann::json(nullptr)},
          {"CUDA_VISIBLE_DEVICES", visible ? nlohmann::json(visible) : nlohmann::json(nullptr)}};
}

// One run of a study per directory: a second would write every case name again (the report and the gate refuse
// such rows), and meta.json keeps one entry per study. Other studies may join it (a sweep split over calls). Checked
// where meta.json is first written, before anything is measured (after the cases exist: bench_remote's ranks are
// connected then, so a refusal there ends the holder too; refused before they connect, it waited its timeout).
void refuse_second_run(const nlohmann::json& meta, const std::string& out_dir, const std::string& study) {
  if (!meta.is_object() || !meta.contains("studies") || !meta["studies"].is_object() ||
      !meta["studies"].contains(study))
    return;
  const auto& held = meta["studies"][study];
  const auto text = [&](const char* k) {
    return held.is_object() && held.contains(k) && held[k].is_string() ? held[k].get<std::string>() : std::string("?");
  };
  throw UsageError("--out " + out_dir + ": already holds the " + study + " study (status " + text("status") +
                   ", started " + text("started_utc") + "); a second run there would write its cases twice: give "
                   "another --out");
}

// Creates (or reopens) the results directory and records this study's run in meta.json.
std::unique_ptr<ResultsDir> open_results(const std::string& out_dir, const std::string& study, const Backend& be,
                                         const std::string& command, std::size_t n_cases, const bench::Flags& f,
                                         const std::string& prog) {
  const MeasureConfig& cfg = f.cfg;
  const nlohmann::json selection = device_selection_json(be, f);
  auto dir = std::make_unique<ResultsDir>(out_dir);
  dir->update_meta([&](nlohmann::json& m) {
    refuse_second_run(m, out_dir, study);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    if (!m.contains("host")) m["host"] = {{"hostname", host}, {"os", os_name()}};
    if (!m.contains("device")) m["device"] = be.info().to_json();
    if (!m.contains("device_selection")) m["device_selection"] = selection;
    if (!m.contains("created_utc")) m["created_utc"] = utc_now();
    m["studies"][study] = {{"backend", be.name()},
                           {"device", be.info().to_json()},
                           {"device_selection", selection},
                           {"command", command},
                           {"started_utc", utc_now()},
                           {"status", "running"},
                           {"cases", n_cases},
                           {"measure",
                            {{"warmup", cfg.warmup},
                             {"min_samples", cfg.stop.min_samples},
                             {"max_samples", cfg.stop.max_samples},
                             {"target_rel_error", cfg.stop.target_rel_error},
                             {"budget_s", cfg.stop.budget_s},
                             {"throttle_fraction", cfg.throttle_fraction},
                             {"flush_bytes", be.flush_bytes()},
                             {"repetitions", f.reps},
                             {"profile", f.profile},
                             {"quick", f.quick},
                             {"budget_min_samples", cfg.stop.budget_min_samples}}},
                           // Test-only (docs/gate.md): `kvf gate` refuses a result that carries one unless told.
                           {"fault_injection",
                            f.inject_re ? nlohmann::json{{"case_regex", f.inject_text.substr(0, f.inject_text.rfind('='))},
                                                         {"fraction", f.inject_fraction}}
                                        : nlohmann::json(nullptr)},
                           {"machine_load", machine_load_json()}};
  });
  if (const double l = load_average_1m(); l > 1.25 * std::thread::hardware_concurrency())
    std::fprintf(stderr,
                 "%s: note: the machine is loaded (1-minute load %.1f on %u hardware threads): timings will be "
                 "noisy; compare ratios within one run, or re-run on a quiet machine (load recorded in meta.json)\n",
                 prog.c_str(), l, std::thread::hardware_concurrency());
  return dir;
}

// meta.json gets the study's end status; stdout's failure (the console table) is an error of the run.
int finish_run(ResultsDir& dir, const std::string& study, bench::RunOutcome out, const std::string& prog) {
  int exit_code = out.exit_code;
  std::string status = exit_code == kExitOk ? "complete" : (out.stop_study.empty() ? "errors" : out.stop_study);
  if (!out.write_failure.empty()) {
    print_error(prog, out.write_failure);
    if (exit_code == kExitOk) exit_code = kExitFailure;
    status = "stopped: " + out.write_failure;
  }
  // The status matters most: where the disk has no room for the machine load as well, the status alone is written.
  const auto end_meta = [&](bool with_load) {
    dir.update_meta([&](nlohmann::json& m) {
      auto& s = m["studies"][study];
      s["finished_utc"] = utc_now();
      if (with_load) s["machine_load_at_end"] = machine_load_json();
      s["status"] = status;
    });
  };
  try {
    try {
      end_meta(true);
    } catch (const std::exception&) {
      end_meta(false);
    }
  } catch (const std::exception& e) {
    // meta.json keeps "running": it cannot be told more (the old file stays whole).
    if (out.write_failure.empty()) {
      print_error(prog, e.what());
      if (exit_code == kExitOk) exit_code = kExitFailure;
    }
  }
  if (const std::string failed = stdout_failure(); !failed.empty()) {
    print_error(prog, failed + " (the results files are not affected)");
    if (exit_code == kExitOk) exit_code = kExitFailure;
  }
  if (out.write_failure.empty()) std::fprintf(stderr, "%s: results in %s\n", prog.c_str(), dir.path().c_str());
  return exit_code;
}

int run_study(int argc, char** argv, Study& study) {
  // Before any other thread exists (OpenMP, CUDA): they inherit the blocked termination signals.
  guard_termination_signals();
  // Past a file size limit (ulimit -f) a write fails with EFBIG, which the writers report, instead of
  // SIGXFSZ killing the process in the middle of a row.
  ::signal(SIGXFSZ, SIG_IGN);
  const std::string prog = "bench_" + study.name();
  const std::string command = join_args(argc, argv);

  Flags f;
  // The app outlives cases(): studies read their flags' counts there.
  CLI::App app{prog + ": the " + study.name() +
               " study of kvfrontier. Google Benchmark flags are accepted too: --benchmark_out=FILE "
               "--benchmark_out_format=json (one entry per repetition, for compare.py and kvf gate); "
               "--benchmark_repetitions=N (each case measured N times; its one row in cases.csv pools them, "
               "samples.csv says which repetition each sample is); --benchmark_filter=RE (on study/case/mode; "
               "the ceiling cases the chosen ones are stated against are kept)."};
  if (const auto code = bench::parse_flags(&argc, argv, study, prog, app, f)) return *code;

  std::unique_ptr<Backend> be;
  std::vector<std::unique_ptr<Case>> cases;
  std::string note;  // the backend line, said once the flags and filters are known to be fine
  try {
    if (f.plan_device.empty() && study.host_only()) {
      be = make_cpu_backend();
      std::string unused = f.backend_choice == "cuda" ? "--backend cuda" : "";
      if (f.device.kind == DeviceChoice::Kind::gpu)
        unused += (unused.empty() ? "--device " : " and --device ") + f.device.text;
      note = "backend: cpu (the " + study.name() + " study moves host memory and times it on the host" +
             (unused.empty() ? "" : "; " + unused + " not used") + ")";
    } else if (f.plan_device.empty()) {
      be = make_backend(f.backend_choice, &note, f.device);
    } else {
      be = make_plan_backend(f.plan_device);
      note = "backend: " + be->name() + " (planned for " + be->info().name + " from " + f.plan_device +
             "; nothing runs" +
             (study.host_only() ? "; the " + study.name() + " study itself runs on the CPU backend" : "") + ")";
    }
    // A GPU sample is timed on the device: a host busy wait would not be inside it.
    if (f.inject_re && be->name() != "cpu")
      throw UsageError("--inject-slowdown " + f.inject_text + ": the cpu backend only (backend here: " + be->name() +
                       "; a GPU sample is timed on the device, which a host wait does not slow)");
    StudyContext ctx{be.get(), f.quick};
    cases = study.cases(ctx);
    if (!f.case_filter.empty())
      filter_cases(cases, [&](const Case& c) { return std::regex_search(c.name, f.filter_re); }, study.name());
    if (f.benchmark_filter_re) apply_benchmark_filter(cases, f, study.name(), prog);
  } catch (const UsageError& e) {
    print_error(prog, e.what());
    return kExitUsage;
  }
  for (auto& c : cases) {
    if (f.no_cold) c->cold = false;
    if (f.no_hot) c->hot = false;
  }
  std::erase_if(cases, [](const auto& c) { return !c->cold && !c->hot && !is_skipped(*c); });
  scale_estimates_to_budget(cases, f);
  // A filter that leaves nothing is refused by --list too, so kvf run's plan stops it before any study measures.
  const bool filtered = !f.case_filter.empty() || f.benchmark_filter_re.has_value();
  if (cases.empty() && (filtered || !f.listing)) {
    const std::string which = !f.case_filter.empty() ? " --case-filter '" + f.case_filter + "'"
                              : f.benchmark_filter_re ? " --benchmark_filter '" + f.benchmark_filter + "'"
                                                      : std::string();
    print_error(prog, "no cases to run" + (which.empty() ? std::string() : ":" + which + " matches none") +
                          " (--list without it shows the cases)");
    return kExitUsage;
  }
  // After the study checked its flags and the filters left cases: a bad flag is one line on stderr, not a backend
  // note and then it.
  std::fprintf(stderr, "%s: %s\n", prog.c_str(), note.c_str());
  if (f.listing) return print_list(cases, study.name(), study.host_only() ? "cpu" : be->name(), f, prog);

  const std::string out_dir = f.out_dir.empty() ? default_out_dir(study.name()) : f.out_dir;
  std::unique_ptr<ResultsDir> dir;
  try {
    dir = open_results(out_dir, study.name(), *be, command, cases.size(), f, prog);
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
  bench::RunOutcome out = bench::run_cases(study.name(), *be, *dir, cases, f, prog);
  return finish_run(*dir, study.name(), std::move(out), prog);
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
