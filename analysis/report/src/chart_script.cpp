// A Plot -> the NAME.dat and NAME.gp texts: its panels (small multiples with one shared legend), series named
// by the parameters that differ, reference lines labelled where they are drawn, log2 axes ticked in human units.
// Every text reaches the .gp file through gnuplot_quote, every datum through the .dat file.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>

#include "internal.hpp"

namespace kvf::report {

namespace {

bool is_series(const Line& l) { return l.ref == Line::Ref::none && !l.pts.empty(); }

// The panel a line belongs to: its values of the panel parameters; nullopt when it has none of them (then it
// is drawn in every panel).
std::optional<std::map<std::string, std::string>> panel_of(const Line& l, const std::vector<std::string>& by) {
  std::map<std::string, std::string> id;
  bool any = false;
  for (const auto& k : by) {
    const auto it = l.key.find(k);
    any = any || it != l.key.end();
    id[k] = it == l.key.end() ? "-" : it->second;
  }
  if (!any) return std::nullopt;
  return id;
}

}  // namespace

ChartLayout lay_out(const Plot& p) {
  ChartLayout out;
  // Panels in the order the series first name them.
  std::vector<std::map<std::string, std::string>> ids;
  for (const auto& l : p.lines)
    if (is_series(l))
      if (auto id = panel_of(l, p.panel_by); id && std::find(ids.begin(), ids.end(), *id) == ids.end())
        ids.push_back(*id);
  const bool split = ids.size() > 1;
  // Panels are titled by the panel parameters that differ between them; series by the other parameters that
  // differ between them. What is left is the same in every series.
  const md::Grouping pg = md::group_params(ids);
  std::vector<std::map<std::string, std::string>> keys;
  for (const auto& l : p.lines)
    if (is_series(l) && !l.key.empty()) keys.push_back(l.key);
  const std::set<std::string> by(pg.varying.begin(), pg.varying.end());
  const md::Grouping g = md::group_params(keys, split ? by : std::set<std::string>{});
  out.fixed = keys.empty() ? "" : g.fixed;
  std::vector<Line> named = p.lines;
  std::size_t k = 0;
  for (auto& l : named) {
    if (!is_series(l) || l.key.empty()) continue;
    const std::string differs = g.varying.empty() ? std::string() : g.keys[k];
    ++k;
    l.title = l.title.empty() ? differs : differs.empty() ? l.title : l.title + " " + differs;
  }
  if (!split) {
    out.panels.push_back({"", std::move(named)});
    return out;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ChartPanel panel{pg.keys[i], {}};
    for (const auto& l : named) {
      const auto id = panel_of(l, p.panel_by);
      if (!id || *id == ids[i]) panel.lines.push_back(l);
    }
    out.panels.push_back(std::move(panel));
  }
  return out;
}

namespace {

// A comment line of a .gp or .dat file: gnuplot ignores it, but the files are handed to users to run and
// read, so it holds no line break and no backquote either.
std::string comment_text(const std::string& s) {
  std::string t = printable_text(s, kMaxChartText);
  std::replace(t.begin(), t.end(), '`', '?');
  return t;
}

// "with STYLE" with a line type inserted after the style's name: one colour per series name in every panel.
std::string with_lt(const std::string& style, int lt) {
  const auto sp = style.find(' ');
  const std::string name = style.substr(0, sp), rest = sp == std::string::npos ? "" : style.substr(sp);
  return name + " lt " + std::to_string(lt) + rest;
}

// Explicit tics of a log x axis in human units; at most `most` of them (every second power, ...).
std::string human_xtics(const Plot& p, const std::vector<ChartPanel>& panels, int most) {
  if (!p.logx || p.xunit == AxisUnit::plain || p.logx_base < 2) return "";
  double lo = 0, hi = 0;
  for (const auto& pn : panels)
    for (const auto& l : pn.lines)
      if (l.ref == Line::Ref::none)
        for (const auto& [x, y] : l.pts)
          if (x > 0 && std::isfinite(x)) {
            lo = lo == 0 ? x : std::min(lo, x);
            hi = std::max(hi, x);
          }
  if (lo == 0) return "";
  const double b = p.logx_base;
  const int e0 = static_cast<int>(std::floor(std::log(lo) / std::log(b) + 1e-9)),
            e1 = static_cast<int>(std::ceil(std::log(hi) / std::log(b) - 1e-9));
  const int step = std::max(1, (e1 - e0 + most) / most);
  std::string s;
  for (int e = e0; e <= e1; e += step) {
    const double v = std::pow(b, e);
    s += (s.empty() ? "set xtics (" : ", ") + gnuplot_quote(p.xunit == AxisUnit::tokens ? md::tokens(v) : md::bytes(v)) +
         " " + fmt(v);
  }
  return s + ")\n";
}

// The x range of a panel's series: a vertical reference outside it would be drawn outside the frame.
std::pair<double, double> x_range(const ChartPanel& pn) {
  double lo = 1e300, hi = -1e300;
  for (const auto& l : pn.lines)
    if (is_series(l))
      for (const auto& [x, y] : l.pts) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
  return {lo, hi};
}

struct Script {
  std::string dat;
  int index = 0;
  std::map<std::string, int> lt;  // series name -> line type, when panels share one legend
};

// One panel's reference labels and its plot command; series data appended to s.dat.
std::string panel_plot(const Plot& p, const ChartPanel& pn, Script& s, bool shared_key) {
  std::ostringstream gp, plot;
  const auto [xlo, xhi] = x_range(pn);
  std::string refs;
  for (const auto& l : pn.lines) {
    if (l.ref == Line::Ref::none || l.pts.empty()) continue;
    const double v = l.ref == Line::Ref::horizontal ? l.pts.front().second : l.pts.front().first;
    if (!std::isfinite(v) || (p.logy && l.ref == Line::Ref::horizontal && v <= 0)) continue;
    if (l.ref == Line::Ref::horizontal) {
      // a function: autoscale takes it in, so a ceiling above the data is still inside the frame
      refs += ", \\\n     " + fmt(v) + " with lines dt 2 lw 1.5 lc rgb 'gray30' notitle";
      if (!l.title.empty())
        gp << "set label " << gnuplot_quote(l.title) << " at graph 0.02, first " << fmt(v)
           << " offset 0,-0.7 font ',9' textcolor rgb 'gray30' front\n";
    } else if (v >= xlo && v <= xhi) {
      gp << "set arrow from " << fmt(v) << ", graph 0 to " << fmt(v) << ", graph 1 nohead dt 3 lw 1.5 lc rgb 'gray40' front\n";
      if (!l.title.empty())
        gp << "set label " << gnuplot_quote(l.title) << " at first " << fmt(v)
           << ", graph 0.5 center rotate by 90 offset -1.2,0 font ',9' textcolor rgb 'gray40' front\n";
    }
  }
  // One x value (a quick run's single run length): a range around it, not gnuplot's warning.
  if (xlo == xhi)
    gp << "set xrange [" << (p.logx ? fmt(xlo / 2) + ":" + fmt(xhi * 2) : fmt(xlo - 1) + ":" + fmt(xhi + 1)) << "]\n";
  int n = 0;
  for (const auto& l : pn.lines) {
    if (!is_series(l)) continue;
    s.dat += "# " + comment_text(l.title) + "\n";
    const bool err = l.yerr.size() == l.pts.size();
    for (std::size_t i = 0; i < l.pts.size(); ++i) {
      s.dat += fmt(l.pts[i].first) + " " + fmt(l.pts[i].second);
      // appended piecewise: " " + std::string&& trips GCC 12's -Wrestrict false positive
      if (err) {
        s.dat += ' ';
        s.dat += fmt(l.yerr[i].first);
        s.dat += ' ';
        s.dat += fmt(l.yerr[i].second);
      }
      if (!l.labels.empty()) {
        s.dat += ' ';
        s.dat += gnuplot_data_label(i < l.labels.size() ? l.labels[i] : std::string());
      }
      s.dat += "\n";
    }
    s.dat += "\n\n";
    std::string with;
    if (!l.labels.empty()) with = " using 1:2:" + std::string(err ? "5" : "3") + " with labels " + l.style;
    else if (shared_key && !l.title.empty())
      with = std::string(err ? " using 1:2:3:4" : " using 1:2") + " with " +
             with_lt(l.style, s.lt.emplace(l.title, int(s.lt.size()) + 1).first->second);
    else with = std::string(err ? " using 1:2:3:4" : " using 1:2") + " with " + l.style;
    plot << (n++ ? ", \\\n     " : "plot ") << "'" << p.name << ".dat' index " << s.index++ << with << " title "
         << (shared_key ? std::string("''") : gnuplot_quote(l.title));
  }
  gp << plot.str() << refs << "\n";
  return gp.str();
}

std::string axes(const Plot& p) {
  std::ostringstream gp;
  gp << "set xlabel " << gnuplot_quote(p.xlabel) << "\nset ylabel " << gnuplot_quote(p.ylabel) << "\nset grid\n";
  if (p.logx) gp << "set logscale x " << p.logx_base << "\n";
  if (p.logy) gp << "set logscale y\n";
  for (const auto& e : p.extra) gp << e << "\n";
  return gp.str();
}

// The legend of small multiples: one entry per series name, drawn once in a strip below the panels.
std::string key_strip(const ChartLayout& L, const Script& s, double height) {
  std::vector<std::pair<int, std::string>> entries;  // (line type, style) by name
  std::ostringstream gp;
  gp << "set origin 0,0\nset size 1," << fmt(height) << "\n"
     << "unset title\nunset xlabel\nunset ylabel\nunset grid\nunset logscale\nunset border\nunset tics\nunset arrow\n"
     << "unset label\nset xrange [0:1]\nset yrange [0:1]\nset key center center horizontal Left reverse\n";
  std::set<std::string> done;
  std::string plot;
  for (const auto& pn : L.panels)
    for (const auto& l : pn.lines) {
      if (!is_series(l) || l.title.empty() || !l.labels.empty() || !done.insert(l.title).second) continue;
      std::string style = l.style;
      // functions have no error bars: the legend sample is the line and its points
      if (style.rfind("yerrorlines", 0) == 0) style = "linespoints" + style.substr(11);
      if (style.rfind("yerrorbars", 0) == 0) style = "points" + style.substr(10);
      plot += (plot.empty() ? "plot " : ", \\\n     ") + std::string("NaN with ") + with_lt(style, s.lt.at(l.title)) +
              " title " + gnuplot_quote(l.title);
    }
  if (plot.empty()) return "";
  gp << plot << "\n";
  return gp.str();
}

// The shared parameters under the title, "every series: k=v, k=v", broken between parameters into lines of
// at most `chars` characters.
std::vector<std::string> subtitle_lines(const std::string& fixed, std::size_t chars) {
  std::vector<std::string> out;
  if (fixed.empty()) return out;
  std::string line = "every series:";
  std::size_t at = 0;
  while (at < fixed.size()) {
    std::size_t end = fixed.find(", ", at);
    if (end == std::string::npos) end = fixed.size();
    const std::string part = fixed.substr(at, end - at) + (end < fixed.size() ? "," : "");
    if (line.size() + 1 + part.size() > chars && !line.empty()) {
      out.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + part;
    at = end + 2;
  }
  out.push_back(line);
  return out;
}

// Points at the ends of the x range stay inside the frame (and their error bars visible).
const char* kPadX = "set offsets graph 0.03, graph 0.03, 0, 0\n";

}  // namespace

ChartFiles chart_files(const Plot& p) {
  if (!detail::safe_stem(p.name)) throw std::logic_error("chart name '" + p.name + "' is not a plain file stem");
  const ChartLayout L = lay_out(p);
  ChartFiles f;
  Script s;
  std::ostringstream body;
  int width = 960, height = 720;
  // The title and the shared parameters, as labels in a top band every path reserves: gnuplot's own title
  // has room for one line only.
  auto heading = [&](const std::vector<std::string>& sub, double H) {
    body << "set label " << gnuplot_quote(p.title) << " at screen 0.5, screen " << fmt(1 - 20 / H) << " center\n";
    for (std::size_t i = 0; i < sub.size(); ++i)
      body << "set label " << gnuplot_quote(sub[i]) << " at screen 0.5, screen " << fmt(1 - (40 + 16 * i) / H)
           << " center font ',10'\n";
  };
  if (L.panels.size() == 1) {
    const auto sub = subtitle_lines(L.fixed, 130);
    heading(sub, height);
    body << "set tmargin at screen " << fmt(1 - (40 + 16 * sub.size()) / double(height)) << "\n"
         << axes(p) << "set key below left Left reverse\n" << kPadX << human_xtics(p, L.panels, 10)
         << panel_plot(p, L.panels.front(), s, false);
  } else {
    // Small multiples: a grid of panels with fixed margins (aligned frames), the title and the shared
    // parameters above, one legend strip below.
    const int n = static_cast<int>(L.panels.size());
    const int cols = n <= 3 ? n : n == 4 ? 2 : 3, rows = (n + cols - 1) / cols;
    width = cols == 3 ? 1200 : 960;
    const auto sub = subtitle_lines(L.fixed, width / 7);
    std::size_t names = 0, longest = 0;
    {
      std::set<std::string> seen;
      for (const auto& pn : L.panels)
        for (const auto& l : pn.lines)
          if (is_series(l) && !l.title.empty() && l.labels.empty() && seen.insert(l.title).second) {
            ++names;
            longest = std::max(longest, printable_text(l.title, kMaxChartText).size());
          }
    }
    const std::size_t per_row = std::max<std::size_t>(1, width / (longest * 7 + 70));
    const int key_px = names ? static_cast<int>(24 + 20 * ((names + per_row - 1) / per_row)) : 0;
    const int top_px = 36 + 16 * static_cast<int>(sub.size()), panel_px = cols == 1 ? 480 : 420;
    height = top_px + rows * panel_px + key_px;
    const double H = height, pw = 1.0 / cols, ph = panel_px / H, keyh = key_px / H;
    body << "set multiplot\n";
    heading(sub, H);
    for (int i = 0; i < n; ++i) {
      const int r = i / cols, c = i % cols;
      body << "set origin " << fmt(c * pw) << "," << fmt(keyh + (rows - 1 - r) * ph) << "\nset size " << fmt(pw) << ","
           << fmt(ph) << "\nset lmargin 10\nset rmargin 3\nset tmargin 2\nset bmargin 4\nset autoscale\nunset key\n"
           << kPadX << "set title " << gnuplot_quote(L.panels[i].title) << "\n" << axes(p)
           << human_xtics(p, L.panels, cols >= 3 ? 5 : 7) << panel_plot(p, L.panels[i], s, true)
           << "unset label\nunset arrow\n";
    }
    body << key_strip(L, s, keyh) << "unset multiplot\n";
  }
  f.dat = s.dat;
  std::ostringstream gp;
  const std::string size = " size " + std::to_string(width) + "," + std::to_string(height);
  gp << "# kvf report: " << comment_text(p.title) << "\n"
     << "set terminal svg" << size << " noenhanced font 'Helvetica,12' background rgb 'white'\n"
     << "set output '" << p.name << ".svg'\n"
     << body.str() << "set terminal pngcairo" << size << " noenhanced font 'Helvetica,10' background rgb 'white'\n"
     << "set output '" << p.name << ".png'\n"
     << "reset\n"
     << body.str() << "set output\n";
  f.gp = gp.str();
  return f;
}

}  // namespace kvf::report
