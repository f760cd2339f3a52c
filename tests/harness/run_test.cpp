// End-to-end runs of the stream study with tiny sizes: results are complete, verified, and survive
// an interrupted run.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kvf/backend.hpp"
#include "kvf/table.hpp"

extern char** environ;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kvf_run_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}
// argv / envp for posix_spawn: pointers into `strings`, which must outlive the call.
std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}
// This process's environment plus `extra` ("NAME=value").
std::vector<std::string> environ_with(const std::vector<std::string>& extra) {
  std::vector<std::string> envs;
  for (char** p = environ; *p; ++p) envs.push_back(*p);
  envs.insert(envs.end(), extra.begin(), extra.end());
  return envs;
}
pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv = c_strings(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}
int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
// The exit code (128+signal when killed), or nullopt when `pid` is still running after `seconds`.
std::optional<int> wait_exit_for(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do {
    int st = 0;
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

struct Captured {
  int rc = -1;
  std::string err;  // all of stderr
};
// Runs a command to the end with stdout to `out` and stderr captured.
Captured run_capture(std::vector<std::string> args, const char* out = "/dev/null") {
  std::vector<char*> argv = c_strings(args);
  int fds[2];
  if (pipe(fds) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  Captured c;
  if (rc != 0) {
    close(fds[0]);
    return c;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) c.err.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  c.rc = wait_exit(pid);
  return c;
}
std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

// Processes whose parent is `parent` (from /proc/<pid>/stat; comm may hold spaces, so after its ')').
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}
std::string cmdline_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}
// Alive and not a zombie.
bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] != 'Z';
}
std::size_t csv_lines(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}
// The bench `kvf_pid` launched for measuring (not one of its --list runs), once it has written a row.
pid_t wait_for_measuring_bench(pid_t kvf_pid, const fs::path& dir, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const pid_t c : children_of(kvf_pid))
      if (cmdline_of(c).find("--out") != std::string::npos && csv_lines(dir / "cases.csv") >= 2) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}
// Whole rows only: each file ends with a line break and reads as a table.
void expect_whole_rows(const fs::path& d) {
  for (const char* f : {"cases.csv", "samples.csv"}) {
    std::ifstream in(d / f, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(text.empty()) << f;
    EXPECT_EQ(text.back(), '\n') << f << " ends in a torn row";
    EXPECT_NO_THROW(kvf::read_csv_table((d / f).string())) << f;
  }
  for (const auto& e : fs::directory_iterator(d)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}
// `kvf run` of a stream study that takes ~15 s unless stopped, and its bench once that has written a row
// (bench <= 0 when none did in time; kvf is killed then).
struct KvfAndBench {
  pid_t kvf = -1, bench = -1;
};
KvfAndBench start_long_stream_run(const fs::path& d) {
  const pid_t kvf = spawn({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--out", d.string(), "--",
                           "--size", "8MiB", "--budget", "1", "--noise", "0.001", "--min-samples", "3"});
  if (kvf <= 0) return {kvf, -1};
  const pid_t bench = wait_for_measuring_bench(kvf, d, 120);
  if (bench <= 0) kill(kvf, SIGKILL);
  return {kvf, bench};
}
}  // namespace

TEST(EndToEnd, StreamStudyWithTinySizes) {
  const auto d = fresh_dir("e2e");
  const int rc = wait_exit(spawn({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "4MiB", "--budget", "0.02",
                                  "--warmup", "1", "--out", d.string()}));
  ASSERT_EQ(rc, 0);
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  ASSERT_EQ(t.rows.size(), 18u);  // 9 arms x (cold, hot)
  std::size_t total_samples = 0;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    EXPECT_EQ(t.at(r, "verified"), "yes") << t.at(r, "case");
    EXPECT_GT(*kvf::parse_number(t, r, "gbps"), 0);
    EXPECT_GT(*kvf::parse_number(t, r, "pct_of_ceiling"), 0);
    EXPECT_LE(*kvf::parse_number(t, r, "q1_s"), *kvf::parse_number(t, r, "median_s"));
    EXPECT_LE(*kvf::parse_number(t, r, "median_s"), *kvf::parse_number(t, r, "q3_s"));
    EXPECT_NE(t.at(r, "note").find("4x LLC"), std::string::npos);  // says it measured cache, not memory
    total_samples += static_cast<std::size_t>(*kvf::parse_number(t, r, "samples"));
  }
  const kvf::CsvTable s = kvf::read_csv_table((d / "samples.csv").string());
  EXPECT_EQ(s.rows.size(), total_samples);
  std::ifstream in(d / "meta.json");
  const auto meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta["studies"]["stream"]["status"], "complete");
  EXPECT_EQ(meta["device"]["backend"], "cpu");
}

