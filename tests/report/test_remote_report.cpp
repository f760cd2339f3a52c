// The remote tier in the model and the report (issue 18): the fit of fixed + per-descriptor + bandwidth on
// planted rows, claim 6 on planted samples, the fetch_peer action, remote_s, and the section on a committed run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "kvf/report.hpp"
#include "kvf/study_report.hpp"
#include "model_fixtures.hpp"

namespace kvf::report {
StudyReport remote_report();  // studies/remote/report (the generated plug-in table declares it too)
}

using namespace kvf::report;

namespace {

// A measured remote row moving `bytes` as `descriptors` descriptors in `seconds` (its samples all that value,
// unless given).
CaseRow row(const std::string& case_name, const std::string& op, double descriptors, double bytes, double seconds,
            std::map<std::string, std::string> extra = {}, std::vector<double> samples = {}) {
  CaseRow r;
  r.study = "remote";
  r.case_name = case_name;
  r.backend = "cpu";
  r.device = "test";
  r.mode = "hot";
  r.note = "transport tcp/lo(am am_bw); p99 1 ms";
  r.params = {{"op", op}, {"descriptors", std::to_string(static_cast<long long>(descriptors))}, {"readers", "1"}};
  for (auto& [k, v] : extra) r.params[k] = v;
  r.bytes = bytes;
  r.median_s = seconds;
  r.samples_s = samples.empty() ? std::vector<double>(9, seconds) : samples;
  r.samples = static_cast<long>(r.samples_s.size());
  return r;
}

ResultSet set_of(std::vector<CaseRow> rows) {
  ResultSet rs;
  rs.dir = "planted";
  rs.label = "test (cpu)";
  rs.backend = "cpu";
  rs.cases = std::move(rows);
  rs.has_samples = true;
  return rs;
}

// t = 5 us + 2 us per descriptor + bytes / 5 GB/s, exactly.
double planted_s(double d, double b) { return 5e-6 + 2e-6 * d + b / 5e9; }

std::vector<CaseRow> planted_rows() {
  std::vector<CaseRow> v;
  for (double b : {262144.0, 2097152.0, 67108864.0})
    v.push_back(row("ceiling/read/" + std::to_string(static_cast<long long>(b)), "read", 1, b, planted_s(1, b)));
  for (double d : {1.0, 32.0, 512.0})
    v.push_back(row("granularity/read/x/T16/page_first/" + std::to_string(static_cast<long long>(d)), "read", d,
                    2097152, planted_s(d, 2097152)));
  return v;
}

std::map<std::string, double> calibrated(const ResultSet& rs) {
  std::map<std::string, double> out;
  for (const auto& t : remote_report().calibration)
    for (const auto& c : t.measure(rs)) out[c.field] = c.value;
  return out;
}

TEST(RemoteTier, FitRecoversPlantedFixedPerDescriptorAndBandwidth) {
  const auto f = calibrated(set_of(planted_rows()));
  ASSERT_EQ(f.size(), 3u);
  EXPECT_NEAR(f.at("remote_gbps"), 5.0, 5e-6);
  EXPECT_NEAR(f.at("remote_fixed_us"), 5.0, 1e-4);
  EXPECT_NEAR(f.at("remote_descriptor_us"), 2.0, 1e-5);
}

// A tier fitted on shared-memory transports or tcp over loopback (ranks on one machine) says it is no network.
TEST(RemoteTier, OnHostTransportsAreSaidNotToBeANetwork) {
  const auto text = [](const std::string& transport) {
    auto rows = planted_rows();
    for (auto& r : rows) r.note = "transport " + transport + "; p99 1 ms";
    for (const auto& t : remote_report().calibration)
      for (const auto& c : t.measure(set_of(rows)))
        if (c.field == "remote_gbps") return c.text;
    return std::string();
  };
  const std::string said = "on-host transports only (ranks on one machine), not a network";
  EXPECT_NE(text("sysv/memory(am am_bw) posix/memory cma/memory(rma_bw)").find(said), std::string::npos);
  EXPECT_NE(text("tcp/lo(am am_bw)").find(said), std::string::npos);  // loopback: both ranks on one machine
  EXPECT_EQ(text("tcp/eth0(am am_bw)").find(said), std::string::npos);
  EXPECT_EQ(text("cma/memory tcp/eth0").find(said), std::string::npos);
  EXPECT_EQ(text("cma/memory rc_mlx5/mlx5_0:1(rma_bw)").find(said), std::string::npos);  // a NIC with one lane
  EXPECT_EQ(text("sysv/memory tcp/eth0(am)").find(said), std::string::npos);
}

TEST(RemoteTier, WritesAndLoadedRowsAreNotFitted) {
  auto rows = planted_rows();
  // A write 10x slower and a many-to-one read 10x slower: neither may move the fit of one reader's reads.
  rows.push_back(row("ceiling/write/big", "write", 1, 67108864, 10 * planted_s(1, 67108864)));
  rows.push_back(row("ceiling/read/loaded", "read", 1, 1048576, 10 * planted_s(1, 1048576), {{"readers", "3"}}));
  const auto f = calibrated(set_of(rows));
  EXPECT_NEAR(f.at("remote_gbps"), 5.0, 5e-6);
  EXPECT_NEAR(f.at("remote_descriptor_us"), 2.0, 1e-5);
}

TEST(RemoteTier, ColdRowsAreFittedWhereTheRunHasThem) {
  // The planted figures as cold rows, and the same cases hot at 4x the speed (the holder's cache): a peer's pool
  // outgrows its LLC, so the fit is of the cold rows alone and says so.
  std::vector<CaseRow> rows;
  for (auto r : planted_rows()) {
    r.mode = "cold";
    rows.push_back(r);
    r.mode = "hot";
    r.median_s = *r.median_s / 4;
    r.samples_s.assign(r.samples_s.size(), *r.median_s);
    rows.push_back(r);
  }
  const auto rs = set_of(rows);
  const auto f = calibrated(rs);
  EXPECT_NEAR(f.at("remote_gbps"), 5.0, 5e-6);
  EXPECT_NEAR(f.at("remote_descriptor_us"), 2.0, 1e-5);
  std::string text;
  for (const auto& c : remote_report().calibration.front().measure(rs)) text += c.text;
  EXPECT_NE(text.find("6 cold remote read rows"), std::string::npos) << text;
  // Hot rows alone (a run from before cold rows existed, or --no-cold): fitted, and said to be hot.
  std::vector<CaseRow> hot;
  for (const auto& r : rows)
    if (r.mode == "hot") hot.push_back(r);
  text.clear();
  for (const auto& c : remote_report().calibration.front().measure(set_of(hot))) text += c.text;
  EXPECT_NE(text.find("6 hot remote read rows"), std::string::npos) << text;
  EXPECT_NEAR(calibrated(set_of(hot)).at("remote_gbps"), 20.0, 2e-5);
  // Each row is predicted by its own mode's fit: the calibrated (cold) figures for the cold rows, the run's fit of
  // its hot rows for the hot ones (the cold figure would predict them 4x too slow).
  GpuSpec g;
  g.name = "g";
  g.remote_gbps = f.at("remote_gbps");
  g.remote_fixed_us = f.at("remote_fixed_us");
  g.remote_descriptor_us = f.at("remote_descriptor_us");
  for (const auto& r : rs.cases) {
    std::string why;
    const auto t = predict_row(g, r, &why, &rs);
    ASSERT_TRUE(t) << r.case_name << " " << r.mode << ": " << why;
    EXPECT_NEAR(*t / *r.median_s, 1.0, 1e-6) << r.case_name << " " << r.mode << ": " << why;
    EXPECT_EQ(why.find("fit of its hot read rows") != std::string::npos, r.mode == "hot") << why;
  }
  // With the LLC known, a hot row larger than it moves from DRAM as a cold one: the calibrated (cold) figure predicts
  // it; the hot fit is of the rows the LLC holds.
  auto with_llc = rs;
  with_llc.llc_bytes = 32 << 20;
  for (const auto& r : with_llc.cases) {
    if (r.mode != "hot") continue;
    std::string why;
    const auto t = predict_row(g, r, &why, &with_llc);
    ASSERT_TRUE(t) << why;
    const bool big = *r.bytes > (32 << 20);
    EXPECT_NEAR(*t / *r.median_s, big ? 4.0 : 1.0, 1e-6) << r.case_name << ": " << why;
    EXPECT_NE(why.find(big ? "larger than the LLC" : "hot read rows up to the LLC"), std::string::npos) << why;
  }
}

TEST(RemoteTier, ATermThatFitsBelowZeroIsDroppedAndSaid) {
  // More descriptors take less time: no per-descriptor cost can be fitted; bandwidth and fixed cost remain.
  std::vector<CaseRow> v;
  for (double b : {262144.0, 67108864.0}) v.push_back(row("ceiling/read/" + std::to_string(b), "read", 1, b, 1e-5 + b / 4e9));
  v.push_back(row("granularity/read/a", "read", 512, 2097152, 1e-5 + 2097152 / 4e9 - 1e-4));
  const auto rs = set_of(v);
  const auto f = calibrated(rs);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.at("remote_descriptor_us"), 0.0);
  EXPECT_GT(f.at("remote_gbps"), 0.0);
  std::string text;
  for (const auto& c : remote_report().calibration.front().measure(rs)) text += c.text;
  EXPECT_NE(text.find("per-descriptor term fitted at"), std::string::npos) << text;
}

