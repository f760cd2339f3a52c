// Issue 12: results directories are untrusted input. Text from them (device names, case names, parameters)
// must never become gnuplot commands, Markdown or HTML markup; the report stays linear in rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvf/errors.hpp"
#include "kvf/report.hpp"
#include "test_files.hpp"

using namespace kvf::report;
namespace fs = std::filesystem;

namespace {

using kvf_test::slurp;
fs::path tmpdir(const std::string& name) { return kvf_test::tmpdir("kvf_untrusted_test", name); }

bool have_gnuplot() { return std::system("gnuplot --version > /dev/null 2>&1") == 0; }

// Payloads an attacker would put in a device name, a case name or a parameter. Each names a marker file
// that exists afterwards only if gnuplot (or a shell it started) ran the payload.
struct Payloads {
  fs::path markers;
  std::vector<std::string> texts;
  std::vector<fs::path> files;
};

Payloads payloads(const fs::path& markers) {
  Payloads p;
  p.markers = markers;
  auto m = [&](const std::string& name) {
    p.files.push_back(markers / name);
    return (markers / name).string();
  };
  p.texts = {
      "`touch " + m("backquote") + "`",
      "$(touch " + m("dollar") + ")",
      "dev\n!touch " + m("bang") + "\n",
      "dev\nsystem \"touch " + m("system_dq") + "\"\n",
      "dev'\nsystem('touch " + m("system_sq") + "')\n#",
      "dev\" ; system(\"touch " + m("quote_break") + "\") ; \"",
      "dev\r!touch " + m("cr") + "\r",
      "dev\\\n!touch " + m("continuation"),
      "'; `touch " + m("mixed") + "`; '",
      "<script>alert(1)</script>",
      "a|b*c_d[e](f)#g&h~i\\j<k>",
      std::string("ctl\x01\x1b[31m\x7f") + "\xe2\x80\xae" + "bidi \xff bad utf8",
  };
  return p;
}

// A result set whose device label, case names and parameters all hold payload text; it has access-gather
// rows (chart "gather"), stream rows (chart "predicted") and idleness counters (charts "idleness" and
// "pm_sampling"), so every chart builder sees them.
ResultSet hostile_set(const std::vector<std::string>& texts, const std::string& dir) {
  ResultSet rs;
  rs.dir = dir;
  rs.device = texts.at(0) + " " + texts.at(2);
  rs.backend = "cuda";
  rs.label = texts.at(0) + texts.at(2) + texts.at(9) + " (cuda)";
  rs.has_meta = true;
  rs.suite_version = "0.1.0";
  rs.git_sha = texts.at(9);
  rs.thread_placement = texts.at(1) + texts.at(10) + texts.at(9);  // meta.json kvf_run.thread_placement
  rs.missing = {"study " + texts.at(3) + ": status 'running'"};
  rs.warnings = {"cases.csv:7: torn last row " + texts.at(9) + " left out"};
  int n = 0;
  for (const auto& t : texts) {
    for (double run : {64.0, 4096.0}) {
      CaseRow r;
      r.study = "access";
      r.case_name = "gather/" + t + "/" + std::to_string(n++);
      r.backend = "cuda";
      r.device = rs.device;
      r.mode = "cold";
      r.samples = 5;
      r.median_s = 1e-3;
      r.gbps = run / 100;
      r.bytes = 1e6;
      r.params = {{"part", "gather"}, {"arm", t}, {"huge", t}, {"run_bytes", std::to_string(run)}};
      rs.cases.push_back(r);
    }
    CaseRow s;
    s.study = "stream";
    s.case_name = "read/" + t;
    s.backend = "cuda";
    s.mode = "cold";
    s.samples = 5;
    s.median_s = 1e-3;
    s.bytes = 1e9;
    s.gbps = 1000;
    s.params = {{"op", "read"}};
    rs.cases.push_back(s);
    CaseRow c;
    c.study = "idleness";
    c.case_name = "decode/" + t;  // the idleness chart draws decode cases, keyed by their model and layers
    c.backend = "cuda";
    c.mode = "cold";
    c.samples = 5;
    c.median_s = 1e-3;
    c.params = {{"arm", "corun"}, {"batch", std::to_string(n)}, {"model", t}, {"layers", t}};
    rs.cases.push_back(c);
    for (int k = 0; k < 3; ++k) {
      CounterRow ct;
      ct.study = "idleness";
      ct.case_name = c.case_name;
      ct.source = "range";
      ct.metric = "kvf:idle_sm_pct";
      ct.value = 50 + k;
      rs.counters.push_back(ct);
      CounterRow pm = ct;
      pm.source = "pm_sampling";
      pm.metric = t;  // a metric name from counters.csv: input text too
      pm.t_start_ns = 1e6 * (n + k);
      rs.counters.push_back(pm);
    }
  }
  rs.has_counters = true;
  rs.studies_run = {"access", "stream", "idleness"};
  return rs;
}

// The .gp text outside single-quoted strings, line by line; fails the test when a string is left open at a
// line end (a line break inside a string) or when a double quote or backquote appears anywhere.
std::vector<std::string> gp_code_outside_strings(const std::string& gp, const std::string& file) {
  std::vector<std::string> code;
  std::istringstream in(gp);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("#", 0) == 0) {
      EXPECT_EQ(line.find('`'), std::string::npos) << file << ":" << n;
      continue;
    }
    std::string outside;
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      EXPECT_NE(c, '`') << file << ":" << n << ": " << line;
      EXPECT_NE(c, '\r') << file << ":" << n;
      if (quoted) {
        if (c == '\'' && i + 1 < line.size() && line[i + 1] == '\'') ++i;  // '' inside '...'
        else if (c == '\'') quoted = false;
      } else if (c == '\'') {
        quoted = true;
      } else {
        EXPECT_NE(c, '"') << file << ":" << n << ": a double-quoted string: " << line;
        outside += c;
      }
    }
    EXPECT_FALSE(quoted) << file << ":" << n << ": a string is still open at the line end: " << line;
    code.push_back(outside);
  }
  return code;
}

}  // namespace

