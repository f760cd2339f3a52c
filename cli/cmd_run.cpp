// kvf run: resolve the backend once, then launch each study's bench binary into one results directory.
// The stream study always runs first when another study is chosen: it is the ceiling the others are
// stated against, and it must be measured in the same run.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
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
#include "kvf/results.hpp"

extern char** environ;

namespace kvf::cli {

namespace {

struct StudyEntry {
  const char* name;
  const char* what;
};
// Every study of the suite, in the order a run takes them.
constexpr std::array kStudies = {
    StudyEntry{"stream", "bandwidth ceilings: read, write, copy, host link"},
    StudyEntry{"access", "contiguous blocks vs scattered tokens at matched bytes; gather penalty by run length"},
    StudyEntry{"frontier", "per-page KV recompute vs transfer"},
    StudyEntry{"idleness", "decode-phase compute idleness from counters"},
};

std::filesystem::path bin_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : exe.parent_path();
}

std::filesystem::path bench_path(const std::string& study) { return bin_dir() / ("bench_" + study); }

// Runs argv; returns the exit code (128+signal when killed). Captures stdout when `out` is given.
int run_process(const std::vector<std::string>& args, std::string* out = nullptr) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int pipefd[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out) {
    if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (out) close(pipefd[1]);
  if (rc != 0) {
    if (out) close(pipefd[0]);
    throw std::runtime_error(args[0] + ": cannot start: " + std::strerror(rc));
  }
  if (out) {
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<std::size_t>(n));
    close(pipefd[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
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

struct RunOptions {
  std::vector<std::string> studies;
  std::string backend = "auto";
  bool quick = false;
  bool list = false;
  std::string out;
  std::vector<std::string> pass;  // after "--": given to every bench binary
};

int do_run(const RunOptions& o, const std::string& command) {
  std::string allowed;
  for (const auto& s : kStudies) allowed += std::string(allowed.empty() ? "" : ", ") + s.name;
  std::vector<std::string> chosen;
  const auto requested = split_commas(o.studies);
  for (const auto& r : requested) {
    bool known = false;
    for (const auto& s : kStudies) known = known || r == s.name;
    if (!known) throw UsageError("--study " + r + ": unknown study; allowed: " + allowed);
  }
  for (const auto& s : kStudies) {
    const bool want = requested.empty() || std::find(requested.begin(), requested.end(), s.name) != requested.end();
    const bool built = std::filesystem::exists(bench_path(s.name));
    if (want && !built) {
      if (!requested.empty())
        throw UsageError("--study " + std::string(s.name) + ": not available in this build (" +
                         bench_path(s.name).string() + " is missing)");
      std::fprintf(stderr, "kvf run: study %s is not built yet; skipping it\n", s.name);
      continue;
    }
    if (want) chosen.push_back(s.name);
  }
  if (chosen.empty()) throw UsageError("no study to run");
  if (chosen.front() != "stream" && std::filesystem::exists(bench_path("stream"))) {
    chosen.insert(chosen.begin(), "stream");
    std::fprintf(stderr, "kvf run: running stream first: it is the ceiling the other studies are stated against\n");
  }

  std::string note;
  auto be = make_backend(o.backend, &note);
  std::fprintf(stderr, "kvf run: %s\n", note.c_str());
  const std::string backend = be->name();
  be.reset();

  auto common = [&](const std::string& study) {
    std::vector<std::string> a = {bench_path(study).string(), "--backend", backend};
    if (o.quick) a.push_back("--quick");
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
    m["kvf_run"] = {{"studies", chosen}, {"backend", backend}, {"quick", o.quick}, {"estimated_s", total}};
  });
  std::fprintf(stderr, "kvf run: %zu studies, estimated %.0f s; results in %s\n", chosen.size(), total, out.c_str());

  int worst = kExitOk;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    std::fprintf(stderr, "kvf run: [%zu/%zu] %s: %zu cases, ~%.0f s\n", i + 1, chosen.size(), chosen[i].c_str(), ncases[i],
                 est[i]);
    auto args = common(chosen[i]);
    args.insert(args.end(), {"--out", out});
    const int rc = run_process(args);
    if (rc == kExitUsage) {
      std::fprintf(stderr, "kvf run: %s stopped on bad input; results so far are in %s\n", chosen[i].c_str(), out.c_str());
      return kExitUsage;
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
  for (const auto& s : kStudies) studies_help += std::string(" ") + s.name + " (" + s.what + ");";
  auto* sub = app.add_subcommand("run", "run studies by launching their bench binaries into one results directory");
  sub->add_option("--study", o->studies, studies_help)->delimiter(',');
  sub->add_option("--backend", o->backend, "auto | cpu | cuda (auto takes CUDA when a usable GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_flag("--quick", o->quick, "the quick subset of every study (under 30 s on the CPU)");
  sub->add_option("--out", o->out, "results directory (default results/runs/<utc>-<backend>)");
  sub->add_flag("--list", o->list, "print the cases and the estimated time, run nothing");
  sub->add_option("args", o->pass, "after --: flags given to every bench binary (e.g. -- --budget 1)");
  sub->positionals_at_end();
  sub->callback([o, &app] {
    std::string cmd = "kvf run";
    for (const auto& s : o->studies) cmd += " --study " + s;
    cmd += " --backend " + o->backend;
    if (o->quick) cmd += " --quick";
    if (!o->out.empty()) cmd += " --out " + o->out;
    for (const auto& p : o->pass) cmd += " " + p;
    exit_with(do_run(*o, cmd));
  });
}

}  // namespace kvf::cli
