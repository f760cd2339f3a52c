// Golden result sets -> exact report numbers (crossover interpolation, verdict rules), deterministic
// report.md, charts non-empty, partial and malformed inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "kvf/report.hpp"
#include "kvf/study_report.hpp"
#include "series.hpp"  // studies/frontier/report: the frontier's measured series
#include "test_files.hpp"

using namespace kvf::report;
namespace fs = std::filesystem;

namespace {

const std::string kFx = KVF_REPORT_FIXTURES;

using kvf_test::slurp;
fs::path tmpdir(const std::string& name) { return kvf_test::tmpdir("kvf_report_test", name); }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kvf::UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

// The Markdown report of one results directory, without charts.
std::string markdown_of(const fs::path& dir) {
  ReportOptions o;
  o.charts = false;
  return render_markdown({load_results(dir.string())}, o, {});
}

const Verdict& find(const std::vector<Verdict>& vs, const std::string& prefix) {
  for (const auto& v : vs)
    if (v.claim.rfind(prefix, 0) == 0) return v;
  throw std::runtime_error("no verdict " + prefix);
}

}  // namespace

TEST(Load, GpuFixture) {
  const ResultSet rs = load_results(kFx + "/gpu");
  EXPECT_EQ(rs.label, "NVIDIA H100 80GB HBM3 (cuda)");
  EXPECT_EQ(rs.suite_version, "0.1.0");
  EXPECT_TRUE(rs.has_samples);
  EXPECT_TRUE(rs.has_counters);
  EXPECT_EQ(rs.cases.size(), 22u);
  EXPECT_EQ(rs.rows("frontier").size(), 11u);  // the p2p row has no samples
  ASSERT_EQ(rs.missing.size(), 2u);  // the fixture predates the remote study (issue 18): it has no rows of it
  EXPECT_EQ(rs.missing[0], "study remote: no rows in cases.csv (not run)");
  EXPECT_EQ(rs.missing[1], "1 case rows without samples (skipped or failed; reasons in their notes)");
}

TEST(Verdicts, GoldenGpuSet) {
  const auto vs = verdicts(load_all({kFx + "/gpu"}));
  ASSERT_EQ(vs.size(), 8u);  // claims 1, 2 (three definitions), 3, 4, 5, 6 (remote: not run there)
  EXPECT_EQ(find(vs, "A KV page moved as one descriptor per layer").verdict, "not measured");
  // Claim 1: recompute 48 us; fetch interpolated at 524288 B between 64 KiB (30 us) and 1 MiB (330 us) = 170 us.
  const auto& c1 = find(vs, "Recompute ~50 us");
  EXPECT_EQ(c1.verdict, "supported");
  // With the regime: the fetch's fixed cost is a small share of it here, so no "comparison of fixed costs".
  EXPECT_EQ(c1.figures,
            "Llama-3.1-8B: recompute 48 us (q1..q3 48..48 us) (cold), fetch 170 us (q1..q3 170..170 us) (cold); fitted "
            "fixed costs 36.81 us (recompute) and 10 us (fetch) are 76.68% and 5.882% of them at 128 tokens");
  // The same rows with a recompute spread reaching the fetch's: no sign, whatever the medians say.
  auto wide = load_all({kFx + "/gpu"});
  for (auto& r : wide[0].cases)
    if (r.study == "frontier" && r.param("arm") == "x" && r.param("tokens") == "128") r.q3_s = 200e-6;
  const auto unsure = find(verdicts(wide), "Recompute ~50 us");
  EXPECT_EQ(unsure.verdict, "not established") << unsure.figures;
  EXPECT_NE(unsure.figures.find("inside each other's q1..q3 spread, no sign"), std::string::npos) << unsure.figures;
  // Claim 2: medians over all ranges: SM 40 (30,40,50), issue 80 (70,80,90), tensor 97 (95,97,99).
  EXPECT_EQ(find(vs, "More than 60% of the GPU is idle in decode - SM").verdict, "refuted");
  // Per batch, decode ranges only (the fixture's decode cases: batch 1 and 8).
  EXPECT_EQ(find(vs, "More than 60% of the GPU is idle in decode - SM").figures,
            "decode ranges only (3), median per batch and context: B1 35%; B8 50%; lowest: 35% at batch 1");
  EXPECT_EQ(find(vs, "More than 60% of the GPU is idle in decode - issue").verdict, "supported");
  EXPECT_EQ(find(vs, "More than 60% of the GPU is idle in decode - tensor").figures,
            "decode ranges only (3), median per batch and context: B1 96%; B8 99%; lowest: 96% at batch 1");
  // Claim 3: at 16 tokens the fetch (30 us) beats recompute (40 us): refuted; crossover 24.48 tokens.
  const auto& c3 = find(vs, "Recompute wins for small pages");
  EXPECT_EQ(c3.verdict, "refuted");
  EXPECT_NE(c3.figures.find("crossover 24.48 tokens (interpolated between 16 and 128; h2d_pinned faster below, "
                            "recompute above)"),
            std::string::npos)
      << c3.figures;
  EXPECT_NE(c3.figures.find("Llama-3.1-8B vs h2d_pinned (recompute cold, fetch cold): T=16"), std::string::npos)
      << c3.figures;  // the modes the rule picked (cold when measured, else hot) are printed
  EXPECT_NE(c3.figures.find("T=512 90 us / 650 us"), std::string::npos) << c3.figures;
  // layers: 100/170 = 0.5882 at L=1, 300/330 = 0.9091 at L=2 (the advantage shrinks with layers)
  EXPECT_NE(c3.figures.find("through-layers T=128: L=1 recompute/fetch 0.5882, L=2 0.9091"), std::string::npos)
      << c3.figures;
  // Both regimes: the fitted fixed costs and the per-token ratio at large pages.
  EXPECT_NE(c3.figures.find("tokens the fixed cost decides: recompute"), std::string::npos) << c3.figures;
  EXPECT_NE(c3.figures.find("at large pages, where per-token costs decide, recompute/fetch = "), std::string::npos)
      << c3.figures;
  // Claim 4: int4 X 278528 B <= K/V 524288 B; best row P4: 120 us per call / 4 pages = 30 us.
  const auto& c4 = find(vs, "XQuant-style");
  EXPECT_EQ(c4.verdict, "supported");
  // Batched against batched: the 4 pages' K/V in one copy, per page 162.5 us (interpolated at 2 MiB).
  EXPECT_NE(c4.figures.find("int4 X, T=128 P4 (recompute cold, fetch cold): resident 272 KiB vs K/V 512 KiB per page; "
                            "recompute 30 us vs "
                            "h2d_pinned of the 4 pages in one copy 162.5 us per page (0.1846x); K/V error not stated"),
            std::string::npos)
      << c4.figures;
  // Claim 5: token/block 2x at 1024, 3x at 8192 (constant samples: intervals of zero width); the range crosses
  // the L2 at ctx 3413.
  const auto& c5 = find(vs, "Contiguous blocks");
  EXPECT_EQ(c5.verdict, "supported");
  EXPECT_NE(c5.figures.find("token/block 2x [2, 2] at 1K, 3x [3, 3] at 8K"), std::string::npos) << c5.figures;
  EXPECT_NE(c5.figures.find("block faster at 2, token faster at 0"), std::string::npos) << c5.figures;
  EXPECT_NE(c5.figures.find("1 groups cross the LLC/L2 knee"), std::string::npos) << c5.figures;
  for (const auto& v : vs) EXPECT_EQ(v.device, "NVIDIA H100 80GB HBM3 (cuda)");
}

// Claim 4 with the memory columns gone: nothing says what an X form keeps, so nothing was compared at equal
// memory: not measured (it read "refuted: every quantized X is larger" when the columns were absent).
TEST(Verdicts, Claim4WithoutMemoryColumnsIsNotMeasured) {
  auto sets = load_all({kFx + "/gpu"});
  for (auto& r : sets[0].cases)
    if (r.param("arm") == "xq") r.params.erase("resident_bytes_per_page");
  const auto vs = verdicts(sets);
  const auto& c4 = find(vs, "XQuant-style");
  EXPECT_EQ(c4.verdict, "not measured") << c4.figures;
  EXPECT_EQ(c4.figures, "no xq row with both resident_bytes_per_page and kv_bytes_per_page");
}

// A recompute measured through the OpenBLAS fp32 fallback says so in claims 3 and 4: fp32 weights are not the bf16
// path an engine runs, so the verdict rests on another product than the one claimed.
TEST(Verdicts, RecomputeOnTheFp32FallbackSaysSo) {
  auto sets = load_all({kFx + "/gpu"});
  const std::string said = "recompute ran OpenBLAS fp32";
  for (const char* claim : {"Recompute wins for small pages", "XQuant-style"})
    EXPECT_EQ(find(verdicts(sets), claim).figures.find(said), std::string::npos) << claim;
  for (auto& r : sets[0].cases)
    if (r.param("arm") == "x" || r.param("arm") == "xq") r.params["gemm"] = "openblas_fp32";
  const auto vs = verdicts(sets);
  for (const char* claim : {"Recompute wins for small pages", "XQuant-style"})
    EXPECT_NE(find(vs, claim).figures.find(said), std::string::npos) << find(vs, claim).figures;
}

// Rows of one recompute series in any file order (the CPU grid runs T128, T16, T512): each token count keeps its
// own median and q1..q3 once the series is sorted (the spreads had stayed in file order: T16's point carried
// T128's q1..q3 into claim 3's sign test at the smallest page).
TEST(FrontierSeries, ARecomputeSeriesSortedByTokensKeepsEachRowsSpread) {
  ResultSet rs;
  rs.backend = "cpu";
  for (const double T : {128.0, 16.0, 512.0}) {
    CaseRow r;
    r.study = "frontier";
    r.case_name = "x/M/T" + std::to_string(int(T));
    r.mode = "cold";
    r.samples = 5;
    r.median_s = T * 1e-6;
    r.q1_s = T * 0.9e-6;
    r.q3_s = T * 1.1e-6;
    r.params = {{"arm", "x"}, {"model", "M"}, {"tokens", std::to_string(int(T))}};
    rs.cases.push_back(r);
  }
  const auto series = frontier::recompute_series(rs);
  ASSERT_EQ(series.size(), 1u);
  const auto& s = series[0];
  ASSERT_EQ(s.tokens, (std::vector<double>{16, 128, 512}));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(s.secs[i], s.tokens[i] * 1e-6);
    EXPECT_DOUBLE_EQ(s.lo[i], s.tokens[i] * 0.9e-6) << s.tokens[i];
    EXPECT_DOUBLE_EQ(s.hi[i], s.tokens[i] * 1.1e-6) << s.tokens[i];
  }
}

// Claim 5 from planted access rows (constant samples: zero-width intervals). HND at 1K and 8K with block size 16 at
// both (token/block 2x at each) and 64 at 8K only (block twice as fast there); NHD at 8K only, where tokens win.
CaseRow attention_row(const std::string& arm, double ctx, const std::string& block, const std::string& layout,
                      double seconds) {
  CaseRow r;
  r.study = "access";
  r.case_name = "attn/" + arm + "/" + std::to_string(int(ctx)) + "/" + layout + "/B" + block;
  r.mode = "cold";
  r.samples = 5;
  r.median_s = r.q1_s = r.q3_s = seconds;
  r.samples_s.assign(5, seconds);
  r.params = {{"part", "attention"}, {"arm", arm}, {"ctx", std::to_string(int(ctx))}, {"block", block},
              {"keep", "1/8"}, {"layout", layout}, {"select", "per_head"}};
  if (arm == "token") r.params["scatter"] = "uniform";
  return r;
}

