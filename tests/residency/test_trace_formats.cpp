// The suite's CSV trace format, format detection, and the atomic writers (issue 17).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "kvf/errors.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("kvf_trace_formats_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name, std::ios::binary) << text;
    return dir / name;
  }
};

void expect_equal(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].timestamp_ms, b.requests[i].timestamp_ms) << "request " << i;
    EXPECT_EQ(a.requests[i].input_length, b.requests[i].input_length) << "request " << i;
    EXPECT_EQ(a.requests[i].output_length, b.requests[i].output_length) << "request " << i;
    EXPECT_EQ(a.requests[i].hash_ids, b.requests[i].hash_ids) << "request " << i;
  }
}

// Timestamps with fractions, an empty request, ids up to 2^63 - 1, a last partial block.
Trace sample() {
  Trace t = test::make_trace({{0, 1, 2}, {}, {0, 9223372036854775807ull}, {5}}, 4, {12, 0, 7, 3});
  t.requests[0].timestamp_ms = 0;
  t.requests[1].timestamp_ms = 0.1;
  t.requests[2].timestamp_ms = 250;
  t.requests[3].timestamp_ms = 1e15 + 0.5;
  for (std::size_t i = 0; i < t.requests.size(); ++i) t.requests[i].output_length = std::int64_t(i) * 7;
  return t;
}

std::string csv_error(const std::string& rows) {
  try {
    parse_trace_csv("timestamp_ms,input_length,output_length,block_ids\n" + rows, "u.csv", 4);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ResidencyTraceFormats, CsvParsesFieldsAndIgnoresOtherColumns) {
  const Trace t = parse_trace_csv(
      "user,block_ids,timestamp_ms,input_length,output_length\n"
      "a,0 1  2,0,10,6\n"
      "b,,2.5,0,1\n"
      "c,\" 0\t3 \",3,8,1\n",
      "u.csv", 4);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.source, "u.csv");
  EXPECT_EQ(t.requests[0].hash_ids, (std::vector<std::uint64_t>{0, 1, 2}));
  EXPECT_EQ(t.requests[0].input_length, 10);
  EXPECT_EQ(t.requests[0].output_length, 6);
  EXPECT_TRUE(t.requests[1].hash_ids.empty());
  EXPECT_DOUBLE_EQ(t.requests[1].timestamp_ms, 2.5);
  EXPECT_EQ(t.requests[2].hash_ids, (std::vector<std::uint64_t>{0, 3}));
  EXPECT_TRUE(t.warnings.empty());
}

TEST(ResidencyTraceFormats, CsvMalformedRowsNameFileLineAndColumn) {
  EXPECT_NE(csv_error("0,4,1,7\n0,4,1,7 x\n").find("u.csv:3: column 'block_ids': id 1 'x' is not a whole number"),
            std::string::npos);
  EXPECT_NE(csv_error("0,4,1,-7\n").find("u.csv:2: column 'block_ids': id 0 '-7'"), std::string::npos);
  EXPECT_NE(csv_error("0,4,1,9223372036854775808\n").find("u.csv:2: column 'block_ids': id 0"), std::string::npos);
  EXPECT_NE(csv_error("0,4,1,7\n0,-4,1,7\n").find("u.csv:3: column 'input_length'"), std::string::npos);
  EXPECT_NE(csv_error("0,4.5,1,7\n").find("u.csv:2: column 'input_length'"), std::string::npos);
  EXPECT_NE(csv_error("0,4,,7\n").find("u.csv:2: column 'output_length' is empty"), std::string::npos);
  EXPECT_NE(csv_error("-1,4,1,7\n").find("u.csv:2: column 'timestamp_ms': '-1' is below 0"), std::string::npos);
  EXPECT_NE(csv_error("soon,4,1,7\n").find("u.csv:2: column 'timestamp_ms': 'soon' is not a number"),
            std::string::npos);
  EXPECT_NE(csv_error("0,4,1\n").find("u.csv:2: 3 fields, the header has 4"), std::string::npos);
  try {
    parse_trace_csv("timestamp_ms,input_length,block_ids\n0,4,7\n", "u.csv", 4);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("u.csv: missing column 'output_length'"), std::string::npos) << e.what();
  }
}

