// The gate's verdicts, inputs and outputs on fixture result sets (tests/gate/fixtures, written by
// make_fixtures.py) and on small in-memory sets. No timing anywhere: every input is fixed data.
#include <cmath>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/gate.hpp"

namespace g = kvf::gate;

namespace {

std::string fixture(const std::string& name) { return std::string(KVF_GATE_FIXTURES) + "/" + name; }

const g::CaseResult* find(const g::GateReport& r, const std::string& label) {
  for (const auto& c : r.cases)
    if (c.label == label) return &c;
  return nullptr;
}

g::GateReport gate(const std::string& base, const std::string& cur, g::GateOptions o = {}) {
  return g::run_gate(g::load_results(fixture(base)), g::load_results(fixture(cur)), o);
}

// In-memory sets: one case per entry, samples scaled from a unit pattern.
g::CaseData mk(const std::string& study, const std::string& name, std::vector<double> s,
               const std::string& device = "Test GPU") {
  g::CaseData c;
  c.key.study = study;
  c.key.case_name = name;
  c.key.mode = "cold";
  c.backend = "cuda";
  c.device = device;
  c.samples = std::move(s);
  return c;
}
g::ResultSet set(std::vector<g::CaseData> cases, const std::string& src = "mem") {
  g::ResultSet rs;
  rs.source = src;
  rs.format = "kvf results";
  rs.cases = std::move(cases);
  return rs;
}
std::vector<double> times(double base, std::vector<double> jitter) {
  for (auto& j : jitter) j *= base;
  return jitter;
}
const std::vector<double> kLowA{1.000, 1.004, 0.996, 1.008, 0.993};
const std::vector<double> kLowB{0.997, 1.003, 1.001, 0.994, 1.007};

g::Verdict verdict_of(std::vector<double> b, std::vector<double> c, g::GateOptions o = {}) {
  auto r = g::run_gate(set({mk("s", "x", std::move(b))}), set({mk("s", "x", std::move(c))}), o);
  return r.cases.at(0).verdict;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Fixture result sets

TEST(GateFixtures, LoadsResultsDirectory) {
  const auto rs = g::load_results(fixture("base"));
  ASSERT_EQ(rs.cases.size(), 4u);
  EXPECT_EQ(rs.meta_devices, std::set<std::string>{"Fixture CPU 16-core"});
  EXPECT_TRUE(rs.warnings.empty()) << rs.warnings.front();  // samples = unthrottled count, as the harness writes
  const auto it = std::find_if(rs.cases.begin(), rs.cases.end(),
                               [](const g::CaseData& c) { return c.key.case_name == "gather"; });
  ASSERT_NE(it, rs.cases.end());
  EXPECT_EQ(it->samples.size(), 9u);  // 10 samples, one throttled
  EXPECT_EQ(it->throttled, 1);
  EXPECT_EQ(it->key.params.size(), 1u);  // block=16 (op is empty for this row: absent)
  const auto sk = std::find_if(rs.cases.begin(), rs.cases.end(), [](const g::CaseData& c) { return c.skipped; });
  ASSERT_NE(sk, rs.cases.end());
  EXPECT_EQ(sk->note, "skipped: needs 2 GPUs");
  // cases.csv or samples.csv name the same directory.
  EXPECT_EQ(g::load_results(fixture("base/cases.csv")).cases.size(), 4u);
  EXPECT_EQ(g::load_results(fixture("base/samples.csv")).cases.size(), 4u);
}

TEST(GateFixtures, IdenticalRunsPass) {
  const auto r = gate("base", "base");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.compared, 3u);
  EXPECT_EQ(r.count(g::Verdict::same), 3u);
  EXPECT_EQ(r.count(g::Verdict::skipped), 1u);
  EXPECT_DOUBLE_EQ(r.geomean_ratio, 1.0);
  for (const auto& c : r.cases) {
    if (!c.compared) continue;
    EXPECT_NEAR(c.p, 0.5, 1e-12) << c.label;  // one-sided, no direction
    EXPECT_NEAR(c.p_holm, 1.0, 1e-12) << c.label;
  }
}

TEST(GateFixtures, RerunWithinOnePercentPasses) {
  const auto r = gate("base", "rerun");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.count(g::Verdict::same), 3u);
  EXPECT_EQ(r.count(g::Verdict::slower), 0u);
}

