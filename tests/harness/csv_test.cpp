#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/table.hpp"
#include "kvf/units.hpp"

using namespace kvf;
namespace fs = std::filesystem;

namespace {
fs::path temp_file(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kvf_csv_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  auto p = d / name;
  fs::remove(p);
  return p;
}
}  // namespace

TEST(Csv, EscapesOnlyWhatNeedsIt) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_escape(""), "");
  EXPECT_EQ(csv_escape(" padded "), "\" padded \"");
}

TEST(Csv, NumbersRoundTripAndNanIsEmpty) {
  EXPECT_EQ(csv_number(0.1), "0.1");
  EXPECT_EQ(csv_number(std::numeric_limits<double>::quiet_NaN()), "");
  EXPECT_EQ(csv_number(std::numeric_limits<double>::infinity()), "");
  const double v = 1.0 / 3.0;
  EXPECT_EQ(std::stod(csv_number(v)), v);
}

TEST(Csv, RoundTripThroughTheCsvParserLibrary) {
  const auto p = temp_file("round.csv");
  {
    CsvAppender out(p.string(), {"name", "value", "note"});
    out.append({"a,b", csv_number(1.5), "he said \"x\""});
    out.append({"empty", csv_number(std::nan("")), ""});
    out.append({" lead", "2", "tail "});
  }
  const CsvTable t = read_csv_table(p.string());
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.at(0, "name"), "a,b");
  EXPECT_EQ(t.at(0, "note"), "he said \"x\"");
  EXPECT_EQ(parse_number(t, 0, "value"), 1.5);
  EXPECT_FALSE(parse_number(t, 1, "value").has_value());
  EXPECT_EQ(t.at(1, "note"), "");
  EXPECT_EQ(t.line[2], 4u);
}

TEST(Csv, AppenderRefusesADifferentHeader) {
  const auto p = temp_file("hdr.csv");
  { CsvAppender out(p.string(), {"a", "b"}); }
  EXPECT_THROW(CsvAppender(p.string(), {"a", "c"}), UsageError);
  EXPECT_NO_THROW(CsvAppender(p.string(), {"a", "b"}));
}

TEST(Csv, MalformedInputNamesFileAndLine) {
  const auto p = temp_file("bad.csv");
  std::ofstream(p) << "a,b\n1,2\n3\n";
  try {
    read_csv_table(p.string());
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad.csv"), std::string::npos) << msg;
    EXPECT_NE(msg.find('3'), std::string::npos) << msg;  // the line number
  }
  const auto q = temp_file("nan.csv");
  std::ofstream(q) << "a\nxyz\n";
  const CsvTable t = read_csv_table(q.string());
  EXPECT_THROW(parse_number(t, 0, "a"), UsageError);
  EXPECT_THROW(read_csv_table(temp_file("absent.csv").string()), UsageError);
  EXPECT_THROW(t.require_column("nope"), UsageError);
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parse_bytes("4096", "--size"), 4096u);
  EXPECT_EQ(parse_bytes("64KiB", "--size"), 65536u);
  EXPECT_EQ(parse_bytes("2MiB", "--size"), 2u << 20);
  EXPECT_EQ(parse_bytes("1.5GiB", "--size"), 3u << 29);
  EXPECT_EQ(parse_bytes("1GB", "--size"), 1000000000u);
  EXPECT_THROW(parse_bytes("0", "--size"), UsageError);
  EXPECT_THROW(parse_bytes("-1", "--size"), UsageError);
  EXPECT_THROW(parse_bytes("12 furlongs", "--size"), UsageError);
  EXPECT_THROW(parse_bytes("", "--size"), UsageError);
  EXPECT_EQ(format_bytes(256.0 * (1 << 20)), "256 MiB");
  // Case names carry a size exactly (--size 1.5MiB was named 1MiB, 1000000 bytes 0MiB).
  EXPECT_EQ(kvf::exact_size_name(256ull << 20), "256MiB");
  EXPECT_EQ(kvf::exact_size_name(3ull << 19), "1536KiB");
  EXPECT_EQ(kvf::exact_size_name(1000000), "1000000B");
}
