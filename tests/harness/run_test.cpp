// End-to-end runs of the stream study with tiny sizes: results are complete, verified, and survive
// an interrupted run.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "kvf/thread_placement.hpp"
#include "run_util.hpp"

using namespace kvf::test::run;

TEST(EndToEnd, StreamStudyWithTinySizes) {
  const auto d = fresh_dir("e2e");
  const int rc = wait_exit(spawn({KVF_BENCH_STREAM, "--backend", "cpu", "--size", "4MiB", "--budget", "0.02",
                                  "--warmup", "1", "--out", d.string()}));
  ASSERT_EQ(rc, 0);
  const kvf::CsvTable t = kvf::read_csv_table((d / "cases.csv").string());
  ASSERT_EQ(t.rows.size(), 20u);  // 10 cases x (cold, hot)
  std::size_t total_samples = 0;
  // Every row against the run's best read of its mode, also a read row measured before that best one.
  std::map<std::string, double> best_read;
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (t.at(r, "op") == "read")
      best_read[t.at(r, "mode")] = std::max(best_read[t.at(r, "mode")], *kvf::parse_number(t, r, "gbps"));
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    EXPECT_EQ(t.at(r, "verified"), "yes") << t.at(r, "case");
    EXPECT_NEAR(*kvf::parse_number(t, r, "ceiling_value"), best_read[t.at(r, "mode")], 1e-9) << t.at(r, "case");
    EXPECT_GT(*kvf::parse_number(t, r, "gbps"), 0);
    EXPECT_GT(*kvf::parse_number(t, r, "pct_of_ceiling"), 0);
    EXPECT_LE(*kvf::parse_number(t, r, "q1_s"), *kvf::parse_number(t, r, "median_s"));
    EXPECT_LE(*kvf::parse_number(t, r, "median_s"), *kvf::parse_number(t, r, "q3_s"));
    EXPECT_NE(t.at(r, "note").find("4x LLC"), std::string::npos);  // says it measured cache, not memory
    if (t.at(r, "op") == "read") {  // what the kernel granted beside what was asked (huge), from smaps
      const auto pct = kvf::parse_number(t, r, "huge_backed_pct");
      ASSERT_TRUE(pct.has_value()) << t.at(r, "case");
      EXPECT_GE(*pct, 0);
      EXPECT_LE(*pct, 100);
    }
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
  // The gate reads the pooled rows, against a copy whose last sample is a hair slower (one run given as both
  // sides, or an exact copy of it, is refused).
  const fs::path copy = d.string() + "_copy";
  fs::remove_all(copy);
  fs::copy(d, copy, fs::copy_options::recursive);
  {
    std::ifstream in(copy / "samples.csv");
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::vector<std::string> head, last;
    for (auto* cells : {&head, &last}) {
      std::stringstream ss(cells == &head ? lines.front() : lines.back());
      for (std::string c; std::getline(ss, c, ',');) cells->push_back(c);
    }
    const auto col = std::find(head.begin(), head.end(), "seconds") - head.begin();
    last.at(col) = std::to_string(std::stod(last.at(col)) * 1.000001);
    std::string joined;
    for (std::size_t i = 0; i < last.size(); ++i) joined += (i ? "," : "") + last[i];
    lines.back() = joined;
    std::ofstream out(copy / "samples.csv", std::ios::trunc);
    for (const auto& l : lines) out << l << "\n";
  }
  const Captured g =
      run_capture({KVF_CLI, "gate", "--baseline", d.string(), "--current", copy.string(), "--min-samples", "2"});
  EXPECT_EQ(g.rc, 0) << g.err;
  std::ifstream in(console);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(count_lines(out), t.rows.size()) << out;
  EXPECT_NE(out.find("stream/copy/"), std::string::npos) << out;
  EXPECT_NE(out.find("% of stream:op=read:gbps"), std::string::npos) << out;
  EXPECT_EQ(out.find("iterations:1"), std::string::npos) << out;
  EXPECT_EQ(c.err.find("Library was built as DEBUG"), std::string::npos) << c.err;
}