// Google Benchmark habits: --benchmark_repetitions pools into one row per (case, mode) that kvf gate accepts
// (samples.csv says each sample's repetition); --benchmark_filter keeps the ceiling the chosen cases are stated
// against; the console has one line per row with the median and its unit.
TEST(EndToEnd, RepetitionsPoolIntoOneRowAndFilterKeepsTheCeiling) {
  const auto d = fresh_dir("reps");
  fs::create_directories(d);
  const std::string console = (d.parent_path() / "reps_console.txt").string();
  std::ofstream(console).close();  // run_capture opens it without O_CREAT
  const Captured c = run_capture({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB", "--budget", "0.01",
                                  "--warmup", "0", "--min-samples", "3", "--max-samples", "3", "--out", d.string(),
                                  "--benchmark_repetitions=2", "--benchmark_filter=stream/copy/.*/hot"},
                                 console.c_str());
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.err.find("--benchmark_filter 'stream/copy/.*/hot' chose 1 cases and keeps the"), std::string::npos) << c.err;
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  std::set<std::string> keys;
  bool copy_has_pct = false;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    EXPECT_TRUE(keys.insert(t.at(r, "case") + "/" + t.at(r, "mode")).second) << "two rows for " << t.at(r, "case");
    EXPECT_NE(t.at(r, "note").find("2 of 2 repetitions pooled"), std::string::npos) << t.at(r, "note");
    if (t.at(r, "case").rfind("copy", 0) == 0) {
      EXPECT_EQ(t.at(r, "mode"), "hot");
      copy_has_pct = !t.at(r, "pct_of_ceiling").empty();
    } else {
      EXPECT_EQ(t.at(r, "case").rfind("read", 0), 0u) << "only the read ceiling is kept: " << t.at(r, "case");
    }
  }
  EXPECT_TRUE(copy_has_pct);
  const kvf::CsvTable s = kvf::read_csv_table((d / "samples.csv").string());
  std::map<std::string, std::set<std::string>> reps;
  std::map<std::string, std::size_t> pooled;
  for (std::size_t r = 0; r < s.rows.size(); ++r) {
    reps[s.at(r, "case") + "/" + s.at(r, "mode")].insert(s.at(r, "repetition"));
    ++pooled[s.at(r, "case") + "/" + s.at(r, "mode")];
  }
  EXPECT_EQ(reps.size(), t.rows.size());
  for (const auto& [k, v] : reps) EXPECT_EQ(v, (std::set<std::string>{"0", "1"})) << k;
  for (std::size_t r = 0; r < t.rows.size(); ++r)  // the row counts every repetition's samples
    EXPECT_EQ(t.at(r, "samples"), std::to_string(pooled[t.at(r, "case") + "/" + t.at(r, "mode")])) << t.at(r, "case");
  const Captured g = run_capture({KVF_CLI, "gate", "--baseline", d.string(), "--current", d.string(), "--min-samples", "2"});
  EXPECT_EQ(g.rc, 0) << g.err;
  std::ifstream in(console);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(count_lines(out), t.rows.size()) << out;
  EXPECT_NE(out.find("stream/copy/"), std::string::npos) << out;
  EXPECT_NE(out.find("% of stream:op=read:gbps"), std::string::npos) << out;
  EXPECT_EQ(out.find("iterations:1"), std::string::npos) << out;
  EXPECT_EQ(c.err.find("Library was built as DEBUG"), std::string::npos) << c.err;
}

// --profile: one warm-up and one execution per case and mode, rows marked so the report never scores them.
TEST(EndToEnd, ProfileRunExecutesEachCaseOnceAndSaysSo) {
  const auto d = fresh_dir("profile");
  const Captured c = run_capture({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB", "--arms", "read",
                                  "--profile", "--out", d.string()});
  ASSERT_EQ(c.rc, 0) << c.err;
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  ASSERT_FALSE(t.rows.empty());
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    EXPECT_EQ(t.at(r, "samples"), "1");
    EXPECT_EQ(t.at(r, "stop_reason"), "profile");
    EXPECT_NE(t.at(r, "note").find("profile run (--profile)"), std::string::npos);
  }
  std::ifstream in(d / "meta.json");
  EXPECT_EQ(nlohmann::json::parse(in)["studies"]["stream"]["measure"]["profile"], true);
}

TEST(EndToEnd, KvfRunQuickWritesOneDirectory) {
  const auto d = fresh_dir("kvf");
  const int rc = wait_exit(spawn({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--out", d.string(), "--",
                                  "--size", "2MiB", "--budget", "0.01", "--warmup", "0"}));
  ASSERT_EQ(rc, 0);
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  EXPECT_EQ(t.rows.size(), 18u);
  std::ifstream in(d / "meta.json");
  const auto meta = nlohmann::json::parse(in);
  EXPECT_NE(meta["command"].get<std::string>().find("kvf run"), std::string::npos);
}