// ------------------------------------------------------------------------------------------ the escapers
TEST(TextSafety, PrintableTextDropsControlsAndCaps) {
  EXPECT_EQ(printable_text("a\nb\rc\td", 100), "a b c d");
  EXPECT_EQ(printable_text(std::string("x\x01y\x7fz", 5), 100), "x?y?z");
  EXPECT_EQ(printable_text("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", 100), "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac");  // letters kept
  EXPECT_EQ(printable_text("\xff\xc0\xaf", 100), "???");                          // invalid, overlong
  EXPECT_EQ(printable_text("a\xe2\x80\xae" "b\xe2\x80\xa8" "c\xc2\x85", 100), "a?b c?");  // bidi override, LS, NEL
  EXPECT_EQ(printable_text("\xed\xa0\x80", 100), "???");                          // a surrogate is not UTF-8
  EXPECT_EQ(printable_text(std::string(300, 'x'), 200), std::string(200, 'x') + "...");
  EXPECT_EQ(printable_text(std::string(200, 'x'), 200), std::string(200, 'x'));
  EXPECT_EQ(printable_text("\xc3\xa9\xc3\xa9\xc3\xa9", 2), "\xc3\xa9\xc3\xa9...");  // counted in characters
}

TEST(TextSafety, GnuplotQuoteIsSingleQuotedAndInert) {
  EXPECT_EQ(gnuplot_quote("H100"), "'H100'");
  EXPECT_EQ(gnuplot_quote("it's"), "'it''s'");
  // a leading quote: gnuplot reads '' just after the opening quote as an empty string, the rest as code
  EXPECT_EQ(gnuplot_quote("'; system('x'); '"), "' ''; system(''x''); '''");
  EXPECT_EQ(gnuplot_quote("`touch x`"), "'?touch x?'");
  EXPECT_EQ(gnuplot_quote("a\nsystem \"x\""), "'a system \"x\"'");
  EXPECT_EQ(gnuplot_quote("a\\"), "'a\\'");  // no escapes in '...': a trailing backslash is text
  EXPECT_EQ(gnuplot_quote(std::string(500, 'y')).size(), 2 + 200 + 3u);
  EXPECT_EQ(gnuplot_data_label("say \"hi\" # `x` \\n\n"), "\"say 'hi' ? ?x? ?n \"");
}

