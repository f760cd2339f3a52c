#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kvf/errors.hpp"
#include "kvf/result_tables.hpp"
#include "kvf/results.hpp"
#include "kvf/table.hpp"

using namespace kvf;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kvf_results_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}
CaseRecord record(const std::string& study, const std::string& name, std::vector<Param> params, double median,
                  double bytes) {
  CaseRecord r;
  r.study = study;
  r.case_name = name;
  r.backend = "cpu";
  r.device = "test cpu";
  r.mode = "hot";
  r.params = std::move(params);
  r.summary = summarize(std::vector<double>{median, median, median});
  r.bytes = bytes;
  r.gbps = bytes / median / 1e9;
  r.verified = "yes";
  r.note = "line one\nline two, with comma";
  return r;
}
}  // namespace

TEST(Results, RowsAndSamplesAreReadableAndParamsWidenTheHeader) {
  const auto d = fresh_dir("widen");
  ResultsDir dir(d);
  const std::vector<Sample> s = {{0.5}, {0.5}, {0.5}};
  dir.write_case(record("stream", "read", {{"op", "read"}}, 0.5, 1e9), s);
  dir.write_case(record("access", "gather", {{"op", "gather"}, {"run_bytes", "256"}}, 1.0, 1e9), s);
  const CsvTable t = read_csv_table((d / "cases.csv").string());
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.at(0, "op"), "read");
  EXPECT_EQ(t.at(0, "run_bytes"), "");  // the first row gained the new column, empty
  EXPECT_EQ(t.at(1, "run_bytes"), "256");
  EXPECT_EQ(t.at(0, "note"), "line one line two, with comma");
  EXPECT_EQ(parse_number(t, 0, "gbps"), 2.0);
  const CsvTable samples = read_csv_table((d / "samples.csv").string());
  EXPECT_EQ(samples.rows.size(), 6u);
  EXPECT_EQ(samples.at(3, "study"), "access");
  EXPECT_TRUE(fs::exists(d / "meta.json"));
  EXPECT_FALSE(fs::exists(d / "cases.csv.tmp"));
}

TEST(Results, CeilingIsTheBestMatchingRowOfTheSameMode) {
  const auto d = fresh_dir("ceiling");
  ResultsDir dir(d);
  const std::vector<Sample> s = {{1.0}};
  dir.write_case(record("stream", "read/a", {{"op", "read"}}, 1.0, 10e9), s);   // 10 GB/s
  dir.write_case(record("stream", "read/b", {{"op", "read"}}, 1.0, 12e9), s);   // 12 GB/s
  dir.write_case(record("stream", "write", {{"op", "write"}}, 1.0, 50e9), s);   // not a read
  const auto c = find_ceiling(d, CeilingRef{"stream", {{"op", "read"}}, "gbps"}, "hot");
  ASSERT_TRUE(c.has_value());
  EXPECT_DOUBLE_EQ(*c, 12.0);
  EXPECT_FALSE(find_ceiling(d, CeilingRef{"stream", {{"op", "read"}}, "gbps"}, "cold").has_value());
  EXPECT_FALSE(find_ceiling(fresh_dir("none"), CeilingRef{"stream", {{"op", "read"}}, "gbps"}, "hot").has_value());
}

// A CUDA row must not be stated against a CPU stream study in the same directory (nor the reverse), nor one GPU's
// row against another's.
TEST(Results, CeilingIsOfTheRowsBackendAndDevice) {
  const auto d = fresh_dir("ceiling_device");
  ResultsDir dir(d);
  const std::vector<Sample> s = {{1.0}};
  dir.write_case(record("stream", "read/a", {{"op", "read"}}, 1.0, 30e9), s);  // "test cpu", cpu: 30 GB/s
  CaseRecord gpu = record("stream", "read/a", {{"op", "read"}}, 1.0, 3000e9);
  gpu.backend = "cuda";
  gpu.device = "H100";
  dir.write_case(gpu, s);
  const CeilingRef read{"stream", {{"op", "read"}}, "gbps"};
  EXPECT_DOUBLE_EQ(*find_ceiling(d, read, "hot", "cpu", "test cpu"), 30.0);
  EXPECT_DOUBLE_EQ(*find_ceiling(d, read, "hot", "cuda", "H100"), 3000.0);
  EXPECT_FALSE(find_ceiling(d, read, "hot", "cuda", "H200").has_value());
  EXPECT_DOUBLE_EQ(*find_ceiling(d, read, "hot"), 3000.0);  // no backend or device given: any row
}

