// The A/B mode's verdicts: the rounds of both builds matched case by case, each case decided on its paired
// per-round ratios. The rules are stated once, in kvf/gate.hpp above run_paired_gate, and in docs/gate.md
// "A/B mode"; classify_paired() below is their only implementation.
#include <cmath>
#include <map>
#include <optional>
#include <regex>

#include "gate_detail.hpp"
#include "kvf/errors.hpp"
#include "kvf/gate.hpp"

namespace kvf::gate {

namespace {

using namespace detail;

// One case across the rounds: its data in each round of each side (nullptr where the round lacks it).
struct Track {
  std::vector<const CaseData*> base, cur;
  const ResultSet* base_rs = nullptr;
  const ResultSet* cur_rs = nullptr;
};

struct PairedCase {
  std::vector<double> d;  // log(new / base) per round
  SignedRank test;
  ShiftEstimate shift;    // of d
};

std::string interval(const CaseResult& r) {
  auto bound = [](double v) { return std::isfinite(v) ? pct(v) : std::string(v > 0 ? "+inf" : "-inf"); };
  return "[" + bound(r.ci_lo) + ", " + bound(r.ci_hi) + "]";
}

// See kvf/gate.hpp: the verdict of a compared case from its Holm-corrected one-sided p-values.
void classify_paired(CaseResult& r, double holm_slower, double holm_faster, const GateOptions& o) {
  r.p_holm = r.change >= 0 ? holm_slower : holm_faster;
  const bool significant = (holm_slower < o.alpha && r.change > 0) || (holm_faster < o.alpha && r.change < 0);
  // As the stored mode: beyond the threshold by its estimate, not by its interval's far end (five rounds leave the
  // interval unbounded, and a +0.1% change had failed a 5% gate; a wide interval reached it from +1%).
  if (holm_slower < o.alpha && r.change > o.threshold) {
    r.verdict = Verdict::slower;
  } else if (holm_faster < o.alpha && r.change < -o.threshold) {
    r.verdict = Verdict::faster;
  } else if (r.detectable > o.threshold) {
    r.verdict = Verdict::noisy;
    append_note(r.note, std::isfinite(r.detectable)
                            ? "this run could only have seen a slowdown of " + pct(r.detectable) + " or more"
                            : "too few rounds for any slowdown up to +" + pct(max_detectable(o.threshold)) +
                                  " to be significant after the correction for the number of cases; give more "
                                  "--rounds");
  } else {
    r.verdict = Verdict::same;
    if (significant)
      append_note(r.note, "a significant change of " + pct(r.change) + " " + interval(r) + ", within the threshold" +
                              (std::abs(r.change >= 0 ? r.ci_hi : r.ci_lo) >= o.threshold
                                   ? " by its estimate; its interval reaches the threshold (more --rounds narrow it)"
                                   : ""));
  }
}

}  // namespace

GateReport run_paired_gate(const PairedRuns& runs, const GateOptions& o) {
  const std::optional<std::regex> filter = checked_options(o);
  const std::size_t n = runs.base.size();
  if (n < 2) throw UsageError("--rounds " + std::to_string(n) + ": must be at least 2 (the test pairs rounds)");
  if (runs.cur.size() != n || runs.base_first.size() != n)
    throw UsageError("A/B: " + std::to_string(n) + " base rounds, " + std::to_string(runs.cur.size()) +
                     " new rounds and " + std::to_string(runs.base_first.size()) + " orders: they must match");
  GateReport rep;
  rep.threshold = o.threshold;
  rep.paired = true;
  rep.rounds = n;
  rep.seed = runs.seed;
  rep.wall_s = runs.wall_s;
  rep.injected = runs.injected;
  rep.baseline_source = runs.base_source;
  rep.current_source = runs.new_source;
  for (std::size_t i = 0; i < n; ++i) rep.order += std::string(i ? " " : "") + (runs.base_first[i] ? "AB" : "BA");

  std::map<CaseKey, Track> tracks;
  std::set<std::string> warned;
  for (std::size_t i = 0; i < n; ++i) {
    for (auto [side, rs] : {std::pair{"base", &runs.base[i]}, std::pair{"new", &runs.cur[i]}}) {
      for (const auto& w : rs->warnings)
        if (warned.insert(std::string(side) + ": " + w).second)
          rep.warnings.push_back(std::string(side) + " round " + std::to_string(i + 1) + ": " + w);
      for (const auto& c : rs->cases) {
        if (filter && !std::regex_search(c.key.label(), *filter)) continue;
        Track& t = tracks[c.key];
        auto& slot = side == std::string("base") ? t.base : t.cur;
        slot.resize(n, nullptr);
        slot[i] = &c;
        (side == std::string("base") ? t.base_rs : t.cur_rs) = rs;
      }
    }
  }

  std::vector<PairedCase> paired;     // parallel to rep.cases where compared
  std::vector<std::string> mismatched;
  std::set<std::string> dev_b, dev_c;
  for (auto& [key, t] : tracks) {
    CaseResult r;
    r.key = key;
    r.label = key.label();
    t.base.resize(n, nullptr);
    t.cur.resize(n, nullptr);
    std::size_t nb = 0, nc = 0;
    bool skipped = false, empty = false, base_measured = false, new_skips_all = true;
    std::string skip_note;
    for (std::size_t i = 0; i < n; ++i) {
      for (const CaseData* c : {t.base[i], t.cur[i]}) {
        if (!c) continue;
        if (c->skipped && !skipped) skip_note = c->note;
        skipped = skipped || c->skipped;
        empty = empty || (!c->skipped && c->samples.empty());
      }
      base_measured = base_measured || (t.base[i] && !t.base[i]->skipped && !t.base[i]->samples.empty());
      new_skips_all = new_skips_all && t.cur[i] && t.cur[i]->skipped;
      nb += t.base[i] != nullptr;
      nc += t.cur[i] != nullptr;
      if (t.base[i]) r.n_base += t.base[i]->samples.size(), r.throttled_base += t.base[i]->throttled;
      if (t.cur[i]) r.n_cur += t.cur[i]->samples.size(), r.throttled_cur += t.cur[i]->throttled;
    }
    if (nb == 0) {
      r.verdict = Verdict::new_case;
    } else if (nc == 0) {
      r.verdict = Verdict::missing;
    } else if (base_measured && new_skips_all) {
      // Measured by the base build and skipped by the new one: lost, as the stored mode says (--fail-on-missing).
      r.verdict = Verdict::missing;
      append_note(r.note, "measured by the base build, skipped by the new one: " + skip_note);
    } else if (skipped || empty || nb < n || nc < n) {
      r.verdict = Verdict::skipped;
      append_note(r.note, skipped ? (skip_note.rfind("skipped", 0) == 0 ? skip_note : "skipped: " + skip_note)
                          : empty ? std::string("a round has no usable sample (all throttled)")
                                  : "measured in " + std::to_string(nb) + " of " + std::to_string(n) +
                                        " base rounds and " + std::to_string(nc) + " new rounds");
    } else {
      const std::string db = device_of(*t.base[0], *t.base_rs), dc = device_of(*t.cur[0], *t.cur_rs);
      if (!db.empty()) dev_b.insert(db);
      if (!dc.empty()) dev_c.insert(dc);
      if (!db.empty() && !dc.empty() && !same_device(db, dc))
        mismatched.push_back(r.label + ": base '" + db + "', new '" + dc + "'");
      PairedCase pc;
      std::vector<double> mb, mc;
      auto value = [&](const std::vector<double>& xs) {
        return o.round_stat == GateOptions::RoundStat::min ? *std::min_element(xs.begin(), xs.end()) : median_of(xs);
      };
      for (std::size_t i = 0; i < n; ++i) {
        mb.push_back(value(t.base[i]->samples));
        mc.push_back(value(t.cur[i]->samples));
        r.round_ratios.push_back(mc.back() / mb.back());
        pc.d.push_back(std::log(r.round_ratios.back()));
      }
      r.compared = true;
      r.median_base = median_of(mb);
      r.median_cur = median_of(mc);
      r.spread_base = relative_iqr(mb);
      r.spread_cur = relative_iqr(mc);
      pc.test = wilcoxon_signed_rank(pc.d);
      pc.shift = hodges_lehmann(pc.d, o.alpha);
      paired.push_back(std::move(pc));
    }
    rep.cases.push_back(std::move(r));
  }

  const std::string filt = filter ? " matching --filter '" + o.filter + "'" : "";
  if (paired.empty())
    throw UsageError("nothing to compare: of " + std::to_string(tracks.size()) + " cases" + filt +
                     ", none was measured in every round of both builds");
  if (!mismatched.empty()) {
    std::string msg = "the builds ran on different backends or devices: " + mismatched.front();
    if (mismatched.size() > 1) msg += " (and " + std::to_string(mismatched.size() - 1) + " more cases)";
    if (!o.allow_device_mismatch)
      throw UsageError(msg + "; give both the same backend (-- --backend cpu|cuda) or pass --allow-device-mismatch");
    rep.warnings.push_back(msg + " (allowed by --allow-device-mismatch)");
  }
  rep.baseline_device = join(dev_b);
  rep.current_device = join(dev_c);

  // Holm over the compared cases, each direction on its own: one trial raises a false SLOWER with probability
  // at most alpha however many cases it compares.
  std::vector<double> p_slower, p_faster;
  for (const auto& pc : paired) p_slower.push_back(pc.test.p_greater), p_faster.push_back(pc.test.p_less);
  const auto holm_slower = holm_adjust(p_slower), holm_faster = holm_adjust(p_faster);
  const double level = o.alpha / static_cast<double>(paired.size());  // Holm's first step: what power must clear
  double log_sum = 0;
  std::size_t k = 0;
  for (auto& r : rep.cases) {
    if (r.throttled_base || r.throttled_cur)
      append_note(r.note, "throttled samples ignored: " + std::to_string(r.throttled_base) + " base, " +
                              std::to_string(r.throttled_cur) + " new");
    rep.throttled_base += r.throttled_base;
    rep.throttled_cur += r.throttled_cur;
    if (!r.compared) continue;
    const PairedCase& pc = paired[k];
    r.change = std::expm1(pc.shift.estimate);
    r.ci_lo = std::expm1(pc.shift.lo);
    r.ci_hi = std::expm1(pc.shift.hi);
    r.exact = pc.test.exact;
    r.p = r.change >= 0 ? pc.test.p_greater : pc.test.p_less;
    r.detectable = reported_detectable(std::expm1(detectable_shift(pc.d, level)), o.threshold);
    classify_paired(r, holm_slower[k], holm_faster[k], o);
    log_sum += pc.shift.estimate;
    ++k;
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