TEST(TextSafety, MarkdownAndHtml) {
  EXPECT_EQ(md_text("a|b*c_d[e]<f>#g&h~i\\j`k"), "a|b\\*c\\_d\\[e\\]\\<f\\>\\#g\\&h\\~i\\\\j\\`k");
  EXPECT_EQ(md_text("line1\nline2"), "line1 line2");
  EXPECT_EQ(html_escape("<a href=\"x\" title='y'>&</a>"),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
}

// ------------------------------------------------------------------------------------------ gnuplot
TEST(Untrusted, ChartFilesHoldNoCodeFromInput) {
  const fs::path root = tmpdir("gp_text");
  const Payloads p = payloads(root / "markers");
  ReportOptions o;
  o.charts = false;
  o.out_dir = (root / "report").string();
  const auto res = write_report({hostile_set(p.texts, (root / "in").string())}, o);
  std::size_t gp_files = 0;
  for (const auto& e : fs::directory_iterator(o.out_dir)) {
    const std::string name = e.path().filename().string();
    const std::string text = slurp(e.path());
    if (e.path().extension() == ".gp") {
      ++gp_files;
      for (const auto& code : gp_code_outside_strings(text, name)) {
        EXPECT_EQ(code.find("system"), std::string::npos) << name << ": " << code;
        EXPECT_EQ(code.find('!'), std::string::npos) << name << ": " << code;
        EXPECT_EQ(code.find("touch"), std::string::npos) << name << ": " << code;
      }
      // set output names a file the report named itself
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("set output", 0) != 0 || line == "set output") continue;
        EXPECT_TRUE(line == "set output '" + e.path().stem().string() + ".svg'" ||
                    line == "set output '" + e.path().stem().string() + ".png'")
            << line;
      }
    } else if (e.path().extension() == ".dat") {
      // data files: comment lines, blank separators and numbers only (no label column in these charts)
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) {
        EXPECT_EQ(line.find('`'), std::string::npos) << name;
        EXPECT_EQ(line.find('\r'), std::string::npos) << name;
        if (line.empty() || line[0] == '#') continue;
        EXPECT_EQ(line.find_first_not_of("0123456789.e+- "), std::string::npos) << name << ": " << line;
      }
    }
  }
  EXPECT_GE(gp_files, 4u);  // gather, predicted, idleness, pm_sampling at least
  EXPECT_FALSE(res.gnuplot_ran);
}

TEST(Untrusted, GnuplotRunsNoPayload) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed (apt-get install gnuplot-nox): the run half is not tested";
  const fs::path root = tmpdir("gp_run");
  const Payloads p = payloads(root / "markers");
  fs::create_directories(p.markers);
  ReportOptions o;
  o.out_dir = (root / "report").string();
  const auto res = write_report({hostile_set(p.texts, (root / "in").string())}, o);
  // gnuplot ran every chart to the end (a syntax error would stop a script before a later payload)
  EXPECT_TRUE(res.gnuplot_ran);
  EXPECT_TRUE(res.warnings.empty()) << res.warnings.front() << "\n" << slurp(fs::path(o.out_dir) / "gnuplot.log");
  for (const auto& f : p.files) EXPECT_FALSE(fs::exists(f)) << f << ": a payload ran";
  EXPECT_TRUE(fs::is_empty(p.markers));
  // And the same .gp files run by hand (what --no-charts invites) run nothing either.
  for (const auto& e : fs::directory_iterator(o.out_dir))
    if (e.path().extension() == ".gp") {
      const std::string cmd = "cd '" + o.out_dir + "' && gnuplot '" + e.path().filename().string() + "' > /dev/null 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << e.path();
    }
  EXPECT_TRUE(fs::is_empty(p.markers));
}

