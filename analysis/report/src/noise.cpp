// The noise interval the verdict rules use before reading a difference as a sign (kvf/report.hpp, Ratio).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvf/report.hpp"
#include "kvf/stats.hpp"

namespace kvf::report {

namespace {

using kvf::quantile_sorted;

// The harness's median (kvf::summarize's definition: type-7 quantile at 0.5), on a scratch vector, by selection:
// the bootstrap below takes 4,000 medians per ratio, and sorting for them was most of a report's run time (a
// quick run's report, under ASan: 60% of it). Bit for bit quantile_sorted(sorted, 0.5): the same two order
// statistics in the same arithmetic.
double median_of(std::vector<double>& v) {
  const std::size_t n = v.size();
  if (n < 2) return quantile_sorted(v, 0.5);
  const double h = (static_cast<double>(n) - 1.0) * 0.5;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double a = v[lo];
  const double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());  // order statistic lo + 1
  return a + (h - static_cast<double>(lo)) * (b - a);
}

// splitmix64: the same draws on every platform and standard library (std::uniform_int_distribution is not),
// so the report is byte-identical wherever it is made.
struct Draw {
  std::uint64_t s;
  std::size_t below(std::size_t n) {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<std::size_t>((z ^ (z >> 31)) % n);
  }
};

}  // namespace

Ratio median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  Ratio r;
  if (a.empty() || b.empty()) return r;
  std::vector<double> x = a, y = b;
  const double mb = median_of(y);
  r.value = mb > 0 ? median_of(x) / mb : 0;
  r.lo = r.hi = r.value;
  if (a.size() < 3 || b.size() < 3 || !(mb > 0)) return r;
  constexpr int kResamples = 2000;
  Draw d{0x6b76662d6e6f6973ull};  // fixed seed
  std::vector<double> ratios;
  ratios.reserve(kResamples);
  for (int i = 0; i < kResamples; ++i) {
    for (auto& v : x) v = a[d.below(a.size())];
    for (auto& v : y) v = b[d.below(b.size())];
    const double den = median_of(y);
    if (den > 0) ratios.push_back(median_of(x) / den);
  }
  if (ratios.size() < kResamples / 2) return r;
  std::sort(ratios.begin(), ratios.end());
  r.lo = ratios[static_cast<std::size_t>(0.025 * (ratios.size() - 1))];
  r.hi = ratios[static_cast<std::size_t>(0.975 * (ratios.size() - 1))];
  r.has_interval = true;
  return r;
}

Ratio median_ratio(const CaseRow& a, const CaseRow& b) {
  Ratio r = median_ratio(a.samples_s, b.samples_s);
  // Without raw samples (samples.csv missing or partial) the figure is still cases.csv's medians, uninterpreted.
  if (r.value == 0 && a.median_s && b.median_s && *b.median_s > 0) r.value = r.lo = r.hi = *a.median_s / *b.median_s;
  // Rows that kept enough samples (cases.csv) but brought too few here: the interval is missing, not the measurement.
  const auto kept = [](const CaseRow& c) { return c.samples - c.throttled_samples; };
  if (!r.has_interval && kept(a) >= 3 && kept(b) >= 3 && b.median_s && *b.median_s > 0)
    r.why_none = "no raw samples in samples.csv";
  return r;
}

std::string Ratio::text() const {
  if (!has_interval) return fmt(value) + "x (no interval: " + why_none + ")";
  return fmt(value) + "x [" + fmt(lo) + ", " + fmt(hi) + "]";
}

}  // namespace kvf::report
