// Issue 19: bench_attention's output in `kvf report` (fixture: fixtures/gpu_attention, a planted attention/ output
// beside access rows, written by make_fixtures.py; its README says what is planted). Summaries and the join are
// checked against the planted values; each verdict rule on planted runs whose outcome is known; bad files are
// said ("not available"), never a crash.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>

#include "kvf/attention_report.hpp"
#include "kvf/errors.hpp"
#include "kvf/report.hpp"
#include "test_files.hpp"

using namespace kvf::report;
namespace at = kvf::report::attention;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = fs::path(KVF_REPORT_FIXTURES) / "gpu_attention";

fs::path tmpdir(const std::string& name) { return kvf_test::tmpdir("kvf_attention_report_test", name); }

// A copy of the fixture whose attention/<file> is `text`.
fs::path copy_with(const std::string& name, const std::string& file, const std::string& text) {
  return kvf_test::copy_with(kFixture, tmpdir(name), fs::path("attention") / file, text);
}

std::string original(const std::string& file) { return kvf_test::slurp(kFixture / "attention" / file); }

std::vector<Verdict> claims(const std::vector<Verdict>& all, const std::string& prefix) {
  std::vector<Verdict> out;
  for (const auto& v : all)
    if (v.claim.rfind(prefix, 0) == 0) out.push_back(v);
  return out;
}

// A planted run: `layers` layers of 2 heads, context 4096, windows 0 and 512 (the H1 window), threshold 0.5.
at::Run planted(const std::vector<double>& mass512, const std::vector<double>& entropy) {
  at::Run r;
  r.source = "dump";
  r.model = "planted";
  r.prompt = "p";
  r.context = 4096;
  r.queries = 4;
  r.q_heads = 2;
  r.kv_heads = 1;
  r.head_dim = 64;
  r.threshold = 0.5;
  for (std::size_t l = 0; l < mass512.size(); ++l)
    for (int h = 0; h < 2; ++h) {
      r.locality.push_back({static_cast<int>(l), h, 16, 0, 0.01});
      r.locality.push_back({static_cast<int>(l), h, 16, 512, mass512[l] + (h ? 0.01 : -0.01)});
    }
  for (std::size_t l = 0; l < entropy.size(); ++l) r.layers.push_back({static_cast<int>(l), entropy[l] * 8, entropy[l]});
  return r;
}

void add_selection(at::Run& r, double keep, double block_recall, double token_recall) {
  for (int l = 0; l < 2; ++l)
    for (const auto& [arm, rec] : {std::pair<const char*, double>{"block", block_recall}, {"token", token_recall}})
      r.selection.push_back({l, 0, arm, 64, static_cast<std::int64_t>(keep * 4096), keep, rec, 0.1});
}

CaseRow access_row(const std::string& arm, const std::string& keep, double us, double jitter = 0) {
  CaseRow c;
  c.study = "access";
  c.case_name = "attn/" + arm + "/" + keep;
  c.mode = "cold";
  c.params = {{"part", "attention"}, {"arm", arm}, {"ctx", "4096"}, {"keep", keep}, {"block", "64"},
              {"hq", "2"},           {"hkv", "1"}, {"head_dim", "64"}};
  if (arm == "token") c.params["scatter"] = "uniform";
  c.samples = 5;
  c.median_s = us * 1e-6;
  for (int i = 0; i < 5; ++i) c.samples_s.push_back((us + jitter * (i - 2)) * 1e-6);
  return c;
}

ResultSet with_rows(std::vector<CaseRow> rows) {
  ResultSet rs;
  rs.dir = "planted-dir";
  rs.label = "GPU (cuda)";
  rs.cases = std::move(rows);
  return rs;
}

}  // namespace