// The loader's way in: device names from meta.json and the device column of cases.csv.
TEST(Untrusted, DeviceNameFromMetaAndCasesRunsNothing) {
  const fs::path root = tmpdir("gp_dir");
  const fs::path marker = root / "pwned";
  const fs::path dir = root / "results";
  fs::create_directories(dir);
  const std::string payload = "`touch " + marker.string() + "`\\n!touch " + marker.string();
  std::ofstream(dir / "meta.json") << R"({"suite_version": "0.1.0", "device": {"name": ")" << payload
                                   << R"(", "backend": "cpu"}, "studies": {"access": {"status": "complete"}}})";
  std::ofstream cases(dir / "cases.csv");
  cases << "study,case,backend,device,mode,samples,median_s,gbps,part,arm,huge,run_bytes\n";
  for (int rb : {64, 4096})
    cases << "access,gather/" << rb << ",cpu,\"`touch " << marker.string() << "`\n!touch " << marker.string()
          << "\",cold,5,0.001," << rb / 100.0 << ",gather,\"$(touch " << marker.string() << ")\",on," << rb << "\n";
  cases.close();
  const auto sets = load_all({dir.string()});
  ReportOptions o;
  o.charts = have_gnuplot();
  const auto res = write_report(sets, o);  // default: DIR/report
  EXPECT_FALSE(fs::exists(marker));
  const std::string gp = slurp(dir / "report" / "gather.gp");
  EXPECT_EQ(gp.find('`'), std::string::npos) << gp;
  // the device is the same in every series: said once, under the title
  EXPECT_NE(gp.find("set label 'every series: device=?touch "), std::string::npos) << gp;
  const std::string md = slurp(dir / "report" / "report.md");
  EXPECT_EQ(md.find("\n!touch"), std::string::npos);
  // every backquote of the payload is escaped (literal text), none opens a code span
  for (auto at = md.find("`touch"); at != std::string::npos; at = md.find("`touch", at + 1))
    EXPECT_EQ(md[at - 1], '\\') << md.substr(at - 20, 60);
}

// ------------------------------------------------------------------------------------------ markdown, html
TEST(Untrusted, MarkdownAndHtmlEscapeInputText) {
  const fs::path root = tmpdir("md");
  const Payloads p = payloads(root / "markers");
  ReportOptions o;
  o.charts = false;
  o.out_dir = (root / "report").string();
  write_report({hostile_set(p.texts, (root / "in").string())}, o);
  const std::string md = slurp(fs::path(o.out_dir) / "report.md");
  const std::string html = slurp(fs::path(o.out_dir) / "report.html");
  for (const std::string& raw : {std::string("<script>"), std::string("</script>")}) {
    EXPECT_EQ(md.find(raw), std::string::npos) << raw;
    EXPECT_EQ(html.find(raw), std::string::npos) << raw;
  }
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  // No input text starts a line (a heading, a list item, a figure, a table row of its own).
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) {
    EXPECT_NE(line.rfind("!touch", 0), 0u) << line;
    EXPECT_NE(line.rfind("system", 0), 0u) << line;
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
  }
  // The inputs table keeps its 13 columns with | in the label and the thread placement: 14 unescaped bars per row.
  const auto at = md.find("| 1 | ");
  ASSERT_NE(at, std::string::npos);
  const std::string row = md.substr(at, md.find('\n', at) - at);
  std::size_t bars = 0;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] == '|' && (i == 0 || row[i - 1] != '\\')) ++bars;
  EXPECT_EQ(bars, 14u) << row;
  // The warnings the loader read around are listed beside what is missing.
  EXPECT_NE(md.find("### Input warnings"), std::string::npos);
  EXPECT_NE(md.find("cases.csv:7: torn last row \\<script\\>alert(1)\\</script\\> left out"), std::string::npos);
  EXPECT_NE(html.find("cases.csv:7: torn last row &lt;script&gt;alert(1)&lt;/script&gt; left out"), std::string::npos);
  // html: the escaped Markdown renders back to the text (no stray backslashes, no markup)
  EXPECT_NE(html.find("a|b*c_d[e](f)#g&amp;h~i\\j&lt;k&gt;"), std::string::npos);
}

TEST(Untrusted, HtmlInlinesOnlyChartsDrawnNow) {
  const fs::path root = tmpdir("stale");
  const fs::path out = root / "report";
  fs::create_directories(out);
  // A results directory shared with its report/ folder: a planted SVG must not be inlined.
  std::ofstream(out / "gather.svg") << "<svg><script>alert('planted')</script></svg>";
  const Payloads p = payloads(root / "markers");
  ReportOptions o;
  o.charts = false;
  o.out_dir = out.string();
  write_report({hostile_set(p.texts, (root / "in").string())}, o);
  const std::string html = slurp(out / "report.html");
  EXPECT_EQ(html.find("planted"), std::string::npos);
  EXPECT_NE(html.find("chart gather.svg not drawn"), std::string::npos);
  EXPECT_FALSE(fs::exists(out / "gather.svg"));  // stale chart removed with its .gp rewritten
}

