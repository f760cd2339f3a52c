// Saved counter captures and counters.csv: format, errors naming files, derived idleness rows, and the collectors'
// graceful "counters unavailable" state (no GPU here; on a GPU machine those tests check the other branch).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kvf/cupti/activity.hpp"
#include "kvf/cupti/counters_io.hpp"
#include "kvf/cupti/pm_sampler.hpp"
#include "kvf/cupti/range_profiler.hpp"
#include "kvf/cupti/status.hpp"
#include "kvf/errors.hpp"
#include "kvf/table.hpp"

namespace fs = std::filesystem;
namespace kc = kvf::cupti;

namespace {
fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kvf_cupti_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(Status, PrivilegesNameTheFix) {
  auto st = kc::classify(35, "cuptiRangeProfilerEnable");  // CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
  EXPECT_EQ(st.availability, kc::Availability::insufficient_privileges);
  EXPECT_NE(st.reason.find("CAP_PERFMON"), std::string::npos);
  EXPECT_NE(st.reason.find("NVreg_RestrictProfilingToAdminUsers=0"), std::string::npos);
  EXPECT_NE(st.reason.find("root"), std::string::npos);
  EXPECT_NE(st.reason.find("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"), std::string::npos);
}

TEST(Status, AnotherProfilerIsBusy) {
  for (int code : {26, 39})  // HARDWARE_BUSY, MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    EXPECT_EQ(kc::classify(code, "x").availability, kc::Availability::profiler_busy) << code;
  EXPECT_NE(kc::classify(39, "x").reason.find("nsys"), std::string::npos);
  EXPECT_EQ(kc::classify(0, "x").availability, kc::Availability::available);
  EXPECT_EQ(kc::classify(43, "x").availability, kc::Availability::unsupported_device);  // MIG
}

TEST(Collectors, UnavailableIsAStateNotACrash) {
  kc::RangeProfiler rp;
  kc::PmSampler pm;
  kc::KernelTracer kt;
  if (rp.available()) GTEST_SKIP() << "a GPU with counters is present: covered by the study run";
  EXPECT_FALSE(rp.status().reason.empty());
  EXPECT_FALSE(pm.available());
  EXPECT_FALSE(pm.status().reason.empty());
  EXPECT_FALSE(kt.available());
  rp.start();
  {
    kc::ScopedRange r(rp, "case/step0", "case");
  }
  rp.stop();
  pm.start();
  pm.decode();
  pm.stop();
  kt.begin_window("w");
  kt.end_window();
  const auto dir = fresh_dir("unavailable");
  EXPECT_FALSE(rp.save(dir, "c", "idleness", "case"));
  EXPECT_FALSE(pm.save(dir, "p", "idleness", "case"));
  EXPECT_FALSE(kt.save(dir, "k", "idleness", "case"));
  EXPECT_TRUE(rp.rows("idleness", "case").empty());
  EXPECT_FALSE(fs::exists(kc::counters_dir(dir)));
}

TEST(Manifest, JsonRoundTrip) {
  kc::CaptureManifest m;
  m.name = "cap";
  m.kind = "range";
  m.chip = "GH100";
  m.study = "idleness";
  m.case_name = "b8";
  m.set = "decode_idleness";
  m.metrics = {"gpu__time_duration.sum"};
  m.passes = 1;
  kc::RangeMeta r;
  r.index = 0;
  r.name = "b8/step0";
  r.host_clock_mhz = 1980;
  m.ranges.push_back(r);
  const auto back = kc::CaptureManifest::from_json(m.to_json(), "mem");
  EXPECT_EQ(back.name, "cap");
  EXPECT_EQ(back.chip, "GH100");
  EXPECT_EQ(back.metrics, m.metrics);
  ASSERT_EQ(back.ranges.size(), 1u);
  EXPECT_EQ(back.ranges[0].name, "b8/step0");
  EXPECT_DOUBLE_EQ(back.ranges[0].host_clock_mhz, 1980);
  EXPECT_TRUE(std::isnan(back.ranges[0].t_start_ns));
  auto bad = m.to_json();
  bad["format"] = "other";
  EXPECT_THROW(kc::CaptureManifest::from_json(bad, "mem"), kvf::UsageError);
}

TEST(EvaluateDir, MissingDirectoryIsUsageError) {
  const auto dir = fresh_dir("missing");
  try {
    kc::evaluate_dir(dir);
    FAIL();
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("counters"), std::string::npos);
  }
}

TEST(EvaluateDir, MissingImageNamesTheFile) {
  const auto dir = fresh_dir("noimage");
  kc::CaptureManifest m;
  m.name = "idleness_b8";
  m.kind = "range";
  m.chip = "GH100";
  m.metrics = {"gpu__time_duration.sum"};
  kc::save_capture(dir, m, {1, 2, 3}, {});  // config only: the counter data is "lost"
  EXPECT_EQ(fs::exists(kc::counters_dir(dir) / "chip.txt"), true);
  try {
    kc::evaluate_dir(dir);
    FAIL();
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("idleness_b8.counterdata"), std::string::npos) << e.what();
  }
}

