// Matching cases and giving verdicts. The rules are stated once, at the top of kvf/gate.hpp, and in
// docs/gate.md "Verdict rules"; classify() below is their only implementation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "kvf/errors.hpp"
#include "kvf/gate.hpp"
#include "kvf/stats.hpp"

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

std::string pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * f);
  return buf;
}
std::string num(double v, const char* fmt = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

double median_of(std::span<const double> xs) {
  std::vector<double> s(xs.begin(), xs.end());
  std::sort(s.begin(), s.end());
  return quantile_sorted(s, 0.5);
}

void append_note(std::string& note, const std::string& more) {
  if (more.empty()) return;
  if (!note.empty()) note += "; ";
  note += more;
}

// The device a case ran on: its own column, else the one device named by meta.json / the context.
std::string device_of(const CaseData& c, const ResultSet& rs) {
  std::string d = c.device;
  if (d.empty() && rs.meta_devices.size() == 1) d = *rs.meta_devices.begin();
  if (!d.empty() && !c.backend.empty()) d = c.backend + ":" + d;
  return d;
}

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "unknown" : out;
}

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

}  // namespace

GateReport run_gate(const ResultSet& baseline, const ResultSet& current, const GateOptions& o) {
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

  std::set<CaseKey> keys;
  for (const auto& [k, _] : bm) keys.insert(k);
  for (const auto& [k, _] : cm) keys.insert(k);

  std::size_t in_common = 0;
  std::vector<std::string> too_few, mismatched;
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
        for (auto [side, d] : {std::pair{"baseline", b}, std::pair{"current", c}}) {
          if (static_cast<int>(d->samples.size()) < o.min_samples)
            too_few.push_back(r.label + ": " + side + " has " + std::to_string(d->samples.size()) +
                              " usable samples" +
                              (d->throttled ? " (" + std::to_string(d->throttled) + " throttled ignored)" : "") +
                              ", fewer than --min-samples " + std::to_string(o.min_samples));
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
    std::string msg = too_few.front();
    if (too_few.size() > 1) msg += " (and " + std::to_string(too_few.size() - 1) + " more)";
    // Each side's remedy: a results directory holds our samples (a longer --budget takes more); a Google
    // Benchmark JSON holds one time per repetition, so only more repetitions add samples there.
    std::string remedy;
    for (const ResultSet* side : {&baseline, &current}) {
      const std::string r = side->format == "Google Benchmark JSON"
                                ? "rerun with --benchmark_repetitions=N (one sample per repetition in its JSON)"
                                : "take more samples (kvf run ... -- --budget S)";
      if (remedy.find(r) == std::string::npos) remedy += (remedy.empty() ? "" : ", or ") + r;
    }
    throw UsageError(msg + "; " + remedy + ", or lower --min-samples");
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

  // Labels that collide (same study/case/mode, different parameters) get their parameters appended.
  std::map<std::string, int> label_count;
  for (const auto& r : rep.cases) ++label_count[r.label];
  for (auto& r : rep.cases)
    if (label_count[r.label] > 1) r.label += " {" + r.key.params_string() + "}";

  std::stable_sort(rep.cases.begin(), rep.cases.end(), [](const CaseResult& a, const CaseResult& b) {
    if (a.verdict != b.verdict) return static_cast<int>(a.verdict) < static_cast<int>(b.verdict);
    return a.label < b.label;
  });
  const bool fail = rep.count(Verdict::slower) > 0 || (o.fail_on_missing && rep.count(Verdict::missing) > 0);
  rep.exit_code = fail ? kExitFailure : kExitOk;
  return rep;
}

}  // namespace kvf::gate