TEST(GateFixtures, TenPercentSlowdownFails) {
  const auto r = gate("base", "slow");
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(r.count(g::Verdict::slower), 1u);
  const auto& c = r.cases.front();  // SLOWER sorts first
  EXPECT_EQ(c.label, "stream/read/cold");
  EXPECT_EQ(c.verdict, g::Verdict::slower);
  EXPECT_NEAR(c.change, 0.10, 0.01);
  EXPECT_LT(c.p, 0.001);
  EXPECT_LT(c.detectable, 0.05);
  EXPECT_EQ(r.count(g::Verdict::same), 2u);
  EXPECT_NE(g::summary_line(r).find("stream/read/cold +"), std::string::npos) << g::summary_line(r);
  // The same slowdown passes when the threshold is above it.
  g::GateOptions loose;
  loose.threshold = 0.15;
  EXPECT_EQ(gate("base", "slow", loose).exit_code, 0);
}

TEST(GateFixtures, NoisyCaseIsNoisyNotSlower) {
  const auto r = gate("noisy_base", "noisy");
  EXPECT_EQ(r.exit_code, 0);
  const auto* c = find(r, "access/gather/hot");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->verdict, g::Verdict::noisy);
  EXPECT_GT(c->change, 0.05);       // its median did move by more than the threshold...
  EXPECT_GT(c->detectable, 0.05);  // ...but the samples could not have told 5% from their noise
  EXPECT_NE(c->note.find("could not have flagged"), std::string::npos) << c->note;
}

TEST(GateFixtures, NewAndMissingAreReported) {
  const auto r = gate("base", "newmissing");
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_NE(find(r, "stream/copy/cold"), nullptr);
  EXPECT_EQ(find(r, "stream/copy/cold")->verdict, g::Verdict::new_case);
  ASSERT_NE(find(r, "stream/write/cold"), nullptr);
  EXPECT_EQ(find(r, "stream/write/cold")->verdict, g::Verdict::missing);
  g::GateOptions o;
  o.fail_on_missing = true;
  const auto strict = gate("base", "newmissing", o);
  EXPECT_EQ(strict.exit_code, 1);
  EXPECT_NE(g::summary_line(strict).find("stream/write/cold missing"), std::string::npos);
  // Without --fail-on-missing a MISSING case is no failure, also where another case fails the gate.
  g::GateReport both = r;
  both.exit_code = 1;
  g::CaseResult slow;
  slow.label = "stream/read/cold";
  slow.verdict = g::Verdict::slower;
  slow.change = 0.2;
  both.cases.insert(both.cases.begin(), slow);
  const std::string line = g::summary_line(both);
  EXPECT_NE(line.find("failing: stream/read/cold +20"), std::string::npos) << line;
  EXPECT_EQ(line.find("stream/write/cold missing"), std::string::npos) << line;
}

TEST(GateFixtures, SkippedCasesAreNotRegressions) {
  const auto r = gate("base", "slow");
  const auto* c = find(r, "access/gather_2gpu/hot");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->verdict, g::Verdict::skipped);
  EXPECT_NE(c->note.find("needs 2 GPUs"), std::string::npos);
}

TEST(GateFixtures, ThrottledSamplesAreIgnoredAndSaidSo) {
  const auto r = gate("base", "rerun");
  EXPECT_EQ(r.throttled_base, 1);
  EXPECT_EQ(r.throttled_cur, 1);
  const auto* c = find(r, "access/gather/hot");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_base, 9u);
  EXPECT_NE(c->note.find("throttled"), std::string::npos);
  EXPECT_NE(g::format_markdown(r, {}).find("Throttled samples were ignored"), std::string::npos);
}

TEST(GateFixtures, DeviceMismatchIsRefusedUnlessAllowed) {
  EXPECT_THROW(gate("base", "gpu"), kvf::UsageError);
  try {
    gate("base", "gpu");
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--allow-device-mismatch"), std::string::npos) << e.what();
  }
  g::GateOptions o;
  o.allow_device_mismatch = true;
  const auto r = gate("base", "gpu", o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(std::any_of(r.warnings.begin(), r.warnings.end(),
                          [](const std::string& w) { return w.find("device mismatch") != std::string::npos; }));
}

// An empty backend column is an unknown backend: the same device name is no mismatch (it was refused, exit 2), and
// another device name still is.
TEST(GateFixtures, AnEmptyBackendIsNoDeviceMismatch) {
  const std::vector<double> s = {1.0, 1.01, 0.99, 1.0, 1.02};
  g::CaseData unknown = mk("stream", "read", s);
  unknown.backend.clear();
  EXPECT_NO_THROW(g::run_gate(set({mk("stream", "read", s)}), set({unknown}, "other"), {}));
  unknown.device = "Other GPU";
  EXPECT_THROW(g::run_gate(set({mk("stream", "read", s)}), set({unknown}, "other"), {}), kvf::UsageError);
}

TEST(GateFixtures, FewerSamplesThanMinimumIsBadInput) {
  try {
    gate("base", "few");
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("stream/read/cold: current has 3 usable samples"), std::string::npos) << w;
    EXPECT_NE(w.find("--min-samples 5"), std::string::npos) << w;
  }
  g::GateOptions o;
  o.min_samples = 3;
  EXPECT_NO_THROW(gate("base", "few", o));
}