TEST(Verdicts, Claim5ComparesBlockSizesMeasuredAtEveryContextAndCountsOneContextGroups) {
  ResultSet rs;
  rs.label = "planted (cpu)";
  rs.backend = "cpu";
  for (const double ctx : {1024.0, 8192.0}) {
    rs.cases.push_back(attention_row("block", ctx, "16", "HND", 1e-3));
    rs.cases.push_back(attention_row("token", ctx, "16", "HND", 2e-3));
  }
  // Only at 8K: a best of two sizes there beside a best of one at 1K would read 4x against 2x, a widening.
  rs.cases.push_back(attention_row("block", 8192, "64", "HND", 0.5e-3));
  rs.cases.push_back(attention_row("token", 8192, "64", "HND", 2e-3));
  const auto judged = [&] {
    for (const auto& v : verdicts({rs}))
      if (v.claim.find("Contiguous blocks") != std::string::npos) return v;
    return Verdict{};
  };
  Verdict v = judged();
  EXPECT_EQ(v.verdict, "mixed") << v.figures;  // block faster at both points, the gap not wider at B16
  EXPECT_NE(v.figures.find("token/block 2x [2, 2] at 1K, 2x [2, 2] at 8K"), std::string::npos) << v.figures;
  EXPECT_NE(v.figures.find("gap widens in 0 groups"), std::string::npos) << v.figures;
  // Tokens faster in another layout, measured at one context: it counts, and is named by what differs.
  rs.cases.push_back(attention_row("block", 8192, "16", "NHD", 2e-3));
  rs.cases.push_back(attention_row("token", 8192, "16", "NHD", 1e-3));
  v = judged();
  EXPECT_EQ(v.verdict, "mixed") << v.figures;
  EXPECT_NE(v.figures.find("1 groups at 2+ contexts and 1 at one"), std::string::npos) << v.figures;
  EXPECT_NE(v.figures.find("block faster at 2, token faster at 1"), std::string::npos) << v.figures;
  EXPECT_NE(v.figures.find("tokens faster with layout=NHD at 8K: token/block 0.5x [0.5, 0.5]"), std::string::npos)
      << v.figures;
}

// Token rows of equal bytes and flops at two more block sizes whose medians differ by 20% (the machine drifted
// between rows): the figures state that spread beside the signs, which stay the intervals' own.
TEST(Verdicts, Claim5StatesTheSpreadOfEqualWorkRows) {
  ResultSet rs;
  rs.label = "planted (cpu)";
  rs.backend = "cpu";
  const auto pair = [&](double ctx, double block_s, double token_s) {
    rs.cases.push_back(attention_row("block", ctx, "16", "HND", block_s));
    rs.cases.push_back(attention_row("token", ctx, "16", "HND", token_s));
  };
  pair(1024, 1e-3, 1.1e-3);
  pair(8192, 1e-3, 2e-3);
  const auto judged = [&] {
    for (const auto& v : verdicts({rs}))
      if (v.claim.find("Contiguous blocks") != std::string::npos) return v;
    return Verdict{};
  };
  EXPECT_NE(judged().figures.find("block faster at 2, token faster at 0"), std::string::npos) << judged().figures;
  // Token rows at 1K at two more block sizes, the same bytes and flops, 1.0 and 1.2 ms: a floor of 20%.
  for (const auto& [block, t] : std::vector<std::pair<std::string, double>>{{"32", 1.0e-3}, {"64", 1.2e-3}}) {
    CaseRow r = attention_row("token", 1024, block, "HND", t);
    r.bytes = r.flops = 1e6;
    rs.cases.push_back(r);
  }
  const Verdict v = judged();
  EXPECT_NE(v.figures.find("block faster at 2, token faster at 0"), std::string::npos) << v.figures;
  EXPECT_NE(v.figures.find("caution: token rows of equal bytes and flops at other block sizes spread by 20% in this "
                           "run"),
            std::string::npos)
      << v.figures;
  EXPECT_NE(v.figures.find("gap widens in 1 groups"), std::string::npos) << v.figures;
}

// Claim 3 on CPU results reads the SSD tier (file_page); host memory (dram_copy), a CPU offload's first tier, is
// stated beside it: recompute/fetch at the smallest and largest page.
TEST(Verdicts, Claim3OnACpuStatesHostMemoryBesideTheDisk) {
  ResultSet rs;
  rs.label = "planted (cpu)";
  rs.backend = "cpu";
  const auto add = [&](const std::string& name, std::map<std::string, std::string> params, double seconds) {
    CaseRow r;
    r.study = "frontier";
    r.case_name = name;
    r.mode = params.count("mode") ? params["mode"] : "cold";
    params.erase("mode");
    r.samples = 5;
    r.median_s = r.q1_s = r.q3_s = seconds;
    r.params = std::move(params);
    rs.cases.push_back(r);
  };
  for (const double T : {16.0, 128.0}) {
    const std::string t = std::to_string(int(T)), kv = std::to_string(int(T) * 4096);
    add("x/M/T" + t, {{"arm", "x"}, {"model", "M"}, {"tokens", t}, {"kv_bytes_per_page", kv}}, 50e-6 + T * 10e-6);
    add("file_page/T" + t, {{"arm", "file_page"}, {"copy_bytes", kv}, {"mode", "hot"}}, 100e-6 + T * 4096 / 1e9);
    add("h2d_pinned/" + kv, {{"arm", "h2d_pinned"}, {"copy_bytes", kv}}, 10e-6 + T * 4096 / 50e9);
    add("dram_copy/" + kv, {{"arm", "dram_copy"}, {"copy_bytes", kv}}, 2e-6 + T * 4096 / 10e9);
  }
  const auto claim3 = [&] {
    for (const auto& x : verdicts({rs}))
      if (x.claim.find("Recompute wins for small pages") != std::string::npos) return x;
    return Verdict{};
  };
  // T=16: 210 us against 2 us + 65536 B / 10 GB/s = 8.5536 us; T=128: 1330 us against 54.43 us.
  Verdict v = claim3();
  EXPECT_NE(v.figures.find("beside host memory (dram_copy, cold): recompute/fetch T=16 24.55, T=128 24.44"),
            std::string::npos)
      << v.figures;
  rs.backend = "cuda";  // a GPU's fetch is its link (h2d_pinned here): no host-memory line
  v = claim3();
  EXPECT_NE(v.figures.find("vs h2d_pinned"), std::string::npos) << v.figures;
  EXPECT_EQ(v.figures.find("beside host memory"), std::string::npos) << v.figures;
}

// A section that prints percentages of a ceiling says when rows beat it beyond their spread (their percentage at
// their q3 time above 100), with the count and the largest; a row above it only within its spread does not count.
TEST(ReportText, ACeilingBeatenBeyondTheRowsSpreadIsSaid) {
  ResultSet rs;
  rs.label = "host (cpu)";
  const auto add = [&](const std::string& name, double pct, double q3_over_median) {
    CaseRow r;
    r.study = "access";
    r.case_name = name;
    r.mode = "cold";
    r.samples = 5;
    r.median_s = 1.0;
    r.q1_s = 0.99;
    r.q3_s = q3_over_median;
    r.pct_of_ceiling = pct;
    r.ceiling = "stream:op=read:gbps";
    rs.cases.push_back(r);
  };
  add("gather/R4096", 90, 1.01);
  add("gather/seq", 104, 1.08);  // 96.3% at its q3 time: within its spread
  EXPECT_EQ(md::ceiling_beaten(rs, "access", "stream:op=read:gbps", "stream read ceiling"), "");
  add("attn/read/64K", 119, 1.01);
  add("gather/R65536", 126, 1.02);
  const std::string said = md::ceiling_beaten(rs, "access", "stream:op=read:gbps", "stream read ceiling");
  EXPECT_NE(said.find("host (cpu): the stream read ceiling was beaten** by 2 access rows beyond their own spread, "
                      "by up to 26% (gather/R65536, cold)"),
            std::string::npos)
      << said;
  EXPECT_EQ(md::ceiling_beaten(rs, "access", "frontier:arm=gemm_ceiling:tflops", "GEMM ceiling"), "");
  // A section's own rows only: the gather section does not name an attention row.
  rs.cases[3].params["part"] = "gather";
  const std::string gather = md::ceiling_beaten(rs, "access", "stream:op=read:gbps", "stream read ceiling",
                                                {{"part", "gather"}});
  EXPECT_NE(gather.find("by 1 access rows (part=gather) beyond their own spread, by up to 26% (gather/R65536"),
            std::string::npos)
      << gather;
}

TEST(Verdicts, NotMeasuredWhenInputsAreMissing) {
  const auto vs = verdicts(load_all({kFx + "/cpu_partial"}));
  for (const auto& v : vs) EXPECT_EQ(v.verdict, "not measured") << v.claim << ": " << v.figures;
  EXPECT_EQ(find(vs, "Recompute ~50 us").figures, "CPU results: the claim is about a GPU");
  // Section 5 is named only where this run measured CPU idleness (the golden AMD EPYC report has it).
  EXPECT_EQ(find(vs, "More than 60%").figures,
            "CPU results: the claim is about a GPU (and this directory has no CPU idleness counters either)");
}

TEST(Verdicts, OverlayKeepsEachDevice) {
  const auto vs = verdicts(load_all({kFx + "/gpu", kFx + "/cpu_partial"}));
  ASSERT_EQ(vs.size(), 16u);
  // grouped by claim, then in command-line order
  EXPECT_EQ(vs[0].device, "NVIDIA H100 80GB HBM3 (cuda)");
  EXPECT_EQ(vs[1].device, "AMD EPYC (cpu)");
  EXPECT_EQ(vs[1].verdict, "not measured");
}

TEST(Calibrate, CeilingsAndFittedCopyCost) {
  const auto gpus = load_gpus(default_gpus_path());
  GpuSpec g = find_gpu(gpus, "H100 SXM");
  const auto done = calibrate(g, load_results(kFx + "/gpu"));
  EXPECT_EQ(done.size(), 5u);
  EXPECT_DOUBLE_EQ(g.hbm_tbps, 3.0);
  EXPECT_DOUBLE_EQ(g.bf16_tflops, 700);
  // h2d_pinned rows lie exactly on t = 10 us + n / 3.2768 GB/s
  EXPECT_NEAR(g.host_link_gbps, 3.2768, 1e-9);
  EXPECT_NEAR(g.copy_fixed_us, 10, 1e-6);
  EXPECT_DOUBLE_EQ(g.l2_mib, 50);
  EXPECT_EQ(g.launch_us, 4);  // not measurable: the spec file's assumption stays
  EXPECT_EQ(g.source.at("hbm_tbps").rfind("measured: 3000 GB/s", 0), 0u) << g.source.at("hbm_tbps");
}