TEST(ReportAttention, ReadsTheFixture) {
  ASSERT_EQ(at::find_runs(kFixture), std::vector<fs::path>{kFixture / "attention"});
  const at::Run r = at::read_run(kFixture / "attention", kFixture);
  EXPECT_EQ(r.model, "Tiny-Llama-Planted (LlamaForCausalLM)");
  EXPECT_EQ(r.prompt, "prompt.tokens.json");
  EXPECT_EQ(r.context, 4096);
  EXPECT_EQ(r.locality.size(), 80u);
  EXPECT_EQ(r.entropy.size(), 16u);
  EXPECT_EQ(r.layers.size(), 4u);
  EXPECT_EQ(r.selection.size(), 240u);
  EXPECT_EQ(r.needles.size(), 240u);
  EXPECT_EQ(r.skipped.size(), 1u);
  ASSERT_EQ(r.decodes.size(), 11u);  // needle_decode.csv: dense, then block and token at 5 budgets
  EXPECT_EQ(r.decodes[0].arm, "dense");
  EXPECT_TRUE(r.decodes[0].exact);
  EXPECT_EQ(std::count_if(r.decodes.begin(), r.decodes.end(), [](const at::DecodeRow& d) { return d.exact; }), 7);
  EXPECT_EQ(r.decodes[8].arm, "token");  // block 64, keep 1/32
  EXPECT_EQ(r.decodes[8].matched_prefix, 1);
  EXPECT_TRUE(at::find_runs(fs::path(KVF_REPORT_FIXTURES) / "gpu").empty());
}

// The planted values of make_fixtures.py come back: H1 at W = 512, the boundary, the selection means.
TEST(ReportAttention, SummariesEqualThePlantedValues) {
  const at::Run r = at::read_run(kFixture / "attention", kFixture);
  ASSERT_EQ(at::h1_window(r), 512);
  const auto by = at::locality_by_layer(r, 512);
  const double want[] = {0.35, 0.7, 0.8, 0.9};
  for (int l = 0; l < 4; ++l) {
    EXPECT_NEAR(by.at(l).mean, want[l], 1e-9) << l;
    EXPECT_NEAR(by.at(l).min, want[l] - 0.03, 1e-9) << l;
  }
  const at::Boundary b = at::boundary(r);
  EXPECT_EQ(b.first_below, 1);
  EXPECT_EQ(b.largest_drop, 1);
  EXPECT_NEAR(b.drop, 0.35, 1e-9);
  const auto pts = at::selection_points(r);
  ASSERT_EQ(pts.size(), 5u);
  EXPECT_EQ(pts[1].block, 64);
  EXPECT_EQ(at::keep_text(pts[1].keep), "1/8");
  EXPECT_NEAR(pts[1].arm.at("block").recall, 0.8, 1e-9);
  EXPECT_NEAR(pts[1].arm.at("token").recall, 0.83, 1e-9);
  EXPECT_EQ(pts[2].arm.at("block").error_n, 15);  // one row's out_error is empty (NaN): left out
  EXPECT_EQ(pts[2].arm.at("block").n, 16);
}

// The join takes the cold, eager, uniform rows of the same keep and block size, the closest context first, and
// says what differs from the run.
TEST(ReportAttention, JoinPicksTheClosestAccessRows) {
  const at::Run r = at::read_run(kFixture / "attention", kFixture);
  const ResultSet rs = load_results(kFixture.string());
  const auto pts = at::selection_points(r);
  const at::Join j = at::join_latency(r, pts, rs);
  ASSERT_EQ(j.points.size(), 3u) << j.none;  // block 64 at 1/2, 1/8, 1/32; block 256 has no access rows
  const at::Joined& k8 = j.points[1];
  EXPECT_EQ(at::keep_text(k8.point->keep), "1/8");
  EXPECT_DOUBLE_EQ(*k8.block->median_s, 10e-6);
  EXPECT_DOUBLE_EQ(*k8.token->median_s, 11e-6);
  EXPECT_TRUE(k8.token_vs_block.a_slower());
  EXPECT_EQ(k8.differs.size(), 3u);  // hq, hkv, head_dim
  EXPECT_NE(k8.differs[0].find("hq 32 against the run's 4"), std::string::npos) << k8.differs[0];
  const at::Joined& k2 = j.points[0];
  ASSERT_FALSE(k2.differs.empty());
  EXPECT_EQ(k2.differs[0], "context 64K against the run's 4K");
}

