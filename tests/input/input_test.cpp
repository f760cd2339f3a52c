// The bounded readers of untrusted input (kvf/input.hpp, kvf/table.hpp): each crafted case of issue 12
// that concerns reading, at the unit level. tests/input/hostile_results.py replays them end to end.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/table.hpp"
#include "kvf/units.hpp"

using namespace kvf;
namespace fs = std::filesystem;

namespace {

class Input : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = read_limits();
    dir_ = fs::temp_directory_path() /
           ("kvf_input_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    set_read_limits(saved_);
    fs::remove_all(dir_);
  }
  fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // The message of the UsageError `f` throws ("" when it throws none).
  template <class F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const UsageError& e) {
      return e.what();
    }
    return {};
  }
  fs::path dir_;
  ReadLimits saved_;
};

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST_F(Input, RefusesAFifoWithoutBlocking) {
  const fs::path p = dir_ / "cases.csv";
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { read_csv_table(p.string(), dir_); });
  EXPECT_TRUE(has(msg, "a FIFO")) << msg;
  EXPECT_TRUE(has(msg, "cases.csv")) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(Input, RefusesDevicesAndDirectories) {
  EXPECT_TRUE(has(error_of([] { read_input_file("/dev/zero"); }), "character device"));
  fs::create_directories(dir_ / "meta.json");
  const std::string msg = error_of([&] { read_json_input(dir_ / "meta.json", dir_); });
  EXPECT_TRUE(has(msg, "meta.json: a directory, expected a regular file")) << msg;
}

TEST_F(Input, SymlinksLeavingTheDirectoryNeedConsent) {
  const fs::path outside = write("../kvf_input_outside_" + std::to_string(::getpid()) + ".csv", "a\n1\n");
  fs::create_directories(dir_ / "run");
  fs::create_symlink(outside, dir_ / "run" / "cases.csv");
  fs::create_symlink("/dev/zero", dir_ / "run" / "samples.csv");
  write("run/inside.csv", "a\n2\n");
  fs::create_symlink("inside.csv", dir_ / "run" / "link.csv");
  const fs::path run = dir_ / "run";
  EXPECT_TRUE(has(error_of([&] { read_csv_table((run / "cases.csv").string(), run); }), "outside"));
  EXPECT_TRUE(has(error_of([&] { read_csv_table((run / "samples.csv").string(), run); }), "outside"));
  EXPECT_EQ(read_csv_table((run / "link.csv").string(), run).rows.at(0).at(0), "2");  // staying inside is fine
  ReadLimits l = read_limits();
  l.follow_symlinks = true;
  set_read_limits(l);
  EXPECT_EQ(read_csv_table((run / "cases.csv").string(), run).rows.at(0).at(0), "1");
  // Consent to follow is not consent to read a device.
  EXPECT_TRUE(has(error_of([&] { read_csv_table((run / "samples.csv").string(), run); }), "character device"));
  fs::remove(outside);
}

TEST_F(Input, FileSizeLimit) {
  ReadLimits l = read_limits();
  l.max_file_bytes = 1000;
  set_read_limits(l);
  const fs::path p = write("big.csv", "a\n" + std::string(2000, '1') + "\n");
  const std::string msg = error_of([&] { read_input_file(p); });
  EXPECT_TRUE(has(msg, "--max-file-mib")) << msg;
  EXPECT_EQ(read_input_file(write("small.csv", "a\n1\n")), "a\n1\n");
  EXPECT_EQ(read_input_file(write("empty.csv", "")), "");
}

TEST_F(Input, FieldAndRecordLimitsNameTheLine) {
  const std::string big(100 << 10, 'x');
  std::string msg = error_of([&] { parse_csv_text("study,device\nstream," + big + "\n", "cases.csv"); });
  EXPECT_TRUE(has(msg, "cases.csv:2: field 2 longer than")) << msg;
  EXPECT_TRUE(has(msg, "--max-field-kib")) << msg;
  // A quoted field that never closes runs into the record limit, not into memory.
  ReadLimits l = read_limits();
  l.max_line_bytes = 4096;
  set_read_limits(l);
  msg = error_of([&] { parse_csv_text("a,b\n1,\"" + std::string(10000, '\n') + "\n", "s.csv"); });
  EXPECT_TRUE(has(msg, "s.csv:2: record longer than 4096")) << msg;
  // The header has no line limit of its own: it is a record like the others.
  msg = error_of([&] { parse_csv_text(std::string(5000, 'h') + "\n", "h.csv"); });
  EXPECT_TRUE(has(msg, "h.csv:1:")) << msg;
}