TEST(RemoteTier, OneSizeGivesNoFigure) {
  EXPECT_TRUE(calibrated(set_of({row("ceiling/read/a", "read", 1, 1 << 20, 1e-3)})).empty());
  EXPECT_TRUE(calibrated(set_of({})).empty());
}

TEST(RemoteTier, RemoteSecondsAndNoFigureIsAUsageError) {
  GpuSpec g;
  g.name = "g";
  EXPECT_THROW(remote_s(g, 1e6, 1), kvf::UsageError);
  g.remote_gbps = 10;
  g.remote_fixed_us = 3;
  g.remote_descriptor_us = 0.5;
  // 3 us + 32 x 0.5 us + 2 MiB / 10 GB/s = 19 us + 209.7152 us
  EXPECT_NEAR(remote_s(g, 2097152, 32) * 1e6, 3 + 16 + 209.7152, 1e-9);
}

TEST(RemoteTier, FetchPeerActionOnlyWithAFigureAndPricedAsRemotePlusDemote) {
  GpuSpec g = test::toy();
  const Shape m = test::small();
  ActionOptions o;
  o.tokens = {128};
  o.layers = {4};
  o.reuse = {1};
  auto has_peer = [](const std::vector<ActionClass>& t) {
    for (const auto& a : t.front().costs)
      if (a.action == "fetch_peer") return true;
    return false;
  };
  EXPECT_FALSE(has_peer(action_table(g, m, o)));
  g.remote_gbps = 10;
  g.remote_fixed_us = 3;
  g.remote_descriptor_us = 0.5;
  const auto t = action_table(g, m, o);
  ASSERT_TRUE(has_peer(t));
  double demote = 0, peer = 0;
  for (const auto& a : t.front().costs) {
    if (a.action == "demote") demote = a.reuse_us;
    if (a.action == "fetch_peer") {
      peer = a.reuse_us;
      EXPECT_EQ(a.hbm_bytes, 0);
    }
  }
  // K/V of 128 tokens x 4 layers = 128 x 256 x 2 x 4 = 262,144 B; remote: 3 + 4 x 0.5 + 262144 / 10e9 s = 31.2144 us.
  EXPECT_NEAR(peer - demote, 3 + 2 + 26.2144, 1e-9);
  EXPECT_GT(peer, demote);
}

