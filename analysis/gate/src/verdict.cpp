// Matching cases and giving verdicts. The rules are stated once, at the top of kvf/gate.hpp, and in
// docs/gate.md "Verdict rules"; measure() and decide() below are their only implementation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <tuple>
#include <utility>

#include "kvf/errors.hpp"
#include "kvf/gate.hpp"
#include "kvf/stats.hpp"
#include "gate_detail.hpp"

namespace kvf::gate {

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::slower: return "SLOWER";
    case Verdict::missing: return "MISSING";
    case Verdict::noisy: return "NOISY";
    case Verdict::faster: return "FASTER";
    case Verdict::new_case: return "NEW";
    case Verdict::skipped: return "SKIPPED";
    case Verdict::same: return "SAME";
  }
  return "?";
}

std::size_t GateReport::count(Verdict v) const {
  return static_cast<std::size_t>(
      std::count_if(cases.begin(), cases.end(), [v](const CaseResult& c) { return c.verdict == v; }));
}

double relative_iqr(std::span<const double> xs) {
  if (xs.size() < 2) return 0;
  std::vector<double> s(xs.begin(), xs.end());
  std::sort(s.begin(), s.end());
  const double med = quantile_sorted(s, 0.5);
  if (!(med > 0)) return 0;
  return (quantile_sorted(s, 0.75) - quantile_sorted(s, 0.25)) / med;
}

