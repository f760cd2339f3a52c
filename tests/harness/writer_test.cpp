// Writers on a full disk, without a full disk: a forked child lowers RLIMIT_FSIZE with SIGXFSZ ignored, so
// a write past the limit fails with EFBIG the way ENOSPC does. The parent checks what the child left.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"
#include "kvf/table.hpp"

using namespace kvf;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kvf_writer_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// What the child saw, by exit code.
enum ChildResult { kWriteErrorEfbig = 10, kNoError = 11, kOtherWriteError = 12, kOtherException = 13 };

// Runs `body` in a child whose files may not grow past `limit` bytes. Returns the child's ChildResult.
int with_file_size_limit(rlim_t limit, const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(99);
    int code = kNoError;
    try {
      body();
    } catch (const WriteError& e) {
      const std::string what = e.what();
      code = e.err == EFBIG && what.find(": write failed: File too large") != std::string::npos &&
                     what.find('\n') == std::string::npos
                 ? kWriteErrorEfbig
                 : kOtherWriteError;
    } catch (...) {
      code = kOtherException;
    }
    ::_exit(code);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

CaseRecord record(const std::string& name, std::size_t note_bytes, std::vector<Param> params = {{"op", "read"}}) {
  CaseRecord r;
  r.study = "stream";
  r.case_name = name;
  r.backend = "cpu";
  r.device = "test cpu";
  r.mode = "hot";
  r.params = std::move(params);
  r.summary = summarize(std::vector<double>{0.5, 0.5, 0.5, 0.5});
  r.bytes = 1e9;
  r.gbps = 2;
  r.verified = "yes";
  r.note = std::string(note_bytes, 'n');
  return r;
}

// Every row of cases.csv has exactly as many rows in samples.csv as its `samples` column says, and
// samples.csv holds no sample of a case without a row: nothing half-written, nothing orphaned.
void expect_whole_results(const fs::path& d) {
  for (const char* f : {"cases.csv", "samples.csv"}) {
    if (!fs::exists(d / f)) continue;
    const std::string text = slurp(d / f);
    ASSERT_FALSE(text.empty()) << f;
    EXPECT_EQ(text.back(), '\n') << f << " ends in a torn row";
  }
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_NE(e.path().extension(), ".tmp") << "stray temporary file " << e.path();
  if (!fs::exists(d / "cases.csv")) return;
  const CsvTable cases = read_csv_table((d / "cases.csv").string());
  std::map<std::string, double> want;
  for (std::size_t r = 0; r < cases.rows.size(); ++r) want[cases.at(r, "case")] = *parse_number(cases, r, "samples");
  std::map<std::string, double> have;
  if (fs::exists(d / "samples.csv")) {
    const CsvTable samples = read_csv_table((d / "samples.csv").string());
    for (std::size_t r = 0; r < samples.rows.size(); ++r) have[samples.at(r, "case")] += 1;
  }
  EXPECT_EQ(have, want);
}

}  // namespace

TEST(Writer, AppenderLeavesNoTornRowAtTheFileSizeLimit) {
  const auto d = fresh_dir("appender");
  const auto p = d / "t.csv";
  { CsvAppender out(p.string(), {"a", "b"}); }  // header only: 4 bytes
  const int rc = with_file_size_limit(64, [&] {
    CsvAppender out(p.string(), {"a", "b"});
    out.append({"1", "2"});                          // fits
    out.append({std::string(100, 'x'), "y"});        // does not: part of it would be written
  });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  EXPECT_EQ(slurp(p), "a,b\n1,2\n");
}

TEST(Writer, AppenderBatchIsAllOrNothing) {
  const auto d = fresh_dir("batch");
  const auto p = d / "t.csv";
  const int rc = with_file_size_limit(40, [&] {
    CsvAppender out(p.string(), {"a", "b"});
    out.append_rows({{"1", "2"}, {"3", "4"}});
    out.append_rows({{"5", "6"}, {"7", "8"}, {std::string(30, 'z'), "9"}});
  });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  EXPECT_EQ(slurp(p), "a,b\n1,2\n3,4\n");
}

TEST(Writer, HeaderOfANewFileThatCannotBeWrittenLeavesAnEmptyFile) {
  const auto d = fresh_dir("header");
  const auto p = d / "t.csv";
  const int rc = with_file_size_limit(3, [&] { CsvAppender out(p.string(), {"abc", "def"}); });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  EXPECT_EQ(fs::file_size(p), 0u);
  // An empty file reads as absent: the next appender writes the header again.
  CsvAppender again(p.string(), {"abc", "def"});
  again.append({"1", "2"});
  EXPECT_EQ(slurp(p), "abc,def\n1,2\n");
}