TEST(EndToEnd, KvfRunTimeLimitStopsAStudyAndKeepsItsRows) {
  const auto d = fresh_dir("time_limit");
  // Alone, the study would take ~15 s: stopped after its share (all of the 4 s), exit 0, the stop recorded.
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_exit(spawn({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--time-limit", "4", "--out",
                                  d.string(), "--", "--size", "8MiB", "--budget", "1", "--noise", "0.001",
                                  "--min-samples", "3"}));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(rc, 0);
  EXPECT_LT(took, 14.0);
  std::ifstream in(d / "meta.json");
  const auto meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta["kvf_run"]["time_limited"], nlohmann::json::array({"stream"}));
  EXPECT_EQ(meta["kvf_run"]["time_limit_s"], 4.0);
  // On a loaded machine the bench may still be setting up at 4 s; whatever rows it wrote are whole.
  if (fs::exists(d / "cases.csv")) {
    expect_whole_rows(d);
    EXPECT_LT(kvf::read_csv_table((d / "cases.csv").string()).rows.size(), 18u);
  }
}

TEST(EndToEnd, KvfRunKeepsAFinishedStreamStudyOfItsDirectory) {
  const auto d = fresh_dir("stream_kept");
  ASSERT_EQ(wait_exit(spawn({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--out", d.string(), "--",
                             "--size", "2MiB", "--budget", "0.01", "--warmup", "0"})),
            0);
  const auto rows = kvf::read_csv_table((d / "cases.csv").string()).rows.size();
  // Another study into the same directory: stream is not run again (it would repeat its case names).
  const int rc = wait_exit(spawn({KVF_CLI, "run", "--study", "idleness", "--backend", "cpu", "--out", d.string(), "--",
                                  "--arms", "decode", "--batches", "1", "--contexts", "1024", "--budget", "0.01",
                                  "--warmup", "0", "--no-cold"}));
  EXPECT_EQ(rc, 0);
  std::size_t stream_rows = 0;
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  for (std::size_t r = 0; r < t.rows.size(); ++r) stream_rows += t.at(r, "study") == "stream";
  EXPECT_EQ(stream_rows, rows);
  EXPECT_GT(t.rows.size(), rows);
}

TEST(EndToEnd, KilledRunLeavesEveryFinishedCaseReadable) {
  const auto d = fresh_dir("killed");
  // Long budget: the run would take ~15 s; kill it as soon as a few rows are in.
  const pid_t pid = spawn({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "8MiB", "--budget", "1", "--noise", "0.001",
                           "--min-samples", "3", "--out", d.string()});
  ASSERT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::size_t rows_before = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(d / "cases.csv");
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line)) ++n;
    if (n >= 3) {  // header + 2 rows
      rows_before = n - 1;
      break;
    }
  }
  ASSERT_GE(rows_before, 2u) << "the run wrote no rows in time";
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  EXPECT_GE(t.rows.size(), rows_before);
  EXPECT_LT(t.rows.size(), 18u);  // it really was interrupted
  for (std::size_t r = 0; r < t.rows.size(); ++r) EXPECT_TRUE(kvf::parse_number(t, r, "median_s").has_value());
  // Bad input into the same directory loses nothing already measured.
  const auto before = fs::file_size(d / "cases.csv");
  EXPECT_EQ(wait_exit(spawn({KVF_BENCH_STREAM, "--size", "0", "--out", d.string()})), 2);
  EXPECT_EQ(fs::file_size(d / "cases.csv"), before);
}

TEST(Signals, KvfForwardsSigtermToItsBenchAndStops) {
  const auto d = fresh_dir("kvf_sigterm");
  const auto [kvf, bench] = start_long_stream_run(d);
  ASSERT_GT(kvf, 0);
  ASSERT_GT(bench, 0) << "kvf started no bench that wrote a row in time";
  kill(kvf, SIGTERM);
  const auto rc = wait_exit_for(kvf, 10);
  if (!rc) kill(kvf, SIGKILL), kill(bench, SIGKILL);
  ASSERT_TRUE(rc.has_value()) << "kvf did not stop on SIGTERM";
  EXPECT_EQ(*rc, 128 + SIGTERM);
  // kvf waited for its bench: it is gone (reaped), not left running or orphaned.
  EXPECT_FALSE(running(bench)) << "the bench outlived kvf";
  expect_whole_rows(d);
  EXPECT_LT(kvf::read_csv_table((d / "cases.csv").string()).rows.size(), 18u);  // it really was stopped
}

