#include "kvf/cupti/clock_alignment.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvf::cupti {

KernelCoverage::KernelCoverage(std::span<const KernelRecord> kernels) {
  std::vector<std::pair<double, double>> iv;
  for (const auto& k : kernels)
    if (k.end_ns > k.start_ns) iv.emplace_back(static_cast<double>(k.start_ns), static_cast<double>(k.end_ns));
  std::sort(iv.begin(), iv.end());
  double busy = 0;
  for (const auto& [s, e] : iv) {
    if (!starts_.empty() && s <= ends_.back()) {
      if (e > ends_.back()) ends_.back() = e;
      continue;
    }
    if (!starts_.empty()) busy += ends_.back() - starts_.back();
    starts_.push_back(s);
    ends_.push_back(e);
    cum_.push_back(busy);
  }
}

double KernelCoverage::busy_before(double t) const {
  // First interval starting after t; the one before it may contain t.
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), t);
  if (it == starts_.begin()) return 0;
  const std::size_t i = static_cast<std::size_t>(it - starts_.begin()) - 1;
  return cum_[i] + (std::min(t, ends_[i]) - starts_[i]);
}

double KernelCoverage::busy_pct(double t0, double t1) const {
  if (t1 <= t0) return 0;
  return 100.0 * (busy_before(t1) - busy_before(t0)) / (t1 - t0);
}

namespace {
struct Fit {
  std::size_t n = 0;
  double corr = std::numeric_limits<double>::quiet_NaN(), mae = std::numeric_limits<double>::quiet_NaN();
};

Fit fit_at(std::span<const PmPoint> samples, const KernelCoverage& cov, double shift) {
  Fit f;
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0, sad = 0;
  for (const auto& p : samples) {
    const double a = p.t_start_ns + shift, b = p.t_end_ns + shift;
    if (a < cov.first_ns() || b > cov.last_ns() || !(b > a) || !std::isfinite(p.busy_pct)) continue;
    const double x = p.busy_pct, y = cov.busy_pct(a, b);
    ++f.n;
    sx += x; sy += y; sxx += x * x; syy += y * y; sxy += x * y; sad += std::fabs(x - y);
  }
  if (f.n < 8) return f;
  const double n = static_cast<double>(f.n);
  const double vx = sxx - sx * sx / n, vy = syy - sy * sy / n, cxy = sxy - sx * sy / n;
  f.mae = sad / n;
  // A flat series (all busy or all idle) says nothing about the offset.
  if (vx > 1e-9 * n && vy > 1e-9 * n) f.corr = cxy / std::sqrt(vx * vy);
  return f;
}
}  // namespace

ClockAlignment align_pm_to_kernels(std::span<const PmPoint> samples, std::span<const KernelRecord> kernels,
                                   double max_shift_ns, double step_ns) {
  ClockAlignment out;
  const KernelCoverage cov(kernels);
  if (samples.empty() || kernels.empty()) return out;
  std::vector<double> widths;
  for (const auto& p : samples)
    if (p.t_end_ns > p.t_start_ns) widths.push_back(p.t_end_ns - p.t_start_ns);
  if (widths.empty()) return out;
  std::nth_element(widths.begin(), widths.begin() + widths.size() / 2, widths.end());
  const double interval = widths[widths.size() / 2];
  if (step_ns <= 0) step_ns = interval / 4;
  max_shift_ns = std::max(0.0, max_shift_ns);

  const Fit zero = fit_at(samples, cov, 0);
  out.samples = zero.n;
  out.corr_at_zero = zero.corr;
  out.mae_at_zero_pct = zero.mae;
  const long steps = static_cast<long>(std::floor(max_shift_ns / step_ns));
  for (long i = -steps; i <= steps; ++i) {
    const double s = static_cast<double>(i) * step_ns;
    const Fit f = fit_at(samples, cov, s);
    if (!std::isfinite(f.corr)) continue;
    // Ties go to the smaller |shift|: the loop visits shifts in increasing order, so compare magnitudes.
    if (!std::isfinite(out.corr_best) || f.corr > out.corr_best + 1e-12 ||
        (std::fabs(f.corr - out.corr_best) <= 1e-12 && std::fabs(s) < std::fabs(out.best_shift_ns))) {
      out.corr_best = f.corr;
      out.best_shift_ns = s;
      out.mae_best_pct = f.mae;
    }
  }
  out.shared_clock = std::isfinite(out.corr_at_zero) && out.corr_at_zero >= 0.8 && std::isfinite(out.best_shift_ns) &&
                     std::fabs(out.best_shift_ns) <= interval;
  return out;
}

std::vector<CounterRow> clock_check_rows(const std::filesystem::path& results_dir,
                                         const std::vector<CaptureManifest>& manifests,
                                         const std::vector<CounterRow>& rows) {
  std::vector<CounterRow> out;
  for (const auto& pm : manifests) {
    if (pm.kind != "pm_sampling") continue;
    // Candidates: the tracer that ran during the sampling ("activity_" + the PM capture's name) first, then any
    // activity capture of the same study and case; the first whose kernels overlap the samples is used.
    std::vector<const CaptureManifest*> acts;
    for (const auto& m : manifests)
      if (m.kind == "activity" && m.name == "activity_" + pm.name) acts.push_back(&m);
    for (const auto& m : manifests)
      if (m.kind == "activity" && m.name != "activity_" + pm.name && m.study == pm.study && m.case_name == pm.case_name)
        acts.push_back(&m);
    std::vector<PmPoint> samples;
    for (const auto& r : rows)
      if (r.capture == pm.name && r.metric == kGrActiveMetric && std::isfinite(r.t_start_ns))
        samples.push_back({r.t_start_ns, r.t_end_ns, r.value});
    if (samples.empty()) continue;
    ClockAlignment a;
    for (const CaptureManifest* act : acts) {
      const auto kernels = read_kernels_csv(counters_dir(results_dir) / (act->name + ".kernels.csv"));
      if (kernels.empty()) continue;
      // Search up to a tenth of the recorded span either way: enough for a launch-latency-sized offset; an offset
      // beyond it means the two were not recorded over the same steps.
      const KernelCoverage cov(kernels);
      a = align_pm_to_kernels(samples, kernels, (cov.last_ns() - cov.first_ns()) / 10);
      if (a.samples > 0) break;
    }
    if (a.samples == 0) continue;
    CounterRow key;
    key.study = pm.study;
    key.case_name = pm.case_name;
    key.source = "pm_sampling";
    key.capture = pm.name;
    key.range_index = -1;
    key.range = "clock_check";
    key.chip = pm.chip;
    auto add = [&](const char* metric, double v, const char* unit) { out.push_back(metric_row(key, metric, v, unit)); };
    add("kvf:clock_samples", static_cast<double>(a.samples), "samples");
    add("kvf:clock_corr_at_zero", a.corr_at_zero, "");
    add("kvf:clock_mae_at_zero_pct", a.mae_at_zero_pct, "%");
    add("kvf:clock_best_shift_ns", a.best_shift_ns, "ns");
    add("kvf:clock_corr_best", a.corr_best, "");
    add("kvf:clock_shared", a.shared_clock ? 1.0 : 0.0, "bool");
  }
  return out;
}

}  // namespace kvf::cupti