TEST(GateFixtures, MalformedInputsAreBadInput) {
  for (const char* bad : {"badnumber", "badquote", "nosamples", "does-not-exist", "make_fixtures.py"}) {
    EXPECT_THROW(g::load_results(fixture(bad)), kvf::UsageError) << bad;
  }
  try {
    g::load_results(fixture("badnumber"));
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("samples.csv"), std::string::npos) << e.what();
  }
}

TEST(GateFixtures, FilterSelectsCases) {
  g::GateOptions o;
  o.filter = "^access/";
  const auto r = gate("base", "slow", o);
  EXPECT_EQ(r.exit_code, 0);  // the slow case is filtered out
  EXPECT_EQ(r.cases.size(), 2u);
  o.filter = "^nothing-matches$";
  EXPECT_THROW(gate("base", "slow", o), kvf::UsageError);
  o.filter = "([unclosed";
  EXPECT_THROW(gate("base", "slow", o), kvf::UsageError);
}

TEST(GateFixtures, GoogleBenchmarkJsonWithRepetitions) {
  const auto rs = g::load_results(fixture("gbench_base.json"));
  ASSERT_EQ(rs.cases.size(), 2u);  // aggregates (mean/median/stddev) are not samples
  for (const auto& c : rs.cases) EXPECT_EQ(c.samples.size(), 6u) << c.key.case_name;
  const auto scan = std::find_if(rs.cases.begin(), rs.cases.end(),
                                 [](const g::CaseData& c) { return c.key.case_name == "BM_Scan/65536"; });
  ASSERT_NE(scan, rs.cases.end());
  EXPECT_NEAR(scan->samples[0], 12.5e-6 * 0.997, 1e-12);  // time_unit "us" -> seconds
  const auto r = gate("gbench_base.json", "gbench_slow.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.cases.front().label, "BM_Copy/4096");
  EXPECT_EQ(r.cases.front().verdict, g::Verdict::slower);
  EXPECT_NEAR(r.cases.front().p, 1.0 / 924.0, 1e-12);  // 6 vs 6, no overlap: one-sided 1 / C(12,6)
  EXPECT_EQ(gate("gbench_base.json", "gbench_base.json").exit_code, 0);
}

// The remedy for too few samples depends on what holds them: our samples (a longer --budget) or Google
// Benchmark's one time per repetition (more repetitions; a longer budget adds nothing there).
TEST(GateFixtures, TooFewSamplesNamesTheRemedyOfEachFormat) {
  g::GateOptions o;
  o.min_samples = 7;  // the JSON fixtures hold 6 repetitions per case
  try {
    gate("gbench_base.json", "gbench_slow.json", o);
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--benchmark_repetitions=N"), std::string::npos) << w;
    EXPECT_EQ(w.find("--budget"), std::string::npos) << w;
  }
  try {
    gate("base", "few");
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--budget"), std::string::npos) << w;
    EXPECT_EQ(w.find("--benchmark_repetitions"), std::string::npos) << w;
  }
}

TEST(GateFixtures, MixedFormatsShareNoCase) {
  EXPECT_THROW(gate("base", "gbench_base.json"), kvf::UsageError);
}

// ---------------------------------------------------------------------------------------------
// Verdict rules on in-memory data

TEST(GateRules, HonestTenPercentSlowdownWithFiveSamples) {
  EXPECT_EQ(verdict_of(times(1.0, kLowA), times(1.10, kLowB)), g::Verdict::slower);
}

TEST(GateRules, SignificantButBelowThresholdIsSame) {
  EXPECT_EQ(verdict_of(times(1.0, kLowA), times(1.04, kLowB)), g::Verdict::same);
}

TEST(GateRules, TenPercentFasterIsFaster) {
  const auto r = g::run_gate(set({mk("s", "x", times(1.0, kLowA))}), set({mk("s", "x", times(0.90, kLowB))}), {});
  EXPECT_EQ(r.cases.at(0).verdict, g::Verdict::faster);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NEAR(r.geomean_ratio, 0.90, 0.01);
}

TEST(GateRules, NoiseWiderThanThresholdIsNoisy) {
  const std::vector<double> noisy{1.0, 1.3, 0.8, 1.2, 0.9, 1.1, 0.75, 1.25};
  EXPECT_EQ(verdict_of(noisy, times(1.08, noisy)), g::Verdict::noisy);
  EXPECT_EQ(verdict_of(noisy, noisy), g::Verdict::noisy);  // cannot resolve 5% either way
}

TEST(GateRules, NoisyCurrentRunWhoseRanksDoNotMoveIsNotSlower) {
  // Tight baseline, a jittery current run whose median moved 10% but whose ranks barely did (2 of 8 below).
  const std::vector<double> cur{1.10, 0.85, 1.45, 1.02, 1.30, 0.90, 1.25, 1.12};
  const std::vector<double> base{1.0, 1.002, 0.998, 1.004, 0.996, 1.001, 0.999, 1.003};
  EXPECT_EQ(verdict_of(base, cur), g::Verdict::noisy);
}

// A regression that also makes the timings noisier is a regression: the current run's spread widens nothing.
TEST(GateRules, SlowdownThatAddsNoiseStillFails) {
  const std::vector<double> base{1.0, 1.004, 0.996, 1.008, 0.993, 0.997, 1.003, 1.001, 0.994, 1.007};
  // half the samples 1.5x slower (a lock, a bimodal path): +25% median
  const std::vector<double> bimodal{1.0, 1.5, 1.004, 1.51, 0.996, 1.49, 1.008, 1.52, 0.993, 1.48};
  // every sample 30% slower with 15% jitter
  const std::vector<double> jitter{1.30, 1.12, 1.48, 1.25, 1.41, 1.18, 1.36, 1.29, 1.52, 1.22};
  EXPECT_EQ(verdict_of(base, bimodal), g::Verdict::slower);
  EXPECT_EQ(verdict_of(base, jitter), g::Verdict::slower);
}

TEST(GateRules, ChangeFarBeyondTheNoiseIsSlowerEvenWhenNoisy) {
  const std::vector<double> noisy{1.0, 1.2, 0.85, 1.15, 0.9, 1.1, 0.95, 1.05};
  EXPECT_EQ(verdict_of(noisy, times(2.0, noisy)), g::Verdict::slower);
}

TEST(GateRules, TooFewSamplesToBeSignificantIsNoisyAndSaysSo) {
  g::GateOptions o;
  o.min_samples = 3;
  auto r = g::run_gate(set({mk("s", "x", {1.0, 1.001, 0.999})}), set({mk("s", "x", {1.5, 1.501, 1.499})}), o);
  const auto& c = r.cases.at(0);
  EXPECT_EQ(c.verdict, g::Verdict::noisy);  // +50%, but 3 vs 3 can never reach p < 0.05 (min one-sided p 0.05)
  EXPECT_NEAR(c.p, 0.05, 1e-12);
  EXPECT_NE(c.note.find("too few samples"), std::string::npos) << c.note;
  EXPECT_EQ(r.exit_code, 0);
}

TEST(GateRules, ParametersArePartOfTheKey) {
  auto a = mk("s", "x", times(1.0, kLowA));
  a.key.params = {{"size", "1"}};
  auto b = mk("s", "x", times(1.0, kLowA));
  b.key.params = {{"size", "2"}};
  auto other = mk("s", "y", times(1.0, kLowA));
  const auto r = g::run_gate(set({a, other}), set({b, other}), {});
  EXPECT_EQ(r.count(g::Verdict::new_case), 1u);
  EXPECT_EQ(r.count(g::Verdict::missing), 1u);
  EXPECT_NE(find(r, "s/x/cold {size=2}"), nullptr);  // colliding labels carry their parameters
  EXPECT_NE(find(r, "s/x/cold {size=1}"), nullptr);
}

TEST(GateRules, BadOptionsAreBadInput) {
  const auto s = set({mk("s", "x", times(1.0, kLowA))});
  g::GateOptions o;
  o.alpha = 0;
  EXPECT_THROW(g::run_gate(s, s, o), kvf::UsageError);
  o = {};
  o.threshold = 0;
  EXPECT_THROW(g::run_gate(s, s, o), kvf::UsageError);
}

TEST(GateRules, AllCommonCasesSkippedIsBadInput) {
  auto a = mk("s", "x", {});
  a.skipped = true;
  EXPECT_THROW(g::run_gate(set({a}), set({a}), {}), kvf::UsageError);
}

// ---------------------------------------------------------------------------------------------
// Loading from tables

TEST(GateLoad, TablesWithParametersInAnyColumnOrder) {
  kvf::CsvTable cases;
  cases.path = "cases.csv";
  cases.header = kvf::case_columns();
  cases.header.push_back("size");
  std::vector<std::string> row(cases.header.size());
  auto set_col = [&](const std::string& col, const std::string& v) {
    row[*cases.column(col)] = v;
  };
  set_col("study", "stream");
  set_col("case", "read");
  set_col("mode", "cold");
  set_col("samples", "2");
  set_col("size", "4096");
  cases.rows.push_back(row);
  cases.line.push_back(2);
  kvf::CsvTable samples;
  samples.path = "samples.csv";
  samples.header = kvf::sample_columns();
  samples.rows = {{"stream", "read", "cold", "0", "0.5", "", "0"},
                  {"stream", "read", "cold", "1", "0.6", "", "1"},
                  {"stream", "gone", "cold", "0", "0.6", "", "0"}};
  samples.line = {2, 3, 4};
  const auto rs = g::load_kvf_tables(cases, samples, "mem");
  ASSERT_EQ(rs.cases.size(), 1u);
  EXPECT_EQ(rs.cases[0].samples, std::vector<double>{0.5});
  EXPECT_EQ(rs.cases[0].throttled, 1);
  EXPECT_EQ(rs.cases[0].key.params_string(), "size=4096");
  ASSERT_EQ(rs.warnings.size(), 1u);  // the orphan "gone" sample
  EXPECT_NE(rs.warnings[0].find("belong to no case"), std::string::npos);

  // Every sample throttled: cases.csv says 0, but it is not a skipped case; it has 0 usable samples.
  auto all_thr = cases;
  all_thr.rows[0][*cases.column("samples")] = "0";
  auto thr = samples;
  thr.rows[0][6] = "1";
  const auto rt = g::load_kvf_tables(all_thr, thr, "mem");
  EXPECT_FALSE(rt.cases[0].skipped);
  EXPECT_EQ(rt.cases[0].throttled, 2);
  try {
    g::run_gate(rt, rt, {});
    FAIL() << "expected UsageError";
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("0 usable samples (2 throttled ignored)"), std::string::npos) << e.what();
  }

  auto dup = cases;
  dup.rows.push_back(row);
  dup.line.push_back(3);
  EXPECT_THROW(g::load_kvf_tables(dup, samples, "mem"), kvf::UsageError);
  auto neg = samples;
  neg.rows[0][4] = "-1";
  EXPECT_THROW(g::load_kvf_tables(cases, neg, "mem"), kvf::UsageError);
  auto nocol = samples;
  nocol.header[4] = "secs";
  EXPECT_THROW(g::load_kvf_tables(cases, nocol, "mem"), kvf::UsageError);
}

