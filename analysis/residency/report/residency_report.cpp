// The residency replay in the report (issue 17): for each results directory with the files of `kvf residency
// --out` beside it, the added latency and the hit rates against the HBM budget per policy (charts), the answer at
// one budget (table: the CSV's figures), and where the `cost` policy beats `lru` and `lru-host`. Not a study: no
// bench writes cases.csv rows for it; the section is there only where a directory has a replay.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "kvf/errors.hpp"
#include "kvf/residency_report.hpp"
#include "kvf/study_report.hpp"

namespace kvf::report {

namespace {

using namespace md;
namespace rd = residency;

std::string ms(double us) { return fmt(us / 1e3); }
std::string pct(double fraction) { return fmt(100 * fraction) + "%"; }
std::string gib(double g) { return fmt(g) + " GiB"; }

// Every distinct value of one column, in row order: a replay states its cost sources once per row.
template <class F>
std::vector<std::string> distinct(const rd::Replay& r, F f) {
  std::vector<std::string> out;
  for (const auto& w : r.rows)
    if (std::find(out.begin(), out.end(), f(w)) == out.end()) out.push_back(f(w));
  return out;
}

std::string join_txt(const std::vector<std::string>& v, const char* sep = "; ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + txt(x);
  return s;
}

const rd::Row* row_at(const rd::Replay& r, const std::string& policy, double budget) {
  for (const auto& w : r.rows)
    if (w.policy == policy && w.hbm_gib == budget) return &w;
  return nullptr;
}

struct Found {
  const ResultSet* set = nullptr;
  std::optional<rd::Replay> replay;
  std::string error;  // why the files could not be read (UsageError's text: file, line, column)
};

// Each directory's replay, read through the bounded readers; an unreadable one is said in the section and as a
// warning, and the rest of the report stands (the files are beside the suite's results, not part of them).
std::vector<Found> find_all(ReportContext& cx) {
  std::vector<Found> out;
  for (const auto& rs : cx.sets) {
    const auto dir = rd::find_replay(rs.dir);
    if (!dir) continue;
    Found f;
    f.set = &rs;
    try {
      f.replay = rd::read_replay(*dir, rs.dir);
      for (const auto& w : f.replay->read_around) cx.warn(w);
    } catch (const UsageError& e) {
      f.error = e.what();
      cx.warn(f.error + " (the residency section says it is not available)");
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string suffix(std::size_t k) { return k == 0 ? "" : "_" + std::to_string(k + 1); }

// Added latency per request against the HBM budget: one panel per percentile, one line per policy, the no-cache
// latency as a reference line (it does not depend on the budget).
Plot latency_plot(const rd::Replay& r, std::size_t k) {
  Plot p{"residency_latency" + suffix(k), "Added latency per request against HBM budget, " + r.model + " on " + r.gpu,
         "HBM budget (GiB)", "added latency (ms)", false, false, {}, {}, 2, AxisUnit::plain, {"percentile"}};
  for (const char* q : {"p50", "p99"}) {
    const bool p50 = std::string(q) == "p50";
    for (const auto& policy : r.policies()) {
      Line l;
      l.title = policy;
      l.key = {{"percentile", q}};
      for (const auto& w : r.rows)
        if (w.policy == policy) l.pts.emplace_back(w.hbm_gib, (p50 ? w.added_p50_us : w.added_p99_us) / 1e3);
      std::sort(l.pts.begin(), l.pts.end());
      p.lines.push_back(std::move(l));
    }
    Line none;
    none.title = std::string("no cache ") + q;
    none.key = {{"percentile", q}};
    none.ref = Line::Ref::horizontal;
    none.style = "lines dt 2 lc rgb 'gray'";
    none.pts = {{r.rows.front().hbm_gib, (p50 ? r.rows.front().nocache_p50_us : r.rows.front().nocache_p99_us) / 1e3}};
    p.lines.push_back(std::move(none));
  }
  return p;
}

// Hit rate (of block references) by tier against the HBM budget: HBM, host, and both; a policy without a host
// tier (host_gib 0 in every row) is left out of the host panel.
Plot hits_plot(const rd::Replay& r, std::size_t k) {
  Plot p{"residency_hits" + suffix(k), "Hit rate by tier against HBM budget, " + r.model + " on " + r.gpu,
         "HBM budget (GiB)", "hit rate (of block references)", false, false, {}, {}, 2, AxisUnit::plain, {"tier"}};
  // The last panel is every tier's hits: with a disk or a peer's pool behind host memory, its hits too.
  bool tier3 = false;
  for (const auto& w : r.rows) tier3 = tier3 || w.tier3_gib > 0;
  const std::string all = tier3 ? std::string("HBM + host + ") + (r.peer_tier ? "peer" : "disk") : "HBM + host";
  for (const std::string& tier : {std::string("HBM"), std::string("host"), all}) {
    for (const auto& policy : r.policies()) {
      Line l;
      l.title = policy;
      l.key = {{"tier", tier}};
      bool host = false;
      for (const auto& w : r.rows) {
        if (w.policy != policy) continue;
        host = host || w.host_gib > 0;
        l.pts.emplace_back(w.hbm_gib, tier == "HBM" ? w.hit_rate_hbm : tier == "host" ? w.hit_rate_host : w.hit_rate);
      }
      if (tier == "host" && !host) continue;
      std::sort(l.pts.begin(), l.pts.end());
      p.lines.push_back(std::move(l));
    }
  }
  return p;
}

// Compression is cost's alone in this pair of rows: a win may be the smaller store's, not the policy's.
bool only_cost_compresses(const rd::Row& cost, const rd::Row& base) {
  return !cost.compress_to.empty() && cost.compress_to != "none" && cost.compress_to != base.compress_to;
}

// "For Llama-3.1-8B on H100 SXM with 34 GiB of HBM: cost adds 12.3% less latency than lru (...); prefill ...; added
// p99 1,234 ms against 1,456 ms".
std::string sentence(const rd::Replay& r, double b) {
  const rd::Row* cost = row_at(r, "cost", b);
  // A policy's tiers behind HBM: "64 GiB host and 1024 GiB disk".
  const auto tiers = [&](const rd::Row& w) {
    return gib(w.host_gib) + " host" +
           (w.tier3_gib > 0 ? " and " + gib(w.tier3_gib) + (r.peer_tier ? " peer" : " disk") : std::string());
  };
  std::string s;
  for (const char* name : {"lru", "lru-host"}) {
    const rd::Row* base = row_at(r, name, b);
    if (!cost || !base) continue;
    s += "- For " + txt(r.model) + " on " + txt(r.gpu) + " with " + gib(b) + " of HBM" +
         (cost->host_gib > 0 ? " (+ " + tiers(*cost) + " for cost" +
                                   (base->host_gib > 0 ? ", " + tiers(*base) + " for " + name : "") + ")"
                             : "") +
         ": ";
    // The latency a request sees (prefill, fetches from every tier, restores) first: prefill alone leaves out what
    // a slow tier's fetches cost, and a policy that prefills less can add more.
    if (base->added_total_s > 0) {
      const double saved = (base->added_total_s - cost->added_total_s) / base->added_total_s;
      s += saved >= 0 ? "cost adds " + pct(saved) + " less latency than " + name
                      : "cost adds " + pct(-saved) + " more latency than " + name;
      s += " (" + fmt(cost->added_total_s) + " s against " + fmt(base->added_total_s) +
           " s over the trace: prefill, fetches and restores)";
    } else {
      s += std::string(name) + " adds no latency, cost " + fmt(cost->added_total_s) + " s";
    }
    s += "; prefill " + fmt(cost->prefill_total_s) + " s against " + fmt(base->prefill_total_s) + " s; added p99 " +
         ms(cost->added_p99_us) + " ms against " + ms(base->added_p99_us) + " ms";
    if (only_cost_compresses(*cost, *base)) {
      s += " (cost compresses to " + txt(cost->compress_to) + ", " + name + " keeps " +
           (r.block_form.empty() ? std::string("the replay's form") : txt(r.block_form));
      // The replay's control (kvf residency runs it beside a compressing cost): the policy without the smaller store.
      if (const rd::Row* ctl = row_at(r, "cost-no-compress", b); ctl && base->added_total_s > 0) {
        const double saved = (base->added_total_s - ctl->added_total_s) / base->added_total_s;
        s += "; its control cost-no-compress, the same policy storing no compressed form, adds " +
             fmt(ctl->added_total_s) + " s: the policy" +
             (base->host_gib < ctl->host_gib ? std::string(" with its host tier") : std::string(" alone")) + " adds " +
             pct(std::fabs(saved)) +
             (saved >= 0 ? " less" : " more") + " than " + name + ", the rest is the compressed store's (its quality "
             "loss unpriced))";
      } else {
        s += ": `kvf residency --compress-to none` compares the policies alone)";
      }
    }
    s += ".\n";
  }
  if (s.empty())
    s = "- No comparison: the replay has " + (cost ? std::string("neither lru nor lru-host") : std::string("no cost policy")) +
        " (policies: " + join_txt(r.policies(), ", ") + ").\n";
  return s + "\n";
}

std::string answer_table(const rd::Replay& r, double b) {
  // The tier behind host memory (disk or a peer's pool), where any row at this budget has one: its hits are part
  // of the prefill avoided.
  bool tier3 = false;
  for (const auto& w : r.rows) tier3 = tier3 || (w.hbm_gib == b && w.tier3_gib > 0);
  const std::string t3 = r.peer_tier ? "peer" : "disk";
  std::vector<std::string> cols = {"policy", "host GiB", "hit rate HBM", "hit rate host"};
  if (tier3) cols.insert(cols.end(), {t3 + " GiB", "hit rate " + t3});
  cols.insert(cols.end(), {"prefill avoided (tokens)", "prefill avoided (s)", "prefill (s)", "added p50 (ms)",
                           "added p99 (ms)", "host link fetched (GB)", "host link demoted (GB)"});
  std::string t = header(cols);
  const rd::Row* any = nullptr;
  for (const auto& w : r.rows) {
    if (w.hbm_gib != b) continue;
    any = any ? any : &w;
    // Belady on HBM alone: a bound on the reuse of HBM-only policies, not of those with a host tier (README)
    std::vector<std::string> cells = {txt(w.policy) + (w.offline ? " (offline, HBM only)" : ""), fmt(w.host_gib),
                                      fmt(w.hit_rate_hbm), fmt(w.hit_rate_host)};
    if (tier3) cells.insert(cells.end(), {fmt(w.tier3_gib), fmt(w.hit_rate_tier3)});
    cells.insert(cells.end(), {pct(w.prefill_avoided), fmt(w.prefill_avoided_s), fmt(w.prefill_total_s),
                               ms(w.added_p50_us), ms(w.added_p99_us), fmt(w.host_link_bytes / 1e9),
                               w.host_link_demote_bytes ? fmt(*w.host_link_demote_bytes / 1e9) : "-"});
    t += row(cells);
  }
  std::vector<std::string> none = {"no cache", "-", "0", "0"};
  if (tier3) none.insert(none.end(), {"-", "0"});
  // No cache prefills everything: any row's prefill plus what it avoided (prefill_avoided_s is no-cache's less its).
  none.insert(none.end(), {"0%", "0", fmt(any->prefill_total_s + any->prefill_avoided_s), ms(any->nocache_p50_us),
                           ms(any->nocache_p99_us), "-", "-"});
  t += row(none);
  return t + "\n";
}

// Where `cost` beats `base` over the sweep, by one figure (lower is better): "lower at 34 GiB (-1.2 s), ...".
std::string where_beats(const rd::Replay& r, const std::string& base, const std::string& what, double (*f)(const rd::Row&),
                        const char* unit, const std::string& who = "cost") {
  std::map<std::pair<std::string, double>, const rd::Row*> at;  // one pass: a sweep may have 1,000 budgets
  for (const auto& w : r.rows) at.emplace(std::make_pair(w.policy, w.hbm_gib), &w);
  std::string lower, higher, equal, unequal;
  std::size_t n = 0, wins = 0;
  for (double b : r.budgets()) {
    const auto c = at.find({who, b}), o = at.find({base, b});
    if (c == at.end() || o == at.end()) continue;
    ++n;
    // lru keeps HBM only: against a cost policy with a host tier it is no like-for-like base, and the line says so.
    const rd::Row &cr = *c->second, &orow = *o->second;
    if (unequal.empty() && (cr.host_gib != orow.host_gib || cr.tier3_gib != orow.tier3_gib))
      unequal = " (not at equal memory: " + who + " has " + gib(cr.host_gib) + " of host" +
                (cr.tier3_gib > 0 ? " and " + gib(cr.tier3_gib) + " behind it" : std::string()) + ", " + base + " " +
                (orow.host_gib > 0 ? gib(orow.host_gib) + " of host" : std::string("HBM only")) + ")";
    if (unequal.find("compresses") == std::string::npos && only_cost_compresses(cr, orow))
      unequal += " (cost compresses to " + txt(cr.compress_to) + ", " + base + " does not: `--compress-to none` "
                 "compares the policies alone)";
    const double d = f(*c->second) - f(*o->second);
    std::string& list = d < 0 ? lower : d > 0 ? higher : equal;
    list += (list.empty() ? "" : ", ") + gib(b) + (d == 0 ? "" : " (" + std::string(d > 0 ? "+" : "") + fmt(d) + unit + ")");
    wins += d < 0;
  }
  if (!n) return "";
  const std::string verdict = wins == n   ? "beats " + base + " at every budget"
                              : wins == 0 ? "does not beat " + base + " at any budget"
                                          : "beats " + base + " at " + std::to_string(wins) + " of " + std::to_string(n) + " budgets";
  std::string s = "- " + what + ": " + who + " **" + verdict + "**" + unequal;
  if (!lower.empty()) s += "; lower at " + lower;
  if (!higher.empty()) s += "; higher at " + higher;
  if (!equal.empty()) s += "; equal at " + equal;
  return s + ".\n";
}

// Compress passes are GPU time the added latency leaves out (off the request path): where cost's gain in summed
// added latency over `base` is smaller than that time, the gain is not a saving of GPU time, and the line says so.
std::string compress_note(const rd::Replay& r, const std::string& base) {
  std::size_t wins = 0, outweighed = 0;
  std::string example;
  for (double b : r.budgets()) {
    const rd::Row *c = row_at(r, "cost", b), *o = row_at(r, base, b);
    if (!c || !o || !c->compress_total_s || *c->compress_total_s <= 0) continue;
    const double gain = o->added_total_s - c->added_total_s;
    if (gain <= 0) continue;
    ++wins;
    if (*c->compress_total_s <= gain) continue;
    if (!outweighed++)
      example = gib(b) + ": " + fmt(*c->compress_total_s) + " s of compress passes against a gain of " + fmt(gain) +
                " s";
  }
  if (!wins) return "";
  if (!outweighed)
    return "  - cost's compress passes (GPU time off the request path, in no figure here) took less than its gain at "
           "every budget where it wins.\n";
  return "  - cost's compress passes (GPU time off the request path, in no figure here) took more than its gain at " +
         std::to_string(outweighed) + " of the " + std::to_string(wins) + " budgets where it wins (" + example +
         "): there the gain in latency is no saving of GPU time.\n";
}

std::string verdict_lines(const rd::Replay& r) {
  std::string s;
  bool tier3 = false;
  for (const auto& w : r.rows) tier3 = tier3 || w.tier3_gib > 0;
  const std::string fetched =
      tier3 ? (r.peer_tier ? "host and peer fetch" : "host fetch and disk reads") : "host fetch";
  for (const char* base : {"lru", "lru-host"}) {
    const std::string summed =
        where_beats(r, base,
                    "Added latency summed over the trace (prefill + " + fetched + " + restores), against " + base,
                    [](const rd::Row& w) { return w.added_total_s; }, " s");
    s += summed + (summed.empty() ? "" : compress_note(r, base));
    s += where_beats(r, base, std::string("Added p99, against ") + base,
                     [](const rd::Row& w) { return w.added_p99_us / 1e3; }, " ms");
    s += where_beats(r, base, "Control: the same policy storing no compressed form, added latency summed, against " +
                     std::string(base), [](const rd::Row& w) { return w.added_total_s; }, " s", "cost-no-compress");
  }
  if (s.empty()) return "";
  return "Where the cost policy (and its control cost-no-compress, where the replay has it) beats lru and lru-host, "
         "budget by budget (the replay's figures, one run of a "
         "deterministic simulator: no noise interval; a difference is a difference of the model's prices):\n\n" + s + "\n";
}

// Each host-tier policy's reuse against the oracle at its tiers' blocks in one (where residency.csv has that bound):
// how far an online policy is from what any placement in the prefix-cache model could reuse with those blocks.
std::string bound_lines(const rd::Replay& r) {
  std::string s;
  for (const double b : r.budgets())
    for (const auto& p : r.policies())
      if (const rd::Row* w = row_at(r, p, b); w && w->oracle_bound_hit_rate) {
        const double bound = *w->oracle_bound_hit_rate;
        s += "- " + gib(b) + " HBM + " + gib(w->host_gib) + " host" +
             (w->tier3_gib > 0 ? " + " + gib(w->tier3_gib) + (r.peer_tier ? " peer" : " disk") : std::string()) +
             ": " + txt(p) + " reuses " + fmt(w->hit_rate) + " of block references, the oracle " + fmt(bound) +
             (bound > 0 ? " (" + pct(w->hit_rate / bound) + " of it)" : std::string()) +
             (w->hit_rate > bound ? ": ABOVE its bound, which no policy of the model can be (a bug: please report it)"
                                  : "") +
             "\n";
      }
  if (s.empty()) return "";
  return "Reuse against its bound (residency.csv's oracle_bound_hit_rate: the offline oracle with the policy's HBM, "
         "host and disk or peer blocks in one tier reuses at least as many blocks as any policy of the prefix-cache "
         "model with them; it reads the future and ignores what each tier costs, so it is an upper bound, not a "
         "target; a policy that compressed, or a trace with prefix violations or a request larger than HBM, has "
         "none):\n\n" + s + "\n";
}

// What was replayed, against what, and where each cost comes from.
std::string inputs_of(const rd::Replay& r) {
  std::string budgets;
  for (double b : r.budgets()) budgets += (budgets.empty() ? "" : ", ") + fmt(b);
  std::string s = "Replay read from " + txt(r.dir.string()) + " (`kvf residency --out`): " + txt(r.model) + " on " +
                  txt(r.gpu) + "; trace " + (r.trace.empty() ? std::string("-") : txt(r.trace)) + ": " +
                  std::to_string(r.requests) + " requests, " + std::to_string(r.references) + " block references, " +
                  std::to_string(r.distinct_blocks) + " distinct blocks, " + std::to_string(r.warnings) +
                  " warnings, " + std::to_string(r.prefix_violations) + " prefix violations";
  if (r.block_tokens > 0) s += "; blocks of " + std::to_string(r.block_tokens) + " tokens";
  if (r.block_bytes > 0) s += ", " + bytes(r.block_bytes) + " each";
  if (!r.block_form.empty()) s += " (" + txt(r.block_form) + ")";
  s += "; HBM budgets " + budgets + " GiB; policies " + join_txt(r.policies(), ", ");
  std::vector<std::string> hbm_only;
  for (const auto& p : r.policies()) {
    bool host = false;
    for (const auto& w : r.rows) host = host || (w.policy == p && w.host_gib > 0);
    if (!host) hbm_only.push_back(p);
  }
  if (!hbm_only.empty()) s += " (" + join_txt(hbm_only, ", ") + ": HBM only, no host tier)";
  s += ".";
  // A policy that compresses holds more blocks in the same bytes at a quality the model does not price: say so
  // before the comparisons below read as a like-for-like one.
  for (const auto& p : r.policies()) {
    std::string to;
    for (const auto& w : r.rows)
      if (w.policy == p && !w.compress_to.empty() && w.compress_to != "none") to = w.compress_to;
    if (!to.empty())
      s += " " + txt(p) + " compresses HBM blocks to " + txt(to) +
           " under pressure (more blocks in the same bytes; the quality lost is not priced: `kvf residency "
           "--compress-to none` replays it without).";
  }
  s += "\n\n";
  const auto prefill = distinct(r, [](const rd::Row& w) { return w.prefill_source; });
  const auto fetch = distinct(r, [](const rd::Row& w) { return w.fetch_source; });
  // "measured": rows priced the cost itself (the layers rows' prefill); "model at measured ceilings": the model on
  // figures a results directory measured (replays before 2026-11-30 wrote those "measured: <figure> <- ...").
  auto kind = [](const std::vector<std::string>& v) {
    bool measured = false, model = false, at_ceilings = false;
    for (const auto& x : v) {
      const bool rows = x.rfind("measured: frontier ", 0) == 0;
      if (x.rfind("model at measured", 0) == 0 || (x.rfind("measured: ", 0) == 0 && !rows)) at_ceilings = true;
      else if (x.rfind("model", 0) == 0) model = true;
      else measured = true;
    }
    if (measured + model + at_ceilings > 1) return "mixed";
    return measured ? "measured" : at_ceilings ? "model at measured ceilings" : "model";
  };
  // The sources themselves only where a figure was measured ("measured: host_link_gbps <- ..."): "model" says all.
  auto said = [&](const std::vector<std::string>& v) {
    const std::string k = kind(v);  // named where anything was measured
    return "**" + k + "**" + (k == std::string("model") ? "" : " (" + join_txt(v) + ")");
  };
  s += "Costs (residency.csv's prefill_source and fetch_source): prefill " + said(prefill) + "; host fetch " +
       said(fetch) + ".";
  if (!r.calibrate.empty())
    s += " Calibrated from " + txt(r.calibrate) + " (" + std::to_string(r.calibration.size()) +
         " figures, residency.json's calibration).";
  // The price comes from the model, on the spec's or measured ceilings, unless rows priced the cost itself.
  return s + " Every cost is the frontier study's analytic model (analysis/residency/README.md \"Costs\"), on the "
             "spec sheet's peaks (model) or on ceilings measured in a results directory (model at measured "
             "ceilings), or rows of such a directory scaled by it (measured): a price of this "
             "trace, not a timing of it on a GPU. Added latency = prefill of the missed tokens + host (and disk) "
             "fetches + restores of blocks kept in another form than bf16 K/V, per request, not overlapped "
             "(residency.csv's added_pipelined_* columns hold the layer-pipelined bound).\n\n";
}

std::string section_residency(ReportContext& cx) {
  std::string s;
  const auto found = find_all(cx);
  std::size_t k = 0;
  for (const auto& f : found) {
    if (found.size() > 1 || cx.sets.size() > 1) s += "### " + lbl(*f.set) + "\n\n";
    if (!f.replay) {
      s += "Not available: " + txt(f.error) + "\n\n";
      continue;
    }
    const rd::Replay& r = *f.replay;
    s += inputs_of(r);
    s += cx.chart(latency_plot(r, k));
    s += cx.chart(hits_plot(r, k));
    ++k;
    const auto budgets = r.budgets();
    const double b = rd::chosen_budget(budgets, cx.o.residency_hbm_gib);
    s += "**The answer at " + gib(b) + " of HBM** (";
    if (!cx.o.residency_hbm_gib) s += "the middle of the sweep; `--residency-hbm-gib X` picks another";
    else if (*cx.o.residency_hbm_gib == b) s += "`--residency-hbm-gib " + fmt(b) + "`";
    else s += "`--residency-hbm-gib " + fmt(*cx.o.residency_hbm_gib) + "` is not a swept budget: the nearest one";
    s += "):\n\n" + sentence(r, b) + answer_table(r, b) + verdict_lines(r) + bound_lines(r);
  }
  return s;
}

}  // namespace

StudyReport residency_report() {
  StudyReport s;
  s.study = "residency";  // no cases.csv rows carry it: the plug-in adds a section only
  s.sections = {{"Residency: prefix-cache policies against the HBM budget (kvf residency)", section_residency,
                 [](const ReportContext& cx) {
                   for (const auto& rs : cx.sets)
                     if (rd::find_replay(rs.dir)) return true;
                   return false;
                 }}};
  // `kvf report R` on what `kvf residency --out R` wrote: the replay is the whole input, so a file that cannot
  // be read is bad input (exit 2, file:line), not a section left out.
  s.own_directory = [](const std::string& dir) -> std::optional<ResultSet> {
    const auto where = rd::find_replay(dir);
    if (!where || *where != std::filesystem::path(dir)) return std::nullopt;
    const rd::Replay r = rd::read_replay(*where, dir);
    ResultSet rs;
    rs.dir = dir;
    rs.device = r.gpu;
    rs.backend = "kvf residency";
    rs.label = rs.device + " (" + rs.backend + ")";
    rs.missing.push_back("cases.csv: none here: a `kvf residency --out` directory (a replay priced by " +
                         std::string(r.calibration.empty() ? "the model on the GPU's spec sheet" : "a run's measured ceilings") +
                         "), not a run of the suite; every claim on it is not measured");
    return rs;
  };
  return s;
}

}  // namespace kvf::report
