// The CPU idleness model's counters.csv rows (studies/idleness/cpu_rows.hpp) as the harness writes them: the
// columns `kvf report` reads, one row per figure, range = mode and range_index 0 cold / 1 hot.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "cpu_rows.hpp"

namespace dc = kvf::decode;

TEST(Counters, RowsAndCsv) {
  const auto x = dc::cpu_idleness(10e9, 4e9, 0.5, 100e9, 16e9);
  const auto rows = kvf::idleness::cpu_rows("idleness", "decode/x", "hot", "cpu", x);
  ASSERT_EQ(rows.size(), 7u);  // the bench adds kvf:ridge_flop_per_byte and kvf:bound_batch
  for (const auto& r : rows) {
    EXPECT_EQ(r.source, "cpu_model");
    EXPECT_EQ(r.capture, "cpu_model");
    EXPECT_EQ(r.range, "hot");
    EXPECT_EQ(r.range_index, 1);
    EXPECT_EQ(r.chip, "cpu");
    EXPECT_TRUE(std::isnan(r.t_start_ns));  // no GPU timestamps: empty fields
  }
  EXPECT_EQ(kvf::idleness::cpu_rows("idleness", "decode/x", "cold", "cpu", x)[0].range_index, 0);
  const auto dir = std::filesystem::temp_directory_path() / "kvf_idleness_counters_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  kvf::append_counters_csv(dir.string(), rows);
  kvf::append_counters_csv(dir.string(), rows);
  std::ifstream in(dir / "counters.csv");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "study,case,source,capture,range_index,range,t_start_ns,t_end_ns,chip,metric,value,unit");
  int n = 0;
  bool saw_idle = false;
  while (std::getline(in, line)) {
    ++n;
    if (line == "idleness,decode/x,cpu_model,cpu_model,1,hot,,,cpu,kvf:idle_compute_pct,80,percent") saw_idle = true;
  }
  EXPECT_EQ(n, 14);
  EXPECT_TRUE(saw_idle);
  std::filesystem::remove_all(dir);
}