// A value the run measured (kvf::measured_param_columns: the access study's FMA peak and floor, the share of an
// array on huge pages) differs between two runs of one case: it is no part of the case's key, so the two match.
TEST(GateLoad, MeasuredColumnsAreNoPartOfTheKey) {
  const auto tables = [](const std::string& peak, const std::string& floor_s) {
    kvf::CsvTable cases;
    cases.path = "cases.csv";
    cases.header = kvf::case_columns();
    for (const char* c : {"ctx", "fma_peak_gflops", "fma_floor_s", "huge_backed_pct"}) cases.header.push_back(c);
    std::vector<std::string> row(cases.header.size());
    const auto set_col = [&](const std::string& col, const std::string& v) { row[*cases.column(col)] = v; };
    set_col("study", "access");
    set_col("case", "attn/dense/16K");
    set_col("mode", "cold");
    set_col("samples", "5");
    set_col("ctx", "16384");
    set_col("fma_peak_gflops", peak);
    set_col("fma_floor_s", floor_s);
    set_col("huge_backed_pct", peak == "124.8" ? "100" : "87.5");
    cases.rows.push_back(row);
    cases.line.push_back(2);
    kvf::CsvTable samples;
    samples.path = "samples.csv";
    samples.header = kvf::sample_columns();
    for (int i = 0; i < 5; ++i) {
      samples.rows.push_back(
          {"access", "attn/dense/16K", "cold", std::to_string(i), std::to_string(0.004 + i * 1e-5), "", "0", "0"});
      samples.line.push_back(3 + i);
    }
    return std::make_pair(cases, samples);
  };
  const auto [c1, s1] = tables("124.8", "0.00215");
  const auto [c2, s2] = tables("200.6", "0.00134");
  const auto a = g::load_kvf_tables(c1, s1, "run 1"), b = g::load_kvf_tables(c2, s2, "run 2");
  ASSERT_EQ(a.cases.size(), 1u);
  EXPECT_EQ(a.cases[0].key.params_string(), "ctx=16384");
  const auto r = g::run_gate(a, b, {});
  EXPECT_EQ(r.count(g::Verdict::new_case), 0u);
  EXPECT_EQ(r.count(g::Verdict::missing), 0u);
  ASSERT_EQ(r.cases.size(), 1u);
  EXPECT_EQ(r.cases[0].verdict, g::Verdict::same);
}