TEST_F(Input, Rfc4180QuotedLineBreaksCommasAndQuotes) {
  const CsvTable t = parse_csv_text(
      "study,note,x\r\n"
      "stream,\"line one\nline two, with \"\"quotes\"\"\",1\r\n"
      "access,  plain  ,\" 2 \"\n",
      "cases.csv");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.at(0, "note"), "line one\nline two, with \"quotes\"");
  EXPECT_EQ(t.line.at(0), 2u);
  EXPECT_EQ(t.line.at(1), 4u);  // the quoted line break counts
  EXPECT_EQ(t.at(1, "note"), "plain");
  EXPECT_EQ(t.at(1, "x"), " 2 ");  // quoted: spaces kept
  EXPECT_FALSE(t.torn);
  EXPECT_TRUE(has(error_of([] { parse_csv_text("a,b\n\"x\"y,1\n", "q.csv"); }), "q.csv:2: character 'y' after a closing quote"));
}

TEST_F(Input, TornLastRowIsLeftOutAndNamed) {
  const std::string whole = "study,case,seconds\nstream,read,1\nstream,write,2\n";
  for (const std::string& tail : {std::string("stream,co"), std::string("stream,copy,3"), std::string("stream,\"co")}) {
    const CsvTable t = parse_csv_text(whole + tail, "samples.csv");
    EXPECT_EQ(t.rows.size(), 2u) << tail;
    ASSERT_TRUE(t.torn) << tail;
    EXPECT_TRUE(has(*t.torn, "samples.csv:4: torn last row")) << *t.torn;
  }
  // A torn row in the middle is no torn row: it is malformed.
  EXPECT_TRUE(has(error_of([&] { parse_csv_text("a,b\n1\n2,3\n", "m.csv"); }), "m.csv:2: 1 fields, the header has 2"));
  // A header alone, even without its line end, is an empty table.
  EXPECT_EQ(parse_csv_text("a,b", "h.csv").header.size(), 2u);
  EXPECT_TRUE(has(error_of([] { parse_csv_text("", "e.csv"); }), "e.csv:1: empty file"));
}

TEST_F(Input, NumbersAreCheckedBeforeConversion) {
  const CsvTable t = parse_csv_text(
      "samples,llc\n1e30,inf\n-9223372036854775808,nan\n9e18,1e400\n12,0x10\n", "cases.csv");
  EXPECT_TRUE(has(error_of([&] { parse_integer(t, 0, "samples", 0, 1ll << 53); }), "cases.csv:2: column 'samples': '1e+30' is not a whole number"));
  EXPECT_TRUE(has(error_of([&] { parse_integer(t, 1, "samples", 0, 1ll << 53); }), "cases.csv:3"));
  EXPECT_TRUE(has(error_of([&] { parse_integer(t, 2, "samples", 0, 1ll << 53); }), "cases.csv:4"));
  EXPECT_EQ(parse_integer(t, 3, "samples", 0, 100), 12);
  EXPECT_TRUE(has(error_of([&] { parse_number(t, 0, "llc"); }), "not a finite number"));
  EXPECT_FALSE(parse_number(t, 1, "llc"));  // "nan": the missing value older writers wrote
  EXPECT_TRUE(has(error_of([&] { parse_number(t, 2, "llc"); }), "'1e400' is not a finite number"));
  EXPECT_TRUE(has(error_of([&] { parse_number(t, 3, "llc"); }), "is not a number"));

  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double v : {nan, inf, -inf, 1e30, 9.3e18, 9223372036854775808.0, -1e19, 0.5})
    EXPECT_THROW(checked_integer(v, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), "x"),
                 UsageError)
        << v;
  EXPECT_EQ(checked_integer(-9223372036854775808.0, std::numeric_limits<std::int64_t>::min(), 0, "x"),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(checked_integer(1e10, 0, std::numeric_limits<std::int64_t>::max(), "x"), 10000000000ll);
  EXPECT_TRUE(has(error_of([] { checked_integer(1e10, 1, 10000, "--layers"); }), "--layers: '1e+10' is not a whole number in [1, 10000]"));
}

