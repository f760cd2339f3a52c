// A run stopped from outside: signals to kvf and to a bench, and a full disk; whatever stops it, every row left
// behind is whole. Built into harness_io_tests, which scripts/untrusted runs under the sanitizers.
#include <gtest/gtest.h>

#include "run_util.hpp"

using namespace kvf::test::run;

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
  EXPECT_LT(kvf::read_csv_table((d / "cases.csv").string()).rows.size(), 20u);  // it really was stopped
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
// it leaves is whole, and meta.json says the run stopped, or still says "running" where the stopped status
// itself would pass the limit (the old file stays whole; kvf run reads "running" as stopped).
TEST(FullDisk, BenchStopsWithOneLineAndWholeRows) {
  for (const int blocks : {2, 6, 7, 12}) {
    const auto d = fresh_dir("full_" + std::to_string(blocks));
    // dash's (/bin/sh's) ulimit -f counts 512-byte blocks.
    const std::uintmax_t limit_bytes = 512u * static_cast<std::uintmax_t>(blocks);
    const std::string cmd = "ulimit -f " + std::to_string(blocks) + "; trap '' XFSZ; exec \"$0\" \"$@\"";
    const Captured c = run_capture({"/bin/sh", "-c", cmd, KVF_BENCH_STREAM, "--backend", "cpu", "--size", "1MiB",
                                    "--budget", "0.01", "--warmup", "0", "--out", d.string()});
    ASSERT_EQ(c.rc, 1) << blocks << " blocks: " << c.err;
    std::size_t error_lines = 0;
    std::string failure;
    std::istringstream in(c.err);
    for (std::string line; std::getline(in, line);)
      if (line.find("error:") != std::string::npos) {
        ++error_lines;
        failure = line.substr(line.find("error: ") + 7);
        EXPECT_NE(line.find(": write failed: File too large"), std::string::npos) << line;
        EXPECT_EQ(line.rfind("bench_stream: error: " + d.string() + "/", 0), 0u) << line;
      }
    EXPECT_EQ(error_lines, 1u) << c.err;
    if (fs::exists(d / "cases.csv")) expect_whole_rows(d);
    for (const auto& e : fs::directory_iterator(d)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
    std::ifstream meta_in(d / "meta.json");
    auto meta = nlohmann::json::parse(meta_in);  // whole, whatever it could record
    if (!meta.contains("studies")) continue;
    auto& study = meta["studies"]["stream"];
    const auto status = study["status"].get<std::string>();
    if (status == "running") {
      // The smallest end meta the bench tries: the stopped status and the finish time, nothing else.
      study["status"] = "stopped: " + failure;
      study["finished_utc"] = "2026-01-01T00:00:00Z";
      EXPECT_GT(meta.dump(2).size() + 1, limit_bytes) << "meta.json says running where the stopped status fits";
    } else {
      EXPECT_EQ(status, "stopped: " + failure) << meta.dump();
    }
  }
}

// kvf run stops at the study that could not write (the next one would only fail the same way).
TEST(FullDisk, KvfRunStopsWithOneLine) {
  const auto d = fresh_dir("kvf_full");
  // 16 blocks of 512 bytes: meta.json (~3.5 KiB) fits, samples.csv (~150 KiB) does not.
  const Captured c = run_capture({"/bin/sh", "-c", "ulimit -f 16; exec \"$0\" \"$@\"", KVF_CLI, "run", "--study", "stream",
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
