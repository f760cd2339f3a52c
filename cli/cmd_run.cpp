// kvf run: resolve the backend once, then launch each study's bench binary into one results directory.
// The stream study always runs first when another study is chosen: it is the ceiling the others are
// stated against, and it must be measured in the same run.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/install_paths.hpp"
#include "kvf/results.hpp"
#include "kvf/studies.hpp"

extern char** environ;

namespace kvf::cli {

namespace {

std::filesystem::path bench_path(const std::string& study) { return kvf::bench_path(study); }

// A signal to kvf is passed on to the bench it is running (the bench finishes the row it is writing and
// dies of it); kvf then stops instead of starting the next study. Without this, a kill of kvf's own pid
// left the bench running and writing for the rest of its study.
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_child = 0;  // the running bench's pid (pid_t is an int on Linux), 0 when none
constexpr std::array kForwarded = {SIGINT, SIGTERM, SIGHUP};

void forward_signal(int sig) {
  g_signal = sig;
  const pid_t child = g_child;
  if (child > 0) ::kill(child, sig);
}

void install_forwarding() {
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid and read return EINTR and the loops below look again
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// Runs argv (fork + exec); returns the exit code (128+signal when killed). Captures stdout when `out` is
// given. With limit_s > 0 the child gets SIGTERM once it has run that long (it finishes the row it is writing,
// as on a forwarded signal; SIGKILL 60 s later) and *timed_out says so. The child gets SIGTERM when kvf dies (PR_SET_PDEATHSIG), so a bench never outlives its kvf,
// not even a kill -9 of kvf; posix_spawn cannot set that, hence fork.
int run_process(const std::vector<std::string>& args, std::string* out = nullptr, double limit_s = 0,
                bool* timed_out = nullptr) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int outfd[2] = {-1, -1};
  int errfd[2] = {-1, -1};  // the child's exec errno; closed by a successful exec (O_CLOEXEC)
  if (out && ::pipe2(outfd, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  if (::pipe2(errfd, O_CLOEXEC) != 0) {
    const int err = errno;
    if (out) ::close(outfd[0]), ::close(outfd[1]);
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(err));
  }
  // Forwarded signals wait until g_child names the new process, so none falls between fork and that.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec. Default dispositions before unblocking: a
    // forwarded signal arriving now must kill this child, not run kvf's handler in it.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : kForwarded) ::sigaction(sig, &dfl, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // kvf died before prctl took effect
    if (out && ::dup2(outfd[1], 1) < 0) {
      const int err = errno;
      (void)!::write(errfd[1], &err, sizeof err);
      ::_exit(127);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::execve(argv[0], argv.data(), environ);
    const int err = errno;
    (void)!::write(errfd[1], &err, sizeof err);
    ::_exit(127);
  }
  const int fork_err = errno;
  if (pid > 0) g_child = pid;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);  // a signal that came meanwhile is forwarded now
  // Another thread of kvf (OpenMP's, from the backend probe) may have taken one before g_child was set.
  if (pid > 0 && g_signal) ::kill(pid, g_signal);
  ::close(errfd[1]);
  if (out) ::close(outfd[1]);
  if (pid < 0) {
    ::close(errfd[0]);
    if (out) ::close(outfd[0]);
    throw std::runtime_error(args[0] + ": cannot start: " + std::strerror(fork_err));
  }
  const auto started = std::chrono::steady_clock::now();
  auto wait_child = [pid, limit_s, timed_out, started] {
    int status = 0;
    if (limit_s > 0) {
      bool termed = false;
      for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) break;
        const double ran = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        if (!termed && ran > limit_s) {
          ::kill(pid, SIGTERM);
          termed = true;
          if (timed_out) *timed_out = true;
        } else if (termed && ran > limit_s + 60) {
          ::kill(pid, SIGKILL);
        }
        ::usleep(50000);
      }
    } else {
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    g_child = 0;
    return status;
  };
  int exec_err = 0;
  ssize_t n;
  while ((n = ::read(errfd[0], &exec_err, sizeof exec_err)) < 0 && errno == EINTR) {
  }
  ::close(errfd[0]);
  if (n == static_cast<ssize_t>(sizeof exec_err)) {
    if (out) ::close(outfd[0]);
    wait_child();
    throw std::runtime_error(args[0] + ": cannot start: " + std::strerror(exec_err));
  }
  if (out) {
    char buf[4096];
    for (;;) {
      n = ::read(outfd[0], buf, sizeof buf);
      if (n > 0) out->append(buf, static_cast<std::size_t>(n));
      else if (n == 0 || errno != EINTR) break;
    }
    ::close(outfd[0]);
  }
  const int status = wait_child();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// After a forwarded signal: the bench has stopped; kvf stops too, with the shell's code for the signal.
int stopped_by_signal(const std::string& out) {
  const int sig = g_signal;
  std::fprintf(stderr, "kvf run: stopped by %s%s\n", signal_name(sig),
               out.empty() ? "" : ("; the finished rows are in " + out).c_str());
  return 128 + sig;
}

// The status a bench left for its study in meta.json; empty when it cannot be read.
std::string study_status(const std::string& out, const std::string& study) {
  try {
    const auto m = read_json_input(std::filesystem::path(out) / "meta.json", out);
    const auto s = m.at("studies").at(study).at("status");
    return s.is_string() ? s.get<std::string>() : std::string{};
  } catch (const std::exception&) {
    return {};
  }
}

std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, ','))
      if (!part.empty()) out.push_back(part);
  }
  return out;
}