TEST(GateLoad, MetaDeviceNames) {
  const auto j = nlohmann::json::parse(R"({"studies":{"a":{"device":{"name":"H100"}},"b":{"device":"H100"}},
                                           "other":[{"device":{"name":"CPU"}}]})");
  EXPECT_EQ(g::meta_device_names(j), (std::set<std::string>{"CPU", "H100"}));
}

TEST(GateLoad, GoogleBenchmarkErrorsAndBadUnits) {
  auto j = nlohmann::json::parse(R"({"benchmarks":[
      {"name":"A","run_name":"A","run_type":"iteration","real_time":5,"time_unit":"ms"},
      {"name":"B","run_name":"B","run_type":"iteration","error_occurred":true,"error_message":"no GPU"}]})");
  const auto rs = g::load_gbench_json(j, "x.json");
  ASSERT_EQ(rs.cases.size(), 2u);
  EXPECT_DOUBLE_EQ(rs.cases[0].samples.at(0), 5e-3);
  EXPECT_TRUE(rs.cases[1].skipped);
  j["benchmarks"][0]["time_unit"] = "fortnights";
  EXPECT_THROW(g::load_gbench_json(j, "x.json"), kvf::UsageError);
  EXPECT_THROW(g::load_gbench_json(nlohmann::json::parse(R"({"nope":1})"), "x.json"), kvf::UsageError);
  EXPECT_THROW(g::load_gbench_json(nlohmann::json::parse(
                   R"({"benchmarks":[{"name":"A_mean","run_name":"A","run_type":"aggregate","real_time":1}]})"),
                                   "x.json"),
               kvf::UsageError);
}