// --list's estimate follows --budget: each mode may sample the difference longer (a larger budget), or takes
// proportionally less (a smaller one); it had stayed at the default whatever was given.
TEST(EndToEnd, ListEstimatesFollowTheBudget) {
  const auto d = fresh_dir("budget_list");
  fs::create_directories(d);
  const auto est = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {KVF_BENCH_STREAM, "--backend", "cpu", "--size", "64MiB", "--arms", "read",
                                     "--list", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string out = (d / "list.jsonl").string();
    std::ofstream(out).close();  // run_capture opens it without O_CREAT
    const Captured c = run_capture(args, out.c_str());
    EXPECT_EQ(c.rc, 0) << c.err;
    std::ifstream in(out);
    std::string line;
    std::getline(in, line);
    const auto j = nlohmann::json::parse(line);
    return std::make_pair(j.at("est_seconds").get<double>(), int(j.at("cold").get<bool>()) + j.at("hot").get<bool>());
  };
  const auto [standard, modes] = est({});
  ASSERT_GT(standard, 0);
  EXPECT_NEAR(est({"--budget", "2"}).first, standard + modes * 1.5, 1e-9);
  const double smaller = est({"--budget", "0.25"}).first;
  EXPECT_LT(smaller, standard);
  EXPECT_GE(smaller, standard * 0.5 - 1e-9);
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
  EXPECT_EQ(t.rows.size(), 20u);  // 10 stream cases x (cold, hot)
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
    EXPECT_LT(kvf::read_csv_table((d / "cases.csv").string()).rows.size(), 20u);
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
  EXPECT_LT(t.rows.size(), 20u);  // it really was interrupted
  for (std::size_t r = 0; r < t.rows.size(); ++r) EXPECT_TRUE(kvf::parse_number(t, r, "median_s").has_value());
  // Bad input into the same directory loses nothing already measured.
  const auto before = fs::file_size(d / "cases.csv");
  EXPECT_EQ(wait_exit(spawn({KVF_BENCH_STREAM, "--size", "0", "--out", d.string()})), 2);
  EXPECT_EQ(fs::file_size(d / "cases.csv"), before);
}

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

// ---- issue 14: one thread placement per kvf run, chosen on the host it runs on and handed to every bench.
namespace {
const std::vector<std::string> kTinyStream = {"--stream.case-filter", "^read", "--", "--size", "1MiB", "--budget",
                                              "0.01", "--warmup", "0"};
// OMP_PROC_BIND as this test process has it (what an inherited placement passes on), null when unset
nlohmann::json user_bind() {
  const char* v = std::getenv("OMP_PROC_BIND");
  return v ? nlohmann::json(v) : nlohmann::json(nullptr);
}
Output run_placement(const fs::path& d, const std::string& mode, const std::vector<std::string>& env = {}) {
  std::vector<std::string> a = {KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--out", d.string()};
  if (!mode.empty()) a.insert(a.end(), {"--thread-placement", mode});
  a.insert(a.end(), kTinyStream.begin(), kTinyStream.end());
  return run_both(a, env);
}
}  // namespace

TEST(KvfRunThreadPlacement, AGivenPlacementReachesTheBenchesAndIsRecorded) {
  const auto d = fresh_dir("placement_close");
  const Output r = run_placement(d, "close");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.err, "kvf run: thread placement: close OMP_PROC_BIND=close OMP_PLACES=cores: as given")) << r.err;
  const auto meta = read_meta(d);
  const auto& tp = meta["kvf_run"]["thread_placement"];
  EXPECT_EQ(tp["requested"], "close");
  EXPECT_EQ(tp["choice"], "close");
  EXPECT_EQ(tp["env"], nlohmann::json::array({"OMP_PROC_BIND=close", "OMP_PLACES=cores"}));
  EXPECT_FALSE(tp.contains("calibration")) << tp;
  EXPECT_FALSE(fs::exists(d / "thread_placement"));
  // what the bench's OpenMP runtime took
  const auto& ml = meta["studies"]["stream"]["machine_load"];
  EXPECT_EQ(ml["OMP_PROC_BIND"], "close") << ml;
  EXPECT_EQ(ml["OMP_PLACES"], "cores") << ml;
  EXPECT_EQ(ml["omp_proc_bind"], "close") << ml;
  EXPECT_GE(ml["omp_num_places"].get<int>(), 1) << ml;
  // --list says what the run would do, and runs nothing
  const auto l = fresh_dir("placement_list");
  const Output lr = run_both({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--list", "--thread-placement",
                              "spread", "--out", l.string()});
  ASSERT_EQ(lr.rc, 0) << lr.err;
  EXPECT_TRUE(has(lr.out, "\nthread placement: spread OMP_PROC_BIND=spread OMP_PLACES=cores: as given")) << lr.out;
  const Output lc = run_both({KVF_CLI, "run", "--study", "stream", "--backend", "cpu", "--list", "--thread-placement",
                              "calibrate", "--out", l.string()});
  ASSERT_EQ(lc.rc, 0) << lc.err;
  EXPECT_TRUE(has(lc.out, "\nthread placement: calibrated before the first study (--thread-placement calibrate)"))
      << lc.out;
  EXPECT_FALSE(fs::exists(l));
}