TEST(Signals, BenchStopsWhenKvfIsKilled) {
  const auto d = fresh_dir("kvf_sigkill");
  // Orphans come to this process instead of init, so the bench's end can be waited for and its cause read.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const auto [kvf, bench] = start_long_stream_run(d);
  ASSERT_GT(kvf, 0);
  ASSERT_GT(bench, 0) << "kvf started no bench that wrote a row in time";
  kill(kvf, SIGKILL);
  EXPECT_EQ(wait_exit(kvf), 128 + SIGKILL);
  const auto rc = wait_exit_for(bench, 10);
  if (!rc) kill(bench, SIGKILL), wait_exit(bench);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_TRUE(rc.has_value()) << "the bench kept running after kvf was killed";
  EXPECT_EQ(*rc, 128 + SIGTERM);  // PR_SET_PDEATHSIG
  expect_whole_rows(d);
}

// The bench takes SIGTERM while it writes rows from a process with several threads (OpenMP): it dies of the
// signal (exit status says so) between whole rows.
TEST(Signals, SigtermToABenchLeavesWholeRows) {
  for (int round = 0; round < 3; ++round) {
    const auto d = fresh_dir("bench_sigterm_" + std::to_string(round));
    const pid_t pid = spawn({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB", "--budget", "0.001",
                             "--warmup", "0", "--min-samples", "1", "--max-samples", "2000", "--out", d.string()});
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (csv_lines(d / "cases.csv") < 2 + static_cast<std::size_t>(round) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    kill(pid, SIGTERM);
    const auto rc = wait_exit_for(pid, 10);
    if (!rc) kill(pid, SIGKILL), wait_exit(pid);
    ASSERT_TRUE(rc.has_value());
    if (*rc == 0) continue;  // finished before the signal came: nothing to check
    EXPECT_EQ(*rc, 128 + SIGTERM);
    expect_whole_rows(d);
  }
}

// A full disk, by the file size limit: the bench ends with one line and exit 1 (never SIGABRT), every row
// it leaves is whole, and meta.json says the run stopped.
TEST(FullDisk, BenchStopsWithOneLineAndWholeRows) {
  for (const int kib : {2, 6, 12}) {
    const auto d = fresh_dir("full_" + std::to_string(kib));
    const std::string cmd = "ulimit -f " + std::to_string(kib) + "; trap '' XFSZ; exec \"$0\" \"$@\"";
    const Captured c = run_capture({"/bin/sh", "-c", cmd, KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB",
                                    "--budget", "0.01", "--warmup", "0", "--out", d.string()});
    ASSERT_EQ(c.rc, 1) << kib << " KiB: " << c.err;
    std::size_t error_lines = 0;
    std::istringstream in(c.err);
    for (std::string line; std::getline(in, line);)
      if (line.find("error:") != std::string::npos) {
        ++error_lines;
        EXPECT_NE(line.find(": write failed: File too large"), std::string::npos) << line;
        EXPECT_EQ(line.rfind("bench_stream: error: " + d.string() + "/", 0), 0u) << line;
      }
    EXPECT_EQ(error_lines, 1u) << c.err;
    if (fs::exists(d / "cases.csv")) expect_whole_rows(d);
    for (const auto& e : fs::directory_iterator(d)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
    std::ifstream meta_in(d / "meta.json");
    const auto meta = nlohmann::json::parse(meta_in);  // whole, whatever it could record
    if (meta.contains("studies")) {
      EXPECT_EQ(meta["studies"]["stream"]["status"].get<std::string>().rfind("stopped: ", 0), 0u) << meta.dump();
    }
  }
}

// kvf run stops at the study that could not write (the next one would only fail the same way).
TEST(FullDisk, KvfRunStopsWithOneLine) {
  const auto d = fresh_dir("kvf_full");
  const Captured c = run_capture({"/bin/sh", "-c", "ulimit -f 6; exec \"$0\" \"$@\"", KVF_CLI, "run", "--study", "stream",
                                  "--backend", "cpu", "--out", d.string(), "--", "--size", "1MiB", "--budget", "0.01",
                                  "--warmup", "0"});
  EXPECT_EQ(c.rc, 1) << c.err;
  EXPECT_NE(c.err.find("write failed: File too large"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("kvf run: stream could not write its results"), std::string::npos) << c.err;
  expect_whole_rows(d);
}

TEST(FullDisk, StdoutToDevFullIsAnErrorNotACrash) {
  const auto d = fresh_dir("devfull");
  const Captured run = run_capture({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB", "--budget", "0.01",
                                    "--warmup", "0", "--out", d.string()},
                                   "/dev/full");
  EXPECT_EQ(run.rc, 1) << run.err;
  EXPECT_NE(run.err.find("bench_stream: error: stdout: write failed"), std::string::npos) << run.err;
  expect_whole_rows(d);
  const Captured list = run_capture({KVF_BENCH_STREAM, "--backend", "cpu", "--list"}, "/dev/full");
  EXPECT_EQ(list.rc, 1) << list.err;
  const Captured kvf_list = run_capture({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--list"}, "/dev/full");
  EXPECT_EQ(kvf_list.rc, 1) << kvf_list.err;
  EXPECT_NE(kvf_list.err.find("kvf: error: stdout: write failed"), std::string::npos) << kvf_list.err;
}

// Every bad flag value: exit 2 and exactly one line on stderr naming the flag and the value.
TEST(BadFlags, OneLineNamingFlagAndValueExit2) {
  const auto d = fresh_dir("badflags");
  const std::string out = (d / "never").string();
  struct Bad {
    std::vector<std::string> args;
    std::vector<std::string> says;
  };
  const std::string B = KVF_BENCH_STREAM, K = KVF_CLI;
  const std::vector<Bad> bad = {
      {{B, "--budget", "nan"}, {"--budget", "'nan'", "[0.001, 3600]"}},
      {{B, "--budget", "inf"}, {"--budget", "'inf'"}},
      {{B, "--budget", "-1"}, {"--budget", "'-1'"}},
      {{B, "--budget", "0"}, {"--budget", "'0'"}},
      {{B, "--budget", ""}, {"--budget", "''"}},
      {{B, "--budget", "1e999"}, {"--budget", "'1e999'"}},
      {{B, "--budget", "0x10"}, {"--budget", "'0x10'"}},
      {{B, "--budget", "1\n2"}, {"--budget", "'1\\n2'"}},
      {{B, "--noise", "nan"}, {"--noise", "'nan'", "[0.001, 100]"}},
      {{B, "--noise", "-inf"}, {"--noise", "'-inf'"}},
      {{B, "--noise", "0"}, {"--noise", "'0'"}},
      {{B, "--min-samples", "0"}, {"--min-samples", "'0'", "[1, 1000000]"}},
      {{B, "--min-samples", ""}, {"--min-samples", "''"}},
      {{B, "--max-samples", "99999999999999999999"}, {"--max-samples", "'99999999999999999999'"}},
      {{B, "--max-samples", "2.5"}, {"--max-samples", "'2.5'"}},
      {{B, "--min-samples", "10", "--max-samples", "5"}, {"--min-samples 10", "--max-samples 5"}},
      {{B, "--warmup", "-1"}, {"--warmup", "'-1'", "[0, 1000]"}},
      {{B, "--warmup", "nan"}, {"--warmup", "'nan'"}},
      {{B, "--out", ""}, {"--out", "''"}},
      {{B, "--case-filter", ""}, {"--case-filter", "''"}},
      {{B, "--case-filter", std::string(5000, 'a')}, {"--case-filter", "5000 characters"}},
      {{B, "--case-filter", "(\n"}, {"--case-filter", "'(\\n'"}},
      {{B, "--list", ""}, {"--list", "''", "text and json"}},
      {{B, "--list", "xml"}, {"--list", "'xml'"}},
      {{B, "--backend", ""}, {"--backend", "''"}},
      {{B, "--benchmark_repetitions=0"}, {"--benchmark_repetitions", "'0'"}},
      {{B, "--benchmark_repetitions=abc"}, {"--benchmark_repetitions", "'abc'"}},
      {{B, "--benchmark_min_time=abc"}, {"--benchmark_min_time"}},
      {{B, "--benchmark_filter="}, {"--benchmark_filter", "''", "empty"}},
      {{B, "--benchmark_filter=-"}, {"--benchmark_filter", "'-'", "empty"}},
      {{B, "--benchmark_filter=(copy"}, {"--benchmark_filter", "'(copy'", "not a valid regular expression"}},
      {{B, "--profile", "--budget", "1"}, {"--profile with --budget"}},
      {{B, "--profile", "--benchmark_repetitions=3"}, {"--profile with --benchmark_repetitions=3"}},
      {{B, "--frobnicate", "x\ny"}, {"--frobnicate", "x\\ny"}},
      {{K, "run", "--out", ""}, {"--out", "''"}},
      {{K, "run", "--study", ""}, {"--study", "''", "allowed: stream"}},
      {{K, "run", "--backend", ""}, {"--backend", "''", "allowed: auto, cpu, cuda"}},
      {{K, "run", "--backend", "tpu"}, {"--backend", "'tpu'"}},
      {{K, "run", "--study", "a\nb"}, {"--study", "a\\nb"}},
  };
  for (const auto& b : bad) {
    std::vector<std::string> args = b.args;
    if (args[0] == K) {
      args.push_back("--list");  // should a bad value pass, nothing runs
    } else {
      // A flag given twice is an error of its own: add the defaults only where the case gives none.
      for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
               {"--backend", "cpu"}, {"--size", "1MiB"}, {"--out", out}})
        if (std::find(b.args.begin(), b.args.end(), flag) == b.args.end()) args.insert(args.end(), {flag, value});
    }
    std::string shown;
    for (const auto& a : args) shown += a.substr(0, 40) + " ";
    const Captured c = run_capture(args);
    EXPECT_EQ(c.rc, 2) << shown << "\n" << c.err;
    EXPECT_EQ(count_lines(c.err), 1u) << shown << "\n" << c.err;
    for (const auto& s : b.says) EXPECT_NE(c.err.find(s), std::string::npos) << shown << " lacks " << s << ": " << c.err;
  }
  EXPECT_FALSE(fs::exists(out));
}

// ---- issue 16: per-study flags, the stream ceilings a case filter needs, devices, the console and its summary.
namespace {
struct Output {
  int rc = -1;
  std::string out, err;
};
// Runs a command to the end with stdout and stderr captured (read in turn: the outputs here are small) and
// `env` ("NAME=value") added to the environment.
Output run_both(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  const fs::path dir = fresh_dir("capture_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::create_directories(dir);
  const std::string o = (dir / "out").string(), e = (dir / "err").string();
  std::vector<char*> argv = c_strings(args);
  std::vector<std::string> envs = environ_with(env);
  std::vector<char*> envp = c_strings(envs);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, o.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, e.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  Output r;
  if (rc != 0) return r;
  r.rc = wait_exit(pid);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}
nlohmann::json read_meta(const fs::path& d) {
  std::ifstream in(d / "meta.json");
  return nlohmann::json::parse(in);
}
bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
}  // namespace

// The brief's end-to-end check: a per-study flag reaches access only (stream would refuse --case-filter's
// cases otherwise), stream runs only the read ceiling the kept cases are stated against, and the summary says
// what ran. Not a terminal: plain lines, no carriage return.
TEST(KvfRunIssue16, PerStudyFlagsNarrowStreamAndSummarize) {
  const auto d = fresh_dir("per_study");
  const Output r = run_both({KVF_CLI, "run", "--quick", "--backend", "cpu", "--study", "access", "--out", d.string(),
                             "--access.case-filter", "^gather/", "--access.run-bytes", "1024", "--", "--budget", "0.01",
                             "--warmup", "0"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "carriage return on a pipe";
  EXPECT_TRUE(has(r.err, "stream runs only its cases that provide stream:op=read")) << r.err;
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  std::size_t access_rows = 0, stream_rows = 0, gathered_1k = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    if (t.at(i, "study") == "stream") {
      ++stream_rows;
      EXPECT_EQ(t.at(i, "op"), "read") << t.at(i, "case");
    } else {
      ++access_rows;
      EXPECT_EQ(t.at(i, "study"), "access");
      EXPECT_EQ(t.at(i, "case").rfind("gather/", 0), 0u) << t.at(i, "case");
      gathered_1k += t.at(i, "case").rfind("gather/R1024/", 0) == 0;  // the default run length is 256
    }
  }
  EXPECT_GT(gathered_1k, 0u) << "--access.run-bytes 1024 did not reach bench_access";
  EXPECT_GT(stream_rows, 0u);
  EXPECT_GT(access_rows, 0u);
  const auto meta = read_meta(d);
  EXPECT_EQ(meta["kvf_run"]["study_flags"]["access"][0], "--access.case-filter ^gather/");
  EXPECT_TRUE(meta["kvf_run"]["stream_case_filter"].is_string());
  // The summary counts every (case, mode) row this run wrote.
  EXPECT_TRUE(has(r.err, "kvf run: finished in ")) << r.err;
  EXPECT_TRUE(has(r.err, std::to_string(t.rows.size()) + " case runs (case x mode): " + std::to_string(t.rows.size()) +
                             " measured, 0 failed, 0 skipped, 0 not run"))
      << r.err;
  EXPECT_TRUE(has(r.err, "] access/gather/")) << "a plain progress line per finished case: " << r.err;
  EXPECT_TRUE(has(r.out, "results: " + d.string() + "\n")) << r.out;
  EXPECT_TRUE(has(r.out, "next: kvf report " + d.string() + "\n")) << r.out;
  // A bench's own [i/n] lines are for a bench run alone on a terminal: none here.
  EXPECT_FALSE(has(r.err, "  ETA ")) << r.err;
}

// Without a case filter stream runs whole, and kvf says why; a flag for stream reaches stream only.
TEST(KvfRunIssue16, UnfilteredStudiesKeepEveryCeilingAndSaySo) {
  const Output r = run_both({KVF_CLI, "run", "--quick", "--backend", "cpu", "--study", "access", "--list",
                             "--stream.size", "4MiB"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.err, "stream runs whole")) << r.err;
  EXPECT_TRUE(has(r.err, "access run(s) every case (no --<study>.case-filter)")) << r.err;
  EXPECT_TRUE(has(r.out, "array_bytes") || has(r.out, "4MiB") || has(r.out, "4 MiB")) << r.out;
}

// A case filter whose cases state no stream ceiling: stream does not run at all.
TEST(KvfRunIssue16, NoStreamWhenTheKeptCasesNeedNone) {
  const Output r = run_both({KVF_CLI, "run", "--quick", "--backend", "cpu", "--study", "frontier", "--list",
                             "--frontier.case-filter", "^gemm_ceiling"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.err, "stream does not run: the cases the case filters keep state no stream ceiling")) << r.err;
  EXPECT_FALSE(has(r.out, "study stream")) << r.out;
}

// A finished stream study in --out is kept (not run again): a --stream.* flag then has no study to go to.
TEST(KvfRunIssue16, StreamFlagRefusedWhenItsDirectoryKeepsStream) {
  const auto d = fresh_dir("stream_kept_flag");
  ASSERT_EQ(wait_exit(spawn({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--out", d.string(), "--",
                             "--size", "2MiB", "--budget", "0.01", "--warmup", "0"})),
            0);
  const Output r = run_both({KVF_CLI, "run", "--study", "access", "--backend", "cpu", "--out", d.string(), "--list",
                             "--stream.size", "4MiB"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_TRUE(has(r.err, "--stream.size: study stream does not run here: " + d.string() + " holds a finished stream study"))
      << r.err;
}

// --device on a bench is recorded with CUDA_VISIBLE_DEVICES as it was (the ordinal counts the visible GPUs only).
TEST(KvfRunIssue16, DeviceSelectionRecordedInMetaJson) {
  const auto d = fresh_dir("device_meta");
  const Output r = run_both({KVF_BENCH_STREAM, "--backend", "cpu", "--device", "cpu", "--size", "1MiB", "--budget",
                             "0.01", "--warmup", "0", "--case-filter", "^read", "--out", d.string()},
                            {"CUDA_VISIBLE_DEVICES=5,7"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto meta = read_meta(d);
  for (const auto& sel : {meta["device_selection"], meta["studies"]["stream"]["device_selection"]}) {
    EXPECT_EQ(sel["requested"], "cpu") << sel;
    EXPECT_EQ(sel["backend"], "cpu") << sel;
    EXPECT_TRUE(sel["cuda_ordinal"].is_null()) << sel;
    EXPECT_EQ(sel["CUDA_VISIBLE_DEVICES"], "5,7") << sel;
  }
  // kvf run --device cpu passes it on and records what was asked for.
  const auto k = fresh_dir("device_meta_kvf");
  const Output kr = run_both({KVF_CLI, "run", "--study", "stream", "--device", "cpu", "--out", k.string(),
                              "--stream.case-filter", "^read", "--", "--size", "1MiB", "--budget", "0.01", "--warmup", "0"});
  ASSERT_EQ(kr.rc, 0) << kr.err;
  const auto km = read_meta(k);
  EXPECT_EQ(km["kvf_run"]["device"], "cpu");
  EXPECT_EQ(km["studies"]["stream"]["device_selection"]["requested"], "cpu");
  EXPECT_TRUE(km["studies"]["stream"]["device_selection"]["CUDA_VISIBLE_DEVICES"].is_null() ||
              std::getenv("CUDA_VISIBLE_DEVICES"));
}

// --list-devices: the CPU always; each GPU, or (no GPU) one line saying so with the CUDA reason.
TEST(KvfRunIssue16, ListDevices) {
  const Output r = run_both({KVF_CLI, "run", "--list-devices"}, {"CUDA_VISIBLE_DEVICES=3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("cpu ", 0), 0u) << r.out;
  EXPECT_TRUE(has(r.out, "[--device cpu]")) << r.out;
  EXPECT_TRUE(has(r.out, "CUDA_VISIBLE_DEVICES=3: the GPU ordinals count only the GPUs it leaves visible")) << r.out;
  std::string why;
  const auto gpus = kvf::list_gpus(&why);
  if (gpus.empty()) {
    EXPECT_TRUE(has(r.out, "no usable GPU: " + why)) << r.out;
    EXPECT_FALSE(why.empty());
    // --device all has nothing to run here: one line, exit 2.
    const Output all = run_both({KVF_CLI, "run", "--device", "all", "--list"});
    EXPECT_EQ(all.rc, 2) << all.err;
    EXPECT_EQ(count_lines(all.err), 1u) << all.err;
    EXPECT_TRUE(has(all.err, "--device all: no GPU visible (" + why + ")")) << all.err;
  } else {
    EXPECT_TRUE(has(r.out, "gpu 0    " + gpus[0].name)) << r.out;
    EXPECT_TRUE(has(r.out, "compute capability " + gpus[0].compute_capability)) << r.out;
  }
}

// The progress protocol: with KVF_PROGRESS_FD a bench writes one JSON line per finished (case, mode) run.
TEST(KvfRunIssue16, ProgressFdGetsOneLinePerCaseAndMode) {
  const auto d = fresh_dir("progress_fd");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string out = d.string();
  std::vector<std::string> args = {KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB", "--budget", "0.01",
                                   "--warmup", "0", "--out", out};
  std::vector<char*> argv = c_strings(args);
  std::vector<std::string> envs = environ_with({"KVF_PROGRESS_FD=9"});
  std::vector<char*> envp = c_strings(envs);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 9);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  ASSERT_EQ(wait_exit(pid), 0);
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  std::istringstream in(text);
  std::string line;
  std::size_t lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["study"], "stream");
    EXPECT_EQ(j["status"], "ok") << line;
    EXPECT_TRUE(j["mode"] == "cold" || j["mode"] == "hot") << line;
    EXPECT_GE(j["seconds"].get<double>(), 0.0);
    EXPECT_EQ(t.at(lines, "case"), j["case"]) << line;
    ++lines;
  }
  EXPECT_EQ(lines, t.rows.size());
}

// Skipped cases: the summary names each with its reason, as cases.csv does (frontier's gemm ceilings: the oneDNN
// bf16 one is skipped on a CPU without bf16 matmuls; on one with them, none is skipped and the summary says 0).
TEST(KvfRunIssue16, SummaryListsSkippedCasesAsCasesCsvDoes) {
  const auto d = fresh_dir("skipped_summary");
  const Output r = run_both({KVF_CLI, "run", "--quick", "--backend", "cpu", "--study", "frontier", "--out", d.string(),
                             "--frontier.case-filter", "^gemm_ceiling", "--", "--budget", "0.01", "--warmup", "0"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  std::set<std::string> skipped_cases;
  std::size_t skipped_rows = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    EXPECT_NE(t.at(i, "study"), "stream") << "no stream ceiling is needed by the gemm ceilings";
    if (t.at(i, "note").rfind("skipped: ", 0) != 0) continue;
    ++skipped_rows;
    skipped_cases.insert(t.at(i, "case"));
    EXPECT_TRUE(has(r.err, t.at(i, "note").substr(9))) << "the reason: " << r.err;
  }
  EXPECT_TRUE(has(r.err, " measured, 0 failed, " + std::to_string(skipped_rows) + " skipped, 0 not run")) << r.err;
  for (const auto& c : skipped_cases) EXPECT_TRUE(has(r.err, "frontier/" + c)) << r.err;
  if (!skipped_cases.empty()) {
    EXPECT_TRUE(has(r.err, "kvf run: skipped " + std::to_string(skipped_cases.size()) +
                               (skipped_cases.size() == 1 ? " case: " : " cases: ")))
        << r.err;
  }
}

// On a terminal: the progress line is redrawn in place (carriage return, erase line), the bench's own [i/n] ETA
// lines do not appear (its stderr is kvf's pipe), and the summary ends the run on a line of its own.
TEST(KvfRunIssue16, ProgressLineInPlaceOnATerminal) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string slave = ptsname(master);
  const auto d = fresh_dir("tty");
  std::vector<std::string> args = {KVF_CLI, "run", "--backend", "cpu", "--study", "stream", "--out", d.string(),
                                   "--stream.case-filter", "^read/loop/huge", "--", "--size", "2MiB", "--budget", "0.01",
                                   "--warmup", "0"};
  std::vector<char*> argv = c_strings(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, slave.c_str(), O_RDWR | O_NOCTTY, 0);
  posix_spawn_file_actions_addclose(&fa, master);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  std::string text;
  char buf[4096];
  std::optional<int> rc;
  // Read while it runs (a full pty would block it); after its exit, what is left.
  while (true) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      const ssize_t n = read(master, buf, sizeof buf);
      if (n > 0) text.append(buf, static_cast<std::size_t>(n));
      else if (rc) break;
    } else if (rc) {
      break;
    }
    if (!rc) rc = wait_exit_for(pid, 0);
  }
  close(master);
  ASSERT_TRUE(rc);
  EXPECT_EQ(*rc, 0) << text;
  EXPECT_TRUE(has(text, "\r\033[Kkvf run [")) << text;
  EXPECT_TRUE(has(text, " case runs, ")) << text;
  EXPECT_TRUE(has(text, "\r\033[Kkvf run: finished in ")) << "the progress line is erased before the summary: " << text;
  EXPECT_FALSE(has(text, "  ETA ")) << "a bench's own [i/n] line: " << text;
}
