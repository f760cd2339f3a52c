// Linear interpolation over measured points and the crossover of two measured (or modelled) series.
#include <algorithm>

#include "kvf/report.hpp"

namespace kvf::report {

std::optional<double> interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.empty() || xs.size() != ys.size() || !(x >= xs.front() && x <= xs.back())) return std::nullopt;
  // Binary search: called per point of a series against another series, a scan made that quadratic.
  const auto it = std::lower_bound(xs.begin(), xs.end(), x);
  const std::size_t i = static_cast<std::size_t>(it - xs.begin());
  if (i < xs.size() && xs[i] == x) return ys[i];
  if (i == 0 || i >= xs.size()) return std::nullopt;
  return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
}

Crossover find_crossover(const std::vector<double>& x, const std::vector<double>& a, const std::vector<double>& b,
                         const std::string& a_name, const std::string& b_name, const std::string& unit,
                         const std::string& range_word) {
  Crossover c;
  if (x.empty()) {
    c.text = "not measured";
    return c;
  }
  // Appended piecewise: "(" + std::string&& trips GCC 12's -Wrestrict false positive.
  std::string range = fmt(x.front());
  range.insert(range.begin(), '(');
  range += "..";
  range += fmt(x.back());
  range += " ";
  range += unit;
  range += ")";
  // Which side wins below the crossover and which above: a crossover alone does not say (a model cell "crossover
  // 54 tokens" read as support for "recompute wins for small pages" where fetch won below it).
  const auto sides = [&](std::size_t at) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (a[i] != b[i]) {
        const bool a_below = (a[i] < b[i]) == (i <= at);
        return "; " + (a_below ? a_name : b_name) + " faster below, " + (a_below ? b_name : a_name) + " above";
      }
    return std::string();
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = a[i] - b[i];
    if (d == 0) {
      c.found = true;
      c.x = x[i];
      c.text = fmt(c.x) + " " + unit + " (" + range_word + " point" + sides(i) + ")";
      return c;
    }
    if (i + 1 < x.size()) {
      const double d2 = a[i + 1] - b[i + 1];
      if ((d < 0) != (d2 < 0) && d2 != 0) {
        c.found = true;
        c.x = x[i] + (x[i + 1] - x[i]) * d / (d - d2);
        c.text =
            fmt(c.x) + " " + unit + " (interpolated between " + fmt(x[i]) + " and " + fmt(x[i + 1]) + sides(i) + ")";
        return c;
      }
    }
  }
  if (x.size() == 1) {
    c.text = "one " + range_word + " point " + range + ": " + (a[0] < b[0] ? a_name : b_name) + " faster there; crossover unknown";
    return c;
  }
  c.text = "outside " + range_word + " range " + range + ": " + (a[0] < b[0] ? a_name : b_name) + " faster throughout";
  return c;
}

}  // namespace kvf::report
