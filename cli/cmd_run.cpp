// kvf run: plan the whole run first (devices, backend, studies, each bench's --list pass: a bad flag stops it
// there, before anything is measured), then launch each study's bench binary into one results directory per
// device. The stream study runs first when another study is chosen: it is the ceiling the others are stated
// against, and it must be measured in the same run (run_plan.cpp; under a case filter only the ceilings needed).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "kvf/studies.hpp"
#include "kvf/thread_placement.hpp"
#include "kvf/units.hpp"
#include "run_console.hpp"
#include "run_flags.hpp"
#include "run_plan.hpp"
#include "run_placement.hpp"
#include "run_plan_detail.hpp"
#include "run_process.hpp"

namespace kvf::cli {

namespace {

constexpr double kGpuSweepLimitS = 25 * 60;

// Under --time-limit a study gets the share of the time left that its estimate has of the estimates left, so
// what a fast study leaves over goes to the ones after it. 0: no limit.
double time_share(const RunOptions& o, double elapsed_s, const std::vector<double>& est, std::size_t i) {
  if (o.time_limit_s <= 0) return 0;
  double est_left = 0;
  for (std::size_t j = i; j < est.size(); ++j) est_left += est[j];
  const double left = o.time_limit_s - elapsed_s;
  return std::max(1.0, left * (est_left > 0 ? est[i] / est_left : 1.0 / double(est.size() - i)));
}

// --list-devices: the CPU and each GPU the CUDA runtime sees, with the --device value that picks it.
int print_devices() {
  const auto cpu = make_cpu_backend();
  const DeviceInfo& c = cpu->info();
  std::printf("%-8s %s (%d threads, %s memory, %s)  [--device cpu]\n", "cpu", c.name.c_str(), c.compute_units,
              format_bytes(double(c.memory_bytes)).c_str(), c.arch.c_str());
  std::string why;
  const auto gpus = list_gpus(&why);
  for (const auto& g : gpus)
    std::printf("gpu %-4d %s (%s memory, compute capability %s%s)  [--device %d]\n", g.ordinal, g.name.c_str(),
                format_bytes(double(g.memory_bytes)).c_str(), g.compute_capability.c_str(),
                g.pci_bus_id.empty() ? "" : (", PCI " + g.pci_bus_id).c_str(), g.ordinal);
  if (gpus.empty()) std::printf("no usable GPU: %s\n", why.c_str());
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"))
    std::printf("CUDA_VISIBLE_DEVICES=%s: the GPU ordinals count only the GPUs it leaves visible\n", v);
  if (gpus.size() > 1) std::printf("--device all runs each GPU in turn, one results directory each (DIR/dev<N>)\n");
  return kExitOk;
}

void print_list(const std::vector<DevicePlan>& plans, const RunOptions& o) {
  double total = 0;
  std::size_t n = 0;
  for (const auto& d : plans) {
    const std::string pre = d.label.empty() ? "" : d.label + "/";
    for (const auto& s : d.studies)
      for (const auto& c : s.cases)
        std::printf("%-10s %-58s %7.1fs%s\n", (pre + s.study).c_str(), c.name.c_str(), c.est_s,
                    c.skipped.empty() ? "" : ("  (skipped: " + c.skipped + ")").c_str());
    for (const auto& s : d.studies) {
      std::printf("study %-9s %4zu cases  ~%.0f s%s\n", (pre + s.study).c_str(), s.cases.size(), s.est_s,
                  s.backend.empty() || s.backend == d.backend ? "" : ("  (on backend " + s.backend + ")").c_str());
      total += s.est_s;
      ++n;
    }
  }
  std::printf("total: %zu studies, estimated %.0f s on backend %s%s\n", n, total, plans.front().backend.c_str(),
              o.quick ? " (--quick)" : "");
  // The limit cuts studies short at their shares of it: said with the estimate it would cut.
  const double limit = o.time_limit_s;
  if (limit > 0 && total > limit)
    std::printf("--time-limit %.0f s: below the estimate; each study would stop at its share of the time left "
                "(rows so far kept)\n", limit);
}

nlohmann::json flags_json() {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : study_flags()) j[f.study].push_back(f.typed);
  return j;
}

// Runs one planned study into its directory; returns its exit code (timed_out when --time-limit stopped it).
int run_study(const StudyPlan& s, const DevicePlan& d, const PlacementChoice& placement, double limit_s,
              RunConsole& console, bool* timed_out) {
  auto args = s.args;  // the stream study's carries its case filter (run_plan.cpp)
  args.insert(args.end(), {"--out", d.out});
  ProcessIo io;
  io.env = placement.env;
  io.relay = [&console](int fd, const std::string& line) { console.relay(fd, line); };
  io.progress = [&console](const std::string& line) { console.progress_line(line); };
  io.tick = [&console] { console.tick(); };
  io.limit_s = limit_s;
  io.timed_out = timed_out;
  return run_process(args, io);
}

int do_run(const RunOptions& o, const std::string& command) {
  if (o.list_devices) return print_devices();
  check_pass_flags(o.pass);
  // Before the backend and placement lines: an --out that cannot be a directory is the only line said.
  if (!o.out.empty()) check_out_dir(o.out, "--out");
  install_forwarding();
  const auto devices = run_devices(o);
  const std::time_t t = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&t));
  std::vector<DevicePlan> plans;
  try {
    for (const auto& dev : devices)
      plans.push_back(plan_device(o, dev, stamp, o.device.kind == DeviceChoice::Kind::all));
  } catch (const RunStopped&) {
    return stopped_by_signal({});
  }
  measure_host_studies_once(plans);
  // The plan stands (nothing refused): now kvf says what it found and decided.
  RunConsole console(::isatty(2) != 0);
  for (const auto& d : plans) {
    console.say("kvf run: " + (d.label.empty() ? "" : d.label + ": ") + d.backend_note);
    for (const auto& n : d.notes) console.say(d.label.empty() ? n : "kvf run: " + d.label + ": " + n.substr(9));
  }
  // One thread placement for the whole run, chosen before the first study (its calibration beside the results).
  const bool cpu_figures = runs_on_cpu(plans);
  if (o.list) {
    print_list(plans, o);
    const PlacementChoice p = plan_thread_placement(o.thread_placement, cpu_figures, o.quick);
    std::printf("%s\n", p.calibrate ? ("thread placement: calibrated before the first study (" + p.reason +
                                       "): a stream read under each of " + kvf::thread_placement_names() + ", " +
                                       std::to_string(kPlacementRounds) + " rounds")
                                          .c_str()
                                    : p.line().c_str());
    return kExitOk;
  }
  // The stream bench's --size as its planned command line has it (the last one given wins), "" without one.
  std::string stream_size;
  for (const auto& s : plans.front().studies)
    if (s.study == "stream")
      for (std::size_t i = 0; i < s.args.size(); ++i) {
        if (s.args[i] == "--size" && i + 1 < s.args.size()) stream_size = s.args[i + 1];
        else if (s.args[i].rfind("--size=", 0) == 0) stream_size = s.args[i].substr(7);
      }
  const PlacementChoice placement =
      choose_thread_placement(o.thread_placement, cpu_figures, o.quick, stream_size,
                              plans.front().out + "/thread_placement",
                              [&console](const std::string& l) { console.say(l); });
  if (stop_signal()) return console.clear(), stopped_by_signal(plans.front().out);
  console.say("kvf run: " + placement.line());

  std::vector<PlannedStudy> planned;
  std::vector<double> est;
  for (const auto& d : plans)
    for (const auto& s : d.studies) {
      PlannedStudy p{d.label.empty() ? s.study : d.label + "/" + s.study, s.study, {}, s.runs, s.est_s};
      for (const auto& c : s.cases) p.est_per_run[c.name] = c.est_per_run_s;
      planned.push_back(std::move(p));
      est.push_back(s.est_s);
    }
  console.plan(planned);

  int worst = kExitOk;
  bool stop = false;
  const auto run_start = std::chrono::steady_clock::now();
  std::vector<std::string> written;
  std::size_t k = 0;
  for (const auto& d : plans) {
    if (stop) break;
    ResultsDir dir(d.out);
    written.push_back(d.out);
    double device_est = 0;
    std::vector<std::string> names;
    for (const auto& s : d.studies) device_est += s.est_s, names.push_back(s.study);
    dir.update_meta([&](nlohmann::json& m) {
      m["command"] = command;
      m["kvf_run"] = {{"studies", names},
                      {"backend", d.backend},
                      {"device", o.device_text.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.device_text)},
                      {"quick", o.quick},
                      {"estimated_s", device_est},
                      {"gpu_sweep", o.gpu_sweep},
                      {"time_limit_s", o.time_limit_s},
                      {"study_flags", flags_json()},
                      {"flags_every_study", o.pass},
                      {"stream_case_filter", d.stream_filter.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.stream_filter)},
                      {"plan_notes", d.notes},
                      {"thread_placement", placement.json()}};
    });
    console.say("kvf run: " + std::to_string(d.studies.size()) + " studies, estimated " + clock_text(device_est) +
                "; results in " + d.out);
    std::vector<std::string> time_limited;
    for (const auto& s : d.studies) {
      const std::size_t i = k++;
      const double share_s =
          time_share(o, std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count(), est, i);
      if (stop_signal()) return console.clear(), stopped_by_signal(d.out);
      console.begin_study(i);
      if (share_s > 0) console.say("kvf run: " + planned[i].label + " stops after " + std::to_string(int(share_s)) + " s (its share of --time-limit)");
      bool timed_out = false;
      const int rc = run_study(s, d, placement, share_s, console, &timed_out);
      console.end_study(rc, timed_out);
      if (stop_signal()) return console.clear(), stopped_by_signal(d.out);
      if (timed_out) {
        console.say("kvf run: " + planned[i].label + " reached its share of --time-limit (" + std::to_string(int(share_s)) +
                    " s) and was stopped; its finished rows are in " + d.out);
        time_limited.push_back(s.study);
        dir.update_meta([&](nlohmann::json& m) {
          m["kvf_run"]["time_limited"] = time_limited;
          // The stopped bench could not finish its own status: what stopped it, for the report and the next run.
          if (!m.contains("studies") || !m["studies"].contains(s.study)) return;  // killed before it registered
          auto& st = m["studies"][s.study];
          if (st.is_object() && st.value("status", "") == "running")
            st["status"] = std::string(kvf::kTimeLimitStatus) + " (its share of --time-limit, " +
                           std::to_string(int(share_s)) + " s)";
        });
        continue;
      }
      if (rc == kExitUsage) {
        console.say("kvf run: " + planned[i].label + " stopped on bad input; results so far are in " + d.out);
        worst = kExitUsage;
        stop = true;
        break;
      }
      // A bench that could not write its results (full disk) said so in meta.json, or could not even do that
      // and left "running": the next study would only fail the same way.
      if (rc == kExitFailure) {
        const std::string status = study_status(d.out, s.study);
        if (status.rfind("stopped: ", 0) == 0 || status == "running") {
          console.say("kvf run: " + planned[i].label + " could not write its results; no further study is run; the finished rows are in " + d.out);
          worst = kExitFailure;
          stop = true;
          break;
        }
      }
      if (rc != kExitOk) {
        console.say("kvf run: " + planned[i].label + " exited with " + std::to_string(rc) + " (" +
                    (rc == kExitVerify ? "verify failed" : "failures") + "); going on with the next study");
        if (worst == kExitOk || rc == kExitVerify) worst = rc >= 128 ? kExitFailure : rc;
      }
    }
  }
  console.clear();
  for (const auto& l : console.summary_lines()) std::fprintf(stderr, "%s\n", l.c_str());
  std::string report = "kvf report";
  for (const auto& w : written) {
    std::printf("results: %s\n", w.c_str());
    if (std::filesystem::exists(std::filesystem::path(w) / "cases.csv")) report += " " + w;
  }
  if (report != "kvf report") std::printf("next: %s\n", report.c_str());
  return worst;
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  std::string studies_help = "studies to run, comma-separated (default: all built). Known:";
  for (const auto& s : kStudies) studies_help += " " + std::string(s.name) + " (" + std::string(s.doc) + ");";
  auto* sub = app.add_subcommand("run", "run studies by launching their bench binaries into one results directory");
  sub->footer(kStudyFlagsHelp);
  std::string allowed;
  for (const auto& s : kStudies) allowed += std::string(allowed.empty() ? "" : ", ") + std::string(s.name);
  // An empty name (--study '', --study stream,, --study a,,b) would otherwise be dropped and leave "all studies" or
  // a shorter list; CLI11's own splitting drops it before a check sees it, so the list is split in run_plan.cpp.
  sub->add_option("--study", o->studies, studies_help)
      ->check(CLI::Validator(
          [allowed](std::string& v) -> std::string {
            const bool empty = v.empty() || v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos;
            return empty ? "'" + v + "' holds an empty study name; allowed: " + allowed : std::string{};
          },
          ""));
  sub->add_option("--backend", o->backend, "auto | cpu | cuda (auto takes CUDA when a usable GPU is present)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "auto" || v == "cpu" || v == "cuda" ? std::string{}
                                                             : "'" + v + "' is not a backend; allowed: auto, cpu, cuda";
          },
          "auto|cpu|cuda"));
  sub->add_option("--device", o->device_text,
                  "cpu, a GPU ordinal (among those CUDA_VISIBLE_DEVICES leaves visible; default 0), or all: each "
                  "visible GPU in turn, one results directory each (DIR/dev0, DIR/dev1, ...). Recorded in meta.json");
  sub->add_flag("--list-devices", o->list_devices,
                "print the CPU and each visible GPU (name, memory, compute capability) with its --device value, run "
                "nothing; takes no other flag");
  sub->add_flag("--quick", o->quick, "the quick subset of every study (under 30 s on the CPU)");
  sub->add_option("--out", o->out, "results directory (default results/runs/<utc>-<backend>)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v.empty() ? "'' is empty; give a directory (leave the flag out for the default)" : std::string{};
          },
          ""));
  sub->add_flag("--list", o->list, "print the cases and the estimated time, run nothing");
  sub->add_flag("--gpu-sweep", o->gpu_sweep,
                "on a lent GPU: every study's default GPU grid (each case verified first) into one directory, within "
                "--time-limit (default 1500 s); refused without a usable GPU. Split it over calls with --study and "
                "one --out: a finished stream study there is kept");
  sub->add_option("--time-limit", o->time_limit_s,
                  "seconds for the whole run: each study is stopped (rows so far kept) at its share of the time "
                  "left, in proportion to its estimate; 1 .. 86400 (default: none; 1500 with --gpu-sweep)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            return !v.empty() && end && *end == 0 && x >= 1 && x <= 86400
                       ? std::string{}
                       : "'" + v + "': must be a number of seconds in 1..86400";
          },
          "SECONDS"));
  sub->add_option("--thread-placement", o->thread_placement,
                  "where the benches' OpenMP threads run: auto (calibrate where the host has more than one NUMA node "
                  "or L3 domain and no study is --quick, else leave the environment as it is), calibrate (a stream "
                  "read under each of inherit, close and spread, 2 alternated rounds, before the first study; a "
                  "placement is taken over inherit only when >= 5% faster in every round), inherit, close or spread "
                  "(OMP_PROC_BIND, OMP_PLACES=cores). Recorded in meta.json (kvf_run.thread_placement; each study's "
                  "machine_load)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "auto" || v == "calibrate" || v == "inherit" || v == "close" || v == "spread"
                       ? std::string{}
                       : "'" + v + "' is not a thread placement; allowed: " + std::string(kThreadPlacementModes);
          },
          "MODE"));
  sub->add_option("args", o->pass, "after --: flags given to every bench binary (e.g. -- --budget 1)");
  sub->positionals_at_end();
  sub->callback([o, sub] {
    // Belt and braces for the validator above, which CLI11 may skip for an empty value.
    if (sub->count("--out") > 0 && o->out.empty())
      throw UsageError("--out '': empty; give a directory (leave the flag out for the default)");
    if (o->list_devices) {  // it runs nothing, so any other flag would be ignored in silence
      std::string given;
      for (const CLI::Option* opt : sub->get_options())
        if (opt->count() > 0 && opt->get_name() != "--list-devices")
          given += (given.empty() ? "" : ", ") + opt->get_name();
      for (const auto& f : study_flags()) given += (given.empty() ? "" : ", ") + f.typed;
      if (!flags_after_separator().empty()) given += given.empty() ? "flags after --" : ", flags after --";
      if (!given.empty())
        throw UsageError("--list-devices lists the devices and runs nothing, it takes no other flag (given: " + given +
                         ")");
    }
    if (sub->count("--device") > 0) o->device = parse_device(o->device_text);
    o->pass.insert(o->pass.end(), flags_after_separator().begin(), flags_after_separator().end());
    if (o->gpu_sweep && o->backend == "cpu")
      throw UsageError("--gpu-sweep with --backend cpu: the sweep runs the GPU grids; leave --backend out or give cuda");
    if (o->gpu_sweep && o->quick)
      throw UsageError("--gpu-sweep with --quick: the sweep runs the default GPU grids; give one of them");
    if (o->gpu_sweep && sub->count("--time-limit") == 0) o->time_limit_s = kGpuSweepLimitS;
    std::string cmd = "kvf run";
    for (const auto& s : o->studies) cmd += " --study " + s;
    cmd += " --backend " + o->backend;
    if (!o->device_text.empty()) cmd += " --device " + o->device_text;
    if (o->quick) cmd += " --quick";
    if (o->gpu_sweep) cmd += " --gpu-sweep";
    if (sub->count("--time-limit") > 0) cmd += " --time-limit " + std::to_string(o->time_limit_s);
    if (!o->out.empty()) cmd += " --out " + o->out;
    if (sub->count("--thread-placement") > 0) cmd += " --thread-placement " + o->thread_placement;
    for (const auto& f : study_flags()) cmd += " " + f.typed;
    if (!o->pass.empty()) cmd += " --";
    for (const auto& p : o->pass) cmd += " " + p;
    exit_with(do_run(*o, cmd));
  });
}

}  // namespace kvf::cli
