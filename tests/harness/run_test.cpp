// End-to-end runs of the stream study with tiny sizes: results are complete, verified, and survive
// an interrupted run.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kvf/table.hpp"

extern char** environ;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kvf_run_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}
pid_t spawn(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
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
