// `kvf residency --trace FILE --model NAME --gpu NAME --hbm-gib X | --sweep-hbm A:B:STEPS ...`: replays a request
// trace against a prefix cache per policy and HBM budget (analysis/residency) and prices each replay with the
// frontier study's analytic model, calibrated by a results directory when --calibrate is given
// (kvf/residency/costs.hpp). analysis/residency/README.md states the semantics and every formula.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/residency/costs.hpp"
#include "kvf/residency/policy.hpp"
#include "kvf/residency/simulate.hpp"
#include "kvf/residency/synth.hpp"
#include "kvf/residency/trace.hpp"
#include "kvf/results.hpp"
#include "model_inputs.hpp"

namespace kvf::cli {

namespace {

namespace rs = kvf::residency;
using ojson = nlohmann::ordered_json;

inline constexpr double kMaxGib = 1e9;      // beyond any machine: a typo, not a budget
inline constexpr int kMaxSweepSteps = 1000;
inline constexpr int kMaxBlockTokens = 1 << 20;

struct Args {
  std::string trace, model, gpu, calibrate, policies = "lru,lru-host,oracle", sweep, out, gpus_path, models_path,
      save_trace, form = "kv", compress_to = "auto", prefill_cost = "auto";
  bool synthetic = false;
  bool seed_given = false, synthetic_requests_given = false;  // flags that only --synthetic reads
  std::uint64_t seed = 1;
  std::int64_t synthetic_requests = 4000;
  double hbm_gib = 0, host_gib = 0, disk_gib = 0, peer_gib = 0;
  int block_tokens = rs::kMooncakeBlockTokens;
};

std::string policy_names() {
  std::string s;
  for (const auto& p : rs::policy_registry()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

// --policies a,b,c: registry names, each once.
std::vector<const rs::PolicyInfo*> parse_policies(const std::string& text) {
  std::vector<const rs::PolicyInfo*> out;
  std::set<std::string> seen;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const rs::PolicyInfo* found = nullptr;
    for (const auto& p : rs::policy_registry())
      if (p.name == name) found = &p;
    if (!found) bad_flag("--policies", text, "unknown policy " + shown_value(name) + " (allowed: " + policy_names() + ")");
    if (!seen.insert(name).second) bad_flag("--policies", text, "policy " + name + " given twice");
    out.push_back(found);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// --sweep-hbm A:B:STEPS: STEPS budgets from A to B GiB, both included, evenly spaced.
std::vector<double> parse_sweep(const std::string& text) {
  const std::string allowed = "expected A:B:STEPS, 0 < A < B <= " + report::fmt(kMaxGib) +
                              " GiB and STEPS a whole number in 2.." + std::to_string(kMaxSweepSteps);
  double v[3] = {0, 0, 0};
  std::size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t colon = text.find(':', start);
    if ((i < 2) == (colon == std::string::npos)) bad_flag("--sweep-hbm", text, allowed);
    const std::string part = text.substr(start, i < 2 ? colon - start : std::string::npos);
    const auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v[i]);
    if (part.empty() || ec != std::errc{} || p != part.data() + part.size()) bad_flag("--sweep-hbm", text, allowed);
    start = colon + 1;
  }
  if (!(v[0] > 0 && v[0] < v[1] && v[1] <= kMaxGib && v[2] >= 2 && v[2] <= kMaxSweepSteps && v[2] == std::floor(v[2])))
    bad_flag("--sweep-hbm", text, allowed);
  std::vector<double> out;
  const int n = static_cast<int>(v[2]);
  for (int i = 0; i < n; ++i) out.push_back(i == n - 1 ? v[1] : v[0] + (v[1] - v[0]) * i / (n - 1));
  return out;
}

CLI::Validator gib_value() {
  const std::string allowed = "GiB > 0, fractional allowed, at most " + report::fmt(kMaxGib);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number (allowed: " + allowed + ")";
        if (!(v > 0 && v <= kMaxGib)) return "'" + text + "' is out of range (allowed: " + allowed + ")";
        return "";
      },
      allowed);
}

// Blocks in `gib`; a budget holding no block is refused, naming the flag, the value (as given: csv_number's
// shortest text that reads back equal, where fmt's 4 digits would show 1e-300 as 0) and the least budget.
std::size_t blocks_in(double gib, const rs::CostModel& c, const std::string& flag, const std::string& value) {
  const std::size_t n = rs::capacity_blocks(gib, c.block_bytes);
  if (n == 0)
    bad_flag(flag, value,
             csv_number(gib) + " GiB holds no block of " + report::fmt(c.block_bytes) + " bytes (" + c.model->name +
                 ", " + std::to_string(c.block_tokens) + " tokens, " + rs::form_description(c.form) + " of " +
                 report::fmt(c.model->layers) +
                 " layers; allowed: at least " + report::fmt(c.block_bytes / rs::kGiB) + " GiB)");
  return n;
}

double us(double s) { return s * 1e6; }

// Every figure of one policy at one budget: the CSV row and the JSON row are both this object.
ojson row_of(const rs::CostedResult& r, const rs::PolicyInfo& p, const rs::Baseline& base, const rs::CostModel& c) {
  const auto& s = r.sim;
  ojson j;
  j["policy"] = s.policy;
  j["offline"] = p.offline;
  j["hbm_gib"] = r.hbm_gib;
  j["host_gib"] = r.host_gib;
  j["disk_gib"] = r.disk_gib;
  j["hbm_blocks"] = s.capacity.hbm_blocks;
  j["host_blocks"] = s.capacity.host_blocks;
  j["disk_blocks"] = s.capacity.disk_blocks;
  j["requests"] = s.requests;
  j["references"] = s.references;
  j["hits_hbm"] = s.hits_hbm;
  j["hits_host"] = s.hits_host;
  j["hits_disk"] = s.hits_disk;
  j["misses"] = s.misses;
  j["hit_rate_hbm"] = r.hit_rate_hbm;
  j["hit_rate_host"] = r.hit_rate_host;
  j["hit_rate_disk"] = r.hit_rate_disk;
  j["hit_rate"] = s.hit_rate();
  j["oracle_bound_hit_rate"] = nullptr;  // oracle_bound fills it where the oracle bounds the policy
  j["input_tokens"] = s.input_tokens;
  j["reused_tokens"] = s.reused_tokens;
  j["prefill_tokens"] = s.prefill_tokens;
  j["prefill_avoided"] = r.prefill_avoided;
  j["demoted_blocks"] = s.demoted();
  j["promoted_blocks"] = s.promoted;
  j["to_disk_blocks"] = s.to_disk;
  j["host_link_bytes"] = r.host_bytes;  // fetched (host -> HBM); the demotes are the next column
  j["host_link_demote_bytes"] = r.demote_bytes;
  j["disk_read_bytes"] = r.disk_bytes;
  j["added_mean_us"] = us(r.added.mean_s);
  j["added_p50_us"] = us(r.added.p50_s);
  j["added_p99_us"] = us(r.added.p99_s);
  j["added_total_s"] = r.added.total_s;
  j["added_pipelined_mean_us"] = us(r.added_pipelined.mean_s);
  j["added_pipelined_p50_us"] = us(r.added_pipelined.p50_s);
  j["added_pipelined_p99_us"] = us(r.added_pipelined.p99_s);
  j["prefill_total_s"] = r.prefill_s_total;
  j["fetch_total_s"] = r.fetch_s_total;
  j["restore_total_s"] = r.restore_s_total;
  j["x_restored_blocks"] = r.x_restored_blocks;
  j["recomputed_tokens"] = r.recomputed_tokens;
  std::size_t compressed = 0;
  for (const std::size_t n : s.compressed) compressed += n;
  j["compressed_blocks"] = compressed;
  j["compress_total_s"] = r.compress_s_total;
  j["entry_pass_total_s"] = r.entry_pass_s_total;
  for (const rs::Form f : rs::kAllForms) j["hbm_share_" + rs::form_column(f)] = r.hbm_share[static_cast<std::size_t>(f)];
  j["nocache_mean_us"] = us(base.latency.mean_s);
  j["nocache_p50_us"] = us(base.latency.p50_s);
  j["nocache_p99_us"] = us(base.latency.p99_s);
  j["nocache_total_s"] = base.latency.total_s;
  j["prefill_avoided_s"] = r.prefill_avoided_s;
  j["form"] = rs::form_name(s.capacity.form);
  std::string to;
  for (const rs::Form f : s.capacity.compress_to) to += (to.empty() ? "" : " ") + std::string(rs::form_name(f));
  j["compress_to"] = to.empty() ? "none" : to;
  j["prefill_source"] = c.prefill_source;
  j["fetch_source"] = c.fetch_source;
  j["disk_source"] = c.disk_source;
  j["restore_source"] = c.restore_source;
  return j;
}

std::string csv_text(const std::vector<ojson>& rows) {
  std::vector<std::string> header;
  for (const auto& [k, v] : rows.front().items()) header.push_back(k);
  std::string out = csv_line(header);
  for (const auto& row : rows) {
    std::vector<std::string> f;
    for (const auto& [k, v] : row.items())
      f.push_back(v.is_null()      ? std::string()  // no figure (JSON null): an empty cell
                  : v.is_string()  ? v.get<std::string>()
                  : v.is_boolean() ? (v.get<bool>() ? "true" : "false")
                                   : csv_number(v.get<double>()));
    out += csv_line(f);
  }
  return out;
}

void print_table(const std::vector<ojson>& rows, const rs::Baseline& base) {
  const auto& first = rows.front();
  std::printf("\nHBM %s GiB (%s blocks)\n", report::fmt(first["hbm_gib"].get<double>()).c_str(),
              std::to_string(first["hbm_blocks"].get<std::size_t>()).c_str());
  std::printf("  %-16s %8s %9s %9s %9s %8s %10s %12s %12s %11s %10s %10s\n", "policy", "host_GiB", "hit_hbm",
              "hit_host", "hit_disk", "avoided", "avoided_s", "added_p50_ms", "added_p99_ms", "pipe_p50_ms", "fetch_GB",
              "demote_GB");
  for (const auto& r : rows)
    std::printf("  %-16s %8s %9.4f %9.4f %9.4f %7.2f%% %10.4g %12.4g %12.4g %11.4g %10.4g %10.4g\n",
                (r["policy"].get<std::string>() + (r["offline"].get<bool>() ? "*" : "")).c_str(),
                report::fmt(r["host_gib"].get<double>()).c_str(), r["hit_rate_hbm"].get<double>(),
                r["hit_rate_host"].get<double>(), r["hit_rate_disk"].get<double>(), 100 * r["prefill_avoided"].get<double>(),
                r["prefill_avoided_s"].get<double>(), r["added_p50_us"].get<double>() / 1e3,
                r["added_p99_us"].get<double>() / 1e3, r["added_pipelined_p50_us"].get<double>() / 1e3,
                r["host_link_bytes"].get<double>() / 1e9, r["host_link_demote_bytes"].get<double>() / 1e9);
  std::printf("  %-16s %8s %9s %9s %9s %7.2f%% %10s %12.4g %12.4g %11.4g %10s %10s\n", "no cache", "-", "-", "-", "-",
              0.0, "0", base.latency.p50_s * 1e3, base.latency.p99_s * 1e3, base.latency.p50_s * 1e3, "-", "-");
  // A policy that held blocks in several forms: how the HBM budget was shared, and what the forms cost.
  for (const auto& r : rows) {
    std::string shares;
    int forms = 0;
    for (const rs::Form f : rs::kAllForms) {
      const double share = r["hbm_share_" + rs::form_column(f)].get<double>();
      if (share <= 0) continue;
      ++forms;
      shares += (shares.empty() ? "" : ", ") + std::string(rs::form_name(f)) + " " + report::fmt(100 * share) + "%";
    }
    if (forms > 1)
      std::printf("  %s: HBM held as %s (mean over requests); %s blocks compressed; restores %.4g s, compress passes "
                  "%.4g s\n",
                  r["policy"].get<std::string>().c_str(), shares.c_str(),
                  std::to_string(r["compressed_blocks"].get<std::size_t>()).c_str(), r["restore_total_s"].get<double>(),
                  r["compress_total_s"].get<double>());
  }
}

// --compress-to: "auto" is the 8-bit form of the entry form's family when it is 16-bit, else none.
std::vector<rs::Form> compress_forms(const std::string& text, rs::Form form) {
  if (text != "auto") {
    std::vector<rs::Form> out = rs::parse_forms(text, "--compress-to");
    rs::check_compress_to(form, out, "--compress-to");
    return out;
  }
  if (form == rs::Form::kv) return {rs::Form::kv_int8};
  if (form == rs::Form::x) return {rs::Form::x_int8};
  return {};
}

void write_outputs(const std::string& dir, const std::vector<ojson>& rows, const ojson& inputs) {
  make_directory(dir, "--out");
  write_file_atomically(std::filesystem::path(dir) / "residency.csv", csv_text(rows));
  ojson j = inputs;
  j["rows"] = rows;
  write_file_atomically(std::filesystem::path(dir) / "residency.json", j.dump(2) + "\n");
}

// README "The oracle's bound": with one form, the union of a policy's tiers is a policy of model M at their blocks
// together, so the oracle there reuses at least as many blocks, on a prefix-consistent trace whose requests fit HBM.
// A policy that compressed held more blocks than that: no bound. Returns the 'bound:' line; sets the row's
// oracle_bound_hit_rate where the bound holds.
std::string oracle_bound(const rs::IndexedTrace& it, const rs::CostModel& cost, const rs::PolicyInfo& p,
                         const rs::Result& sim, std::size_t hbm, std::size_t behind,
                         std::map<std::size_t, double>& oracle_at, ojson& row) {
  std::size_t compressed = 0;
  for (const std::size_t n : sim.compressed) compressed += n;
  if (compressed > 0)
    return p.name + " compressed " + std::to_string(compressed) + " blocks: it held more blocks than its tiers' " +
           std::to_string(hbm + behind) + ", no oracle bound";
  const std::size_t all = hbm + behind;
  if (!oracle_at.count(all))
    oracle_at[all] = rs::simulate(it, rs::find_policy("oracle"), rs::capacity(cost, all, 0)).hit_rate();
  const double bound = oracle_at[all], own = sim.hit_rate();
  std::string verdict;
  if (it.prefix_violations > 0)
    verdict = "no bound on this trace (" + std::to_string(it.prefix_violations) + " prefix violations)";
  else if (it.max_request_blocks > hbm)
    verdict = "no bound at this budget (a request of " + std::to_string(it.max_request_blocks) + " blocks, HBM holds " +
              std::to_string(hbm) + ")";
  if (verdict.empty()) {  // the bound holds
    row["oracle_bound_hit_rate"] = bound;
    verdict = own <= bound ? "within the bound" : "ABOVE the bound (a bug: please report it)";
  }
  return p.name + " reuses " + report::fmt(own) + " of references from its tiers together; the oracle at their " +
         std::to_string(all) + " blocks in one tier reuses " + report::fmt(bound) + ": " + verdict;
}

void run_residency(const Args& a) {
  // Every flag is checked before any file is read: a bad value is one line, nothing written.
  if (a.sweep.empty() && a.hbm_gib == 0)
    throw UsageError("--hbm-gib or --sweep-hbm: one is needed (an HBM budget in GiB, or A:B:STEPS)");
  if (!a.sweep.empty() && a.hbm_gib > 0)
    throw UsageError("--hbm-gib with --sweep-hbm " + shown_value(a.sweep) + ": give one (the sweep sets the HBM budgets)");
  const auto policies = parse_policies(a.policies);
  const std::vector<double> budgets = a.sweep.empty() ? std::vector<double>{a.hbm_gib} : parse_sweep(a.sweep);
  if (a.synthetic == !a.trace.empty())
    throw UsageError(a.synthetic ? "--trace " + shown_value(a.trace) + " with --synthetic: give one (a trace file, or a generated trace)"
                                 : "--trace FILE or --synthetic: one is needed");
  if (a.disk_gib > 0 && a.peer_gib > 0)
    throw UsageError("--peer-gib " + report::fmt(a.peer_gib) + " with --disk-gib " + report::fmt(a.disk_gib) +
                     ": one tier behind host memory is modelled, a local disk or a peer's pool; give one");
  // The tier behind host memory: a local disk (--disk-gib) or a peer node's pool (--peer-gib), priced apart.
  const bool peer = a.peer_gib > 0;
  const double tier3_gib = peer ? a.peer_gib : a.disk_gib;
  const std::string tier3_flag = peer ? "--peer-gib" : "--disk-gib";
  if (tier3_gib > 0 && a.host_gib == 0)
    throw UsageError(tier3_flag + " " + report::fmt(tier3_gib) + " without --host-gib: the tier behind host memory takes "
                     "the host tier's evictions; give a host budget too");
  if (!a.synthetic && !a.save_trace.empty())
    throw UsageError("--save-trace " + shown_value(a.save_trace) + " without --synthetic: it saves a generated trace");
  if (!a.save_trace.empty()) check_out_file(a.save_trace, "--save-trace");
  if (!a.synthetic && a.seed_given)
    throw UsageError("--seed " + std::to_string(a.seed) + " without --synthetic: it seeds a generated trace");
  if (!a.synthetic && a.synthetic_requests_given)
    throw UsageError("--synthetic-requests " + std::to_string(a.synthetic_requests) +
                     " without --synthetic: it sizes a generated trace");

  if (a.prefill_cost != "auto" && a.prefill_cost != "model" && a.prefill_cost != "measured")
    throw UsageError("--prefill-cost " + shown_value(a.prefill_cost) + ": expected auto, model or measured");
  if (a.prefill_cost == "measured" && a.calibrate.empty())
    throw UsageError("--prefill-cost measured without --calibrate: the measured prefill comes from a results directory");
  const rs::Form form = rs::parse_form(a.form, "--form");
  const std::vector<rs::Form> compress_to = compress_forms(a.compress_to, form);
  if (a.compress_to != "auto" && a.compress_to != "none" &&
      std::none_of(policies.begin(), policies.end(), [](const rs::PolicyInfo* p) { return p->compresses; })) {
    std::string compressing;
    for (const auto& p : rs::policy_registry())
      if (p.compresses) compressing += (compressing.empty() ? "" : ", ") + p.name;
    throw UsageError("--compress-to " + shown_value(a.compress_to) + ": no policy of --policies " +
                     shown_value(a.policies) + " compresses (the ones that do: " + compressing + ")");
  }

  const ModelInputs in = load_model_inputs(a.gpus_path, a.gpu, a.models_path, a.model, a.calibrate);
  rs::CostModel cost = [&] {
    try {
      return rs::make_cost_model(in.gpu, in.shape(), a.block_tokens, form);
    } catch (const UsageError& e) {  // "form x: <model> is an MLA model ...": the user gave it as --form
      throw UsageError("--" + std::string(e.what()));
    }
  }();
  if (in.cpu_calibration && a.prefill_cost == "measured")
    throw UsageError("--prefill-cost measured: " + a.calibrate + " is a CPU run, its frontier rows do not price " +
                     in.gpu.name + "'s prefill (--prefill-cost model, or a GPU run's directory)");
  // A CPU run's restore and layer rows are the CPU's: the GPU's are priced by the model.
  if (!a.calibrate.empty() && !in.cpu_calibration) rs::use_measured_restores(cost, in.calibration);
  // Applied once the trace is read: `auto` takes the measured scale only where its rows reach the trace's prompts.
  std::optional<rs::PrefillCalibration> measured_prefill;
  if (a.prefill_cost != "model" && !a.calibrate.empty() && !in.cpu_calibration) {
    measured_prefill = rs::measured_prefill(cost, in.calibration);
    if (!measured_prefill && a.prefill_cost == "measured")
      throw UsageError("--prefill-cost measured: " + a.calibrate + " has no frontier `layers` row of " +
                       in.shape().name + " through its " + report::fmt(in.shape().layers) +
                       " layers (kvf run --study frontier --frontier.arms layers)");
  }
  std::vector<std::size_t> hbm_blocks;
  for (double b : budgets)
    hbm_blocks.push_back(blocks_in(b, cost, a.sweep.empty() ? "--hbm-gib" : "--sweep-hbm",
                                   a.sweep.empty() ? csv_number(b) : a.sweep));
  const std::size_t host_blocks =
      a.host_gib > 0 ? blocks_in(a.host_gib, cost, "--host-gib", csv_number(a.host_gib)) : 0;
  if (a.disk_gib > 0 && !(in.gpu.disk_gbps > 0))
    throw UsageError("--disk-gib " + report::fmt(a.disk_gib) + ": " + in.gpu.name +
                     " has no disk figure (no spec sheet gives one): give --calibrate DIR, a results directory with the "
                     "frontier study's file-tier rows");
  if (peer) {
    try {
      rs::use_peer_tier(cost);
    } catch (const UsageError& e) {
      throw UsageError("--peer-gib " + report::fmt(a.peer_gib) + ": " + e.what());
    }
  }
  const std::size_t disk_blocks = tier3_gib > 0 ? blocks_in(tier3_gib, cost, tier3_flag, csv_number(tier3_gib)) : 0;

  // Before the trace is read and replayed: a long sweep is not run for an --out it cannot write (created once the
  // trace has been read, before the replay: root passes every permission check, so only creating it tells).
  if (!a.out.empty()) check_out_dir(a.out, "--out");
  const auto t0 = std::chrono::steady_clock::now();
  const rs::Trace trace = [&] {
    if (a.synthetic) {
      rs::SynthSpec spec;
      spec.seed = a.seed;
      spec.requests = a.synthetic_requests;
      spec.block_tokens = a.block_tokens;
      rs::Trace t = rs::generate_trace(spec);
      if (!a.save_trace.empty()) {
        try {
          rs::write_mooncake_jsonl(t, a.save_trace);
        } catch (const UsageError& e) {
          throw UsageError("--save-trace " + std::string(e.what()));
        }
      }
      return t;
    }
    try {
      return rs::read_trace(a.trace, a.block_tokens);  // Mooncake JSONL or the suite's CSV, by content
    } catch (const UsageError& e) {  // the reader names the file (and line); the user also sees the flag
      throw UsageError("--trace " + std::string(e.what()));
    }
  }();
  const std::string trace_name = a.synthetic ? trace.source : a.trace;
  if (trace.requests.empty())
    throw UsageError("--trace " + shown_value(a.trace) + ": no requests (allowed: a trace of at least one request)");
  if (std::all_of(trace.requests.begin(), trace.requests.end(),
                  [](const rs::Request& r) { return r.hash_ids.empty(); }))
    throw UsageError("--trace " + shown_value(a.trace) +
                     ": no block ids in any request (allowed: a trace whose requests name their blocks)");
  if (!a.synthetic && trace.length_mismatches * 2 > trace.requests.size()) {
    const auto likely = rs::likely_block_tokens(trace);
    throw UsageError("--block-tokens " + std::to_string(a.block_tokens) + ": " +
                     std::to_string(trace.length_mismatches) + " of " + std::to_string(trace.requests.size()) +
                     " requests of " + shown_value(a.trace) +
                     " have more or fewer block ids than ceil(input_length / " +
                     std::to_string(a.block_tokens) + ") (allowed: the block size the trace's ids were made with" +
                     (likely ? "; " + std::to_string(*likely) + " matches most requests)" : ")"));
  }
  const rs::IndexedTrace it = rs::index_trace(trace, a.block_tokens);
  if (!a.out.empty()) make_directory(a.out, "--out");
  std::printf("trace %s: %zu requests, %zu block references, %zu distinct blocks, %zu warnings%s\n", trace_name.c_str(),
              it.requests(), it.references(), it.distinct, trace.warnings.size(),
              trace.warnings.empty() ? "" : (" (first: " + trace.warnings.front() + ")").c_str());
  if (it.prefix_violations)
    std::printf("trace: %zu prefix violations (first: %s): the oracle's bound does not hold\n", it.prefix_violations,
                it.first_prefix_violation.c_str());
  // A request larger than HBM: no engine serves it whole; the policies keep its first blocks and part with the
  // rest each their own way (README "Replay"), and the oracle's bound does not hold at that budget.
  std::size_t oversize_budgets = 0;
  for (const std::size_t n : hbm_blocks) oversize_budgets += n < it.max_request_blocks;
  if (oversize_budgets)
    std::printf("trace: its largest request has %zu blocks, more than HBM holds at %zu of %zu budgets (the smallest "
                "holds %s): there no engine could serve it whole, policies keep its first blocks (lru-host demotes the "
                "rest, lru, cost and oracle drop them) and the oracle's bound does not hold\n",
                it.max_request_blocks, oversize_budgets, hbm_blocks.size(),
                std::to_string(*std::min_element(hbm_blocks.begin(), hbm_blocks.end())).c_str());
  if (measured_prefill) {
    // One scale from a few short prefills (e.g. 128 tokens after 1K) says little of a 10K-token one, whose GEMMs
    // run nearer the ceiling: `auto` does not stretch it past the rows; `measured` does, and says so.
    std::vector<std::int64_t> lengths(it.input_length.begin(), it.input_length.end());
    std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
    const double median = static_cast<double>(lengths[lengths.size() / 2]);
    const std::string reach = "the measured layers rows reach " + report::fmt(measured_prefill->max_context) +
                              " tokens, the trace's median prompt has " + report::fmt(median);
    if (median <= measured_prefill->max_context || a.prefill_cost == "measured")
      rs::use_measured_prefill(cost, *measured_prefill);
    if (median > measured_prefill->max_context)
      std::printf("prefill: %s: %s\n", reach.c_str(),
                  a.prefill_cost == "measured"
                      ? ("their scale x" + report::fmt(measured_prefill->scale) + " is extrapolated to it").c_str()
                      : ("auto prices it by the model, not by their scale x" + report::fmt(measured_prefill->scale) +
                         " (--prefill-cost measured applies it)").c_str());
  }
  std::printf("model %s, GPU %s, %d tokens per block, %s bytes per block (%s, %s layers)\n",
              in.shape().name.c_str(), in.gpu.name.c_str(), a.block_tokens, report::fmt(cost.block_bytes).c_str(),
              rs::form_description(form).c_str(), report::fmt(in.shape().layers).c_str());
  std::string to_text;
  for (const rs::Form f : compress_to)
    to_text += (to_text.empty() ? "" : ", ") + std::string(rs::form_name(f)) + " (" + rs::form_description(f) + ", " +
               report::fmt(cost.form_bytes[static_cast<std::size_t>(f)]) + " bytes)";
  for (const auto* p : policies)
    if (p->compresses)
      std::printf("%s may compress HBM blocks to: %s%s\n", p->name.c_str(), to_text.empty() ? "none" : to_text.c_str(),
                  to_text.empty() ? "" : " (the model prices the restore passes, not the quality lost)");
  std::printf("prefill cost: %s\nhost fetch cost: %s\n", cost.prefill_source.c_str(), cost.fetch_source.c_str());
  if (!in.calibration_note.empty()) std::printf("%s\n", in.calibration_note.c_str());
  if (disk_blocks > 0) std::printf("%s: %s\n", peer ? "read cost behind host" : "disk read cost", cost.disk_source.c_str());
  if (form != rs::Form::kv || !compress_to.empty()) std::printf("restore cost: %s\n", cost.restore_source.c_str());
  for (const auto* p : policies) {
    if (host_blocks > 0 && !p->host_tier)
      std::printf("note: %s has no host tier: --host-gib %s not applied to it (HBM only)\n", p->name.c_str(),
                  report::fmt(a.host_gib).c_str());
    else if (disk_blocks > 0 && !p->disk_tier)
      std::printf("note: %s has no tier behind host memory: %s %s not applied to it\n", p->name.c_str(),
                  tier3_flag.c_str(), report::fmt(tier3_gib).c_str());
  }

  const rs::Baseline base = rs::baseline(cost, it);
  const rs::RestoreCosts restore = rs::restore_costs(cost);  // what `cost` prices its choices with
  std::vector<ojson> rows;
  for (std::size_t b = 0; b < budgets.size(); ++b) {
    std::vector<ojson> at_budget;
    std::map<std::size_t, double> oracle_at;  // the oracle's hit rate by capacity in blocks (oracle_bound)
    std::vector<std::string> bounds;
    for (const auto* p : policies) {
      const std::size_t host = p->host_tier ? host_blocks : 0, disk = p->disk_tier ? disk_blocks : 0;
      // Only a multi-form policy (`cost`) takes compress_to; the others keep every block in `form`.
      const bool compresses = p->compresses && !compress_to.empty();
      const auto replay = [&](const std::vector<rs::Form>& forms) {
        return rs::simulate(it, *p, rs::capacity(cost, hbm_blocks[b], host, forms, disk), &restore);
      };
      const auto priced = [&](const rs::Result& sim) {
        return row_of(rs::price(cost, sim, base, budgets[b], host ? a.host_gib : 0, disk ? tier3_gib : 0), *p, base,
                      cost);
      };
      const rs::Result sim = replay(compresses ? compress_to : std::vector<rs::Form>{});
      ojson row = priced(sim);
      if (host > 0) bounds.push_back(oracle_bound(it, cost, *p, sim, hbm_blocks[b], host + disk, oracle_at, row));
      at_budget.push_back(std::move(row));
      if (!compresses) continue;
      // The control: the same policy storing no compressed form, so its gain splits into the policy's and the
      // smaller store's (whose quality loss nothing prices).
      at_budget.push_back(priced(replay({})));
      at_budget.back()["policy"] = p->name + "-no-compress";
    }
    print_table(at_budget, base);
    for (const auto& line : bounds) std::printf("  bound: %s\n", line.c_str());
    rows.insert(rows.end(), at_budget.begin(), at_budget.end());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n* offline: reads the future, HBM only (a bound on HBM-only policies' reuse; the 'bound:' lines give "
              "the oracle at a host-tier policy's blocks together, README \"The oracle's bound\"). avoided: reused / "
              "input tokens; "
              "avoided_s: no-cache prefill time - the policy's, summed over requests; added latency: prefill of the missed "
              "tokens + host fetches + restores of blocks not kept as bf16 K/V (dequantize, recompute from X), per request, "
              "serial; pipe: the fetch pipelined by layer against the compute (a lower bound). fetch_GB / demote_GB: "
              "bytes over the host link, host -> HBM (host and disk hits) / HBM -> host (demoted blocks).\n");
  std::printf("%zu replays in %.3g s (trace read included)\n", rows.size(), secs);

  if (a.out.empty()) return;
  ojson inputs;
  inputs["trace"] = {{"path", trace_name},          {"requests", it.requests()},
                     {"references", it.references()}, {"distinct_blocks", it.distinct},
                     {"warnings", trace.warnings.size()}, {"prefix_violations", it.prefix_violations},
                     {"max_request_blocks", it.max_request_blocks}};
  inputs["model"] = in.shape().name;
  inputs["gpu"] = in.gpu.name;
  inputs["calibrate"] = a.calibrate;
  inputs["calibration"] = in.calibrated;
  inputs["block_tokens"] = a.block_tokens;
  inputs["block_bytes"] = cost.block_bytes;
  inputs["block_form"] = rs::form_description(form) + ", all layers";
  inputs["form"] = rs::form_name(form);
  inputs["compress_to"] = [&] {
    std::vector<std::string> v;
    for (const rs::Form f : compress_to) v.emplace_back(rs::form_name(f));
    return v;
  }();
  inputs["policies"] = a.policies;
  inputs["hbm_gib"] = budgets;
  inputs["host_gib"] = a.host_gib;
  inputs["disk_gib"] = a.disk_gib;
  inputs["peer_gib"] = a.peer_gib;
  inputs["disk_source"] = cost.disk_source;
  inputs["restore_source"] = cost.restore_source;
  inputs["prefill_source"] = cost.prefill_source;
  inputs["fetch_source"] = cost.fetch_source;
  write_outputs(a.out, rows, inputs);
  std::printf("wrote %s/residency.csv and %s/residency.json\n", a.out.c_str(), a.out.c_str());
}

}  // namespace

void add_residency(CLI::App& app) {
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "residency",
      "Replay a request trace (Mooncake JSONL, the suite's CSV, or --synthetic) against a KV prefix cache per policy and HBM budget: hit rates by "
      "tier, prefill avoided, host link bytes, added latency per request (analysis/residency/README.md)");
  sub->add_option("--trace", args->trace,
                  "Request trace: Mooncake JSONL (timestamp, input_length, output_length, hash_ids) or the suite's CSV "
                  "(timestamp_ms, input_length, output_length, block_ids), told apart by content. Or --synthetic")
      ->check(non_empty("a trace file"));
  sub->add_flag("--synthetic", args->synthetic,
                "Replay a generated trace instead (shared system prompts, multi-turn sessions, RAG over a document "
                "pool; analysis/residency/README.md states the model and its defaults)");
  sub->add_option("--seed", args->seed, "Seed of --synthetic (the same seed, the same trace)")
      ->capture_default_str()
      ->check(number_in(0, 9007199254740992.0, "a whole number in [0, 2^53]", true));
  sub->add_option("--synthetic-requests", args->synthetic_requests, "Requests of --synthetic")
      ->capture_default_str()
      ->check(number_in(1, 10000000, "whole requests in [1, 10000000]", true));
  sub->add_option("--save-trace", args->save_trace, "With --synthetic: also write the generated trace as Mooncake JSONL to FILE")
      ->check(non_empty("a file"));
  sub->add_option("--model", args->model, "Model from data/models.json: name, alias or Hugging Face id, case-blind")
      ->required()
      ->check(non_empty("a model name"));
  sub->add_option("--gpu", args->gpu, "GPU from data/gpus.json, name or alias, case-blind")
      ->required()
      ->check(non_empty("a GPU name"));
  sub->add_option("--calibrate", args->calibrate,
                  "Results directory whose measured ceilings (GEMM, stream read, host copy fit, disk, remote tier) "
                  "replace the spec peaks; from a CPU run, the disk and remote tier only (a CPU's ceilings do not "
                  "price a GPU)")
      ->check(non_empty("a results directory"));
  sub->add_option("--hbm-gib", args->hbm_gib, "HBM budget for KV blocks in GiB (2^30 bytes), fractional allowed; "
                                              "capacity = floor(budget / bytes per block). Or --sweep-hbm")
      ->check(gib_value());
  sub->add_option("--host-gib", args->host_gib, "Host-tier budget in GiB, for policies with a host tier (lru-host, cost); "
                                                "policies without one run HBM only, with a note")
      ->check(gib_value());
  sub->add_option("--prefill-cost", args->prefill_cost,
                  "Prefill priced by the model (roofline at the GPU's peaks, or the --calibrate ceilings) or measured: "
                  "scaled by the --calibrate directory's frontier `layers` rows of the model through all its layers "
                  "(measured / model, median); auto: measured when those rows exist, else the model")
      ->capture_default_str()
      ->check(non_empty("auto, model or measured"));
  sub->add_option("--disk-gib", args->disk_gib,
                  "Disk-tier budget in GiB behind the host tier (needs --host-gib, and a disk figure from --calibrate: "
                  "the frontier study's file-tier rows), for policies with a disk tier (lru-host, cost)")
      ->check(gib_value());
  sub->add_option("--peer-gib", args->peer_gib,
                  "A peer node's pool in GiB behind the host tier instead of a disk (Mooncake store, LMCache remote): "
                  "reads priced by the remote tier's fit (needs --host-gib and --calibrate DIR with remote-study rows); "
                  "the disk_* columns then hold this tier")
      ->check(gib_value());
  sub->add_option("--block-tokens", args->block_tokens, "Tokens per block, as the trace's hash ids were made")
      ->capture_default_str()
      ->check(number_in(1, kMaxBlockTokens, "whole tokens in [1, " + std::to_string(kMaxBlockTokens) + "]", true));
  sub->add_option("--form", args->form,
                  "Form blocks enter HBM and the host tier in: kv (bf16 K/V), kv-int8, kv-int4 (fp32 scale per 128 "
                  "values; a dequantize pass per use), x, x-int8, x-int4 (the layer inputs; K/V recomputed per use). "
                  "Capacity = budget / bytes per block of this form")
      ->capture_default_str()
      ->check(non_empty("a form"));
  sub->add_option("--compress-to", args->compress_to,
                  "Forms the cost policy may turn an HBM block into under pressure (the entry form's family, fewer "
                  "bits), comma-separated, or none; auto: the 8-bit form when --form is 16-bit, else none. The model "
                  "prices the restore passes, not the quality lost; a compressing cost replays beside its control, "
                  "cost-no-compress (the same policy, no compressed form)")
      ->capture_default_str()
      ->check(non_empty("forms or none"));
  sub->add_option("--policies", args->policies, "Comma-separated policies (" + policy_names() + ")")
      ->capture_default_str()
      ->check(non_empty("a comma-separated policy list"));
  sub->add_option("--sweep-hbm", args->sweep, "HBM budgets A:B:STEPS: STEPS budgets from A to B GiB, both included, "
                                              "evenly spaced (instead of --hbm-gib)")
      ->check(non_empty("A:B:STEPS"));
  sub->add_option("--out", args->out, "Write residency.csv and residency.json (each whole or not at all) to DIR")
      ->check(non_empty("a directory"));
  sub->add_option("--gpus", args->gpus_path, "GPU spec file (default: gpus.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)")
      ->check(non_empty("a GPU spec file"));
  sub->add_option("--models-file", args->models_path, "Model shape file (default: models.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)")
      ->check(non_empty("a model shape file"));
  sub->callback([args, sub] {
    args->seed_given = sub->count("--seed") > 0;
    args->synthetic_requests_given = sub->count("--synthetic-requests") > 0;
    run_residency(*args);
    exit_with(kExitOk);
  });
}

}  // namespace kvf::cli