TEST(ReportAttention, FixtureVerdicts) {
  const auto all = verdicts({load_results(kFixture.string())});
  const auto h1 = claims(all, "H1"), h3 = claims(all, "H3"), bet = claims(all, "Block selection");
  ASSERT_EQ(h1.size(), 1u);
  ASSERT_EQ(h3.size(), 1u);
  ASSERT_EQ(bet.size(), 1u);
  EXPECT_EQ(h1[0].verdict, "mixed") << h1[0].figures;
  EXPECT_NE(h1[0].figures.find("below: layers 0"), std::string::npos) << h1[0].figures;
  EXPECT_NE(h1[0].figures.find("Tiny-Llama-Planted"), std::string::npos);
  EXPECT_NE(h1[0].figures.find("prompt.tokens.json"), std::string::npos);
  EXPECT_EQ(h3[0].verdict, "supported") << h3[0].figures;
  // 1/2 and 1/8 support (recall within 0.05, block faster); 1/32 at block 64 of 4K is a budget of 128 tokens, the
  // sink and latest blocks alone: both arms keep the same tokens there (its planted recalls differ, as no run's
  // can), so it is left out and counted.
  // 1/2 joins access rows at 64K, 16x the run's 4K: shown, not judged (the ratio at 64K is not the ratio at 4K).
  EXPECT_EQ(bet[0].verdict, "supported") << bet[0].figures;
  EXPECT_NE(bet[0].figures.find("1 selection joined, 1 support, 0 refute; 1 left out: budget = sink + latest"),
            std::string::npos)
      << bet[0].figures;
  EXPECT_NE(bet[0].figures.find("; 1 not judged: the nearest access rows are at 64K, over 4x from the run's 4K "
                                "context"),
            std::string::npos)
      << bet[0].figures;
  EXPECT_NE(bet[0].figures.find("at 64K (not judged)"), std::string::npos) << bet[0].figures;
  // A directory without attention output has no row for these claims.
  const auto none = verdicts({load_results((fs::path(KVF_REPORT_FIXTURES) / "gpu").string())});
  EXPECT_TRUE(claims(none, "H1").empty());
  EXPECT_TRUE(claims(none, "Block selection").empty());
}

TEST(ReportAttention, H1Rule) {
  EXPECT_EQ(at::judge_h1(nullptr, "x.csv:3: bad", "d").verdict, "not available");
  EXPECT_EQ(at::judge_h1(nullptr, "x.csv:3: bad", "d").figures, "x.csv:3: bad");
  auto all = planted({0.6, 0.55, 0.9}, {});
  EXPECT_EQ(at::judge_h1(&all, "", "d").verdict, "supported");
  auto none = planted({0.2, 0.49}, {});
  EXPECT_EQ(at::judge_h1(&none, "", "d").verdict, "refuted");
  auto some = planted({0.2, 0.8}, {});
  EXPECT_EQ(at::judge_h1(&some, "", "d").verdict, "mixed");
  auto small = planted({0.9}, {});
  small.context = 2048;  // 512 > 2048 / 8: no H1 window
  EXPECT_EQ(at::judge_h1(&small, "", "d").verdict, "not available");
}

TEST(ReportAttention, H3Rule) {
  auto drop = planted({}, {0.9, 0.7, 0.4, 0.3});
  const Verdict v = at::judge_h3(&drop, "", "d");
  EXPECT_EQ(v.verdict, "supported") << v.figures;
  EXPECT_NE(v.figures.find("boundary (first below) layer 2; largest drop 0.3 into layer 2"), std::string::npos)
      << v.figures;
  auto rises = planted({}, {0.9, 0.4, 0.6});
  EXPECT_EQ(at::judge_h3(&rises, "", "d").verdict, "mixed");
  auto low_early = planted({}, {0.4, 0.3});
  EXPECT_EQ(at::judge_h3(&low_early, "", "d").verdict, "refuted");
  auto never = planted({}, {0.9, 0.8, 0.7});
  EXPECT_EQ(at::judge_h3(&never, "", "d").verdict, "refuted");
  auto one = planted({}, {0.9});
  EXPECT_EQ(at::judge_h3(&one, "", "d").verdict, "not available");
  EXPECT_EQ(at::judge_h3(nullptr, "meta.json: bad", "d").verdict, "not available");
}