TEST_F(Input, JsonDepthAndStringLimits) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  EXPECT_TRUE(has(error_of([&] { parse_json_input(deep, "meta.json"); }), "meta.json: JSON nested more than 64"));
  std::string deep_obj;
  for (int i = 0; i < 50000; ++i) deep_obj += "{\"device\":";
  deep_obj += "1" + std::string(50000, '}');
  EXPECT_TRUE(has(error_of([&] { parse_json_input(deep_obj, "meta.json"); }), "nested more than"));
  const std::string huge = "{\"device\":{\"name\":\"" + std::string(17u << 20, 'A') + "\"}}";
  EXPECT_TRUE(has(error_of([&] { parse_json_input(huge, "meta.json"); }), "--max-field-kib"));
  EXPECT_TRUE(has(error_of([] { parse_json_input("{\"a\":", "m.json"); }), "m.json: malformed JSON"));
  EXPECT_TRUE(has(error_of([] { parse_json_input("{\"a\":1e400}", "m.json"); }), "m.json: malformed JSON"));
  EXPECT_EQ(parse_json_input("{\"a\":[1,2]}", "ok.json")["a"][1], 2);
}

TEST_F(Input, JsonTypesNameFileAndKey) {
  const auto j = parse_json_input(
      R"({"suite_version": 5, "device": {"llc_bytes": 1e30, "cores": 2.5, "big": 18446744073709551615, "neg": -3, "ok": 64, "name": null}})",
      "meta.json");
  EXPECT_TRUE(has(error_of([&] { json_string(j, "suite_version", "meta.json", "suite_version"); }),
                  "meta.json: key 'suite_version': expected a string, got number"));
  const auto& d = j["device"];
  EXPECT_TRUE(has(error_of([&] { json_integer(d, "llc_bytes", "meta.json", "device.llc_bytes", 0, 1ll << 50); }),
                  "meta.json: key 'device.llc_bytes': '1e+30' is not a whole number"));
  EXPECT_TRUE(has(error_of([&] { json_integer(d, "cores", "meta.json", "device.cores", 0, 1000); }), "'2.5'"));
  EXPECT_TRUE(has(error_of([&] { json_integer(d, "big", "meta.json", "device.big", 0, 1ll << 50); }),
                  "18446744073709551615 is not a whole number"));
  EXPECT_TRUE(has(error_of([&] { json_integer(d, "neg", "meta.json", "device.neg", 0, 10); }), "-3 is not"));
  EXPECT_EQ(json_integer(d, "ok", "meta.json", "device.ok", 0, 100), 64);
  EXPECT_FALSE(json_string(d, "name", "meta.json", "device.name"));  // null: absent
  EXPECT_FALSE(json_number(d, "absent", "meta.json", "device.absent", 0, 1));
  EXPECT_TRUE(has(error_of([&] { json_number(d, "neg", "meta.json", "device.neg", 0, 10); }), "-3 is not a number in [0, 10]"));
  EXPECT_TRUE(has(error_of([&] { json_string(j["suite_version"], "x", "meta.json", "suite_version.x"); }), "expected an object"));
}

TEST(Units, SizesAreWholeBytesAndNamedWhenEmpty) {
  EXPECT_EQ(parse_bytes("1.5GiB", "--size"), 3u << 29);
  EXPECT_EQ(parse_bytes("0.5KiB", "--size"), 512u);
  for (const char* bad : {"4096.4", "0.6", "1.5", "0", "1e30", "inf", "nan", "4Q", "-1"})
    EXPECT_THROW(parse_bytes(bad, "--size"), UsageError) << bad;
  try {
    parse_bytes("", "--size");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(has(e.what(), "--size '': empty size")) << e.what();
  }
  try {
    parse_bytes("0.6", "--size");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(has(e.what(), "--size 0.6: not a whole number of bytes")) << e.what();
  }
}

TEST_F(Input, HeaderReadsOnlyTheFirstRecord) {
  // A writer reopens its files for every case: the header check must not read (or be refused for) the rows.
  ReadLimits l = read_limits();
  l.max_file_bytes = 1000;
  set_read_limits(l);
  std::string text = "study,case\n";
  for (int i = 0; i < 200; ++i) text += "stream,read\n";
  const fs::path p = write("cases.csv", text);
  EXPECT_EQ(read_csv_header(p.string()), (std::vector<std::string>{"study", "case"}));
  EXPECT_TRUE(has(error_of([&] { read_input_file(p); }), "--max-file-mib"));
  EXPECT_TRUE(read_csv_header((dir_ / "absent.csv").string()).empty());
  EXPECT_TRUE(has(error_of([&] { read_input_head("/dev/zero", 10); }), "character device"));
}