namespace {

using namespace detail;

// The run-to-run standard deviation of log run medians is taken as at least this (0.01%), and at least what the
// samples inside a run say of their median's precision: runs of quantized timings (a timer's resolution, a
// scheduler's quantum) can agree exactly, and a zero would make every difference infinitely significant.
constexpr double kMinRunSd = 1e-4;

// One compared case's test, before the correction over cases: the one-sided p of each direction, and what the
// smallest detectable slowdown needs (see kvf/gate.hpp).
struct CaseTest {
  double p_slower = 1, p_faster = 1;
  // k >= 2 baseline runs: the prediction test's pieces (log medians); k = 1: the samples, for the rank test
  std::size_t runs = 1;
  double mean_log = 0, scale = 0;  // mean of the runs' log medians; s * sqrt(1 + 1/k)
  const CaseData *b = nullptr, *c = nullptr;
};

// One-sided Mann-Whitney p that `c` is shifted up (slower) against `b`, and down: half the two-sided p in the
// direction the ranks moved.
std::pair<double, double> one_sided_mwu(std::span<const double> c, std::span<const double> b, bool* exact = nullptr) {
  const MwuResult t = mann_whitney_u(c, b);
  if (exact) *exact = t.exact;
  const double half = 0.5 * t.p, mid = 0.5 * static_cast<double>(c.size() * b.size());
  if (t.u1 > mid) return {half, 1 - half};
  if (t.u1 < mid) return {1 - half, half};
  return {0.5, 0.5};
}

// Fill in the numbers of a case measured on both sides and its uncorrected test. See kvf/gate.hpp.
CaseTest measure(CaseResult& r, const CaseData& b, const CaseData& c) {
  r.compared = true;
  r.median_base = median_of(b.samples);
  r.median_cur = median_of(c.samples);
  r.spread_base = relative_iqr(b.samples);
  r.spread_cur = relative_iqr(c.samples);
  CaseTest t;
  t.b = &b;
  t.c = &c;
  t.runs = std::max<std::size_t>(1, b.run_medians.size());
  r.runs_base = t.runs;
  if (t.runs >= 2) {
    // Whole runs are the units: is the current run's median one more draw of the baseline runs' medians?
    // Student's t prediction test on log medians, k - 1 degrees of freedom (samples inside a run move together,
    // so pooling them as independent would overstate what the baseline knows).
    const double k = static_cast<double>(t.runs);
    double sum = 0, sq = 0;
    for (double m : b.run_medians) sum += std::log(m);
    t.mean_log = sum / k;
    for (double m : b.run_medians) sq += (std::log(m) - t.mean_log) * (std::log(m) - t.mean_log);
    r.spread_runs = std::sqrt(sq / (k - 1));
    // The baseline's centre is the runs' geometric mean: the level the test compares with (a pooled median
    // leans to the run with the most samples).
    r.median_base = std::exp(t.mean_log);
    // A run's median is known to about 1.25 sd / sqrt(n) (sd from the samples' IQR / 1.349, n samples per run)
    const double n_per_run = static_cast<double>(b.samples.size()) / k;
    const double within = 1.2533 * (r.spread_base / 1.349) / std::sqrt(std::max(1.0, n_per_run));
    t.scale = std::max({r.spread_runs, within, kMinRunSd}) * std::sqrt(1 + 1 / k);
    r.change = r.median_cur / r.median_base - 1.0;
    const double stat = (std::log(r.median_cur) - t.mean_log) / t.scale;
    t.p_slower = student_t_sf(stat, k - 1);
    t.p_faster = student_t_sf(-stat, k - 1);
    r.exact = true;
  } else {
    r.change = r.median_cur / r.median_base - 1.0;
    std::tie(t.p_slower, t.p_faster) = one_sided_mwu(c.samples, b.samples, &r.exact);
  }
  return t;
}

// The smallest slowdown s the case's test would have flagged at `level` (Holm's first step, alpha / m):
// infinity when none can.
double detectable(const CaseResult& r, const CaseTest& t, double level) {
  const double inf = std::numeric_limits<double>::infinity();
  if (t.runs >= 2) {
    const double q = student_t_isf(level, static_cast<double>(t.runs) - 1);
    return std::isfinite(q) ? std::exp(t.mean_log + q * t.scale) / r.median_base - 1 : inf;
  }
  // One run: the current samples moved onto the baseline's median, then slowed by s.
  auto p_at = [&](double s) {
    std::vector<double> moved(t.c->samples);
    for (double& x : moved) x *= (1 + s) * r.median_base / r.median_cur;
    return one_sided_mwu(moved, t.b->samples).first;
  };
  double hi = 1;
  while (!(p_at(hi) < level)) {
    if (hi > 1e3) return inf;  // past every baseline sample and still not: the rank test's floor
    hi *= 4;
  }
  if (p_at(0) < level) return 0;
  double lo = 0;
  for (int i = 0; i < 60 && hi - lo > 1e-6; ++i) {
    const double mid = 0.5 * (lo + hi);
    (p_at(mid) < level ? hi : lo) = mid;
  }
  return hi;
}

// The verdict from the corrected p-values (kvf/gate.hpp).
void decide(CaseResult& r, const CaseTest& t, double p_slower_holm, double p_faster_holm, std::size_t m,
            const GateOptions& o) {
  const bool up = r.change >= 0;
  r.p = up ? t.p_slower : t.p_faster;
  r.p_holm = up ? p_slower_holm : p_faster_holm;
  r.detectable = reported_detectable(detectable(r, t, o.alpha / static_cast<double>(m)), o.threshold);
  if (t.runs >= 2 && r.spread_runs > 0)
    append_note(r.note, "the " + std::to_string(t.runs) + " baseline runs' medians vary by " + pct(r.spread_runs) +
                            " (sd)");
  if (t.runs < 2 && r.detectable == 0)
    append_note(r.note, "the current samples differ in shape from the baseline's (significant even moved onto its "
                        "median)");
  if (r.spread_cur > 3 * std::max(r.spread_base, 0.01))
    append_note(r.note, "current spread " + pct(r.spread_cur) + " against the baseline's " + pct(r.spread_base));
  if (p_slower_holm < o.alpha && r.change > o.threshold) {
    r.verdict = Verdict::slower;
  } else if (p_faster_holm < o.alpha && r.change < -o.threshold) {
    r.verdict = Verdict::faster;
  } else if (r.detectable > o.threshold) {
    r.verdict = Verdict::noisy;
    append_note(r.note, std::isfinite(r.detectable)
                            ? "could not have flagged less than +" + pct(r.detectable) + " (threshold " +
                                  pct(o.threshold) + ")"
                            : "too few samples or runs: no slowdown up to +" + pct(max_detectable(o.threshold)) +
                                  " could reach p < alpha / " + std::to_string(m));
  } else if (std::fabs(r.change) > o.threshold) {
    r.verdict = Verdict::noisy;
    append_note(r.note, "change not significant (p " + num(r.p_holm) + " after Holm >= alpha " + num(o.alpha) + ")");
  } else {
    r.verdict = Verdict::same;
    if (r.p_holm < o.alpha) append_note(r.note, "significant, but within the threshold");
  }
}

// A case with fewer usable samples than --min-samples: the line that says so.
struct TooFew {
  std::string text;
  const ResultSet* side;
  double sample_s;  // its median sample (0: none)
  int throttled;
};

// The fix that fits the result set at hand, from how it was made (meta.json, load.cpp read_run_settings).
std::string remedy(const TooFew& t, const GateOptions& o) {
  const ResultSet& rs = *t.side;
  const std::string want = std::to_string(o.min_samples);
  if (rs.format == "Google Benchmark JSON")
    return "rerun with --benchmark_repetitions=N (one sample per repetition in its JSON)";
  if (t.throttled > 0)
    return "its throttled samples were dropped: rerun on a device that holds its clocks (or with a longer -- --budget S)";
  if (rs.run_min_samples > 0 && rs.run_min_samples < o.min_samples) {
    // meta.json records the value either way: the default is no flag to leave out.
    const std::string n = std::to_string(rs.run_min_samples);
    return "the run took at least " + n + " per case and mode (" +
           (rs.run_min_samples == StopRule{}.min_samples ? "the default --min-samples" : "-- --min-samples " + n) +
           "): rerun kvf run with -- --min-samples " + want;
  }
  if (rs.quick)
    return "a --quick run of this kvf takes at least " + std::to_string(StopRule{}.min_samples) +
           " samples per case and mode on any LLC size: rerun kvf run --quick with it (older runs stopped earlier)";
  const std::string b = rs.run_budget_s > 0 ? " (" + num(rs.run_budget_s) + " s)" : "";
  return "each sample outlasted the run's --budget" + b + ", which then stops at 2: rerun kvf run with -- --budget S, "
         "S at least one sample's time (" + num(t.sample_s) + " s here)";
}

// A result set that a test-only fault injection slowed is no measurement: refused unless the gate is told.
void check_injection(const char* side, const ResultSet& rs, const GateOptions& o, GateReport& rep) {
  if (rs.fault_injection.empty()) return;
  std::string what = rs.fault_injection.front();
  if (rs.fault_injection.size() > 1) what += " and " + std::to_string(rs.fault_injection.size() - 1) + " more";
  if (!o.allow_fault_injection)
    throw UsageError(std::string(side) + " " + rs.source + ": carries a test-only fault injection (" + what +
                     "), not a measurement; only a test of the gate compares it, with --allow-fault-injection");
  rep.warnings.push_back(std::string(side) + " carries a test-only fault injection (" + what +
                         "): not a measurement (allowed by --allow-fault-injection)");
}

}  // namespace