// A run's rows stated against the best so far of their own ceiling are stated again against the best at the end
// (the stream study's read variants); rows before `first`, rows without a ceiling and rows already right stay.
TEST(Results, RestateCeilingsStatesEarlierRowsAgainstTheRunsBest) {
  const auto d = fresh_dir("restate");
  ResultsDir dir(d);
  const std::vector<Sample> s = {{1.0}};
  const CeilingRef read{"stream", {{"op", "read"}}, "gbps"};
  auto stated = [&](CaseRecord r, double ceiling) {
    r.ceiling = read.label();
    r.ceiling_value = ceiling;
    r.pct_of_ceiling = 100 * r.gbps / ceiling;
    return r;
  };
  dir.write_case(stated(record("stream", "read/old", {{"op", "read"}}, 1.0, 40e9), 40), s);  // an earlier run
  const std::size_t first = dir.case_row_count();
  EXPECT_EQ(first, 1u);
  dir.write_case(stated(record("stream", "read/a", {{"op", "read"}}, 1.0, 10e9), 10), s);   // best so far: itself
  dir.write_case(stated(record("stream", "write", {{"op", "write"}}, 1.0, 5e9), 10), s);    // against read/a
  dir.write_case(stated(record("stream", "read/b", {{"op", "read"}}, 1.0, 20e9), 40), s);   // already right
  dir.write_case(record("stream", "free", {{"op", "read_1thread"}}, 1.0, 1e9), s);          // no ceiling
  const std::size_t n = dir.restate_ceilings(first, [&](const std::string& name) -> const CeilingRef* {
    return name == "free" ? nullptr : &read;
  });
  EXPECT_EQ(n, 2u);
  const CsvTable t = read_csv_table((d / "cases.csv").string());
  ASSERT_EQ(t.rows.size(), 5u);
  EXPECT_EQ(t.at(0, "ceiling_value"), "40");  // before first: left as it was
  EXPECT_EQ(parse_number(t, 1, "ceiling_value"), 40.0);
  EXPECT_EQ(parse_number(t, 1, "pct_of_ceiling"), 25.0);
  EXPECT_EQ(parse_number(t, 2, "pct_of_ceiling"), 12.5);
  EXPECT_EQ(parse_number(t, 3, "pct_of_ceiling"), 50.0);
  EXPECT_EQ(t.at(4, "ceiling_value"), "");
  EXPECT_EQ(t.at(1, "note"), "line one line two, with comma");  // the rest of each row as it was
  EXPECT_FALSE(fs::exists(d / "cases.csv.tmp"));
  EXPECT_EQ(dir.restate_ceilings(first, [&](const std::string&) { return &read; }), 0u);  // nothing left to change
}

TEST(Results, CeilingLabelsParseBack) {
  const CeilingRef read{"stream", {{"op", "read"}, {"huge", "on"}}, "gbps"};
  const auto back = CeilingRef::parse(read.label());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->label(), read.label());
  EXPECT_EQ(back->match.size(), 2u);
  EXPECT_EQ(CeilingRef::parse("idleness:tflops")->study, "idleness");
  for (const char* bad : {"", "stream", "stream:op=read", "stream:op:gbps", ":op=read:gbps", "stream:=x:gbps"})
    EXPECT_FALSE(CeilingRef::parse(bad)) << bad;
}

TEST(Results, RowsBeforeTheirCeilingsStudyAreStatedWhenItRuns) {
  const auto d = fresh_dir("late");
  ResultsDir dir(d);
  const std::vector<Sample> s = {{1.0}};
  const CeilingRef read{"stream", {{"op", "read"}}, "gbps"};
  auto naming = [&](CaseRecord r, std::optional<double> ceiling) {
    r.ceiling = read.label();
    r.ceiling_value = ceiling;
    if (ceiling) r.pct_of_ceiling = 100 * r.gbps / *ceiling;
    return r;
  };
  dir.write_case(naming(record("access", "dense", {{"arm", "dense"}}, 1.0, 10e9), std::nullopt), s);  // none then
  dir.write_case(naming(record("access", "kept", {{"arm", "dense"}}, 1.0, 10e9), 50), s);  // stated in its time
  dir.write_case(record("access", "cached", {{"arm", "dense"}}, 1.0, 10e9), s);           // names no ceiling
  CaseRecord gpu = naming(record("access", "gpu", {{"arm", "dense"}}, 1.0, 10e9), std::nullopt);
  gpu.backend = "cuda";
  dir.write_case(gpu, s);  // no CUDA read below
  EXPECT_EQ(dir.state_late_ceilings("stream"), 0u);  // no ceiling row yet
  dir.write_case(record("stream", "read", {{"op", "read"}}, 1.0, 40e9), s);
  EXPECT_EQ(dir.state_late_ceilings("idleness"), 0u);  // not the study these rows name
  EXPECT_EQ(dir.state_late_ceilings("stream"), 1u);
  const CsvTable t = read_csv_table((d / "cases.csv").string());
  EXPECT_EQ(parse_number(t, 0, "ceiling_value"), 40.0);
  EXPECT_EQ(parse_number(t, 0, "pct_of_ceiling"), 25.0);
  EXPECT_EQ(parse_number(t, 1, "ceiling_value"), 50.0);
  EXPECT_EQ(t.at(2, "pct_of_ceiling"), "");
  EXPECT_EQ(t.at(3, "pct_of_ceiling"), "");
  EXPECT_EQ(dir.state_late_ceilings("stream"), 0u);
}

