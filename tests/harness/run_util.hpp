// What the end-to-end tests of runs share (run_test.cpp, signals_test.cpp): spawning kvf and the stream bench
// with deadlines, and reading what a run left behind.
#pragma once
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

namespace kvf::test::run {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kvf_run_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}
// argv / envp for posix_spawn: pointers into `strings`, which must outlive the call.
inline std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}
// This process's environment plus `extra` ("NAME=value").
inline std::vector<std::string> environ_with(const std::vector<std::string>& extra) {
  std::vector<std::string> envs;
  for (char** p = environ; *p; ++p) envs.push_back(*p);
  envs.insert(envs.end(), extra.begin(), extra.end());
  return envs;
}
inline pid_t spawn(std::vector<std::string> args) {
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
inline int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
// The exit code (128+signal when killed), or nullopt when `pid` is still running after `seconds`.
inline std::optional<int> wait_exit_for(pid_t pid, double seconds) {
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
inline Captured run_capture(std::vector<std::string> args, const char* out = "/dev/null") {
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
inline std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

// Processes whose parent is `parent` (from /proc/<pid>/stat; comm may hold spaces, so after its ')').
inline std::vector<pid_t> children_of(pid_t parent) {
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
inline std::string cmdline_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}
// Alive and not a zombie.
inline bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] != 'Z';
}
inline std::size_t csv_lines(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}
// The bench `kvf_pid` launched for measuring (not one of its --list runs), once it has written a row.
inline pid_t wait_for_measuring_bench(pid_t kvf_pid, const fs::path& dir, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const pid_t c : children_of(kvf_pid))
      if (cmdline_of(c).find("--out") != std::string::npos && csv_lines(dir / "cases.csv") >= 2) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}
// Whole rows only: each file ends with a line break and reads as a table.
inline void expect_whole_rows(const fs::path& d) {
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
inline KvfAndBench start_long_stream_run(const fs::path& d) {
  const pid_t kvf = spawn({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--out", d.string(), "--",
                           "--size", "8MiB", "--budget", "1", "--noise", "0.001", "--min-samples", "3"});
  if (kvf <= 0) return {kvf, -1};
  const pid_t bench = wait_for_measuring_bench(kvf, d, 120);
  if (bench <= 0) kill(kvf, SIGKILL);
  return {kvf, bench};
}

}  // namespace kvf::test::run