TEST(Untrusted, PlantedSymlinksAreNotFollowed) {
  const fs::path root = tmpdir("links");
  const fs::path dir = root / "results";
  fs::create_directories(dir / "report");
  std::ofstream(dir / "cases.csv") << "study,case,backend,device,mode,samples,median_s\nstream,read,cpu,cpu,cold,5,0.001\n";
  const fs::path victim = root / "victim.txt";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, dir / "report" / "report.md");
  fs::create_symlink(victim, dir / "report" / "gnuplot.log");
  ReportOptions o;
  o.charts = false;
  write_report(load_all({dir.string()}), o);
  EXPECT_EQ(slurp(victim), "keep me");
  EXPECT_FALSE(fs::is_symlink(dir / "report" / "report.md"));
  // The default report directory itself a symlink: refused (exit 2), nothing written through it.
  const fs::path elsewhere = root / "elsewhere";
  fs::create_directories(elsewhere);
  fs::remove_all(dir / "report");
  fs::create_directory_symlink(elsewhere, dir / "report");
  try {
    write_report(load_all({dir.string()}), o);
    ADD_FAILURE() << "no UsageError";
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is a symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(elsewhere));
}

// ------------------------------------------------------------------------------------------ scale
// 100,000 case rows (idleness co-run rows: the ones the issue measured growing quadratically, each looking
// up its alone rows) and 30,000 counter rows. No time limit here (timed tests are flaky on shared CI);
// docs/report.md states the measured rows per second. The report must finish and count every row.
TEST(Scale, HundredThousandRows) {
  const fs::path dir = tmpdir("scale") / "results";
  fs::create_directories(dir);
  {
    std::ofstream m(dir / "meta.json");
    m << R"({"suite_version": "0.1.0", "device": {"name": "NVIDIA H100 80GB HBM3", "backend": "cuda",
            "llc_bytes": 52428800, "compute_units": 132}, "studies": {"idleness": {"status": "complete"}}})";
    std::ofstream c(dir / "cases.csv");
    c << "study,case,backend,device,mode,samples,median_s,q1_s,q3_s,bytes,flops,gbps,tflops,throttled_samples,note,"
         "arm,model,batch,context,layers,background\n";
    const char* bgs[] = {"none", "recompute", "recompute_alone", "green_none", "green_recompute"};
    std::ofstream k(dir / "counters.csv");
    k << "study,case,source,metric,value,range_index\n";
    for (int i = 0; i < 100000; ++i) {
      const int batch = 1 << (i % 8), ctx = 1024 << ((i / 8) % 6), layers = 1 + (i / 48) % 4;
      const std::string bg = bgs[(i / 192) % 5];
      // a quarter named as decode steps: the idleness chart draws those
      const std::string name = std::string(i % 4 ? "corun" : "decode") + "/Llama-3.1-8B/B" + std::to_string(batch) + "/C" + std::to_string(ctx) + "/L" +
                               std::to_string(layers) + "/bg_" + bg + "/r" + std::to_string(i);
      const double t = 1e-3 * (1 + i % 7);
      c << "idleness," << name << ",cuda,NVIDIA H100 80GB HBM3," << (i % 2 ? "hot" : "cold") << ",5," << t << ","
        << t * 0.9 << "," << t * 1.1 << "," << 1e9 + i << "," << 2e12 << ",,,0,\"decode, co-run\",corun,Llama-3.1-8B,"
        << batch << "," << ctx << "," << layers << "," << bg << "\n";
      if (i % 10 < 3) k << "idleness," << name << ",range,kvf:idle_sm_pct," << 40 + i % 50 << "," << i % 10 << "\n";
    }
  }
  const auto sets = load_all({dir.string()});
  ASSERT_EQ(sets.at(0).cases.size(), 100000u);
  ReportOptions o;
  o.charts = false;
  const auto res = write_report(sets, o);
  const std::string md = slurp(dir / "report" / "report.md");
  EXPECT_NE(md.find("| 100000 | missing | 30000 |"), std::string::npos);
  EXPECT_NE(md.find("co-run model (bandwidth sharing)"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "report" / "predicted.dat"));
  EXPECT_TRUE(fs::exists(dir / "report" / "idleness.dat"));
}