TEST(Results, MetaUpdatesMerge) {
  const auto d = fresh_dir("meta");
  ResultsDir dir(d);
  dir.update_meta([](nlohmann::json& m) { m["studies"]["a"] = 1; });
  dir.update_meta([](nlohmann::json& m) { m["studies"]["b"] = 2; });
  std::ifstream in(d / "meta.json");
  const auto m = nlohmann::json::parse(in);
  EXPECT_EQ(m["studies"]["a"], 1);
  EXPECT_EQ(m["studies"]["b"], 2);
  EXPECT_EQ(m["suite"], "kvfrontier");
  EXPECT_TRUE(m.contains("git_sha"));
}

TEST(Results, ForeignCasesCsvIsRefused) {
  const auto d = fresh_dir("foreign");
  fs::create_directories(d);
  std::ofstream(d / "cases.csv") << "x,y\n1,2\n";
  EXPECT_THROW(ResultsDir{d}, UsageError);
  std::ifstream in(d / "cases.csv");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "x,y");  // untouched
}

// counters.csv has several writers (CPU model rows, perf, CUPTI) and one reader: what the harness writes is
// what it reads back, an absent number (NaN) included, and a second append adds rows, not a second header.
TEST(Results, CountersCsvReadsBackWhatWasAppended) {
  const auto d = fresh_dir("counters");
  fs::create_directories(d);
  CounterRow key;
  key.study = "idleness";
  key.case_name = "decode/x";
  key.source = key.capture = "cpu_model";
  key.range_index = 1;
  key.range = "hot";
  key.chip = "cpu";
  CounterRow timed = metric_row(key, "kvf:busy_ns", 12.5, "ns");
  timed.source = "activity";
  timed.t_start_ns = 100;
  timed.t_end_ns = 250;
  const std::vector<CounterRow> rows = {metric_row(key, "kvf:idle_compute_pct", 80, "percent"), timed};
  append_counters_csv(d.string(), rows);
  append_counters_csv(d.string(), rows);
  const CsvTable t = read_csv_table((d / "counters.csv").string());
  EXPECT_EQ(t.header, counter_columns());
  const auto back = read_counters_csv(t);
  ASSERT_EQ(back.size(), 4u);
  for (std::size_t i = 0; i < back.size(); ++i) EXPECT_EQ(to_fields(back[i]), to_fields(rows[i % 2]));
  EXPECT_TRUE(std::isnan(back[0].t_start_ns));
  EXPECT_DOUBLE_EQ(back[1].t_end_ns, 250);
  std::ofstream(d / "counters.csv") << "x,y\n";
  EXPECT_THROW(append_counters_csv(d.string(), rows), UsageError);  // a foreign file is not appended to
}

TEST(Results, MetaJsonThatIsNoFileOrNoObjectIsBadInput) {
  const auto d = fresh_dir("badmeta");
  ResultsDir dir(d);
  fs::remove(d / "meta.json");
  ASSERT_EQ(::mkfifo((d / "meta.json").c_str(), 0600), 0);
  EXPECT_THROW(dir.update_meta([](nlohmann::json&) {}), UsageError);  // refused at once, not blocked in open()
  fs::remove(d / "meta.json");
  std::ofstream(d / "meta.json") << "[1, 2]";
  EXPECT_THROW(dir.update_meta([](nlohmann::json&) {}), UsageError);
  std::ofstream(d / "meta.json") << R"({"studies": "x"})";
  EXPECT_THROW(dir.update_meta([](nlohmann::json& m) { m["studies"]["a"] = 1; }), UsageError);
  EXPECT_FALSE(fs::exists(d / "meta.json.tmp"));
}

// set_param replaces the value of a parameter already there (keeping its place) and appends a new one.
TEST(Results, SetParamReplacesInPlaceOrAppends) {
  std::vector<Param> ps = {{"a", "1"}, {"b", "2"}};
  set_param(ps, "a", "3");
  set_param(ps, "c", "4");
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(ps[0].name, "a");
  EXPECT_EQ(ps[0].value, "3");
  EXPECT_EQ(ps[1].value, "2");
  EXPECT_EQ(ps[2].name, "c");
  EXPECT_EQ(ps[2].value, "4");
}