// ---------------------------------------------------------------------------------------------
// Output

TEST(GateOutput, MarkdownForAPullRequest) {
  const auto r = gate("base", "slow");
  const std::string md = g::format_markdown(r, {});
  EXPECT_NE(md.find("kvf gate: FAIL"), std::string::npos) << md;
  EXPECT_NE(md.find("| **SLOWER** | `stream/read/cold` |"), std::string::npos) << md;
  EXPECT_NE(md.find("geomean current/baseline"), std::string::npos);
  EXPECT_NE(md.find("<details>"), std::string::npos);  // SAME cases folded away
  EXPECT_NE(md.find("Fixture CPU 16-core"), std::string::npos);
  // Every table row has the header's 10 cells.
  std::size_t pos = 0;
  while ((pos = md.find("\n| ", pos)) != std::string::npos) {
    const std::size_t end = md.find('\n', pos + 1);
    const std::string line = md.substr(pos + 1, end - pos - 1);
    std::size_t bars = 0;
    for (std::size_t i = 0; i < line.size(); ++i)
      if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) ++bars;
    EXPECT_EQ(bars, 11u) << line;
    pos = end;
  }
  EXPECT_NE(g::format_markdown(gate("base", "base"), {}).find("kvf gate: PASS"), std::string::npos);
}

TEST(GateOutput, CsvHasOneRowPerCase) {
  const auto r = gate("base", "newmissing");
  const std::string csv = g::format_csv(r);
  EXPECT_EQ(csv.rfind("verdict,study,case,mode,params,", 0), 0u) << csv;
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')), r.cases.size() + 1);
  EXPECT_NE(csv.find("MISSING,stream,write,cold,op=write"), std::string::npos) << csv;
  EXPECT_NE(csv.find("NEW,stream,copy,cold,op=copy"), std::string::npos) << csv;
}

// ---------------------------------------------------------------------------------------------
// Noise never fails the build; an honest slowdown always does. Deterministic: a fixed-seed mt19937
// (its output sequence is fixed by the standard) turned into roughly normal noise by summing uniforms.

namespace {
struct Noise {
  std::mt19937_64 rng{20261122};
  double normal() {  // Irwin-Hall: the sum of 12 uniforms minus 6, mean 0, sd 1
    double s = 0;
    for (int i = 0; i < 12; ++i) s += static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return s - 6;
  }
  std::vector<double> samples(int n, double median, double rel_sd) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(median * std::max(0.05, 1 + rel_sd * normal()));
    return v;
  }
};
}  // namespace