// Copies from 16 KiB to 64 MiB that no line fits exactly: the plain fit follows the large copies and predicts the
// smallest one far off; the fit of relative error keeps every copy within a few percent (the H100 run: 26% -> 16%).
TEST(Calibrate, TheRelativeFitKeepsSmallCopiesNearTheirTimes) {
  // 10 us + n / 50 GB/s, with the 8 MiB copy 3% faster and the 64 MiB one 2% slower than the line: the plain fit
  // lets those two move its intercept (7.9 us: the 16 KiB copy predicted 20% low), the relative one keeps 10 us.
  const std::vector<double> sizes = {16384, 65536, 524288, 8388608, 67108864};
  std::vector<std::pair<double, double>> pts;
  for (const double n : sizes)
    pts.emplace_back(n, (10e-6 + n / 50e9) * (n == 8388608 ? 0.97 : n == 67108864 ? 1.02 : 1));
  const auto worst = [&](const std::pair<double, double>& f) {
    double w = 0;
    for (const auto& [n, t] : pts) w = std::max(w, std::fabs(f.first + f.second * n - t) / t);
    return w;
  };
  const auto plain = fit_affine(pts), relative = fit_affine(pts, true);
  ASSERT_TRUE(plain && relative);
  EXPECT_GT(worst(*plain), 0.15);
  EXPECT_LT(worst(*relative), 0.04);
  EXPECT_NEAR(relative->first, 10e-6, 0.1e-6);
  pts.emplace_back(1048576, 0.0);  // a row with no time: nothing to weigh it by
  EXPECT_FALSE(fit_affine(pts, true));
}

// A page moved as back-to-back copies (the frontier's granularity rows: one 16 MiB page in 1, 8, 32 copies) fits the
// cost of each further copy; a transfer of L copies then pays the first copy's fixed cost and L - 1 issue costs.
TEST(Calibrate, GranularityRowsFitTheCostOfEachFurtherCopy) {
  const auto gpus = load_gpus(default_gpus_path());
  GpuSpec g = find_gpu(gpus, "H100 SXM");
  ResultSet rs = load_results(kFx + "/gpu");
  const double page = 16 << 20;
  for (const int copies : {1, 8, 32}) {
    CaseRow r = *rs.rows("frontier").front();
    r.case_name = "granularity/M/T128/" + std::to_string(copies);
    r.mode = "cold";
    r.params = {{"arm", "granularity"}, {"copies", std::to_string(copies)},
                {"page_bytes", std::to_string(static_cast<long long>(page))}};
    r.median_s = 10e-6 + (copies - 1) * 2e-6 + page / 50e9;  // 2 us per further copy, exactly
    rs.cases.push_back(r);
  }
  calibrate(g, rs);
  EXPECT_NEAR(g.copy_issue_us, 2, 1e-6);
  EXPECT_NEAR(g.copy_fixed_us, 10, 1e-6);  // the h2d_pinned fit's, as before
  // 32 copies of 512 KiB: 10 us + 31 x 2 us + 16 MiB / link; without the fit each copy paid 10 us.
  const double bytes = 32 * 524288.0, link = bytes / (g.host_link_gbps * 1e9);
  EXPECT_NEAR(transfer(g, bytes, 32, g.host_link_gbps).seconds, 72e-6 + link, 1e-12);
  g.copy_issue_us = 0;
  EXPECT_NEAR(transfer(g, bytes, 32, g.host_link_gbps).seconds, 320e-6 + link, 1e-12);
  EXPECT_DOUBLE_EQ(copies_fixed_s(g, 0), 0);
}

// Two studies read the same memory (stream op=read, idleness arm=read_ceiling), both rank 0: the faster read is the
// memory ceiling, whichever study it came from, and the other is named beside it.
TEST(Calibrate, TheBetterOfTwoReadsOfOneMemoryIsTheCeiling) {
  const auto gpus = load_gpus(default_gpus_path());
  for (const double idle_gbps : {2500.0, 3300.0}) {
    ResultSet rs = load_results(kFx + "/gpu");
    CaseRow r = *rs.rows("stream").front();
    r.study = "idleness";
    r.case_name = "read_ceiling/1024MiB";
    r.mode = "cold";
    r.params = {{"arm", "read_ceiling"}};
    r.gbps = idle_gbps;
    rs.cases.push_back(r);
    GpuSpec g = find_gpu(gpus, "H100 SXM");
    calibrate(g, rs);
    const std::string& src = g.source.at("hbm_tbps");
    EXPECT_DOUBLE_EQ(g.hbm_tbps, std::max(3000.0, idle_gbps) / 1000) << src;
    const std::string stream = "3000 GB/s, best stream op=read", idle = "best idleness arm=read_ceiling";
    EXPECT_EQ(src.rfind(idle_gbps > 3000 ? "measured: 3300 GB/s, " + idle : "measured: " + stream, 0), 0u) << src;
    EXPECT_NE(src.find(idle_gbps > 3000 ? "; also " + stream : "; also 2500 GB/s, " + idle), std::string::npos) << src;
  }
}

TEST(Predict, RowsUseCalibratedCeilings) {
  const auto gpus = load_gpus(default_gpus_path());
  const ResultSet rs = load_results(kFx + "/gpu");
  const GpuSpec g = spec_from_results(rs, gpus);
  for (const auto& r : rs.cases) {
    if (r.case_name == "h2d_pinned/1 MiB") {
      EXPECT_NEAR(*predict_row(g, r) * 1e6, 330, 1e-6);
    }
    // stream read: 1 GiB at the 3000 GB/s ceiling = 357.9 us
    if (r.case_name == "read/device/1024MiB") {
      EXPECT_NEAR(*predict_row(g, r), 1073741824.0 / 3e12, 1e-12);
    }
    if (r.study == "idleness") {
      EXPECT_FALSE(predict_row(g, r));
    }
  }
}

TEST(Report, GoldenNumbersAndDeterminism) {
  const auto sets = load_all({kFx + "/gpu"});
  ReportOptions o;
  o.charts = false;
  const std::string md = render_markdown(sets, o, {});
  EXPECT_NE(md.find("| NVIDIA H100 80GB HBM3 (cuda) | Llama-3.1-8B x/bf16 L1 P1 (cold) | h2d\\_pinned | 16..512 | 3 | "
                    "24.48 tokens (interpolated between 16 and 128; transfer faster below, recompute above) | 0 |"),
            std::string::npos);
  EXPECT_NE(md.find("working set crosses the LLC/L2 at 3413 tokens"), std::string::npos);
  EXPECT_NE(md.find("| NVIDIA H100 80GB HBM3 (cuda) | gather | on | - | cold | 4 KiB | 2 TB/s | 66.67 |"),
            std::string::npos);
  EXPECT_NE(md.find("| H100 SXM | 1 | 14.1 | 18.19 | 54.26 tokens (interpolated between 32 and 64; fetch faster below, "
                    "recompute above) |"),
            std::string::npos);
  EXPECT_NE(md.find("| NVIDIA H100 80GB HBM3 (cuda) | frontier | h2d\\_pinned/1 MiB | cold | 330 | - | 330 | 1 |"),
            std::string::npos);
  EXPECT_EQ(md, render_markdown(sets, o, {}));
  // Same input written twice: byte-identical report.md.
  const fs::path a = tmpdir("det_a"), b = tmpdir("det_b");
  o.out_dir = a.string();
  write_report(sets, o);
  o.out_dir = b.string();
  write_report(sets, o);
  EXPECT_EQ(slurp(a / "report.md"), slurp(b / "report.md"));
  EXPECT_TRUE(fs::exists(a / "recompute_transfer_1_Llama_3_1_8B.gp"));  // one chart per (directory, model)
  EXPECT_TRUE(fs::exists(a / "recompute_transfer_1_Llama_3_1_8B.dat"));
}

// Model names are free text: a name longer than a chart stem may be, and two names the same once cut to it,
// each get a chart of their own (the fuzzer found the report aborting on the first).
TEST(Report, ModelChartNamesStayPlainAndUnique) {
  const fs::path d = tmpdir("long_model");
  fs::copy(kFx + "/gpu", d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const std::string long_name = "Llama-3.1-8B-Instruct-with-a-fine-tune-suffix-longer-than-any-chart-name";
  for (const char* f : {"cases.csv", "samples.csv"}) {
    std::istringstream in(slurp(d / f));
    std::string out, line;
    while (std::getline(in, line)) {
      // x rows: the long name; xq rows: another that differs only past the cut
      const bool xq = line.find("xq/Llama-3.1-8B") != std::string::npos;
      const std::string to = xq ? long_name + "-int4" : long_name;
      for (std::size_t at = 0; (at = line.find("Llama-3.1-8B", at)) != std::string::npos; at += to.size())
        line.replace(at, 12, to);
      out += line + "\n";
    }
    std::ofstream(d / f, std::ios::trunc) << out;
  }
  const auto sets = load_all({d.string()});
  ReportOptions o;
  o.charts = true;
  o.out_dir = tmpdir("long_model_out").string();
  o.gnuplot = "/nonexistent/gnuplot";  // the chart files are written either way
  ASSERT_NO_THROW(write_report(sets, o));
  const std::string md = slurp(fs::path(o.out_dir) / "report.md");
  const std::string cut = "recompute_transfer_1_Llama_3_1_8B_Instruct_with_a_fine_tune_suff";
  ASSERT_EQ(cut.size(), 64u);
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / (cut + ".gp")));
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / (cut.substr(0, 62) + "_2.gp")));
  EXPECT_NE(md.find(long_name + "-int4"), std::string::npos);
}

