// Issue 17: the Residency section of `kvf report` from the files `kvf residency --out` wrote (fixture:
// fixtures/gpu_residency/residency/, made by the command in fixtures/gpu_residency/README.md). The table's figures
// are the CSV's, read here independently of the plug-in; bad files are said, never crash the report.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "kvf/errors.hpp"
#include "kvf/report.hpp"
#include "kvf/residency_report.hpp"
#include "kvf/table.hpp"
#include "test_files.hpp"

using namespace kvf::report;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = fs::path(KVF_REPORT_FIXTURES) / "gpu_residency";

fs::path tmpdir(const std::string& name) { return kvf_test::tmpdir("kvf_residency_report_test", name); }

// A copy of the fixture whose residency.csv (or .json) holds `text`.
fs::path copy_with(const std::string& name, const std::string& file, const std::string& text) {
  return kvf_test::copy_with(kFixture, tmpdir(name), fs::path("residency") / file, text);
}

std::string markdown(const fs::path& dir, ReportOptions o = {}) {
  return render_markdown({load_results(dir.string())}, o, {});
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string c;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '|') {
      out.push_back(c.substr(c.find_first_not_of(' ') == std::string::npos ? 0 : c.find_first_not_of(' ')));
      while (!out.back().empty() && out.back().back() == ' ') out.back().pop_back();
      c.clear();
    } else {
      c += row[i];
    }
  }
  return out;
}

// The answer table's rows (policy -> cells), the lines after "**The answer at".
std::map<std::string, std::vector<std::string>> answer_rows(const std::string& md) {
  std::map<std::string, std::vector<std::string>> rows;
  const auto ls = lines_of(md);
  std::size_t i = 0;
  while (i < ls.size() && ls[i].rfind("**The answer at", 0) != 0) ++i;
  while (i < ls.size() && ls[i].rfind("| policy", 0) != 0) ++i;
  for (i += 2; i < ls.size() && !ls[i].empty() && ls[i][0] == '|'; ++i) {
    const auto c = cells(ls[i]);
    rows[c.at(0)] = c;
  }
  return rows;
}

std::string original(const std::string& file) { return kvf_test::slurp(kFixture / "residency" / file); }

}  // namespace

TEST(ReportResidency, ReadsTheFixture) {
  const auto r = residency::read_replay(kFixture / "residency", kFixture);
  EXPECT_EQ(r.model, "Llama-3.1-8B");
  EXPECT_EQ(r.gpu, "H100 SXM");
  EXPECT_EQ(r.policies(), (std::vector<std::string>{"lru", "lru-host", "cost", "oracle"}));
  EXPECT_EQ(r.budgets(), (std::vector<double>{4, 34, 64}));
  EXPECT_EQ(r.rows.size(), 12u);
  EXPECT_GT(r.requests, 0);
  EXPECT_GT(r.references, r.distinct_blocks);
  EXPECT_EQ(residency::find_replay(kFixture), kFixture / "residency");
  EXPECT_EQ(residency::find_replay(fs::path(KVF_REPORT_FIXTURES) / "gpu"), std::nullopt);
}

TEST(ReportResidency, ChosenBudget) {
  const std::vector<double> b{4, 34, 64}, even{1, 2, 3, 4};
  EXPECT_EQ(residency::chosen_budget(b, std::nullopt), 34);
  EXPECT_EQ(residency::chosen_budget(even, std::nullopt), 2);  // the lower middle
  EXPECT_EQ(residency::chosen_budget(b, 60.0), 64);
  EXPECT_EQ(residency::chosen_budget(b, 19.0), 4);  // a tie goes to the smaller
  EXPECT_EQ(residency::chosen_budget(b, 1000.0), 64);
}