TEST(EvaluateDir, KeepsRowsThatNoSavedCaptureProduced) {
  // The CPU twin writes cpu_model rows straight into counters.csv; re-evaluating the saved GPU
  // captures must not lose them, and must replace (not duplicate) the rows of the captures it re-reads.
  const auto dir = fresh_dir("keep_cpu_rows");
  fs::create_directories(kc::counters_dir(dir));
  const std::vector<kc::KernelRecord> ks = {{100, 200, 0, 1, 7, 1, "attn"}};
  kc::write_kernels_csv(kc::counters_dir(dir) / "trace.kernels.csv", ks);
  kc::CaptureManifest m;
  m.name = "trace";
  m.kind = "activity";
  m.study = "idleness";
  m.case_name = "b1";
  m.ranges = {kc::RangeMeta{0, "b1/step0", "", 50, 450, NAN}};
  kc::save_capture(dir, m, {}, {});
  kc::CounterRow cpu{"idleness", "b1", "cpu_model", "cpu_model", 0, "cold", 0, 1, "cpu", "kvf:idle_compute_pct", 97.5, "%"};
  kc::write_counters_csv(dir / "counters.csv", {cpu});
  const auto first = kc::evaluate_dir(dir);
  const auto second = kc::evaluate_dir(dir);  // idempotent
  EXPECT_EQ(first.rows, second.rows);
  const auto t = kvf::read_csv_table((dir / "counters.csv").string());
  std::size_t cpu_rows = 0, trace_rows = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    if (t.at(i, "source") == "cpu_model") {
      ++cpu_rows;
      EXPECT_EQ(t.at(i, "value"), "97.5");
    }
    if (t.at(i, "capture") == "trace") ++trace_rows;
  }
  EXPECT_EQ(cpu_rows, 1u);
  EXPECT_GT(trace_rows, 0u);
  EXPECT_EQ(t.rows.size(), first.rows);
}

TEST(EvaluateDir, ActivityCaptureRoundTrip) {
  // Kernel records and windows saved, re-evaluated offline into counters.csv.
  const auto dir = fresh_dir("activity");
  std::vector<kc::KernelRecord> ks = {{100, 200, 0, 1, 7, 1, "attn"}, {250, 400, 0, 1, 7, 2, "mlp, fused"},
                                      {1100, 1200, 0, 1, 7, 3, "attn"}};
  fs::create_directories(kc::counters_dir(dir));
  kc::write_kernels_csv(kc::counters_dir(dir) / "trace.kernels.csv", ks);
  kc::CaptureManifest m;
  m.name = "trace";
  m.kind = "activity";
  m.study = "idleness";
  m.case_name = "b8";
  kc::RangeMeta w0{0, "b8/step0", "", 50, 450, NAN};
  kc::RangeMeta w1{1, "b8/step1", "b16", 1000, 1300, NAN};
  m.ranges = {w0, w1};
  kc::save_capture(dir, m, {}, {});
  const auto sum = kc::evaluate_dir(dir);
  EXPECT_EQ(sum.captures, 1u);
  const auto t = kvf::read_csv_table((dir / "counters.csv").string());
  EXPECT_EQ(t.header, kvf::counter_columns());
  bool saw_gap = false, saw_case = false;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    if (t.at(i, "range") == "b8/step0" && t.at(i, "metric") == "kvf:gap_ns") {
      EXPECT_EQ(t.at(i, "value"), "50");
      saw_gap = true;
    }
    if (t.at(i, "range") == "b8/step1") {
      EXPECT_EQ(t.at(i, "case"), "b16");
      saw_case = true;
    }
  }
  EXPECT_TRUE(saw_gap);
  EXPECT_TRUE(saw_case);
}

TEST(Derived, ThreeIdlenessesAndClock) {
  kc::CounterRow base;
  base.study = "idleness";
  base.case_name = "b8";
  std::vector<kc::CounterRow> raw;
  auto add = [&](const char* m, double v) {
    kc::CounterRow r = base;
    r.metric = m;
    r.value = v;
    raw.push_back(r);
  };
  add("sm__cycles_active.avg.pct_of_peak_sustained_elapsed", 90);
  add("smsp__issue_active.avg.pct_of_peak_sustained_elapsed", 25);
  add("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", 5);
  add("gpc__cycles_elapsed.avg.per_second", 1.98e9);
  const auto d = kc::derived_rows(raw, 1755);
  auto value = [&](const char* m) {
    for (const auto& r : d)
      if (r.metric == m) return r.value;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(value("kvf:idle_sm_pct"), 10);
  EXPECT_DOUBLE_EQ(value("kvf:idle_issue_pct"), 75);
  EXPECT_DOUBLE_EQ(value("kvf:idle_tensor_pct"), 95);
  EXPECT_DOUBLE_EQ(value("kvf:sm_clock_mhz"), 1980);
  EXPECT_DOUBLE_EQ(value("kvf:host_clock_mhz"), 1755);
  EXPECT_DOUBLE_EQ(value("kvf:idle_gr_pct"), -1.0);  // input absent: no row
}