TEST(Report, ChartsExistAndAreNonEmpty) {
  if (std::system("gnuplot --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const auto sets = load_all({kFx + "/gpu"});
  ReportOptions o;
  o.out_dir = tmpdir("charts").string();
  const auto res = write_report(sets, o);
  EXPECT_TRUE(res.gnuplot_ran);
  EXPECT_TRUE(res.warnings.empty()) << res.warnings.front();
  for (const char* c : {"gather", "block_token", "recompute_transfer_1_Llama_3_1_8B", "frontier_map_1", "idleness", "pm_sampling", "predicted"})
    for (const char* ext : {".svg", ".png"}) {
      const fs::path f = fs::path(o.out_dir) / (std::string(c) + ext);
      ASSERT_TRUE(fs::exists(f)) << f;
      EXPECT_GT(fs::file_size(f), 1000u) << f;
    }
  // report.html is self-contained: the SVGs are inlined, no file references remain.
  const std::string html = slurp(fs::path(o.out_dir) / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find(".svg\""), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  // each inlined figure has its own ids (gnuplot reuses gpPt0.. in every SVG)
  EXPECT_NE(html.find("id='f2_gpPt0'"), std::string::npos);
  EXPECT_EQ(html.find("href='#gpPt"), std::string::npos);
}

TEST(Report, MissingGnuplotKeepsTheMarkdown) {
  const auto sets = load_all({kFx + "/gpu"});
  ReportOptions o;
  o.out_dir = tmpdir("nognuplot").string();
  o.gnuplot = "/nonexistent/gnuplot";
  const auto res = write_report(sets, o);
  EXPECT_FALSE(res.gnuplot_ran);
  const std::string md = slurp(fs::path(o.out_dir) / "report.md");
  EXPECT_NE(md.find("gnuplot not found: charts not drawn"), std::string::npos);
  EXPECT_NE(md.find("## Verdicts"), std::string::npos);
}

TEST(Report, PartialDirectorySaysWhatIsMissing) {
  const auto sets = load_all({kFx + "/cpu_partial"});
  ReportOptions o;
  const std::string md = render_markdown(sets, o, {});
  EXPECT_NE(md.find("- AMD EPYC (cpu): study stream: status 'running' in meta.json (interrupted run: only finished cases are reported)"),
            std::string::npos);
  EXPECT_NE(md.find("- AMD EPYC (cpu): samples.csv missing"), std::string::npos);
  EXPECT_NE(md.find("- AMD EPYC (cpu): study access: no rows in cases.csv (not run)"), std::string::npos);
  EXPECT_NE(md.find("Not measured: no access-study gather rows"), std::string::npos);
  // No GPU results: the frontier map is the spec-sheet prediction, said so.
  EXPECT_NE(md.find("No GPU results given: the map below is the model's prediction from spec-sheet peaks (not measured)."),
            std::string::npos);
}

TEST(BadInput, FileAndLine) {
  EXPECT_EQ(message_of([] { load_results(kFx + "/badnumber"); }).find(kFx + "/badnumber/cases.csv:3: column 'median_s'"), 0u);
  EXPECT_NE(message_of([] { load_results(kFx + "/missingcol"); }).find("missing column 'median_s'"), std::string::npos);
  EXPECT_NE(message_of([] { load_results(kFx + "/badquote"); }).find("badquote/cases.csv"), std::string::npos);
  EXPECT_NE(message_of([] { load_results(kFx + "/nocases"); }).find("cases.csv: no such file"), std::string::npos);
  EXPECT_NE(message_of([] { load_results(kFx + "/nope"); }).find("no such results directory"), std::string::npos);
  const std::string mixed = message_of([] { load_all({kFx + "/gpu", kFx + "/gpu_v2"}); });
  EXPECT_NE(mixed.find("gpu_v2/meta.json: suite version 0.2.0 differs from"), std::string::npos) << mixed;
}

TEST(Actions, MeasuredCostsReplaceTheModel) {
  // gpu fixture: x bf16 P1 at 16/128/512 tokens = 40/48/90 us; h2d_pinned 30 us at 64 KiB, 170 us at 512 KiB
  // (interpolated); Llama-3.1-8B K/V per layer: 4096 B per token.
  const auto gpus = load_gpus(default_gpus_path());
  const auto shapes = load_shapes();
  ResultSet rs = load_results(kFx + "/gpu");
  // Planted beside the fixture: evict measured by the through-layers arm (Llama-3.1-8B, 128 tokens, 2 layers:
  // 300 us) and an MLA model's latent recomputed from X (DeepSeek-V3, 128 tokens: 20 us).
  const auto plant = [&](const std::string& arm, const std::string& model, const std::string& layers, double s) {
    CaseRow r = *rs.rows("frontier").front();
    r.case_name = arm + "/" + model + "/T128/L" + layers;
    r.mode = "cold";
    r.params = {{"arm", arm}, {"model", model}, {"tokens", "128"}, {"layers", layers}, {"pages", "1"}};
    r.median_s = r.q1_s = r.q3_s = s;
    rs.cases.push_back(r);
  };
  plant("layers", "Llama-3.1-8B", "2", 300e-6);
  plant("mla_latent", "DeepSeek-V3", "1", 20e-6);
  const GpuSpec g = spec_from_results(rs, gpus);
  ActionOptions o;
  o.tokens = {16, 64, 128, 4096};
  o.layers = {1, 2};
  o.reuse = {0.5};
  o.measured = &rs;
  const auto t = action_table(g, find_shape(shapes, "Llama-3.1-8B"), o);
  const auto mla = action_table(g, find_shape(shapes, "DeepSeek-V3"), o);
  for (const auto& c : mla)
    for (const auto& x : c.costs)
      if (c.tokens == 128 && c.phase == "decode" && x.action == "recompute_x") {
        EXPECT_NEAR(x.reuse_us, 20 * c.layers, 1e-9) << c.layers;  // per layer x L
        EXPECT_EQ(x.source, "measured");
      }
  auto cost = [&](double T, double L, const std::string& phase, const std::string& a) {
    for (const auto& c : t)
      if (c.tokens == T && c.layers == L && c.phase == phase)
        for (const auto& x : c.costs)
          if (x.action == a) return x;
    ADD_FAILURE() << a;
    return ActionCost{};
  };
  EXPECT_NEAR(cost(128, 1, "decode", "recompute_x").reuse_us, 48, 1e-9);
  EXPECT_EQ(cost(128, 1, "decode", "recompute_x").source, "measured");
  EXPECT_NEAR(cost(128, 2, "decode", "recompute_x").reuse_us, 96, 1e-9);  // per layer x 2
  // 64 tokens: between 16 (40 us) and 128 (48 us): 40 + 8 * 48/112
  EXPECT_NEAR(cost(64, 1, "decode", "recompute_x").reuse_us, 40 + 8.0 * 48 / 112, 1e-9);
  EXPECT_EQ(cost(64, 1, "decode", "recompute_x").source, "interpolated");
  EXPECT_EQ(cost(4096, 1, "decode", "recompute_x").source, "model");  // beyond 512 tokens: never extrapolated
  EXPECT_EQ(cost(128, 1, "prefill", "recompute_x").source, "model");  // P=16 not measured
  EXPECT_NEAR(cost(16, 1, "decode", "demote").reuse_us, 30, 1e-9);     // 64 KiB measured
  EXPECT_EQ(cost(16, 1, "decode", "demote").source, "measured");
  EXPECT_NEAR(cost(128, 2, "decode", "demote").reuse_us, 340, 1e-9);   // 2 copies of 512 KiB at 170 us
  EXPECT_EQ(cost(128, 2, "decode", "demote").source, "interpolated");
  // int4 X at 128 tokens: P1 row 60 us measured
  EXPECT_NEAR(cost(128, 1, "decode", "recompute_x_int4").reuse_us, 60, 1e-9);
  EXPECT_NEAR(cost(128, 2, "decode", "evict").reuse_us, 300, 1e-9);
  EXPECT_EQ(cost(128, 2, "decode", "evict").source, "measured");
  EXPECT_EQ(cost(128, 2, "prefill", "evict").source, "model");  // P=16 not measured
}

// ------------------------------------------------------------------------------------------ disk, overlap, co-run
// Fixture cpu_tiers (make_fixtures.py): memory 10 GB/s, 0.1 TFLOP/s, file_page reads at exactly 100 us + n / 1 GB/s.
namespace {
const CaseRow& row_of(const ResultSet& rs, const std::string& case_name) {
  for (const auto& r : rs.cases)
    if (r.case_name == case_name) return r;
  throw std::runtime_error("no case " + case_name);
}
}  // namespace

TEST(Calibrate, DiskFittedOnFilePageReads) {
  const ResultSet rs = load_results(kFx + "/cpu_tiers");
  const GpuSpec g = spec_from_results(rs, load_gpus(default_gpus_path()));
  EXPECT_NEAR(g.hbm_tbps, 0.01, 1e-15);
  EXPECT_NEAR(g.bf16_tflops, 0.1, 1e-15);
  EXPECT_NEAR(g.disk_gbps, 1, 1e-9);
  EXPECT_NEAR(g.disk_latency_us, 100, 1e-6);
  EXPECT_EQ(g.source.at("disk_gbps").rfind("measured: 1 GB/s, fit t = a + n/B per read over 3 frontier file_page rows "
                                           "(3 read sizes) in ", 0), 0u)
      << g.source.at("disk_gbps");
  EXPECT_EQ(g.source.at("disk_latency_us"), "measured: 100 us per read, intercept of the same fit");
}

// On the CPU the compute field (named bf16_tflops) says which GEMM gave it: OpenBLAS fp32, or oneDNN's bf16 matmul
// where that row is the best (it used to read "fp32 sgemm" whatever won).
TEST(Calibrate, CpuGemmCeilingSaysWhichLibraryWon) {
  ResultSet rs = load_results(kFx + "/cpu_tiers");
  const auto gpus = load_gpus(default_gpus_path());
  EXPECT_NE(spec_from_results(rs, gpus).source.at("bf16_tflops").find("(fp32 sgemm on the CPU)"), std::string::npos);
  CaseRow bf16 = row_of(rs, "gemm_ceiling/2048");
  bf16.case_name = "gemm_ceiling/2048/onednn_bf16";
  bf16.params["gemm_lib"] = "onednn_bf16";
  bf16.median_s = *bf16.median_s / 4;
  bf16.tflops = *bf16.tflops * 4;
  for (auto& x : bf16.samples_s) x /= 4;
  rs.cases.push_back(bf16);
  const GpuSpec g = spec_from_results(rs, gpus);
  EXPECT_NEAR(g.bf16_tflops, 0.4, 1e-12);
  EXPECT_NE(g.source.at("bf16_tflops").find("(oneDNN bf16 matmul on the CPU"), std::string::npos)
      << g.source.at("bf16_tflops");
  // The fp32 twins (idleness decode/prefill, the OpenBLAS ceiling rows) are predicted at the fp32 GEMM, not the
  // faster bf16 one: a compute-bound decode step of 1e11 FLOP takes 1 s at 0.1 TFLOP/s.
  EXPECT_NEAR(g.fp32_tflops, 0.1, 1e-12);
  CaseRow step = row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_none");
  step.flops = 1e11;
  std::string why;
  EXPECT_NEAR(*predict_row(g, step, &why), 1.0, 1e-9) << why;
  EXPECT_NE(why.find("fp32 GEMM peak 0.1 TFLOP/s"), std::string::npos) << why;
  EXPECT_NEAR(*predict_row(g, row_of(rs, "gemm_ceiling/2048")), 1.0, 1e-9);
  EXPECT_NEAR(*predict_row(g, bf16), 0.25, 1e-9);
}

// A CPU directory without stream rows has no memory bandwidth: each row says "no prediction" and why (the fp32
// roofline once skipped that check and kvf report exited 2 on such a directory).
TEST(Calibrate, CpuDirectoryWithoutStreamRowsPredictsNothingAndRenders) {
  const fs::path d = tmpdir("no_stream");
  fs::copy(kFx + "/cpu_tiers", d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  for (const char* f : {"cases.csv", "samples.csv"}) {
    std::istringstream in(slurp(d / f));
    std::string out, line;
    while (std::getline(in, line))
      if (line.rfind("stream,", 0) != 0) out += line + "\n";
    std::ofstream(d / f, std::ios::trunc) << out;
  }
  const auto sets = load_all({d.string()});
  const GpuSpec g = spec_from_results(sets.front(), load_gpus(default_gpus_path()));
  EXPECT_EQ(g.hbm_tbps, 0);
  EXPECT_NEAR(g.fp32_tflops, 0.1, 1e-12);
  std::string why;
  EXPECT_FALSE(predict_row(g, row_of(sets.front(), "corun/Llama-3.1-8B/B16/C4K/L1/bg_none"), &why).has_value());
  EXPECT_NE(why.find("no memory bandwidth"), std::string::npos) << why;
  ReportOptions o;
  std::string md;
  ASSERT_NO_THROW(md = render_markdown(sets, o, {}));
  EXPECT_NE(md.find("no memory bandwidth"), std::string::npos);
}

TEST(Calibrate, DiskFromTheDdRowWithoutTwoReadSizes) {
  ResultSet rs;
  rs.dir = "mem";
  CaseRow dd;
  dd.study = "frontier";
  dd.case_name = "dd_direct/512 KiB";
  dd.mode = "hot";
  dd.samples = 5;
  dd.median_s = 0.3;
  dd.bytes = 268435456;
  dd.gbps = 0.9;
  dd.params = {{"arm", "dd_direct"}, {"copy_bytes", "524288"}};
  rs.cases.push_back(dd);
  GpuSpec g;
  calibrate(g, rs);
  EXPECT_DOUBLE_EQ(g.disk_gbps, 0.9);
  EXPECT_EQ(g.disk_latency_us, 0);
  EXPECT_EQ(g.source.at("disk_gbps").rfind("measured: 0.9 GB/s, best frontier arm=dd_direct (hot", 0), 0u);
  // 512 reads of 512 KiB at 0.9 GB/s, no latency term: 268435456 / 0.9e9 = 0.29826162 s
  std::string why;
  EXPECT_NEAR(*predict_row(g, dd, &why), 268435456 / 0.9e9, 1e-12);
  EXPECT_NE(why.find("dd's process start (fork+exec) not modelled"), std::string::npos) << why;
}

TEST(Predict, FileTierRows) {
  const auto gpus = load_gpus(default_gpus_path());
  const ResultSet rs = load_results(kFx + "/cpu_tiers");
  const GpuSpec g = spec_from_results(rs, gpus);
  // 256 MiB in 512 reads: 512 x 100 us + 268435456 / 1e9 = 0.319635456 s
  EXPECT_NEAR(*predict_row(g, row_of(rs, "file_direct/512 KiB")), 0.319635456, 1e-12);
  EXPECT_NEAR(*predict_row(g, row_of(rs, "dd_direct/512 KiB")), 0.319635456, 1e-12);
  // one 64 KiB read: 100 us + 65.536 us
  EXPECT_NEAR(*predict_row(g, row_of(rs, "file_page/Llama-3.1-8B/T16")), 165.536e-6, 1e-15);
  // a GPU spec has no disk figure: no prediction, and the reason says so
  const GpuSpec gpu = spec_from_results(load_results(kFx + "/gpu"), gpus);
  std::string why;
  EXPECT_FALSE(predict_row(gpu, row_of(rs, "file_page/Llama-3.1-8B/T16"), &why));
  EXPECT_EQ(why.rfind("no disk figure", 0), 0u) << why;
}

TEST(Predict, OverlapMaxAgainstSum) {
  const auto gpus = load_gpus(default_gpus_path());
  const auto shapes = load_shapes();
  const ResultSet rs = load_results(kFx + "/cpu_tiers");
  const GpuSpec g = spec_from_results(rs, gpus);
  std::string why;
  // f = 0.5, Llama-3.1-8B (H 4096, K/V width 2048), 64 tokens recomputed: GEMM max(2*64*4096*2048 / 1e11 =
  // 10.73741824 ms, (16777216 + 524288 + 524288) B / 1e10) + RoPE/write 64*2048*6 B / 1e10 = 78.6432 us
  // -> 10.81606144 ms; fetch 262144 B: 100 us + 262.144 us. max + sync (0 on the CPU) = 10.81606144 ms.
  const CaseRow& half = row_of(rs, "overlap/Llama-3.1-8B/T128/f0.5");
  EXPECT_NEAR(*predict_row(g, half, &why, &rs, &shapes), 0.01081606144, 1e-12);
  EXPECT_NE(why.find("sum 11178 us"), std::string::npos) << why;  // 10816.06144 + 362.144 us
  // the run's alone rows: 0.5 x 9000 us recompute, 0.5 x 600 us fetch
  EXPECT_NE(why.find("this run's alone rows (f x t(f=1), (1-f) x t(f=0)): max 4500 us, sum 4800 us"), std::string::npos)
      << why;
  // without the model shapes: calibrated on the alone rows, max(4500, 300) us
  EXPECT_NEAR(*predict_row(g, half, &why, &rs, nullptr), 4500e-6, 1e-15);
  EXPECT_NE(why.find("calibrated on this run's alone rows"), std::string::npos) << why;
  // f = 0: the disk term alone, 100 us + 524.288 us; f = 1: recompute_x of 128 tokens, 21.47483648 ms GEMM +
  // 157.2864 us RoPE/write
  EXPECT_NEAR(*predict_row(g, row_of(rs, "overlap/Llama-3.1-8B/T128/f0"), &why, &rs, &shapes), 624.288e-6, 1e-15);
  EXPECT_NEAR(*predict_row(g, row_of(rs, "overlap/Llama-3.1-8B/T128/f1"), &why, &rs, &shapes), 0.02163212288, 1e-12);
}

TEST(Predict, CorunBandwidthSharing) {
  const ResultSet rs = load_results(kFx + "/cpu_tiers");
  const GpuSpec g = spec_from_results(rs, load_gpus(default_gpus_path()));
  std::string why;
  // decode 80e6 B alone 10 ms; memcpy co-runner 2 x 60e6 B / 20 ms = 6 GB/s of 10: 80e6 / 4e9 = 20 ms
  EXPECT_NEAR(*predict_row(g, row_of(rs, "interference/Llama-3.1-8B/N16384/copy"), &why, &rs), 0.02, 1e-15);
  EXPECT_NE(why.find("predicted slowdown 2 "), std::string::npos) << why;
  // recompute co-runner 30e6 B / 10 ms = 3 GB/s: 80e6 / 7e9
  EXPECT_NEAR(*predict_row(g, row_of(rs, "interference/Llama-3.1-8B/N16384/recompute"), &why, &rs), 80e6 / 7e9, 1e-15);
  // file co-runner 268435456 B / 0.3 s = 0.8948 GB/s leaves more than the decode's 8 GB/s: 10 ms
  EXPECT_NEAR(*predict_row(g, row_of(rs, "interference/Llama-3.1-8B/N16384/file"), &why, &rs), 0.01, 1e-15);
  // decode alone: roofline(268435456 / 1e11, 80e6 / 1e10) = 8 ms
  EXPECT_NEAR(*predict_row(g, row_of(rs, "interference/Llama-3.1-8B/N16384/none"), &why, &rs), 0.008, 1e-15);
  // idleness: decode 1e9 B alone 0.2 s (5 GB/s), recompute alone 6e8 B / 0.1 s = 6 GB/s: 1e9 / 4e9 = 0.25 s
  EXPECT_NEAR(*predict_row(g, row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_recompute"), &why, &rs), 0.25, 1e-15);
  EXPECT_NE(why.find("predicted slowdown 1.25 "), std::string::npos) << why;
  // with the core count: the recompute co-runner's busy thread time-shares 2 cores: (2 + 1) / 2 = 1.5 > 1.25
  ResultSet two = rs;
  two.compute_units = 2;
  EXPECT_NEAR(*predict_row(g, row_of(two, "corun/Llama-3.1-8B/B16/C4K/L1/bg_recompute"), &why, &two), 0.3, 1e-15);
  EXPECT_NE(why.find("core time-sharing: (2 cores + 1 busy thread) / 2 = slowdown 1.5"), std::string::npos) << why;
  // 16 cores: 17 / 16 = 1.0625 < 1.25: bandwidth sharing decides
  two.compute_units = 16;
  EXPECT_NEAR(*predict_row(g, row_of(two, "corun/Llama-3.1-8B/B16/C4K/L1/bg_recompute"), &why, &two), 0.25, 1e-15);
  // the file co-runner waits on the disk: no time-sharing term even with the core count
  EXPECT_NEAR(*predict_row(g, row_of(two, "interference/Llama-3.1-8B/N16384/file"), &why, &two), 0.01, 1e-15);
  EXPECT_NEAR(*predict_row(g, row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_none"), &why, &rs), 0.1, 1e-15);
  EXPECT_NEAR(*predict_row(g, row_of(rs, "corun/Llama-3.1-8B/recompute_alone/T128"), &why, &rs), 0.06, 1e-15);
  // without the run's alone rows: no prediction, with the reason
  EXPECT_FALSE(predict_row(g, row_of(rs, "interference/Llama-3.1-8B/N16384/copy"), &why));
  EXPECT_EQ(why, "co-run model: needs this run's alone rows (none given)");
}

// The idleness co-run's copy and file backgrounds: their demand from the device's figures (no alone row of them),
// and a row whose note says its background did not overlap its steps gets no prediction.
TEST(Predict, CorunCopyAndFileBackgrounds) {
  ResultSet rs = load_results(kFx + "/cpu_tiers");
  const GpuSpec g = spec_from_results(rs, load_gpus(default_gpus_path()));
  ASSERT_NEAR(g.hbm_tbps, 0.01, 1e-12);  // memory 10 GB/s
  ASSERT_NEAR(g.disk_gbps, 1.0, 1e-9);   // the file_page fit
  const CaseRow base = row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_recompute");
  for (const char* bg : {"copy", "file"}) {
    CaseRow r = base;
    r.case_name = std::string("corun/Llama-3.1-8B/B16/C4K/L1/bg_") + bg;
    r.params["background"] = bg;
    rs.cases.push_back(r);
  }
  CaseRow bad = base;
  bad.case_name = "corun/Llama-3.1-8B/B16/C4K/L1/bg_copy_invalid";
  bad.params["background"] = "copy";
  bad.note = "...; co-run INVALID: the background was not running across every step";
  rs.cases.push_back(bad);
  rs.compute_units = 4;
  std::string why;
  // file: demand = disk 1 GB/s, 9 GB/s left > the decode's alone 5 GB/s (1e9 B / 0.2 s): 0.2 s; no busy thread
  EXPECT_NEAR(*predict_row(g, row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_file"), &why, &rs), 0.2, 1e-12);
  EXPECT_NE(why.find("file bytes at the disk rate 1 GB/s"), std::string::npos) << why;
  EXPECT_EQ(why.find("time-sharing"), std::string::npos) << why;
  // copy (CPU): one of 5 streaming threads, 10 / 5 = 2 GB/s, 8 GB/s left: 0.2 s; its busy thread time-shares 4
  // cores: 5 / 4 = 1.25 -> 0.25 s
  EXPECT_NEAR(*predict_row(g, row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_copy"), &why, &rs), 0.25, 1e-12);
  EXPECT_NE(why.find("memory bandwidth / 5"), std::string::npos) << why;
  EXPECT_NE(why.find("(4 cores + 1 busy thread) / 4 = slowdown 1.25"), std::string::npos) << why;
  EXPECT_FALSE(predict_row(g, row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_copy_invalid"), &why, &rs));
  EXPECT_NE(why.find("did not overlap"), std::string::npos) << why;
  // without the core count the copy thread's share is unknown
  rs.compute_units = 0;
  EXPECT_FALSE(predict_row(g, row_of(rs, "corun/Llama-3.1-8B/B16/C4K/L1/bg_copy"), &why, &rs));
  EXPECT_NE(why.find("no core count"), std::string::npos) << why;
}

TEST(Report, EveryTierRowHasAPredictionAndThrottlingIsListed) {
  ReportOptions o;
  o.charts = false;
  const auto tiers = load_all({kFx + "/cpu_tiers"});
  const std::string md = render_markdown(tiers, o, {});
  EXPECT_NE(md.find("disk 1 GB/s + 100 us per read"), std::string::npos);
  EXPECT_NE(md.find("Throttled samples: none"), std::string::npos);
  EXPECT_EQ(md.find("no prediction"), std::string::npos);
  EXPECT_NE(md.find("| AMD EPYC (cpu) | frontier | overlap/Llama-3.1-8B/T128/f0.5 | hot | 5000 | - | 10816 | 2.163 |"),
            std::string::npos);
  EXPECT_NE(md.find("| AMD EPYC (cpu) | frontier | interference/Llama-3.1-8B/N16384/copy | cold | 25000 | - | 20000 | 0.8 |"),
            std::string::npos);
  EXPECT_EQ(md, render_markdown(tiers, o, {}));
  const std::string gmd = render_markdown(load_all({kFx + "/gpu"}), o, {});
  EXPECT_NE(gmd.find("Throttled samples: 2 in 1 case rows"), std::string::npos);
  EXPECT_NE(gmd.find("- NVIDIA H100 80GB HBM3 (cuda): frontier x/Llama-3.1-8B/bf16/T128/P1 (cold): 2 throttled, 5 kept"),
            std::string::npos);
  EXPECT_NE(gmd.find("disk - (no disk figure: no file-tier rows)"), std::string::npos);
}

// ------------------------------------------------------------------------------------------ validity and noise
namespace {
std::string validity_fixture() {
  const auto d = kvf_test::tmpdir("kvf_report_validity", "run");
  std::ofstream c(d / "cases.csv");
  c << "study,case,backend,device,mode,samples,median_s,note\n"
       "stream,read/a,cpu,X,cold,3,1.0,\n"            // 2: measured twice, agreeing
       "stream,read/a,cpu,X,cold,3,1.0,\n"            // 3
       "stream,read/b,cpu,X,cold,3,1.0,\n"            // 4: measured twice, 2x apart
       "stream,read/b,cpu,X,cold,3,2.0,\n"            // 5
       "idleness,corun/x,cpu,X,cold,3,1.0,co-run INVALID: background finished first\n"
       "frontier,interference/y,cpu,X,cold,3,1.0,background: copy; background drained before the decode ended in 3 of 3 executions\n"
       "frontier,interference/z,cpu,X,cold,3,1.0,background: copy; background drained before the decode ended in 0 of 3 executions\n"
       // The idleness wording (GPU co-run rows written before the overlap guard): scored once it says so.
       "idleness,corun/y,cuda,X,hot,3,1.0,background: recompute; background drained before the step ended in 9 of 9 "
       "executions (warm-up included; 0 expected)\n"
       // Its rerun with the overlap guard, 2x slower: the failed row is no measurement to disagree with.
       "idleness,corun/y,cuda,X,hot,3,2.0,background: recompute; co-run overlap checked\n";
  std::ofstream s(d / "samples.csv");
  s << "study,case,mode,sample,seconds,clock_mhz,throttled\n";
  auto put_mode = [&](const std::string& st, const std::string& cs, const char* mode, std::initializer_list<double> v) {
    int i = 0;
    for (double x : v) s << st << "," << cs << "," << mode << "," << i++ << "," << x << ",,0\n";
  };
  auto put = [&](const std::string& st, const std::string& cs, std::initializer_list<double> v) {
    put_mode(st, cs, "cold", v);
  };
  put("stream", "read/a", {1.0, 1.01, 0.99});
  put("stream", "read/a", {1.0, 1.0, 1.01});
  put("stream", "read/b", {1.0, 1.01, 0.99});
  put("stream", "read/b", {2.0, 2.02, 1.98});
  for (const char* x : {"interference/y", "interference/z"}) put("frontier", x, {1.0, 1.0, 1.0});
  put("idleness", "corun/x", {1.0, 1.0, 1.0});
  put_mode("idleness", "corun/y", "hot", {1.0, 1.0, 1.0});
  put_mode("idleness", "corun/y", "hot", {2.0, 2.0, 2.0});
  return d.string();
}
const CaseRow& row_at(const ResultSet& rs, const std::string& where_suffix) {
  for (const auto& r : rs.cases)
    if (r.where.size() >= where_suffix.size() && r.where.compare(r.where.size() - where_suffix.size(), where_suffix.size(), where_suffix) == 0)
      return r;
  throw std::runtime_error("no row at " + where_suffix);
}
}  // namespace

TEST(Validity, RepeatsAgreeingKeepTheFirstConflictsScoreNoneFailedChecksAreListed) {
  const ResultSet rs = load_results(validity_fixture());
  EXPECT_EQ(row_at(rs, "cases.csv:2").invalid, "");
  EXPECT_NE(row_at(rs, "cases.csv:3").invalid.find("repeat of"), std::string::npos) << row_at(rs, "cases.csv:3").invalid;
  EXPECT_NE(row_at(rs, "cases.csv:4").invalid.find("none is scored"), std::string::npos);
  EXPECT_NE(row_at(rs, "cases.csv:5").invalid.find("none is scored"), std::string::npos);
  EXPECT_NE(row_at(rs, "cases.csv:6").invalid.find("co-run INVALID"), std::string::npos);
  EXPECT_NE(row_at(rs, "cases.csv:7").invalid.find("3 of 3 executions"), std::string::npos);
  EXPECT_EQ(row_at(rs, "cases.csv:8").invalid, "");
  EXPECT_NE(row_at(rs, "cases.csv:9").invalid.find("drained before the step ended in 9 of 9 executions"),
            std::string::npos) << row_at(rs, "cases.csv:9").invalid;
  EXPECT_EQ(row_at(rs, "cases.csv:10").invalid, "");
  // Samples of the repeats stay apart: the second read/b holds the 2x samples.
  EXPECT_EQ(row_at(rs, "cases.csv:5").samples_s, (std::vector<double>{2.0, 2.02, 1.98}));
  EXPECT_EQ(rs.rows("stream").size(), 1u);  // only the first read/a is scored
  EXPECT_EQ(rs.rows("frontier").size(), 1u);
  ReportOptions o;
  o.charts = false;
  const std::string md = render_markdown({rs}, o, {});
  EXPECT_NE(md.find("### Rows not scored"), std::string::npos);
  EXPECT_NE(md.find("co-run INVALID"), std::string::npos);
}

// A row faster than its ceiling is listed with its percentage at its q3 time; the ceiling row itself (100 up to
// rounding) and a row under 100 are not.
TEST(Validity, RowsAboveTheirCeilingAreListedWithTheirSpread) {
  const auto d = kvf_test::tmpdir("kvf_report_above", "run");
  std::ofstream(d / "cases.csv")
      << "study,case,backend,device,mode,samples,median_s,q1_s,q3_s,gbps,pct_of_ceiling,ceiling,ceiling_value\n"
         "stream,read/c,cpu,X,cold,3,1.0,0.99,1.01,10,100.00000000000001,stream:op=read:gbps,10\n"
         "stream,write/w,cpu,X,cold,3,1.0,0.99,1.1,11,110,stream:op=read:gbps,10\n"
         "access,gather/g,cpu,X,cold,3,1.0,0.99,1.01,9,90,stream:op=read:gbps,10\n";
  const std::string md = markdown_of(d);
  const auto at = md.find("### Rows above their ceiling");
  ASSERT_NE(at, std::string::npos);
  const std::string part = md.substr(at, md.find("### Input warnings") - at);
  EXPECT_NE(part.find("| X (cpu) | stream | write/w | cold | stream:op=read:gbps | 110 | 100 |"), std::string::npos)
      << part;
  EXPECT_EQ(part.find("read/c"), std::string::npos) << part;
  EXPECT_EQ(part.find("gather/g"), std::string::npos) << part;
}

// A row whose note says the harness saw other work interrupt its samples is listed with its count; none: no
// section (older runs never recorded it).
// The part of a report from `heading` to the next `end` after it; "" where the heading is absent.
std::string part_of(const std::string& md, const std::string& heading, const std::string& end) {
  const auto at = md.find(heading);
  return at == std::string::npos ? "" : md.substr(at, md.find(end, at) - at);
}

TEST(Validity, RowsOnABusyMachineAreListed) {
  const auto d = kvf_test::tmpdir("kvf_report_busy", "run");
  std::ofstream(d / "cases.csv")
      << "study,case,backend,device,mode,samples,median_s,gbps,note\n"
         "stream,read/a,cpu,X,cold,3,1.0,10,\"machine busy: 33 involuntary context switches in 0.15 s of samples "
         "(110/s per thread): other work took the CPUs, the samples may hold its stalls\"\n"
         "stream,read/b,cpu,X,cold,3,1.0,10,quiet\n";
  std::string md = markdown_of(d);
  const std::string part = part_of(md, "### Rows measured on a busy machine", "### Input warnings");
  ASSERT_FALSE(part.empty()) << md;
  EXPECT_NE(part.find("| X (cpu) | stream | read/a | cold | 33 involuntary context switches in 0.15 s of samples "
                      "(110/s per thread) |"),
            std::string::npos)
      << part;
  EXPECT_EQ(part.find("read/b"), std::string::npos) << part;
  std::ofstream(d / "cases.csv") << "study,case,backend,device,mode,samples,median_s,gbps,note\n"
                                    "stream,read/b,cpu,X,cold,3,1.0,10,quiet\n";
  md = markdown_of(d);
  EXPECT_EQ(md.find("busy machine"), std::string::npos);
}

TEST(Validity, HotRunsSlowerThanColdOnesAreListed) {
  const auto d = kvf_test::tmpdir("kvf_report_hot_slower", "run");
  // a: hot 1.3x beyond both spreads; b: hot 1.3x but its q1 under cold's q3; c: hot 1.05x; d: cold only.
  std::ofstream(d / "cases.csv") << "study,case,backend,device,mode,samples,median_s,q1_s,q3_s,gbps,note\n"
                                    "access,a,cpu,X,cold,5,1.0,0.95,1.05,10,\n"
                                    "access,a,cpu,X,hot,5,1.3,1.25,1.35,10,\n"
                                    "access,b,cpu,X,cold,5,1.0,0.9,1.2,10,\n"
                                    "access,b,cpu,X,hot,5,1.3,1.1,1.4,10,\n"
                                    "access,c,cpu,X,cold,5,1.0,0.99,1.01,10,\n"
                                    "access,c,cpu,X,hot,5,1.05,1.04,1.06,10,\n"
                                    "access,d,cpu,X,cold,5,1.0,0.99,1.01,10,\n";
  std::string md = markdown_of(d);
  const std::string part = part_of(md, "### Hot runs slower than cold ones", "</details>");
  ASSERT_FALSE(part.empty()) << md;
  EXPECT_NE(part.find("1 case ran slower hot than cold"), std::string::npos) << part;
  EXPECT_NE(part.find("| X (cpu) | access | a | 1000000 | 1300000 | 1.3 |"), std::string::npos) << part;
  for (const char* other : {"| b |", "| c |", "| d |"}) EXPECT_EQ(part.find(other), std::string::npos) << other;
  std::ofstream(d / "cases.csv") << "study,case,backend,device,mode,samples,median_s,gbps,note\n"
                                    "access,c,cpu,X,cold,5,1.0,10,\n";
  EXPECT_EQ(markdown_of(d).find("Hot runs slower"), std::string::npos);
}

TEST(Noise, BootstrapIntervalSeesTwoXAndNotJitterAndIsDeterministic) {
  const std::vector<double> a = {1.00, 1.02, 0.99, 1.01, 1.00}, b = {1.01, 0.99, 1.00, 1.02, 1.00};
  const Ratio same = median_ratio(a, b);
  ASSERT_TRUE(same.has_interval);
  EXPECT_FALSE(same.established());
  EXPECT_LE(same.lo, 1.0);
  EXPECT_GE(same.hi, 1.0);
  std::vector<double> twice;
  for (double x : a) twice.push_back(2 * x);
  const Ratio slow = median_ratio(twice, b);
  EXPECT_TRUE(slow.a_slower());
  EXPECT_FALSE(slow.a_faster());
  EXPECT_NEAR(slow.value, 2.0, 1e-12);
  EXPECT_EQ(median_ratio(twice, b).text(), slow.text());  // fixed seed: the report stays byte-identical
  EXPECT_FALSE(median_ratio({1.0, 2.0}, b).has_interval);  // fewer than 3 samples: no interval
}

// A NaN median (a damaged cases.csv) is not a measurement: the row is left out of every section and verdict.
TEST(Validity, ANanMedianIsNoMeasurement) {
  CaseRow r;
  r.samples = 11;
  r.median_s = std::nan("");
  EXPECT_FALSE(r.measured());
  r.median_s = 1e-3;
  EXPECT_TRUE(r.measured());
}

// Rows whose samples.csv lines are missing: no interval, and the text says why (not "fewer than 3 raw samples" when
// cases.csv counts 7 and 15).
TEST(Noise, RowsWithoutTheirRawSamplesSaySoWhereTheyHaveNoInterval) {
  CaseRow a, b;
  a.samples = 7, b.samples = 15;
  a.median_s = 2.0, b.median_s = 1.0;
  const Ratio lost = median_ratio(a, b);
  EXPECT_FALSE(lost.has_interval);
  EXPECT_EQ(lost.text(), "2x (no interval: no raw samples in samples.csv)");
  a.samples = 2;
  EXPECT_EQ(median_ratio(a, b).text(), "2x (no interval: fewer than 3 raw samples)");
  a.samples = 7;
  a.samples_s = {2.0, 2.01, 1.99}, b.samples_s = {1.0, 1.01, 0.99};
  EXPECT_TRUE(median_ratio(a, b).has_interval);
}

// Claim 5 reads a difference as a sign only outside the noise: the same two contexts judged with jittered samples.
namespace {
ResultSet block_token_set(double token_over_block_small, double token_over_block_large, double jitter) {
  ResultSet rs;
  rs.label = "X (cuda)";
  auto add = [&](const char* arm, double ctx, double median) {
    CaseRow r;
    r.study = "access";
    r.case_name = std::string("attention/") + arm + "/" + std::to_string(int(ctx));
    r.mode = "cold";
    r.params = {{"part", "attention"}, {"arm", arm}, {"ctx", fmt(ctx)}, {"keep", "1/8"}};
    r.samples = 5;
    r.median_s = median;
    for (double f : {1.0, 1 - jitter, 1 + jitter, 1 - jitter / 2, 1 + jitter / 2}) r.samples_s.push_back(median * f);
    rs.cases.push_back(r);
  };
  add("block", 4096, 1e-5);
  add("token", 4096, 1e-5 * token_over_block_small);
  add("block", 65536, 1e-4);
  add("token", 65536, 1e-4 * token_over_block_large);
  return rs;
}
}  // namespace

TEST(Verdicts, BlockTokenSignsOnlyOutsideTheNoise) {
  auto judge = [](const ResultSet& rs) { return find(verdicts({rs}), "Contiguous blocks"); };
  // 2% and 3% gaps with +-10% jitter: inside the noise at both contexts.
  const auto noisy = judge(block_token_set(1.02, 1.03, 0.10));
  EXPECT_EQ(noisy.verdict, "not established") << noisy.figures;
  EXPECT_NE(noisy.figures.find("no measurable difference at 2"), std::string::npos) << noisy.figures;
  // The same gaps with 0.1% jitter: block faster at both, and the gap widens.
  EXPECT_EQ(judge(block_token_set(1.02, 1.03, 0.001)).verdict, "supported");
  // Token clearly faster at both contexts.
  EXPECT_EQ(judge(block_token_set(0.8, 0.7, 0.001)).verdict, "refuted");
  // Block faster at the small context, token at the large one: the gap narrows in every group.
  EXPECT_EQ(judge(block_token_set(1.2, 0.8, 0.001)).verdict, "refuted");
  // Block faster everywhere, but by the same margin: the first half holds, the widening does not.
  const auto flat = judge(block_token_set(1.2, 1.2, 0.001));
  EXPECT_EQ(flat.verdict, "mixed") << flat.figures;
  EXPECT_NE(flat.figures.find("gap widens in 0 groups, narrows in 0"), std::string::npos) << flat.figures;
  // Without samples.csv's lines the noise is unknown: no interval, never "no measurable difference".
  ResultSet lost = block_token_set(1.2, 1.5, 0.001);
  for (auto& r : lost.cases) r.samples_s.clear();
  const auto unknown = judge(lost);
  EXPECT_EQ(unknown.verdict, "not established") << unknown.figures;
  EXPECT_NE(unknown.figures.find("no measurable difference at 0, no interval at 2 (no raw samples in samples.csv)"),
            std::string::npos) << unknown.figures;
}

// Claim 5 is about memory: where a run has cold groups they decide, and hot points (cache-resident at small
// contexts) are counted beside the verdict. Hot rows with token faster turned a cold "supported" into "mixed".
TEST(Verdicts, BlockTokenJudgedOnColdGroupsWhereThereAreAny) {
  ResultSet rs = block_token_set(1.02, 1.03, 0.001);
  const ResultSet hot = block_token_set(0.8, 0.7, 0.001);
  for (CaseRow r : hot.cases) {
    r.mode = "hot";
    rs.cases.push_back(r);
  }
  const auto v = find(verdicts({rs}), "Contiguous blocks");
  EXPECT_EQ(v.verdict, "supported") << v.figures;
  EXPECT_NE(v.figures.find("judged on cold groups only (hot ones, beside them: block faster at 0, token faster at 2 "
                           "of 2 points)"),
            std::string::npos)
      << v.figures;
  // Hot groups alone are judged as they are.
  for (auto& r : rs.cases) r.mode = r.mode == "cold" ? "gone" : r.mode;
  std::erase_if(rs.cases, [](const CaseRow& r) { return r.mode == "gone"; });
  EXPECT_EQ(find(verdicts({rs}), "Contiguous blocks").verdict, "refuted");
}

// The CPU's derived columns (the FMA floor grows with the context; huge_backed_pct is what the kernel granted) are
// no part of a group: with them in the key, every context was a group of its own and claim 5 was never judged.
TEST(Verdicts, BlockTokenGroupsIgnoreTheCpusDerivedColumns) {
  ResultSet rs = block_token_set(1.02, 1.03, 0.001);
  for (auto& r : rs.cases) {
    const double ctx = *r.num("ctx");
    r.params["fma_floor_s"] = fmt(ctx * 1e-9);
    r.params["fma_peak_gflops"] = "200";
    r.params["fma_peak_isa"] = "avx2 ymm fp32 fma, 2 threads";
    r.params["fma_floor_basis"] = "fp32 fma";
    r.params["huge_backed_pct"] = ctx > 8192 ? "100" : "98.5";
  }
  EXPECT_EQ(find(verdicts({rs}), "Contiguous blocks").verdict, "supported");
}

// Claim 5 pairs a token row with the block row of its own block size (the same sink, latest blocks and budget) at
// the block size whose block row is fastest; before, the fastest token row of any block size or selection was
// divided by the fastest block row, a best-of-N on the token side only.
TEST(Verdicts, BlockTokenPairsRowsOfOneBlockSizeAndSelection) {
  ResultSet rs;
  rs.label = "X (cuda)";
  auto add = [&](const char* arm, double ctx, const char* block, const char* select, double median) {
    CaseRow r;
    r.study = "access";
    r.case_name = std::string("attention/") + arm + "/" + std::to_string(int(ctx)) + "/B" + block + "/" + select;
    r.mode = "cold";
    r.params = {{"part", "attention"}, {"arm", arm}, {"ctx", fmt(ctx)}, {"keep", "1/8"}, {"block", block},
                {"select", select}};
    r.samples = 5;
    r.median_s = median;
    for (double f : {1.0, 0.999, 1.001, 0.9995, 1.0005}) r.samples_s.push_back(median * f);
    rs.cases.push_back(r);
  };
  for (double ctx : {4096.0, 65536.0}) {
    const double u = ctx / 4096 * 1e-5;
    add("block", ctx, "64", "per_head", 1.0 * u);   // the fastest block size ...
    add("token", ctx, "64", "per_head", 2.0 * u);   // ... and its token row: 2x
    add("block", ctx, "128", "per_head", 1.1 * u);
    add("token", ctx, "128", "per_head", 1.5 * u);  // the fastest token row, of another block size
    add("block", ctx, "64", "shared", 1.0 * u);
    add("token", ctx, "64", "shared", 0.5 * u);     // another selection: its own group
  }
  const auto vs = verdicts({rs});
  const auto& c5 = find(vs, "Contiguous blocks");
  // Per head: 2x at both contexts (not the 1.5x of the fastest token row); shared: 0.5x, a group of its own (merged,
  // its token rows would have been the fastest: 0.5x in one group of four points).
  EXPECT_NE(c5.figures.find("2 groups, 4 (group, context) points: block faster at 2, token faster at 2"),
            std::string::npos) << c5.figures;
  EXPECT_NE(c5.figures.find("token/block 2x [1.997, 2.003] at 4K, 2x [1.997, 2.003] at 64K"), std::string::npos)
      << c5.figures;
  EXPECT_EQ(c5.verdict, "mixed");
}

// Claim 2 reads decode ranges only: prefill and co-run ranges of the same run are other phases.
TEST(Verdicts, IdlenessCountsDecodeRangesOnlyPerBatch) {
  ResultSet rs;
  rs.label = "X (cuda)";
  rs.backend = "cuda";
  rs.has_counters = true;
  for (const char* name : {"decode/b1", "decode/b64", "decode/b64_1k", "prefill/p", "corun/c"}) {
    CaseRow r;
    r.study = "idleness";
    r.case_name = name;
    r.mode = "cold";
    r.samples = 5;
    r.median_s = 1e-3;
    const std::string n = name;
    r.params = {{"batch", n.rfind("decode/b64", 0) == 0 ? "64" : "1"},
                {"context", n == "decode/b64_1k" ? "1024" : "32768"}};
    rs.cases.push_back(r);
  }
  auto range = [&](const char* c, double v) {
    CounterRow k;
    k.study = "idleness";
    k.case_name = c;
    k.source = "range";
    k.metric = "kvf:idle_sm_pct";
    k.value = v;
    rs.counters.push_back(k);
  };
  for (double v : {70.0, 72.0}) range("decode/b1", v);
  for (double v : {50.0, 52.0}) range("decode/b64", v);
  // Batch 64 at 1K context: idle. Pooled with 32K the batch's median would be 70.5 (between its cells), "above".
  for (double v : {89.0, 91.0}) range("decode/b64_1k", v);
  for (double v : {5.0, 6.0, 7.0, 8.0, 9.0}) {
    range("prefill/p", v);
    range("corun/c", v);
  }
  const auto v = find(verdicts({rs}), "More than 60% of the GPU is idle in decode - SM");
  EXPECT_EQ(v.verdict, "mixed") << v.figures;
  EXPECT_EQ(v.figures,
            "decode ranges only (6), median per batch and context: B1 71% at 32K; B64 90% at 1K, 51% at 32K; above 60% "
            "in 2 of 3 cells, not at batch 64, context 32K; lowest: 51% at batch 64, context 32K");
}

// A merged directory's "sources" give each study run its commit: the Inputs list every commit, not the merge's.
TEST(Provenance, MergedSourcesListEveryCommitAndBadSourcesAreUsageErrors) {
  const auto d = kvf_test::tmpdir("kvf_report_sources", "merged");
  std::ofstream(d / "cases.csv") << "study,case,backend,device,mode,samples,median_s,note\nstream,read/a,cpu,X,cold,3,1.0,\n";
  auto meta = [&](const std::string& sources) {
    std::ofstream(d / "meta.json") << R"({"suite_version": "0.1.0", "git_sha": "aaaa",
      "studies": {"stream": {"command": "bench_stream", "status": "complete"}},
      "sources": )" << sources << "}";
  };
  meta(R"([{"dir": "run1", "git_sha": "bbbb", "studies": ["stream"]},
           {"dir": "run2", "git_sha": "cccc", "studies": ["stream"], "command": "bench_stream --again"}])");
  const ResultSet rs = load_results(d.string());
  ASSERT_EQ(rs.runs.size(), 2u);
  EXPECT_EQ(rs.runs[0].git_sha, "bbbb");
  EXPECT_EQ(rs.runs[0].command, "bench_stream");
  EXPECT_EQ(rs.runs[1].source, "run2");
  EXPECT_EQ(rs.runs[1].command, "bench_stream --again");
  ReportOptions o;
  o.charts = false;
  const std::string md = render_markdown({rs}, o, {});
  EXPECT_NE(md.find("| bbbb, cccc |"), std::string::npos);
  meta(R"({"dir": "x"})");
  EXPECT_THROW(load_results(d.string()), kvf::UsageError);
  meta(R"([{"dir": "x", "git_sha": "b", "studies": "stream"}])");
  EXPECT_THROW(load_results(d.string()), kvf::UsageError);
}

// The launch axis: a graph row is predicted with one launch, kept out of the eager series, and shown beside its
// eager row.
TEST(Report, GraphRowsStandBesideTheirEagerRowsAndTakeOneLaunch) {
  ResultSet rs;
  rs.label = "NVIDIA H100 80GB HBM3 (cuda)";
  rs.device = "NVIDIA H100 80GB HBM3";
  rs.backend = "cuda";
  auto add = [&](const std::string& name, const std::string& launch, double secs) {
    CaseRow r;
    r.study = "frontier";
    r.case_name = name;
    r.mode = "cold";
    r.samples = 5;
    r.median_s = secs;
    r.bytes = 16e6;
    r.flops = 1e9;
    r.params = {{"arm", "x"}, {"model", "Llama-3.1-8B"}, {"tokens", "128"}, {"pages", "1"}, {"layers", "1"},
                {"xdtype", "bf16"}, {"launch", launch}, {"kv_bytes_per_page", "524288"}};
    for (double f : {1.0, 0.99, 1.01, 0.995, 1.005}) r.samples_s.push_back(secs * f);
    rs.cases.push_back(r);
  };
  for (const auto& [bytes, secs] : {std::pair<const char*, double>{"65536", 30e-6}, {"1048576", 330e-6}}) {
    CaseRow c;
    c.study = "frontier";
    c.case_name = std::string("h2d_pinned/") + bytes;
    c.mode = "cold";
    c.samples = 5;
    c.median_s = secs;
    c.params = {{"arm", "h2d_pinned"}, {"copy_bytes", bytes}};
    rs.cases.push_back(c);
  }
  add("x/Llama-3.1-8B/bf16/T128/P1", "eager", 16e-6);
  add("x/Llama-3.1-8B/bf16/T128/P1/graph", "graph", 12e-6);
  ReportOptions o;
  o.charts = false;
  const std::string md = render_markdown({rs}, o, {});
  EXPECT_NE(md.find("Eager launches against one CUDA graph"), std::string::npos);
  EXPECT_NE(md.find("| frontier | x/Llama-3.1-8B/bf16/T128/P1 | cold | 16 | 12 | 4 | 0.75x"), std::string::npos) << md;
  EXPECT_NE(md.find("as one CUDA graph: 1 launch for the 2"), std::string::npos);
  // The recompute series (claims 1, 3) read the eager row only: 16 us, not 12.
  EXPECT_NE(find(verdicts({rs}), "Recompute ~50 us").figures.find("recompute 16 us"), std::string::npos)
      << find(verdicts({rs}), "Recompute ~50 us").figures;
}

// Two directories claiming one commit on one device with different results: both say so, neither is picked.
TEST(Provenance, SameCommitDifferentResultsIsSaidInBothDirectories) {
  auto make = [](const std::string& name, double secs, const std::string& sha = "abc123") {
    const auto d = kvf_test::tmpdir("kvf_report_samecommit", name);
    std::ofstream(d / "meta.json") << R"({"suite_version": "0.1.0", "git_sha": ")" << sha
                                   << R"(", "device": {"name": "X", "backend": "cpu"}})";
    std::ofstream(d / "cases.csv") << "study,case,backend,device,mode,samples,median_s,note\nstream,read/a,cpu,X,cold,3,"
                                    << secs << ",\nstream,read/b,cpu,X,cold,3,1.0,\n";
    return d.string();
  };
  const auto sets = load_all({make("one", 1.0), make("two", 2.0)});
  ASSERT_EQ(sets[0].warnings.size(), 1u);
  EXPECT_EQ(sets[0].warnings, sets[1].warnings);
  EXPECT_NE(sets[0].warnings[0].find("both claim commit abc123 on X, yet 1 common case(s) differ by more than 5%"),
            std::string::npos)
      << sets[0].warnings[0];
  EXPECT_TRUE(load_all({make("three", 1.0), make("four", 1.01)})[0].warnings.empty());  // within 5%: nothing to say
  // Builds with changes on top of the commit, or from no checkout, are not one build: nothing to say either.
  for (const char* sha : {"abc123-dirty", "unknown"})
    EXPECT_TRUE(load_all({make("five", 1.0, sha), make("six", 2.0, sha)})[0].warnings.empty()) << sha;
}

// GPU attention rows of one shape timed with several kernels (--attn-loads) sit side by side, matched on every other
// column and the mode; a shape with one kernel, and CPU rows (no loads column), are not listed.
TEST(ReportAccess, AttentionKernelsOfOneShapeSitSideBySide) {
  ResultSet rs;
  rs.label = "H (cuda)";
  auto add = [&](const std::string& name, const char* loads, const char* ctx, const char* mode, double us) {
    CaseRow r;
    r.study = "access";
    r.case_name = name;
    r.mode = mode;
    r.params = {{"part", "attention"}, {"arm", "dense"}, {"ctx", ctx}, {"dtype", "bf16"}};
    if (*loads) r.params["loads"] = loads;
    r.samples = 5;
    r.median_s = us * 1e-6;
    rs.cases.push_back(r);
  };
  add("attn/dense/64K", "auto", "65536", "cold", 85);
  add("attn/dense/64K/mma", "mma", "65536", "cold", 86);
  add("attn/dense/64K/smem", "smem", "65536", "cold", 98);
  add("attn/dense/64K/regs", "regs", "65536", "hot", 104);  // another mode: alone, not listed
  add("attn/dense/4K", "auto", "4096", "cold", 17);         // one kernel: not listed
  add("attn/dense/128K", "", "131072", "cold", 500);       // a CPU row: no loads column
  add("attn/dense/256K", "auto", "262144", "cold", 298);
  add("attn/dense/256K/smem", "smem", "262144", "cold", 341);
  ReportOptions o;
  o.charts = false;
  const std::string md = render_markdown({rs}, o, {});
  EXPECT_NE(md.find("### GPU attention kernels side by side"), std::string::npos) << md;
  // Shapes in context order (as numbers: 65536 before 262144, which a byte order would reverse).
  EXPECT_NE(md.find("| H (cuda) | attn/dense/256K | cold | 298 | - | 341 | - | auto |"), std::string::npos) << md;
  EXPECT_LT(md.find("| H (cuda) | attn/dense/64K | cold |"), md.find("| H (cuda) | attn/dense/256K | cold |")) << md;
  EXPECT_NE(md.find("| H (cuda) | attn/dense/64K | cold | 85 | 86 | 98 | - | auto |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| H (cuda) | attn/dense/64K | hot |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| H (cuda) | attn/dense/4K |"), std::string::npos) << md;
  EXPECT_EQ(md.find("attn/dense/128K | cold | -"), std::string::npos) << md;
}

// A CPU gather or dense row sits beside its control (arm plain / read) of the same bytes and mode, and nothing else;
// a dense row also shows its FMA floor against its time.
TEST(ReportAccess, RowsSitBesideTheirControlOfTheSameShapeAndMode) {
  ResultSet rs;
  rs.label = "X (cpu)";
  auto add = [&](const std::string& name, std::map<std::string, std::string> params, const char* mode, double gbps) {
    CaseRow r;
    r.study = "access";
    r.case_name = name;
    r.mode = mode;
    r.params = std::move(params);
    r.samples = 5;
    r.median_s = 1e-3;
    r.gbps = gbps;
    r.ceiling_value = 40;
    rs.cases.push_back(r);
  };
  const std::map<std::string, std::string> g = {{"part", "gather"}, {"run_bytes", "256"}, {"pool_mib", "1024"}, {"huge", "on"}};
  auto with = [](std::map<std::string, std::string> p, const char* k, const char* v) { p[k] = v; return p; };
  add("gather/R256/plain", with(g, "arm", "plain"), "cold", 4);
  add("gather/R256/nohuge/plain", with(with(g, "arm", "plain"), "huge", "off"), "cold", 100);
  add("gather/R256", with(g, "arm", "gather"), "cold", 8);
  add("gather/R256", with(g, "arm", "gather"), "hot", 9);  // no hot control: not listed
  const std::map<std::string, std::string> a = {{"part", "attention"}, {"ctx", "65536"}, {"placement", "shuffled"},
                                                {"page_tokens", "16"}, {"huge", "on"}};
  add("attn/read/64K", with(a, "arm", "read"), "cold", 20);
  add("attn/dense/64K", with(with(a, "arm", "dense"), "fma_floor_s", "0.0005"), "cold", 30);
  add("attn/dense/64K/contiguous", with(with(a, "arm", "dense"), "placement", "contiguous"), "cold", 35);
  // The compute control runs hot only, and a dense row of either mode is read against it; the contiguous one has none.
  add("attn/compute/64K", with(a, "arm", "compute"), "hot", 60);
  rs.cases.back().median_s = 0.7e-3;
  add("attn/read/64K", with(a, "arm", "read"), "hot", 21);
  add("attn/dense/64K", with(with(a, "arm", "dense"), "fma_floor_s", "0.0005"), "hot", 31);
  ReportOptions o;
  o.charts = false;
  const std::string md = render_markdown({rs}, o, {});
  EXPECT_NE(md.find("### The gather against its control"), std::string::npos);
  EXPECT_NE(md.find("| X (cpu) | gather/R256 | cold | 8 GB/s | 20 | 4 GB/s | 10 | 2 |\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("| X (cpu) | gather/R256 | hot |"), std::string::npos);
  EXPECT_NE(md.find("### Dense attention against the read of its own bytes"), std::string::npos);
  // The dense table's last columns: the compute control's time (0.7 ms, hot) and the row's FMA floor (0.5 ms),
  // each over the row's median (1 ms).
  EXPECT_NE(md.find("| X (cpu) | attn/dense/64K | cold | 30 GB/s | 75 | 20 GB/s | 50 | 1.5 | 70 | 50 |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| X (cpu) | attn/dense/64K | hot | 31 GB/s | 77.5 | 21 GB/s | 52.5 | 1.476 | 70 | 50 |\n"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("| X (cpu) | attn/dense/64K/contiguous |"), std::string::npos);
}