// Every cell of the answer table is the CSV's figure at the chosen budget (read here with the plain CSV reader).
TEST(ReportResidency, TableEqualsTheCsv) {
  for (const double budget : {4.0, 34.0, 64.0}) {
    ReportOptions o;
    if (budget != 34) o.residency_hbm_gib = budget;  // 34: the default, the middle of the sweep
    const std::string md = markdown(kFixture, o);
    ASSERT_NE(md.find("**The answer at " + fmt(budget) + " GiB of HBM**"), std::string::npos) << md;
    const auto rows = answer_rows(md);
    const kvf::CsvTable t = kvf::read_csv_table((kFixture / "residency" / "residency.csv").string());
    std::size_t seen = 0;
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      if (std::stod(t.at(i, "hbm_gib")) != budget) continue;
      const std::string name = t.at(i, "policy") + (t.at(i, "offline") == "true" ? " (offline, HBM only)" : "");
      ASSERT_TRUE(rows.count(name)) << name << "\n" << md;
      const auto& c = rows.at(name);
      auto num = [&](const char* col) { return std::stod(t.at(i, col)); };
      EXPECT_EQ(c.at(1), fmt(num("host_gib")));
      EXPECT_EQ(c.at(2), fmt(num("hit_rate_hbm")));
      EXPECT_EQ(c.at(3), fmt(num("hit_rate_host")));
      EXPECT_EQ(c.at(4), fmt(100 * num("prefill_avoided")) + "%");
      EXPECT_EQ(c.at(5), fmt(num("prefill_avoided_s")));
      EXPECT_EQ(c.at(6), fmt(num("prefill_total_s")));
      EXPECT_EQ(c.at(7), fmt(num("added_p50_us") / 1e3));
      EXPECT_EQ(c.at(8), fmt(num("added_p99_us") / 1e3));
      EXPECT_EQ(c.at(9), fmt(num("host_link_bytes") / 1e9));
      EXPECT_EQ(c.at(10), "-");  // the fixture predates host_link_demote_bytes
      EXPECT_EQ(rows.at("no cache").at(8), fmt(num("nocache_p99_us") / 1e3));
      ++seen;
    }
    EXPECT_EQ(seen, 4u);
    EXPECT_EQ(rows.size(), 5u);  // four policies and no cache
  }
}

TEST(ReportResidency, SaysTheSourcesAndTheComparison) {
  const std::string md = markdown(kFixture);
  EXPECT_NE(md.find("Residency: prefix-cache policies"), std::string::npos);
  EXPECT_NE(md.find("prefill **model**"), std::string::npos) << md;
  EXPECT_NE(md.find("host fetch **model**"), std::string::npos);
  EXPECT_NE(md.find("For Llama-3.1-8B on H100 SXM with 34 GiB of HBM"), std::string::npos);
  // The latency a request sees leads (prefill alone had called a policy better that added more through a slow tier).
  EXPECT_NE(md.find("less latency than lru (123.7 s against 177.5 s over the trace: prefill, fetches and restores)"),
            std::string::npos) << md;
  EXPECT_NE(md.find("(cost compresses to kv-int8, lru keeps bf16 K/V, all layers: `kvf residency --compress-to none`"),
            std::string::npos) << md;
  EXPECT_NE(md.find("against lru-host: cost **"), std::string::npos);
  EXPECT_NE(md.find("![residency_latency](residency_latency.svg)"), std::string::npos);
  EXPECT_NE(md.find("![residency_hits](residency_hits.svg)"), std::string::npos);
}

TEST(ReportResidency, NearestBudgetIsSaid) {
  ReportOptions o;
  o.residency_hbm_gib = 50;
  const std::string md = markdown(kFixture, o);
  EXPECT_NE(md.find("**The answer at 64 GiB of HBM** (`--residency-hbm-gib 50` is not a swept budget"),
            std::string::npos);
}

TEST(ReportResidency, ChartFilesAreWritten) {
  const fs::path out = tmpdir("charts");
  ReportOptions o;
  o.out_dir = out.string();
  o.charts = false;
  const auto res = write_report({load_results(kFixture.string())}, o);
  for (const char* f : {"residency_latency.dat", "residency_latency.gp", "residency_hits.dat", "residency_hits.gp"})
    EXPECT_GT(fs::file_size(out / f), 0u) << f;
  const std::string gp = kvf_test::slurp(out / "residency_latency.gp");
  EXPECT_NE(gp.find("'no cache p99'"), std::string::npos) << gp;
  EXPECT_NE(gp.find("'cost'"), std::string::npos);
  // Every policy x budget point is in the data, p50 and p99: 4 policies x 3 budgets x 2.
  const std::string dat = kvf_test::slurp(out / "residency_latency.dat");
  const kvf::CsvTable t = kvf::read_csv_table((kFixture / "residency" / "residency.csv").string());
  EXPECT_NE(dat.find(fmt(std::stod(t.at(0, "added_p99_us")) / 1e3)), std::string::npos) << dat;
  EXPECT_TRUE(res.warnings.empty());
}

