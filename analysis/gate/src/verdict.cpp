// Matching cases and giving verdicts. The rules are stated once, at the top of kvf/gate.hpp, and in
// docs/gate.md "Verdict rules"; classify() below is their only implementation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <tuple>

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

// Fill in the numbers and the verdict of a case measured on both sides. See kvf/gate.hpp.
void classify(CaseResult& r, const CaseData& b, const CaseData& c, const GateOptions& o) {
  r.compared = true;
  r.median_base = median_of(b.samples);
  r.median_cur = median_of(c.samples);
  r.change = r.median_cur / r.median_base - 1.0;
  r.spread_base = relative_iqr(b.samples);
  r.spread_cur = relative_iqr(c.samples);
  // Between-run movement of a multi-run baseline counts like a spread: a whole run can shift on a
  // shared machine by more than the samples inside any one run vary.
  if (b.run_medians.size() >= 2) {
    const auto [lo, hi] = std::minmax_element(b.run_medians.begin(), b.run_medians.end());
    r.spread_runs = (*hi - *lo) / r.median_base;
    r.runs_base = b.run_medians.size();
  }
  r.noise_floor = 2.0 * std::max({r.spread_base, r.spread_cur, r.spread_runs});
  if (r.spread_runs > std::max(r.spread_base, r.spread_cur))
    append_note(r.note, "the " + std::to_string(r.runs_base) + " baseline runs' medians differ by " + pct(r.spread_runs));
  r.limit = std::max(o.threshold, r.noise_floor);
  const MwuResult t = mann_whitney_u(c.samples, b.samples);
  r.p = t.p;
  r.exact = t.exact;
  const bool significant = r.p < o.alpha;
  if (r.change > r.limit && significant) {
    r.verdict = Verdict::slower;
  } else if (r.change < -r.limit && significant) {
    r.verdict = Verdict::faster;
  } else if (r.noise_floor > o.threshold) {
    r.verdict = Verdict::noisy;
    append_note(r.note, "noise floor " + pct(r.noise_floor) + " > threshold " + pct(o.threshold));
  } else if (std::fabs(r.change) > o.threshold) {
    r.verdict = Verdict::noisy;
    append_note(r.note, "change not significant (p " + num(r.p) + " >= alpha " + num(o.alpha) + ")");
  } else {
    r.verdict = Verdict::same;
  }
  const double min_p = t.ties ? 0.0 : mwu_min_p(b.samples.size(), c.samples.size());
  if (t.exact && min_p >= o.alpha)
    append_note(r.note, "too few samples: p can never be below alpha (smallest possible p " + num(min_p) + ")");
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
  rep.baseline_source = baseline.source;
  rep.current_source = current.source;
  for (const auto& w : baseline.warnings) rep.warnings.push_back("baseline: " + w);
  for (const auto& w : current.warnings) rep.warnings.push_back("current: " + w);
  check_injection("--baseline", baseline, o, rep);
  check_injection("--current", current, o, rep);

  std::set<CaseKey> keys;
  for (const auto& [k, _] : bm) keys.insert(k);
  for (const auto& [k, _] : cm) keys.insert(k);

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
      if (b->skipped || c->skipped) {
        r.verdict = Verdict::skipped;
        if (b->skipped) append_note(r.note, "baseline: " + b->note);
        if (c->skipped) append_note(r.note, "current: " + c->note);
      } else {
        const std::string db = device_of(*b, baseline), dc = device_of(*c, current);
        if (!db.empty()) dev_b.insert(db);
        if (!dc.empty()) dev_c.insert(dc);
        if (!db.empty() && !dc.empty() && db != dc)
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
  for (std::size_t i = 0; i < rep.cases.size(); ++i) {
    CaseResult& r = rep.cases[i];
    if (r.throttled_base || r.throttled_cur)
      append_note(r.note, "throttled samples ignored: " + std::to_string(r.throttled_base) + " baseline, " +
                              std::to_string(r.throttled_cur) + " current");
    rep.throttled_base += r.throttled_base;
    rep.throttled_cur += r.throttled_cur;
    if (!r.compared) continue;
    classify(r, *pairs[i].first, *pairs[i].second, o);
    log_sum += std::log(r.median_cur / r.median_base);
    ++rep.compared;
  }
  rep.geomean_ratio = std::exp(log_sum / static_cast<double>(rep.compared));

  finish_labels_and_order(rep.cases);
  const bool fail = rep.count(Verdict::slower) > 0 || (o.fail_on_missing && rep.count(Verdict::missing) > 0);
  rep.exit_code = fail ? kExitFailure : kExitOk;
  rep.missing_fails = o.fail_on_missing;
  return rep;
}

}  // namespace kvf::gate