// Many-to-one in lockstep: predicted as the readers in parallel with no contention at the holder (this run's
// signalling alone + one reader's fitted transfer of its region); the signalling row has no term of its own; the
// section puts the rate in all beside one reader's ceiling row of the same region.
TEST(RemoteLockstep, NoContentionBoundAndTheRateInAllBesideOneReader) {
  auto rows = planted_rows();
  rows.push_back(row("lockstep/read/signal", "read", 1, 0, 4e-6, {{"readers", "3"}, {"lockstep_bytes", "0"}}));
  // Three readers of 2 MiB each, 1.5x one reader's time: 3 / 1.5 = 2x one reader's rate in all.
  rows.push_back(row("lockstep/read/2MiB", "read", 1, 3 * 2097152.0, 1.5 * planted_s(1, 2097152),
                     {{"readers", "3"}, {"lockstep_bytes", "2097152"}}));
  for (auto& r : rows) r.gbps = *r.bytes / *r.median_s / 1e9;
  const auto rs = set_of(rows);
  GpuSpec g;
  g.name = "g";
  g.remote_gbps = 5;
  g.remote_fixed_us = 5;
  g.remote_descriptor_us = 2;
  std::string why;
  const auto t = predict_row(g, rs.cases.back(), &why, &rs);
  ASSERT_TRUE(t) << why;
  EXPECT_NEAR(*t, 4e-6 + planted_s(1, 2097152), 1e-12);
  EXPECT_NE(why.find("no contention at the holder"), std::string::npos) << why;
  EXPECT_FALSE(predict_row(g, rs.cases[rs.cases.size() - 2], &why, &rs));
  EXPECT_NE(why.find("signalling alone"), std::string::npos) << why;
  // Without the signalling row in the run there is no bound.
  auto no_signal = rows;
  no_signal.erase(no_signal.end() - 2);
  const auto rs2 = set_of(no_signal);
  EXPECT_FALSE(predict_row(g, rs2.cases.back(), &why, &rs2));
  EXPECT_NE(why.find("no lockstep signalling row"), std::string::npos) << why;

  const std::string md = render_markdown({rs}, {}, {});
  // region, readers, ...; then in all / one reader and the signalling alone in us
  EXPECT_NE(md.find("| test (cpu) | 2 MiB | 3 | "), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 4 |"), std::string::npos) << md;
}

TEST(RemoteClaim, PerLayerSlowerWithAnIntervalIsSupported) {
  std::vector<double> page(20), layer(20);
  for (int i = 0; i < 20; ++i) page[i] = 1e-3 + i * 1e-6, layer[i] = 1.5e-3 + i * 1e-6;
  const std::map<std::string, std::string> p16 = {{"tokens", "16"}, {"layout", "page_first"}, {"model", "m"}};
  auto with = [&](std::map<std::string, std::string> e, const std::string& g) {
    e["granularity"] = g;
    return e;
  };
  auto judge = [&](const std::vector<double>& a, const std::vector<double>& b) {
    const auto rs = set_of({row("granularity/read/m/T16/page_first/page", "read", 1, 2097152, a[10], with(p16, "page"), a),
                            row("granularity/read/m/T16/page_first/layer", "read", 32, 2097152, b[10], with(p16, "layer"), b)});
    return remote_report().verdicts.front().judge(rs).front();
  };
  const auto v = judge(page, layer);
  EXPECT_EQ(v.verdict, "supported") << v.figures;
  EXPECT_NE(v.figures.find("tcp/lo"), std::string::npos) << v.figures;
  EXPECT_EQ(judge(layer, page).verdict, "refuted");
  EXPECT_EQ(judge(page, page).verdict, "not established");
  EXPECT_EQ(remote_report().verdicts.front().judge(set_of({})).front().verdict, "not measured");
  // A per-layer row is compared with the one-descriptor row of its own mode only: a cold per-layer row beside a hot
  // page row (the holder's cache) has nothing to compare with.
  auto cold_layer = row("granularity/read/m/T16/page_first/layer", "read", 32, 2097152, layer[10], with(p16, "layer"),
                        layer);
  cold_layer.mode = "cold";
  const auto mixed = set_of({row("granularity/read/m/T16/page_first/page", "read", 1, 2097152, page[10],
                                 with(p16, "page"), page),
                             cold_layer});
  const auto unpaired = remote_report().verdicts.front().judge(mixed).front();
  EXPECT_EQ(unpaired.verdict, "not measured") << unpaired.figures;
  EXPECT_NE(unpaired.figures.find("no per-layer row"), std::string::npos) << unpaired.figures;
}

}  // namespace