// Columns are read by name: others (added by the simulator later) change nothing.
// The demotes' bytes get their own column; compress passes (off the request path) that cost more GPU time than
// cost's gain in summed added latency are said under that verdict line.
TEST(ReportResidency, DemotesAndCompressPassesAreShown) {
  const auto ls = lines_of(original("residency.csv"));
  std::vector<std::string> head;
  {
    std::stringstream in(ls.at(0));
    for (std::string x; std::getline(in, x, ',');) head.push_back(x);
  }
  const auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(head.begin(), head.end(), name) - head.begin());
  };
  ASSERT_LT(col("compress_total_s"), head.size());
  std::string out = ls.at(0) + ",host_link_demote_bytes\n";
  for (std::size_t i = 1; i < ls.size(); ++i) {
    std::vector<std::string> f;
    std::stringstream in(ls[i]);
    for (std::string x; std::getline(in, x, ',');) f.push_back(x);
    if (f.at(col("policy")) == "cost") f.at(col("compress_total_s")) = "1e6";
    std::string joined;
    for (std::size_t j = 0; j < f.size(); ++j) joined += (j ? "," : "") + f[j];
    out += joined + ",2e9\n";
  }
  const std::string md = markdown(copy_with("demotes_compress", "residency.csv", out));
  EXPECT_EQ(answer_rows(md).at("lru-host").at(10), "2") << md;
  EXPECT_NE(md.find("cost's compress passes (GPU time off the request path, in no figure here) took more than its "
                    "gain at "),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("of compress passes against a gain of"), std::string::npos);
  // The fixture's compress passes (2.6-2.9 s) are far below cost's gains
  EXPECT_NE(markdown(kFixture).find("took less than its gain at every budget where it wins"), std::string::npos);
}