TEST(ResidencyTraceFormats, CsvWarnsOnIdCountAndTornLastRow) {
  const Trace t =
      parse_trace_csv("timestamp_ms,input_length,output_length,block_ids\n0,9,1,1 2\n1,4,1,3", "u.csv", 4);
  ASSERT_EQ(t.requests.size(), 1u);  // the torn row is left out
  ASSERT_EQ(t.warnings.size(), 2u);
  EXPECT_EQ(t.warnings[0], "u.csv:2: request 0 has 2 hash_ids, but input_length 9 at 4 tokens per block needs 3");
  EXPECT_NE(t.warnings[1].find("u.csv:3: torn last row"), std::string::npos) << t.warnings[1];
}

TEST(ResidencyTraceFormats, BothFormatsRoundTripAndAreDetected) {
  const TempDir tmp;
  const Trace t = sample();
  write_trace_csv(t, tmp.dir / "t.csv");
  write_mooncake_jsonl(t, tmp.dir / "t.jsonl");
  EXPECT_FALSE(fs::exists(tmp.dir / "t.csv.tmp"));
  EXPECT_FALSE(fs::exists(tmp.dir / "t.jsonl.tmp"));
  const Trace csv = read_trace(tmp.dir / "t.csv", 4);
  const Trace jsonl = read_trace(tmp.dir / "t.jsonl", 4);
  EXPECT_EQ(csv.source, (tmp.dir / "t.csv").string());
  expect_equal(t, csv);
  expect_equal(t, jsonl);
  expect_equal(t, read_mooncake_jsonl(tmp.dir / "t.jsonl", 4));
  expect_equal(t, parse_trace_csv(slurp(tmp.dir / "t.csv"), "x", 4));
  EXPECT_TRUE(csv.warnings.empty()) << csv.warnings.front();
  EXPECT_TRUE(jsonl.warnings.empty()) << jsonl.warnings.front();
  // Leading blank lines do not hide the '{' of a JSONL file.
  const fs::path padded = tmp.write("padded.jsonl", "\n  \n" + slurp(tmp.dir / "t.jsonl"));
  expect_equal(t, read_trace(padded, 4));
  // Rewriting replaces the file whole.
  Trace shorter = t;
  shorter.requests.resize(1);
  write_trace_csv(shorter, tmp.dir / "t.csv");
  expect_equal(shorter, read_trace(tmp.dir / "t.csv", 4));
}

TEST(ResidencyTraceFormats, DetectionErrorsNameTheFileAndLine) {
  const TempDir tmp;
  const auto error = [&](const std::string& text) {
    const fs::path p = tmp.write("bad.trace", text);
    try {
      read_trace(p, 4);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string p = (tmp.dir / "bad.trace").string();
  const std::string ok = "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [7]}\n";
  EXPECT_NE(error(ok + "{\"timestamp\": 0,\n").find(p + ":2:"), std::string::npos);
  EXPECT_NE(error("time,input_length,output_length,block_ids\n").find(p + ": missing column 'timestamp_ms'"),
            std::string::npos);
  EXPECT_NE(error("").find(p + ":1: empty file"), std::string::npos);
  // Not a trace at all (an /etc/passwd): the missing column, not the field count of a later line.
  EXPECT_NE(error("root:x:0:0:root:/root:/bin/bash\nu:x:1000:1000:A User,,,:/home/u:/bin/bash\n")
                .find(p + ": missing column 'timestamp_ms'"),
            std::string::npos);
  EXPECT_NE(error("timestamp_ms,input_length,output_length,block_ids\n0,4,1,7\n0,4,1,7;8\n").find(p + ":3: column"),
            std::string::npos);
}

TEST(ResidencyTraceFormats, WritersRefuseWhatReadersWouldRefuse) {
  const TempDir tmp;
  Trace t = sample();
  t.requests[2].timestamp_ms = -1;
  EXPECT_THROW(write_trace_csv(t, tmp.dir / "w.csv"), UsageError);
  t = sample();
  t.requests[0].hash_ids[1] = 1ull << 63;
  EXPECT_THROW(write_mooncake_jsonl(t, tmp.dir / "w.jsonl"), UsageError);
  EXPECT_FALSE(fs::exists(tmp.dir / "w.csv"));
  EXPECT_FALSE(fs::exists(tmp.dir / "w.jsonl"));
  EXPECT_THROW(write_trace_csv(sample(), tmp.dir / "no-such-dir" / "w.csv"), UsageError);
}

}  // namespace
}  // namespace kvf::residency