// --gpu-sweep: every study's default GPU grid, each case verified before it is timed, into one directory,
// within --time-limit (25 minutes unless given). Extra flags per study, sized from the H100 run of 2026-11-22
// (results/gpu/H100-2026-11-22): its frontier default grid did not finish in 150 s (stopped inside the layers
// arm after 505 planned x/xq cases), and its idleness sweep ran with --budget 0.2.
struct SweepFlags {
  std::string_view study;
  std::vector<std::string> flags;
};
const std::vector<SweepFlags>& gpu_sweep_flags() {
  static const std::vector<SweepFlags> f = {{"frontier", {"--budget", "0.2"}}, {"idleness", {"--budget", "0.2"}}};
  return f;
}
constexpr double kGpuSweepLimitS = 25 * 60;

struct RunOptions {
  std::vector<std::string> studies;
  std::string backend = "auto";
  bool quick = false;
  bool list = false;
  bool gpu_sweep = false;
  double time_limit_s = 0;  // 0: none
  std::string out;
  std::vector<std::string> pass;  // after "--": given to every bench binary
};

// The studies to run, in the study list's order: those asked for (all built ones by default), stream first.
std::vector<std::string> choose_studies(const RunOptions& o) {
  std::string allowed;
  for (const auto& s : kStudies) allowed += std::string(allowed.empty() ? "" : ", ") + std::string(s.name);
  std::vector<std::string> chosen;
  const auto requested = split_commas(o.studies);
  for (const auto& r : requested) {
    bool known = false;
    for (const auto& s : kStudies) known = known || r == s.name;
    if (!known) throw UsageError("--study " + r + ": unknown study; allowed: " + allowed);
  }
  for (const auto& study : kStudies) {
    const std::string name(study.name);
    const bool want = requested.empty() || std::find(requested.begin(), requested.end(), name) != requested.end();
    const bool built = std::filesystem::exists(bench_path(name));
    if (want && !built) {
      if (!requested.empty())
        throw UsageError("--study " + name + ": not available in this build (" + bench_path(name).string() +
                         " is missing)");
      std::fprintf(stderr, "kvf run: study %s is not built yet; skipping it\n", name.c_str());
      continue;
    }
    if (want) chosen.push_back(name);
  }
  if (chosen.empty()) throw UsageError("no study to run");
  // A run continued into a directory that holds a finished stream study (a sweep split over several calls)
  // keeps that ceiling instead of measuring it twice under one case name.
  const bool stream_done = !o.out.empty() && study_status(o.out, "stream") == "complete";
  if (chosen.front() != "stream" && std::filesystem::exists(bench_path("stream"))) {
    if (stream_done) {
      std::fprintf(stderr, "kvf run: %s already holds a finished stream study: its ceiling is used, not measured again\n",
                   o.out.c_str());
    } else {
      chosen.insert(chosen.begin(), "stream");
      std::fprintf(stderr, "kvf run: running stream first: it is the ceiling the other studies are stated against\n");
    }
  }
  return chosen;
}