TEST(Writer, AppenderRefusesToGlueARowOntoATornOne) {
  const auto d = fresh_dir("torn");
  const auto p = d / "t.csv";
  std::ofstream(p) << "a,b\n1,2\n3";
  EXPECT_THROW(CsvAppender(p.string(), {"a", "b"}), UsageError);
  EXPECT_EQ(slurp(p), "a,b\n1,2\n3");
}

TEST(Writer, AppenderRefusesAFifo) {
  const auto d = fresh_dir("fifo");
  const auto p = d / "t.csv";
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_THROW(CsvAppender(p.string(), {"a", "b"}), UsageError);  // at once, not blocked in open()
}

// samples.csv fills up first: the case's samples are cut off, its row is not written.
TEST(Writer, CaseWhoseSamplesDoNotFitLeavesNothing) {
  const auto d = fresh_dir("samples_full");
  ResultsDir dir(d);
  const std::vector<Sample> s(4, Sample{0.5});
  const int rc = with_file_size_limit(2048, [&] {
    for (int i = 0; i < 1000; ++i) dir.write_case(record("c" + std::to_string(i), 10), s);
  });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  expect_whole_results(d);
  EXPECT_GT(read_csv_table((d / "cases.csv").string()).rows.size(), 2u);
}

// cases.csv fills up first (long notes): the samples already appended for that case are cut off again.
TEST(Writer, CaseWhoseRowDoesNotFitTakesItsSamplesBack) {
  const auto d = fresh_dir("cases_full");
  ResultsDir dir(d);
  const std::vector<Sample> s(4, Sample{0.5});
  const int rc = with_file_size_limit(4096, [&] {
    for (int i = 0; i < 1000; ++i) dir.write_case(record("c" + std::to_string(i), 700), s);
  });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  expect_whole_results(d);
  const auto n = read_csv_table((d / "cases.csv").string()).rows.size();
  EXPECT_GE(n, 2u);
  EXPECT_LT(n * 4 * 30, fs::file_size(d / "samples.csv") + 4096);  // samples.csv did not hit the limit
}

// A new parameter column rewrites cases.csv through cases.csv.tmp: a failed rewrite keeps the old file.
TEST(Writer, FailedWiderHeaderRewriteKeepsTheOldFileAndNoTmp) {
  const auto d = fresh_dir("widen");
  ResultsDir dir(d);
  const std::vector<Sample> s(4, Sample{0.5});  // as many as record()'s summary counts
  for (int i = 0; i < 3; ++i) dir.write_case(record("c" + std::to_string(i), 200), s);
  const std::string before = slurp(d / "cases.csv");
  const int rc = with_file_size_limit(before.size() + 10, [&] {
    dir.write_case(record("wide", 10, {{"op", "read"}, {"a_new_parameter_column", "1"}}), s);
  });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  EXPECT_EQ(slurp(d / "cases.csv"), before);
  expect_whole_results(d);
}

// meta.json is rewritten through meta.json.tmp: a full disk keeps the old meta.json whole (never 0 bytes)
// and removes the .tmp.
TEST(Writer, FailedMetaUpdateKeepsTheOldMetaAndNoTmp) {
  const auto d = fresh_dir("meta");
  ResultsDir dir(d);
  dir.update_meta([](nlohmann::json& m) { m["status"] = "running"; });
  const std::string before = slurp(d / "meta.json");
  const int rc = with_file_size_limit(before.size() + 16, [&] {
    dir.update_meta([](nlohmann::json& m) { m["big"] = std::string(4096, 'x'); });
  });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  EXPECT_EQ(slurp(d / "meta.json"), before);
  EXPECT_FALSE(fs::exists(d / "meta.json.tmp"));
}

TEST(Writer, NewDirectoryWhoseMetaCannotBeWrittenLeavesNoMetaAndNoTmp) {
  const auto d = fresh_dir("newmeta") / "run";
  const int rc = with_file_size_limit(8, [&] { ResultsDir dir(d); });
  EXPECT_EQ(rc, kWriteErrorEfbig);
  EXPECT_FALSE(fs::exists(d / "meta.json"));
  EXPECT_FALSE(fs::exists(d / "meta.json.tmp"));
}

TEST(Writer, WriteErrorIsOneLineNamingFileAndReason) {
  const WriteError e("/r/cases.csv", ENOSPC);
  EXPECT_STREQ(e.what(), "/r/cases.csv: write failed: No space left on device");
  EXPECT_EQ(e.err, ENOSPC);
  EXPECT_EQ(e.path, "/r/cases.csv");
}
