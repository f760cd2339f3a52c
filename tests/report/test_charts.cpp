// Issue 15: the chart core. Small multiples (one panel per value of the plug-in's panel parameters, one shared
// legend with one colour per series in every panel), legends naming only the parameters that differ (the shared
// ones said once, under the chart and in it), reference lines drawn and labelled, log2 axes ticked in human units.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kvf/study_report.hpp"
#include "test_files.hpp"

using namespace kvf::report;
namespace fs = std::filesystem;

namespace {

Line series(const std::string& title, std::map<std::string, std::string> key, std::vector<std::pair<double, double>> pts) {
  Line l;
  l.title = title;
  l.key = std::move(key);
  l.pts = std::move(pts);
  return l;
}

Line ref(Line::Ref kind, const std::string& title, double v, std::map<std::string, std::string> key = {}) {
  Line l;
  l.ref = kind;
  l.title = title;
  l.key = std::move(key);
  l.pts = {{kind == Line::Ref::vertical ? v : 0, kind == Line::Ref::horizontal ? v : 0}};
  return l;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Two modes x (block, token) on one device: the shape of the access study's block/token chart.
Plot two_modes() {
  Plot p{"two_modes", "Latency", "context (tokens)", "us", true, true, {}, {}};
  p.xunit = AxisUnit::tokens;
  p.panel_by = {"device", "mode"};
  for (const char* mode : {"cold", "hot"})
    for (const char* arm : {"block", "token"})
      p.lines.push_back(series(arm, {{"device", "GPU"}, {"mode", mode}, {"dtype", "bf16"}, {"keep", "1/8"}},
                               {{4096, 10}, {65536, 20}, {262144, 40}}));
  p.lines.push_back(ref(Line::Ref::horizontal, "ceiling 3.08 TB/s", 50));  // no panel parameter: every panel
  p.lines.push_back(ref(Line::Ref::vertical, "knee", 100000, {{"device", "GPU"}, {"mode", "hot"}}));
  return p;
}

}  // namespace

TEST(Charts, LegendNamesOnlyWhatDiffers) {
  Plot p{"legend", "t", "x", "y", false, false, {}, {}};
  p.lines.push_back(series("gather", {{"device", "GPU"}, {"huge", "on"}, {"mode", "cold"}}, {{1, 1}, {2, 2}}));
  p.lines.push_back(series("gather", {{"device", "GPU"}, {"huge", "off"}, {"mode", "cold"}}, {{1, 2}}));
  p.lines.push_back(series("unkeyed title", {}, {{1, 3}}));
  p.lines.push_back(series("no points", {{"device", "CPU"}}, {}));  // not drawn: names nothing, fixes nothing
  const ChartLayout L = lay_out(p);
  ASSERT_EQ(L.panels.size(), 1u);
  EXPECT_EQ(L.panels[0].title, "");
  EXPECT_EQ(L.fixed, "device=GPU, mode=cold");
  EXPECT_EQ(L.panels[0].lines[0].title, "gather huge=on");
  EXPECT_EQ(L.panels[0].lines[1].title, "gather huge=off");
  EXPECT_EQ(L.panels[0].lines[2].title, "unkeyed title");
  // Nothing differs: the title alone names the series; no title and nothing differing names nothing.
  Plot one{"one", "t", "x", "y", false, false, {}, {}};
  one.lines.push_back(series("", {{"device", "GPU"}}, {{1, 1}}));
  EXPECT_EQ(lay_out(one).panels[0].lines[0].title, "");
  EXPECT_EQ(lay_out(one).fixed, "device=GPU");
  // The figure line says the shared parameters once, as report text.
  StudyReports none;
  std::vector<ResultSet> sets;
  ReportOptions o;
  ReportContext cx{none, sets, o};
  EXPECT_EQ(cx.chart(p), "![legend](legend.svg)\n\nEvery series: device=GPU, mode=cold.\n\n");
  ASSERT_EQ(cx.plots.size(), 1u);
  // and the chart itself, under its title
  const ChartFiles f = chart_files(p);
  EXPECT_NE(f.gp.find("set label 'every series: device=GPU, mode=cold' at screen 0.5"), std::string::npos) << f.gp;
  EXPECT_NE(f.gp.find("title 'gather huge=on'"), std::string::npos) << f.gp;
  // Only reference lines: nothing to draw.
  Plot refs{"refs", "t", "x", "y", false, false, {ref(Line::Ref::horizontal, "ceiling", 1)}, {}};
  EXPECT_EQ(cx.chart(refs), "");
}

TEST(Charts, PanelsSplitByTheParameterThatDiffers) {
  const Plot p = two_modes();
  const ChartLayout L = lay_out(p);
  ASSERT_EQ(L.panels.size(), 2u);
  EXPECT_EQ(L.panels[0].title, "mode=cold");
  EXPECT_EQ(L.panels[1].title, "mode=hot");
  // device is a panel parameter with one value: said once with the others, not in the panel titles
  EXPECT_EQ(L.fixed, "device=GPU, dtype=bf16, keep=1/8");
  for (const auto& pn : L.panels) {
    std::vector<std::string> titles;
    for (const auto& l : pn.lines) titles.push_back(l.title);
    // the panel's two series named by their titles alone, the ceiling in both, the knee in hot only
    const std::vector<std::string> want =
        pn.title == "mode=hot" ? std::vector<std::string>{"block", "token", "ceiling 3.08 TB/s", "knee"}
                               : std::vector<std::string>{"block", "token", "ceiling 3.08 TB/s"};
    EXPECT_EQ(titles, want) << pn.title;
  }
  // One value of the panel parameter: one plot, the value said with the shared ones.
  Plot cold = p;
  cold.lines.erase(std::remove_if(cold.lines.begin(), cold.lines.end(),
                                  [](const Line& l) { return l.key.count("mode") && l.key.at("mode") == "hot"; }),
                   cold.lines.end());
  const ChartLayout C = lay_out(cold);
  ASSERT_EQ(C.panels.size(), 1u);
  EXPECT_EQ(C.fixed, "device=GPU, dtype=bf16, keep=1/8, mode=cold");
  EXPECT_EQ(count(chart_files(cold).gp, "set multiplot"), 0u);
}

TEST(Charts, SmallMultiplesShareOneLegendWithOneColourPerSeries) {
  const ChartFiles f = chart_files(two_modes());
  // drawn twice (SVG, then PNG): a multiplot of two panels and a legend strip each time
  EXPECT_EQ(count(f.gp, "\nset multiplot\n"), 2u);
  EXPECT_EQ(count(f.gp, "unset multiplot\n"), 2u);
  EXPECT_EQ(count(f.gp, "set title 'mode=cold'"), 2u);
  EXPECT_EQ(count(f.gp, "set title 'mode=hot'"), 2u);
  // in the panels the series carry no legend entry and the same line type in both panels
  EXPECT_EQ(count(f.gp, "with linespoints lt 1 title ''"), 4u);  // block: 2 panels x 2 terminals
  EXPECT_EQ(count(f.gp, "with linespoints lt 2 title ''"), 4u);  // token
  // the legend strip names each once, with the panels' line types
  EXPECT_EQ(count(f.gp, "NaN with linespoints lt 1 title 'block'"), 2u);
  EXPECT_EQ(count(f.gp, "NaN with linespoints lt 2 title 'token'"), 2u);
  // the ceiling in both panels, labelled where it is drawn; the knee only in hot (inside its x range)
  EXPECT_EQ(count(f.gp, "50 with lines dt 2 lw 1.5 lc rgb 'gray30' notitle"), 4u);
  EXPECT_EQ(count(f.gp, "set label 'ceiling 3.08 TB/s' at graph 0.02, first 50"), 4u);
  EXPECT_EQ(count(f.gp, "set arrow from 100000, graph 0 to 100000, graph 1"), 2u);
  // the x axis in human units, the parameters every series shares under the title
  EXPECT_NE(f.gp.find("set xtics ('4K' 4096, "), std::string::npos) << f.gp;
  EXPECT_NE(f.gp.find("'256K' 262144)"), std::string::npos) << f.gp;
  EXPECT_NE(f.gp.find("set label 'every series: device=GPU, dtype=bf16, keep=1/8'"), std::string::npos);
  // 4 series x 3 points, each block its own index
  EXPECT_EQ(count(f.dat, "\n\n\n"), 4u);
  EXPECT_NE(f.gp.find("index 3 using 1:2"), std::string::npos);
}

TEST(Charts, ErrorBarsAndByteAxis) {
  Plot p{"err", "t", "run length", "GB/s", true, false, {}, {}};
  p.xunit = AxisUnit::bytes;
  Line l = series("ratio", {}, {{32, 1.0}, {65536, 2.0}});
  l.style = "yerrorlines";
  l.yerr = {{0.9, 1.1}, {1.5, 2.5}};
  p.lines.push_back(l);
  const ChartFiles f = chart_files(p);
  EXPECT_NE(f.dat.find("32 1 0.9 1.1\n65536 2 1.5 2.5\n"), std::string::npos) << f.dat;
  EXPECT_NE(f.gp.find("index 0 using 1:2:3:4 with yerrorlines title 'ratio'"), std::string::npos) << f.gp;
  // 32 B .. 64 KiB is 12 powers of two: at most 10 tics, every second one
  EXPECT_NE(f.gp.find("set xtics ('32 B' 32, '128 B' 128, '512 B' 512, '2 KiB' 2048, '8 KiB' 8192, '32 KiB' 32768)"),
            std::string::npos)
      << f.gp;
  EXPECT_THROW(chart_files(Plot{"bad name", "t", "x", "y", false, false, {l}, {}}), std::logic_error);
}

TEST(Charts, GnuplotDrawsSmallMultiplesWithoutAWarning) {
  if (std::system("gnuplot --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const fs::path dir = kvf_test::tmpdir("kvf_charts_test", "draw");
  for (const Plot& p : {two_modes(), Plot{"single", "t", "x", "y", true, false,
                                          {series("a", {{"k", "1"}}, {{256, 1}}), series("b", {{"k", "2"}}, {{256, 2}})},
                                          {}}}) {
    const ChartFiles f = chart_files(p);
    std::ofstream(dir / (p.name + ".dat")) << f.dat;
    std::ofstream(dir / (p.name + ".gp")) << f.gp;
    const std::string cmd = "cd '" + dir.string() + "' && gnuplot " + p.name + ".gp > " + p.name + ".log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << kvf_test::slurp(dir / (p.name + ".log"));
    // one x value gets a range around it, not gnuplot's "empty x range" warning
    EXPECT_EQ(kvf_test::slurp(dir / (p.name + ".log")), "") << p.name;
    for (const char* ext : {".svg", ".png"}) EXPECT_GT(fs::file_size(dir / (p.name + ext)), 1000u) << p.name << ext;
  }
  // two panels side by side: 52 px of title and shared parameters, 420 px of panels, a 44 px legend strip
  EXPECT_NE(kvf_test::slurp(dir / "two_modes.svg").find("width=\"960\" height=\"516\""), std::string::npos);
}