std::optional<std::regex> detail::checked_options(const GateOptions& o) {
  if (!(o.threshold > 0) || !std::isfinite(o.threshold))
    throw UsageError("--threshold " + num(100 * o.threshold) + ": must be a percentage > 0");
  if (!(o.alpha > 0 && o.alpha < 1)) throw UsageError("--alpha " + num(o.alpha) + ": must be in (0, 1)");
  if (o.min_samples < 2) throw UsageError("--min-samples " + std::to_string(o.min_samples) + ": must be >= 2");
  std::optional<std::regex> filter;
  if (!o.filter.empty()) {
    try {
      filter.emplace(o.filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw UsageError("--filter '" + o.filter + "': not a valid regular expression (" + e.what() + ")");
    }
  }
  return filter;
}

GateReport run_gate(const ResultSet& baseline, const ResultSet& current, const GateOptions& o) {
  const std::optional<std::regex> filter = checked_options(o);
  auto pick = [&](const ResultSet& rs) {
    std::map<CaseKey, const CaseData*> m;
    for (const auto& c : rs.cases)
      if (!filter || std::regex_search(c.key.label(), *filter)) m.emplace(c.key, &c);
    return m;
  };
  const auto bm = pick(baseline), cm = pick(current);

  GateReport rep;
  rep.threshold = o.threshold;
  rep.baseline_source = baseline.source;
  rep.current_source = current.source;
  for (const auto& w : baseline.warnings) rep.warnings.push_back("baseline: " + w);
  for (const auto& w : current.warnings) rep.warnings.push_back("current: " + w);
  check_injection("--baseline", baseline, o, rep);
  check_injection("--current", current, o, rep);

  std::set<CaseKey> keys;
  for (const auto& [k, _] : bm) keys.insert(k);
  for (const auto& [k, _] : cm) keys.insert(k);
  // A study stopped part way (killed, or by kvf run's --time-limit) is no run to gate: the cases it never reached
  // would pass as MISSING. Refused where --filter keeps any of its cases.
  for (const auto& [flag, rs] :
       {std::pair<const char*, const ResultSet*>{"--baseline", &baseline}, {"--current", &current}})
    for (const auto& study : rs->unfinished)
      if (std::any_of(keys.begin(), keys.end(), [&](const CaseKey& k) { return k.study == study; }))
        throw UsageError(std::string(flag) + " " + rs->source + ": study " + study +
                         ": never finished (status 'running' or 'stopped: time limit' in meta.json: stopped before "
                         "its end, its unreached cases would pass as MISSING): gate a finished run, or leave the "
                         "study out with --filter");

  std::size_t in_common = 0;
  std::vector<TooFew> too_few;
  std::vector<std::string> mismatched;
  std::set<std::string> dev_b, dev_c;
  std::vector<std::pair<const CaseData*, const CaseData*>> pairs;  // parallel to rep.cases
  for (const auto& k : keys) {
    auto ib = bm.find(k);
    auto ic = cm.find(k);
    const CaseData* b = ib == bm.end() ? nullptr : ib->second;
    const CaseData* c = ic == cm.end() ? nullptr : ic->second;
    CaseResult r;
    r.key = k;
    r.label = k.label();
    if (b) { r.n_base = b->samples.size(); r.throttled_base = b->throttled; }
    if (c) { r.n_cur = c->samples.size(); r.throttled_cur = c->throttled; }
    if ((b && b->injected) || (c && c->injected))  // only past check_injection, i.e. with --allow-fault-injection
      append_note(r.note, std::string("FAULT INJECTED (test only) in the ") +
                              (b && b->injected ? (c && c->injected ? "baseline and current" : "baseline") : "current"));
    if (!b) {
      r.verdict = Verdict::new_case;
      if (c->skipped) append_note(r.note, "skipped in current: " + c->note);
    } else if (!c) {
      r.verdict = Verdict::missing;
      if (b->skipped) append_note(r.note, "skipped in baseline: " + b->note);
    } else {
      ++in_common;
      if (b->skipped && c->skipped) {
        r.verdict = Verdict::skipped;
        append_note(r.note, "baseline: " + b->note);
        append_note(r.note, "current: " + c->note);
      } else if (c->skipped) {  // measured before, not now: as good as gone (--fail-on-missing fails it)
        r.verdict = Verdict::missing;
        append_note(r.note, "measured in the baseline, skipped in current: " + c->note);
      } else if (b->skipped) {  // measured now, not before: nothing to compare it with
        r.verdict = Verdict::new_case;
        append_note(r.note, "skipped in baseline: " + b->note);
      } else {
        const std::string db = device_of(*b, baseline), dc = device_of(*c, current);
        if (!db.empty()) dev_b.insert(db);
        if (!dc.empty()) dev_c.insert(dc);
        if (!db.empty() && !dc.empty() && !same_device(db, dc))
          mismatched.push_back(r.label + ": baseline '" + db + "', current '" + dc + "'");
        for (auto [side, d, rs] : {std::tuple{"baseline", b, &baseline}, std::tuple{"current", c, &current}}) {
          if (static_cast<int>(d->samples.size()) < o.min_samples)
            too_few.push_back({r.label + ": " + side + " has " + std::to_string(d->samples.size()) +
                                   " usable samples" +
                                   (d->throttled ? " (" + std::to_string(d->throttled) + " throttled ignored)" : "") +
                                   ", fewer than --min-samples " + std::to_string(o.min_samples),
                               rs, d->samples.empty() ? 0.0 : median_of(d->samples), d->throttled});
        }
        r.compared = true;  // classified below, once the input is known to be usable
      }
    }
    pairs.emplace_back(b, c);
    rep.cases.push_back(std::move(r));
  }

  const std::string filt = filter ? " matching --filter '" + o.filter + "'" : "";
  if (in_common == 0)
    throw UsageError("no case in common: baseline " + baseline.source + " has " + std::to_string(bm.size()) +
                     " cases" + filt + ", current " + current.source + " has " + std::to_string(cm.size()) +
                     " (cases match on study, case, mode and every parameter)");
  const auto n_cmp = static_cast<std::size_t>(
      std::count_if(rep.cases.begin(), rep.cases.end(), [](const CaseResult& r) { return r.compared; }));
  if (n_cmp == 0)
    throw UsageError("nothing to compare: all " + std::to_string(in_common) + " cases in common" + filt +
                     " were skipped in the baseline or the current run");
  for (std::size_t i = 0; i < rep.cases.size(); ++i) {
    if (!rep.cases[i].compared || pairs[i].first->device_conflict.empty()) continue;
    const std::string msg = "baseline runs of different devices: " + rep.cases[i].label + ": " +
                            pairs[i].first->device_conflict;
    if (!o.allow_device_mismatch) throw UsageError(msg + "; pass --allow-device-mismatch to pool them anyway");
    rep.warnings.push_back(msg + " (allowed by --allow-device-mismatch)");
    break;
  }
  if (dev_c.empty())
    rep.warnings.push_back("current: no compared case names its device: the device check could not run");
  if (!mismatched.empty()) {
    std::string msg = "device mismatch: " + mismatched.front();
    if (mismatched.size() > 1) msg += " (and " + std::to_string(mismatched.size() - 1) + " more cases)";
    if (!o.allow_device_mismatch) throw UsageError(msg + "; pass --allow-device-mismatch to compare anyway");
    rep.warnings.push_back(msg + " (allowed by --allow-device-mismatch)");
  }
  if (!too_few.empty()) {
    std::string msg = too_few.front().text;
    if (too_few.size() > 1) msg += " (and " + std::to_string(too_few.size() - 1) + " more)";
    throw UsageError(msg + "; " + remedy(too_few.front(), o) + "; or lower --min-samples");
  }
  rep.baseline_device = join(dev_b);
  rep.current_device = join(dev_c);

  double log_sum = 0;
  std::vector<CaseTest> tests(rep.cases.size());
  std::vector<double> p_slower, p_faster;  // of the compared cases, in case order
  std::size_t one_run = 0;  // compared cases that one baseline run measured
  for (std::size_t i = 0; i < rep.cases.size(); ++i) {
    CaseResult& r = rep.cases[i];
    if (r.throttled_base || r.throttled_cur)
      append_note(r.note, "throttled samples ignored: " + std::to_string(r.throttled_base) + " baseline, " +
                              std::to_string(r.throttled_cur) + " current");
    rep.throttled_base += r.throttled_base;
    rep.throttled_cur += r.throttled_cur;
    if (!r.compared) continue;
    tests[i] = measure(r, *pairs[i].first, *pairs[i].second);
    one_run += tests[i].runs < 2;
    p_slower.push_back(tests[i].p_slower);
    p_faster.push_back(tests[i].p_faster);
    log_sum += std::log(r.median_cur / r.median_base);
    ++rep.compared;
  }
  rep.geomean_ratio = std::exp(log_sum / static_cast<double>(rep.compared));
  // Holm over the compared cases, each direction on its own: one gate raises a false SLOWER with probability at
  // most alpha, however many cases it compares.
  const std::vector<double> slower_holm = holm_adjust(p_slower), faster_holm = holm_adjust(p_faster);
  for (std::size_t i = 0, j = 0; i < rep.cases.size(); ++i)
    if (rep.cases[i].compared) {
      decide(rep.cases[i], tests[i], slower_holm[j], faster_holm[j], rep.compared, o);
      ++j;
      // A flag the harness set while measuring (other work switched the process out) is what a reader of a SLOWER
      // or NOISY case needs first: the current row's, then the baseline's (of pooled runs, the note kept by the merge).
      const Verdict v = rep.cases[i].verdict;
      if (v == Verdict::slower || v == Verdict::noisy)
        for (const auto& [side, cd] : {std::pair{"current", pairs[i].second}, std::pair{"baseline", pairs[i].first}})
          if (const auto at = cd->note.find("machine busy"); at != std::string::npos)
            append_note(rep.cases[i].note, std::string(side) + " row: " +
                                               cd->note.substr(at, cd->note.find(';', at) - at));
    }
  if (one_run)
    rep.warnings.push_back(
        (one_run == rep.compared ? std::string("a baseline of one run")
                                 : std::to_string(one_run) + " of " + std::to_string(rep.compared) +
                                       " cases measured by one baseline run") +
        ": its samples are tested as if independent, and a whole run's shift (clocks, placement, another job) reads "
        "as a change; give --baseline several runs, 5 on a dedicated runner (docs/gate.md \"Statistics\")");

  finish_labels_and_order(rep.cases);
  const bool fail = rep.count(Verdict::slower) > 0 || (o.fail_on_missing && rep.count(Verdict::missing) > 0);
  rep.exit_code = fail ? kExitFailure : kExitOk;
  rep.missing_fails = o.fail_on_missing;
  return rep;
}

}  // namespace kvf::gate