TEST(ReportAttention, BetRule) {
  auto run = planted({0.9}, {});
  add_selection(run, 0.125, 0.80, 0.83);
  // comparable recall, block faster: supported
  EXPECT_EQ(at::judge_bet(&run, "", with_rows({access_row("block", "1/8", 10), access_row("token", "1/8", 12)})).verdict,
            "supported");
  // block faster, but recall 0.1 short: refuted
  auto worse = planted({0.9}, {});
  add_selection(worse, 0.125, 0.70, 0.80);
  EXPECT_EQ(at::judge_bet(&worse, "", with_rows({access_row("block", "1/8", 10), access_row("token", "1/8", 12)})).verdict,
            "refuted");
  // comparable recall, token faster: refuted
  EXPECT_EQ(at::judge_bet(&run, "", with_rows({access_row("block", "1/8", 12), access_row("token", "1/8", 10)})).verdict,
            "refuted");
  // comparable recall, latency inside the noise: not established
  const Verdict noisy =
      at::judge_bet(&run, "", with_rows({access_row("block", "1/8", 10, 2), access_row("token", "1/8", 10.2, 2)}));
  EXPECT_EQ(noisy.verdict, "not established") << noisy.figures;
  // no access rows at all, or none at this keep: not available, saying so
  const Verdict empty = at::judge_bet(&run, "", with_rows({}));
  EXPECT_EQ(empty.verdict, "not available");
  EXPECT_NE(empty.figures.find("latency: not available: no access study rows in planted-dir"), std::string::npos)
      << empty.figures;
  const Verdict other = at::judge_bet(&run, "", with_rows({access_row("block", "1/2", 10), access_row("token", "1/2", 12)}));
  EXPECT_EQ(other.verdict, "not available");
  EXPECT_NE(other.figures.find("the access rows have keep 1/2 block 64"), std::string::npos) << other.figures;
  // graph launches and clustered tokens are never joined
  auto graph = access_row("block", "1/8", 1);
  graph.params["launch"] = "graph";
  auto clustered = access_row("token", "1/8", 1);
  clustered.params["scatter"] = "clustered";
  EXPECT_EQ(at::judge_bet(&run, "", with_rows({graph, clustered})).verdict, "not available");
}

// The section: its tables, the chart, and "latency: not available" where the directory has no access rows.
TEST(ReportAttention, Section) {
  const std::string md = render_markdown({load_results(kFixture.string())}, {}, {});
  EXPECT_NE(md.find("Attention quality of a checkpoint or a dump"), std::string::npos);
  EXPECT_NE(md.find("| 0 | 0.05 [0.02, 0.08] |"), std::string::npos);  // H1 table: layer 0, W = 0
  EXPECT_NE(md.find("0.35 [0.32, 0.38]"), std::string::npos);
  EXPECT_NE(md.find("first below 0.5; largest drop (0.35)"), std::string::npos);
  EXPECT_NE(md.find("![attention_pareto](attention_pareto.svg)"), std::string::npos);
  EXPECT_NE(md.find("| 1/8 | 64 | 0.8 | 0.83 | 10 us | 11 us |"), std::string::npos);
  EXPECT_EQ(md.find("latency: not available"), std::string::npos);
  EXPECT_NE(md.find("under each selection in every layer (7 of 11 decodes exact)"), std::string::npos);
  EXPECT_NE(md.find("| token | 64 | 1/32 | 128 | no | 1 of 3 |"), std::string::npos);
  // The same output beside a directory without access rows.
  const fs::path d = tmpdir("no_access");
  fs::copy(kFixture, d, fs::copy_options::recursive);
  const std::string cases = kvf_test::slurp(kFixture / "cases.csv");
  std::ofstream(d / "cases.csv", std::ios::trunc) << cases.substr(0, cases.find('\n') + 1);
  fs::remove(d / "samples.csv");
  const std::string md2 = render_markdown({load_results(d.string())}, {}, {});
  EXPECT_NE(md2.find("latency: not available: no access study rows in " + md_text(d.string())), std::string::npos);
  EXPECT_EQ(md2.find("attention_pareto"), std::string::npos);
  // No attention output: no section at all.
  const std::string plain = render_markdown({load_results((fs::path(KVF_REPORT_FIXTURES) / "gpu").string())}, {}, {});
  EXPECT_EQ(plain.find("Attention quality"), std::string::npos);
}