// residency.csv's oracle_bound_hit_rate (where the oracle at a host-tier policy's blocks bounds its reuse): each
// bounded row's reuse against it; rows with an empty cell have no line, and files before the column none at all.
TEST(ReportResidency, ReuseAgainstTheOracleBound) {
  EXPECT_EQ(markdown(kFixture).find("Reuse against its bound"), std::string::npos);
  std::string out;
  bool header = true;
  for (const auto& l : lines_of(original("residency.csv"))) {
    const bool bounded = l.rfind("lru-host,", 0) == 0 && l.find(",4,256,") != std::string::npos;
    out += l + (header ? ",oracle_bound_hit_rate" : bounded ? ",0.6" : ",") + "\n";
    header = false;
  }
  const std::string md = markdown(copy_with("oracle_bound", "residency.csv", out));
  EXPECT_NE(md.find("Reuse against its bound"), std::string::npos) << md;
  EXPECT_NE(md.find("- 4 GiB HBM + 256 GiB host: lru-host reuses 0.3513 of block references, the oracle 0.6 (58.55% "
                    "of it)"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find(": cost reuses"), std::string::npos) << md;  // an empty cell: no bound
}

TEST(ReportResidency, UnknownColumnsAreIgnored) {
  std::string csv = original("residency.csv");
  std::string out;
  bool header = true;
  for (const auto& l : lines_of(csv)) {
    out += (header ? "occupancy_int8_blocks," : "17,") + l + (header ? ",compressed_hits" : ",3") + "\n";
    header = false;
  }
  const fs::path d = copy_with("extra_columns", "residency.csv", out);
  EXPECT_EQ(answer_rows(markdown(d)), answer_rows(markdown(kFixture)));
}

// A bad file is said in the section (file:line, column) and as a warning; the rest of the report stands.
TEST(ReportResidency, BadFilesAreNotAvailableNamingFileAndLine) {
  const std::string csv = original("residency.csv");
  // The CSV with one field replaced (the fixture's fields hold no quoted commas).
  auto set_field = [&](int line, const std::string& column, const std::string& value) {
    auto ls = lines_of(csv);
    auto split = [](const std::string& l) {
      std::vector<std::string> f;
      std::stringstream in(l);
      for (std::string x; std::getline(in, x, ',');) f.push_back(x);
      return f;
    };
    const auto head = split(ls.at(0));
    auto f = split(ls.at(line - 1));
    const auto col = std::find(head.begin(), head.end(), column) - head.begin();
    EXPECT_LT(static_cast<std::size_t>(col), head.size()) << column;
    f.at(col) = value;
    std::string joined, out;
    for (std::size_t i = 0; i < f.size(); ++i) joined += (i ? "," : "") + f[i];
    ls[line - 1] = joined;
    for (const auto& l : ls) out += l + "\n";
    return out;
  };
  const auto first_row = lines_of(csv).at(1);
  struct Case {
    std::string name, file, text, needle;
  };
  const std::vector<Case> cases = {
      {"not_a_number", "residency.csv", set_field(3, "added_p99_us", "12ms"), "residency.csv:3: column 'added_p99_us'"},
      {"infinite", "residency.csv", set_field(4, "prefill_total_s", "inf"), "residency.csv:4: column 'prefill_total_s'"},
      {"empty_policy", "residency.csv", set_field(5, "policy", ""), "residency.csv:5: column 'policy': empty"},
      {"missing_column", "residency.csv", "policy,hbm_gib\nlru,4\n", "missing column 'host_gib'"},
      {"no_rows", "residency.csv", lines_of(csv).at(0) + "\n", "residency.csv: no rows"},
      {"duplicate", "residency.csv", csv + first_row + "\n", "residency.csv:14: policy 'lru' at 4 GiB again (first at"},
      {"hit_rate_out_of_range", "residency.csv", set_field(2, "hit_rate_hbm", "1.5"), "residency.csv:2: column 'hit_rate_hbm'"},
      {"budget_zero", "residency.csv", set_field(2, "hbm_gib", "0"), "residency.csv:2: column 'hbm_gib'"},
      {"bad_json", "residency.json", "{\"model\": ", "residency.json"},
      {"json_no_trace", "residency.json", "{\"model\": \"m\", \"gpu\": \"g\"}", "residency.json: key 'trace'"},
      {"json_count_type", "residency.json",
       "{\"model\": \"m\", \"gpu\": \"g\", \"trace\": {\"requests\": \"many\"}}", "trace.requests"},
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
    EXPECT_NE(md.find(md_text(c.needle)), std::string::npos) << c.name << "\n" << md.substr(md.find("Residency"), 600);
    ASSERT_EQ(res.warnings.size(), 1u) << c.name;
    EXPECT_NE(res.warnings[0].find(c.needle), std::string::npos) << c.name << ": " << res.warnings[0];
    EXPECT_FALSE(fs::exists(out / "residency_latency.dat")) << c.name;
  }
}

// The requests of the CSV and the JSON's trace must be one replay's; a torn last row is left out and named.
TEST(ReportResidency, MismatchedFilesAndTornRows) {
  const std::string csv = original("residency.csv");
  const kvf::CsvTable t = kvf::parse_csv_text(csv, "residency.csv");
  const std::string requests = t.at(0, "requests");
  std::string json = original("residency.json");
  const std::string key = "\"requests\": " + requests;
  ASSERT_NE(json.find(key), std::string::npos);
  json.replace(json.find(key), key.size(), "\"requests\": 7");
  const fs::path d = copy_with("mismatch", "residency.json", json);
  EXPECT_THROW(residency::read_replay(d / "residency", d), kvf::UsageError);
  try {
    residency::read_replay(d / "residency", d);
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("residency.csv:2: column 'requests'"), std::string::npos) << e.what();
  }
  const fs::path torn = copy_with("torn", "residency.csv", csv + "lru,false,128");
  const auto r = residency::read_replay(torn / "residency", torn);
  EXPECT_EQ(r.rows.size(), 12u);
  ASSERT_EQ(r.read_around.size(), 1u);
  EXPECT_NE(r.read_around[0].find("torn"), std::string::npos);
}

// Without a replay the report has no Residency section and the same numbering as before (the goldens of
// tests/studies hold whole reports of directories without one).
TEST(ReportResidency, NoReplayNoSection) {
  const std::string md = markdown(fs::path(KVF_REPORT_FIXTURES) / "gpu");
  EXPECT_EQ(md.find("Residency"), std::string::npos);
  EXPECT_EQ(md.find("residency_"), std::string::npos);
}