// Under --time-limit a study gets the share of the time left that its estimate has of the estimates left, so
// what a fast study leaves over goes to the ones after it. 0: no limit.
double time_share(const RunOptions& o, double elapsed_s, const std::vector<double>& est, std::size_t i) {
  if (o.time_limit_s <= 0) return 0;
  double est_left = 0;
  for (std::size_t j = i; j < est.size(); ++j) est_left += est[j];
  const double left = o.time_limit_s - elapsed_s;
  return std::max(1.0, left * (est_left > 0 ? est[i] / est_left : 1.0 / double(est.size() - i)));
}

int do_run(const RunOptions& o, const std::string& command) {
  const std::vector<std::string> chosen = choose_studies(o);

  install_forwarding();
  std::string note;
  auto be = make_backend(o.backend, &note);
  const std::string backend = be->name();
  be.reset();
  if (o.gpu_sweep && backend != "cuda")
    throw UsageError("--gpu-sweep: no usable GPU here (" + note + "); it runs the GPU grids only");
  std::fprintf(stderr, "kvf run: %s\n", note.c_str());

  auto common = [&](const std::string& study) {
    std::vector<std::string> a = {bench_path(study).string(), "--backend", backend};
    if (o.quick) a.push_back("--quick");
    if (o.gpu_sweep)
      for (const auto& f : gpu_sweep_flags())
        if (f.study == study) a.insert(a.end(), f.flags.begin(), f.flags.end());
    a.insert(a.end(), o.pass.begin(), o.pass.end());
    return a;
  };

  // Estimates from each bench's own case list (also what --list prints).
  std::vector<double> est(chosen.size(), 0);
  std::vector<std::size_t> ncases(chosen.size(), 0);
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    auto args = common(chosen[i]);
    args.insert(args.end(), {"--list", "json"});
    std::string listing;
    const int rc = run_process(args, &listing);
    if (g_signal) return stopped_by_signal({});
    if (rc != 0) return rc == kExitUsage ? kExitUsage : kExitFailure;
    std::istringstream in(listing);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      ++ncases[i];
      est[i] += j.value("est_seconds", 0.0);
      if (o.list)
        std::printf("%-10s %-58s %7.1fs%s\n", chosen[i].c_str(), j.value("case", "").c_str(), j.value("est_seconds", 0.0),
                    j.contains("skipped") ? ("  (skipped: " + j["skipped"].get<std::string>() + ")").c_str() : "");
    }
  }
  double total = 0;
  for (double e : est) total += e;
  if (o.list) {
    for (std::size_t i = 0; i < chosen.size(); ++i)
      std::printf("study %-9s %4zu cases  ~%.0f s\n", chosen[i].c_str(), ncases[i], est[i]);
    std::printf("total: %zu studies, estimated %.0f s on backend %s%s\n", chosen.size(), total, backend.c_str(),
                o.quick ? " (--quick)" : "");
    return kExitOk;
  }

  std::string out = o.out;
  if (out.empty()) {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
    out = "results/runs/" + std::string(buf) + "-" + backend;
  }
  ResultsDir dir(out);
  dir.update_meta([&](nlohmann::json& m) {
    m["command"] = command;
    m["kvf_run"] = {{"studies", chosen},     {"backend", backend},         {"quick", o.quick},
                    {"estimated_s", total}, {"gpu_sweep", o.gpu_sweep}, {"time_limit_s", o.time_limit_s}};
  });
  std::fprintf(stderr, "kvf run: %zu studies, estimated %.0f s; results in %s\n", chosen.size(), total, out.c_str());

  int worst = kExitOk;
  const auto run_start = std::chrono::steady_clock::now();
  std::vector<std::string> time_limited;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const double share_s =
        time_share(o, std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count(), est, i);
    std::fprintf(stderr, "kvf run: [%zu/%zu] %s: %zu cases, ~%.0f s%s\n", i + 1, chosen.size(), chosen[i].c_str(),
                 ncases[i], est[i], share_s > 0 ? (", stopped after " + std::to_string(int(share_s)) + " s").c_str() : "");
    if (g_signal) return stopped_by_signal(out);
    auto args = common(chosen[i]);
    args.insert(args.end(), {"--out", out});
    bool timed_out = false;
    const int rc = run_process(args, nullptr, share_s, &timed_out);
    if (g_signal) return stopped_by_signal(out);
    if (timed_out) {
      std::fprintf(stderr, "kvf run: %s reached its share of --time-limit (%.0f s) and was stopped; its finished rows are in %s\n",
                   chosen[i].c_str(), share_s, out.c_str());
      time_limited.push_back(chosen[i]);
      dir.update_meta([&](nlohmann::json& m) { m["kvf_run"]["time_limited"] = time_limited; });
      continue;
    }
    if (rc == kExitUsage) {
      std::fprintf(stderr, "kvf run: %s stopped on bad input; results so far are in %s\n", chosen[i].c_str(), out.c_str());
      return kExitUsage;
    }
    // A bench that could not write its results (full disk) said so in meta.json, or could not even do that and
    // left "running": the next study would only fail the same way.
    if (rc == kExitFailure) {
      const std::string status = study_status(out, chosen[i]);
      if (status.rfind("stopped: ", 0) == 0 || status == "running") {
        std::fprintf(stderr, "kvf run: %s could not write its results; no further study is run; the finished rows are in %s\n",
                     chosen[i].c_str(), out.c_str());
        return kExitFailure;
      }
    }
    if (rc != kExitOk) {
      std::fprintf(stderr, "kvf run: %s exited with %d (%s); going on with the next study\n", chosen[i].c_str(), rc,
                   rc == kExitVerify ? "verify failed" : "failures");
      if (worst == kExitOk || rc == kExitVerify) worst = rc >= 128 ? kExitFailure : rc;
    }
  }
  std::printf("results: %s\n", out.c_str());
  return worst;
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  std::string studies_help = "studies to run, comma-separated (default: all built). Known:";
  for (const auto& s : kStudies) studies_help += " " + std::string(s.name) + " (" + std::string(s.doc) + ");";
  auto* sub = app.add_subcommand("run", "run studies by launching their bench binaries into one results directory");
  std::string allowed;
  for (const auto& s : kStudies) allowed += std::string(allowed.empty() ? "" : ", ") + std::string(s.name);
  // An empty name (--study '', --study stream,) would otherwise be dropped and leave "all studies".
  sub->add_option("--study", o->studies, studies_help)
      ->delimiter(',')
      ->check(CLI::Validator(
          [allowed](std::string& v) -> std::string {
            return v.empty() ? "'' is not a study; allowed: " + allowed : std::string{};
          },
          ""));
  sub->add_option("--backend", o->backend, "auto | cpu | cuda (auto takes CUDA when a usable GPU is present)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v == "auto" || v == "cpu" || v == "cuda" ? std::string{}
                                                             : "'" + v + "' is not a backend; allowed: auto, cpu, cuda";
          },
          "auto|cpu|cuda"));
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
  sub->add_option("args", o->pass, "after --: flags given to every bench binary (e.g. -- --budget 1)");
  sub->positionals_at_end();
  sub->callback([o, sub, &app] {
    // Belt and braces for the validator above, which CLI11 may skip for an empty value.
    if (sub->count("--out") > 0 && o->out.empty())
      throw UsageError("--out '': empty; give a directory (leave the flag out for the default)");
    if (o->gpu_sweep && o->backend == "cpu")
      throw UsageError("--gpu-sweep with --backend cpu: the sweep runs the GPU grids; leave --backend out or give cuda");
    if (o->gpu_sweep && o->quick)
      throw UsageError("--gpu-sweep with --quick: the sweep runs the default GPU grids; give one of them");
    if (o->gpu_sweep && sub->count("--time-limit") == 0) o->time_limit_s = kGpuSweepLimitS;
    std::string cmd = "kvf run";
    for (const auto& s : o->studies) cmd += " --study " + s;
    cmd += " --backend " + o->backend;
    if (o->quick) cmd += " --quick";
    if (o->gpu_sweep) cmd += " --gpu-sweep";
    if (sub->count("--time-limit") > 0) cmd += " --time-limit " + std::to_string(o->time_limit_s);
    if (!o->out.empty()) cmd += " --out " + o->out;
    for (const auto& p : o->pass) cmd += " " + p;
    exit_with(do_run(*o, cmd));
  });
}

}  // namespace kvf::cli