// Several runs below attention/ (one folder each): one subsection, one chart and one row per claim each; a folder
// without meta.json is not a run.
TEST(ReportAttention, SeveralRuns) {
  const fs::path d = tmpdir("several");
  fs::copy(kFixture, d, fs::copy_options::recursive);
  fs::rename(d / "attention", d / "a");
  fs::create_directories(d / "attention");
  fs::rename(d / "a", d / "attention" / "8k");
  fs::copy(d / "attention" / "8k", d / "attention" / "32k", fs::copy_options::recursive);
  fs::create_directories(d / "attention" / "notes");
  // The 32k run's entropy drops one layer later: first below 0.5 and the largest drop (0.3) at layer 2.
  std::ofstream(d / "attention" / "32k" / "layer_entropy.csv", std::ios::trunc)
      << "layer,nats,normalized\n0,6.65,0.8\n1,5.82,0.7\n2,3.33,0.4\n3,2.5,0.3\n";
  ASSERT_EQ(at::find_runs(d), (std::vector<fs::path>{d / "attention" / "32k", d / "attention" / "8k"}));
  const ResultSet rs = load_results(d.string());
  const std::string md = render_markdown({rs}, {}, {});
  EXPECT_NE(md.find("first below the threshold at layer 1 in 1 of 2 runs, the largest drop at layer 1 in 1 of 2 runs"),
            std::string::npos);
  EXPECT_NE(md.find("| 32k | " + md_text(at::read_run(d / "attention" / "32k", d).rests_on()) + " | layer 2 | layer 2 |"),
            std::string::npos);
  EXPECT_NE(md.find("#### Run 32k"), std::string::npos);
  EXPECT_NE(md.find("#### Run 8k"), std::string::npos);
  EXPECT_NE(md.find("![attention_pareto_2](attention_pareto_2.svg)"), std::string::npos);
  const auto h1 = claims(verdicts({rs}), "H1");
  ASSERT_EQ(h1.size(), 2u);
  EXPECT_NE(h1[0].figures.find("run 32k"), std::string::npos) << h1[0].figures;
}

// A bad file beside the results is said in the section and as a warning, every claim on it "not available"; the
// report is written.
TEST(ReportAttention, BadFilesAreNotAvailable) {
  const std::string sel = original("selection.csv");
  const std::string bad_number = sel.substr(0, sel.find("0.944")) + "lots" + sel.substr(sel.find("0.944") + 5);
  struct Case {
    std::string name, file, text, needle;
  };
  const std::vector<Case> cases = {
      {"not_a_number", "selection.csv", bad_number, "selection.csv:2: column 'recall'"},
      {"unknown_arm", "selection.csv", "layer,head,arm,block,keep,budget,recall,out_error\n0,0,magic,64,0.5,2048,0.9,0.1\n",
       "selection.csv:2: column 'arm': 'magic'"},
      {"missing_column", "locality.csv", "layer,head,sink\n0,0,16\n", "missing column 'window'"},
      {"duplicate", "layer_entropy.csv", original("layer_entropy.csv") + "0,1,0.1\n", "layer_entropy.csv:6: the same row again"},
      {"mass_above_one", "locality.csv", "layer,head,sink,window,mass\n0,0,16,0,1.5\n", "locality.csv:2: column 'mass'"},
      {"bad_json", "meta.json", "{\"schema\": ", "meta.json"},
      {"not_ours", "meta.json", "{\"schema\": \"something else\"}", "meta.json: key 'schema'"},
      {"decode_disagrees", "needle_decode.csv",
       "arm,block,keep,budget,answer_tokens,matched_prefix,exact_match\ntoken,64,0.5,2048,3,2,1\n",
       "needle_decode.csv:2: exact_match 1 with 2 of 3"},
      {"decode_arm", "needle_decode.csv",
       "arm,block,keep,budget,answer_tokens,matched_prefix,exact_match\noracle,64,0.5,2048,3,3,1\n",
       "needle_decode.csv:2: column 'arm'"},
      {"context_type", "meta.json",
       "{\"schema\": \"kvfrontier attention quality v1\", \"source\": \"dump\", \"context\": \"long\"}", "key 'context'"},
  };
  for (const auto& c : cases) {
    const fs::path d = copy_with(c.name, c.file, c.text);
    const fs::path out = tmpdir(c.name + "_out");
    ReportOptions o;
    o.out_dir = out.string();
    o.charts = false;
    ReportResult res;
    ASSERT_NO_THROW(res = write_report({load_results(d.string())}, o)) << c.name;
    const std::string md = kvf_test::slurp(out / "report.md");
    EXPECT_NE(md.find("Not available: "), std::string::npos) << c.name;
    EXPECT_NE(md.find(md_text(c.needle)), std::string::npos) << c.name;
    ASSERT_EQ(res.warnings.size(), 1u) << c.name;
    EXPECT_NE(res.warnings[0].find(c.needle), std::string::npos) << c.name << ": " << res.warnings[0];
    for (const auto& v : claims(verdicts({load_results(d.string())}), "H"))
      EXPECT_EQ(v.verdict, "not available") << c.name;
  }
}