// One case per gate: a false SLOWER needs the one-sided test at alpha and a change above the threshold, so its
// rate is at most alpha (0.05), and well below it where the noise is small against the threshold.
TEST(GateProperties, SameDistributionRarelySlower) {
  Noise nz;
  int slower = 0, trials = 0;
  for (int n : {5, 8, 12, 30}) {
    for (double sd : {0.005, 0.01, 0.03, 0.1, 0.3}) {
      for (int t = 0; t < 100; ++t, ++trials) {
        // Drawn in named order: as two arguments of one call, GCC drew the current side first and clang the
        // baseline first, so the fixed seed gave each compiler different trials.
        auto current = nz.samples(n, 1e-3, sd);
        auto baseline = nz.samples(n, 1e-3, sd);
        if (verdict_of(std::move(baseline), std::move(current)) == g::Verdict::slower) ++slower;
      }
    }
  }
  EXPECT_LE(slower, trials / 20) << "of " << trials << " same-distribution comparisons";
}

namespace {
// A gate of `cases` cases, nothing changed: `runs` baseline runs and one current run, each run shifted as a whole
// (sd `between`) and its `n` samples spread within it (sd `within`). True when the gate fails.
bool null_gate_fails(Noise& nz, int cases, int runs, int n, double between, double within) {
  auto run = [&](int r) {
    std::vector<g::CaseData> cs;
    for (int i = 0; i < cases; ++i) {
      const double shift = 1 + between * nz.normal();
      cs.push_back(mk("s", "c" + std::to_string(i), nz.samples(n, 1e-3 * shift, within)));
    }
    return set(std::move(cs), "run" + std::to_string(r));
  };
  std::vector<g::ResultSet> base;
  for (int r = 0; r < runs; ++r) base.push_back(run(r));
  return g::run_gate(g::merge_runs(std::move(base)), run(runs), {}).exit_code == 1;
}
}  // namespace

// Holm over the cases: a gate of 40 unchanged cases fails about alpha of the time or less, with one baseline run
// (within-run noise only) and with three runs whose whole-run shifts are twice the within-run noise (tested as
// runs, not as pooled samples, which failed most such gates before).
TEST(GateProperties, ManyUnchangedCasesFailAGateAtMostAlphaOfTheTime) {
  Noise nz;
  int one = 0, three = 0;
  for (int t = 0; t < 60; ++t) {
    one += null_gate_fails(nz, 40, 1, 8, 0.0, 0.05);
    three += null_gate_fails(nz, 40, 3, 8, 0.02, 0.01);
  }
  EXPECT_LE(one, 6) << "of 60 gates, one-run baseline";
  EXPECT_LE(three, 6) << "of 60 gates, three-run baseline";
}

// Power of the run-level test: five quiet runs (0.5% between runs) see a 15% slowdown of one case among 20.
TEST(GateProperties, FiveQuietRunsSeeFifteenPercent) {
  Noise nz;
  for (int t = 0; t < 20; ++t) {
    std::vector<g::ResultSet> base;
    auto run = [&](int r, double slow) {
      std::vector<g::CaseData> cs;
      for (int i = 0; i < 20; ++i) {
        const double shift = (1 + 0.005 * nz.normal()) * (i == 0 ? slow : 1.0);
        cs.push_back(mk("s", "c" + std::to_string(i), nz.samples(10, 1e-3 * shift, 0.01)));
      }
      return set(std::move(cs), "run" + std::to_string(r));
    };
    for (int r = 0; r < 5; ++r) base.push_back(run(r, 1.0));
    const auto rep = g::run_gate(g::merge_runs(std::move(base)), run(5, 1.15), {});
    ASSERT_NE(find(rep, "s/c0/cold"), nullptr);
    EXPECT_EQ(find(rep, "s/c0/cold")->verdict, g::Verdict::slower) << "trial " << t;
    EXPECT_EQ(rep.count(g::Verdict::slower), 1u) << "trial " << t;
  }
}