TEST(KvfRunThreadPlacement, CalibrateMeasuresEveryCandidateAndFollowsTheRule) {
  const auto d = fresh_dir("placement_calibrate");
  // what an earlier calibration into the same --out left: replaced, never read as this run's
  fs::create_directories(d / "thread_placement" / "inherit-1");
  std::ofstream(d / "thread_placement" / "inherit-1" / "cases.csv") << "study,case,mode,gbps\nstream,x,hot,99999\n";
  const Output r = run_placement(d, "calibrate");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto meta = read_meta(d);
  const auto& tp = meta["kvf_run"]["thread_placement"];
  ASSERT_TRUE(tp.contains("calibration")) << tp;
  const auto& cal = tp["calibration"];
  EXPECT_EQ(cal["size"], "1MiB") << "the stream study's own --size";
  EXPECT_EQ(cal["rounds"], 2);
  std::vector<std::pair<std::string, std::vector<double>>> rates;
  for (const char* name : kvf::kThreadPlacements) {
    const auto& v = cal["stream_read_gbps"][name];
    ASSERT_EQ(v.size(), 2u) << cal;
    rates.push_back({name, {}});
    for (int round = 0; round < 2; ++round) {
      EXPECT_GT(v[round].get<double>(), 0) << cal;
      EXPECT_LT(v[round].get<double>(), 99999) << cal;
      rates.back().second.push_back(v[round].get<double>());
      // each run's own results, hot rows of the read arm only
      const fs::path run = d / "thread_placement" / (std::string(name) + "-" + std::to_string(round + 1));
      const kvf::CsvTable t = kvf::read_csv_table((run / "cases.csv").string());
      ASSERT_FALSE(t.rows.empty()) << run;
      for (std::size_t i = 0; i < t.rows.size(); ++i) {
        EXPECT_EQ(t.at(i, "mode"), "hot");
        EXPECT_EQ(t.at(i, "op"), "read");
      }
      std::ifstream in(run / "meta.json");
      const auto rm = nlohmann::json::parse(in);
      const auto& env = rm["studies"]["stream"]["machine_load"]["OMP_PROC_BIND"];
      EXPECT_EQ(env, std::string(name) == "inherit" ? user_bind() : nlohmann::json(name)) << run;
    }
  }
  const kvf::PlacementPick p = kvf::pick_thread_placement(rates, 0.05);
  EXPECT_EQ(tp["choice"], p.choice) << tp;
  EXPECT_EQ(tp["env"], nlohmann::json(kvf::thread_placement_env(p.choice)));
  EXPECT_TRUE(has(tp["reason"].get<std::string>(), p.why)) << tp;
  const auto& ml = meta["studies"]["stream"]["machine_load"];
  EXPECT_EQ(ml["OMP_PROC_BIND"], p.choice == "inherit" ? user_bind() : nlohmann::json(p.choice)) << ml;
}

TEST(KvfRunThreadPlacement, AutoKeepsWhatTheUserSetAndSaysWhy) {
  const auto d = fresh_dir("placement_user");
  const Output r = run_placement(d, "", {"OMP_PROC_BIND=spread"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto meta = read_meta(d);
  const auto& tp = meta["kvf_run"]["thread_placement"];
  EXPECT_EQ(tp["requested"], "auto");
  EXPECT_EQ(tp["choice"], "inherit");
  EXPECT_TRUE(tp["env"].empty());
  EXPECT_FALSE(tp.contains("calibration"));
  EXPECT_TRUE(has(tp["reason"].get<std::string>(), "set in the environment (OMP_PROC_BIND=spread): kept")) << tp;
  EXPECT_EQ(meta["studies"]["stream"]["machine_load"]["omp_proc_bind"], "spread");
}

TEST(KvfRunThreadPlacement, AutoCalibratesOnlyWherePlacementCanMatter) {
  if (std::getenv("OMP_PROC_BIND") || std::getenv("OMP_PLACES")) GTEST_SKIP() << "OMP_PROC_BIND/OMP_PLACES set here";
  const auto d = fresh_dir("placement_auto");
  const Output r = run_placement(d, "");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto meta = read_meta(d);
  const auto& tp = meta["kvf_run"]["thread_placement"];
  const kvf::CpuDomains dom = kvf::cpu_domains();
  EXPECT_EQ(tp.contains("calibration"), dom.numa_nodes > 1 || dom.l3_domains > 1) << tp;
  if (dom.numa_nodes <= 1 && dom.l3_domains <= 1) {
    EXPECT_EQ(tp["choice"], "inherit");
    EXPECT_TRUE(has(tp["reason"].get<std::string>(), "one NUMA node and ")) << tp;
  }
  // --quick never calibrates unless asked
  const auto q = fresh_dir("placement_quick");
  std::vector<std::string> a = {KVF_CLI, "run", "--quick", "--study", "stream", "--backend", "cpu", "--out",
                                q.string()};
  a.insert(a.end(), kTinyStream.begin(), kTinyStream.end());
  const Output rq = run_both(a);
  ASSERT_EQ(rq.rc, 0) << rq.err;
  const auto qmeta = read_meta(q);
  const auto& tq = qmeta["kvf_run"]["thread_placement"];
  EXPECT_FALSE(tq.contains("calibration")) << tq;
  EXPECT_EQ(tq["choice"], "inherit");
}