TEST(GateProperties, TenPercentSlowdownWithLowNoiseAlwaysCaught) {
  Noise nz;
  for (int n : {5, 10, 30}) {
    for (int t = 0; t < 100; ++t) {
      auto current = nz.samples(n, 1.1e-3, 0.01);  // named order, as above
      auto baseline = nz.samples(n, 1e-3, 0.01);
      ASSERT_EQ(verdict_of(std::move(baseline), std::move(current)), g::Verdict::slower)
          << "n=" << n << " trial " << t;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Baselines of several runs

TEST(GateRuns, MergePoolsSamplesAndKeepsEachRunsMedian) {
  const auto merged = g::merge_runs({set({mk("s", "x", times(1.0, kLowA))}, "r1"),
                                     set({mk("s", "x", times(1.2, kLowB)), mk("s", "y", times(1.0, kLowA))}, "r2")});
  ASSERT_EQ(merged.cases.size(), 2u);
  const auto& x = merged.cases[0];
  EXPECT_EQ(x.samples.size(), 10u);
  ASSERT_EQ(x.run_medians.size(), 2u);
  EXPECT_NEAR(x.run_medians[0], 1.0, 1e-12);
  EXPECT_NEAR(x.run_medians[1], 1.2 * 1.001, 1e-12);
  EXPECT_EQ(merged.source, "r1 + r2");
  // y was measured by one run of two: said, not hidden.
  ASSERT_EQ(merged.warnings.size(), 1u);
  EXPECT_NE(merged.warnings[0].find("1 of 2"), std::string::npos);
}

TEST(GateRuns, RunToRunShiftInTheBaselineWidensTheNoiseFloor) {
  // Each run is quiet inside (spread < 1%), but whole runs moved by 30% on a shared machine. A current
  // run 25% above the first baseline run is SLOWER against that run alone, and not against the three.
  const auto cur = set({mk("s", "x", times(1.25, kLowB))});
  const auto one = g::run_gate(set({mk("s", "x", times(1.0, kLowA))}), cur, {});
  EXPECT_EQ(one.cases.at(0).verdict, g::Verdict::slower);
  const auto three = g::run_gate(g::merge_runs({set({mk("s", "x", times(1.0, kLowA))}),
                                                set({mk("s", "x", times(1.3, kLowB))}),
                                                set({mk("s", "x", times(1.05, kLowA))})}),
                                 cur, {});
  const auto& r = three.cases.at(0);
  EXPECT_NE(r.verdict, g::Verdict::slower);
  EXPECT_EQ(three.exit_code, 0);
  EXPECT_EQ(r.runs_base, 3u);
  EXPECT_GT(r.spread_runs, 0.1);  // sd of the log medians 0, 0.26, 0.05
  EXPECT_NE(r.note.find("baseline runs"), std::string::npos) << r.note;
}

// Two baseline runs far apart: the t quantile of one degree of freedom at alpha / m puts the detectable slowdown
// past any meaning (it printed 10^51 % on the committed CPU runs); beyond +1000% it is none, the note says so, and
// a PASS where nothing could be flagged says that none of its compared cases was protected.
TEST(GateRuns, DetectableBeyondTenfoldIsNoneAndThePassSaysWhatItProtected) {
  std::vector<g::CaseData> b1, b2, cur;
  for (int i = 0; i < 40; ++i) {
    const std::string n = "x" + std::to_string(i);
    b1.push_back(mk("s", n, times(1.0, kLowA)));
    b2.push_back(mk("s", n, times(1.6, kLowB)));
    cur.push_back(mk("s", n, times(1.2, kLowA)));
  }
  const auto r = g::run_gate(g::merge_runs({set(b1), set(b2)}), set(cur), {});
  ASSERT_EQ(r.cases.size(), 40u);
  const auto& c = r.cases.at(0);
  EXPECT_EQ(c.verdict, g::Verdict::noisy);
  EXPECT_TRUE(std::isinf(c.detectable)) << c.detectable;
  EXPECT_NE(c.note.find("no slowdown up to +1000"), std::string::npos) << c.note;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(g::format_markdown(r, {}).find("kvf gate: PASS (0 of 40 compared cases protected)"), std::string::npos);
  EXPECT_NE(g::summary_line(r).find("(0 of 40 compared cases protected)"), std::string::npos) << g::summary_line(r);
}

// The harness's "machine busy" flag of a row travels into the note of a SLOWER or NOISY case.
TEST(GateRules, MachineBusyFlagOfTheCurrentRowIsInTheNote) {
  auto c = mk("s", "x", times(1.3, kLowB));
  c.note = "GEMM: sgemm; machine busy: 84 involuntary context switches; verify ok";
  const auto r = g::run_gate(set({mk("s", "x", times(1.0, kLowA))}), set({c}), {});
  EXPECT_EQ(r.cases.at(0).verdict, g::Verdict::slower);
  EXPECT_NE(r.cases.at(0).note.find("current row: machine busy: 84 involuntary context switches"), std::string::npos)
      << r.cases.at(0).note;
  EXPECT_EQ(r.cases.at(0).note.find("verify ok"), std::string::npos);
}

TEST(GateRuns, RealSlowdownBeyondTheRunToRunShiftStillFails) {
  const auto base = g::merge_runs({set({mk("s", "x", times(1.0, kLowA))}), set({mk("s", "x", times(1.1, kLowB))}),
                                   set({mk("s", "x", times(1.05, kLowA))})});
  const auto r = g::run_gate(base, set({mk("s", "x", times(2.0, kLowB))}), {});
  EXPECT_EQ(r.cases.at(0).verdict, g::Verdict::slower);
  EXPECT_EQ(r.exit_code, 1);
}

