// Reading a residency replay's files for the report: residency.csv through the report core's CSV reader
// (kvf/table.hpp), residency.json through the harness's bounded JSON reader (kvf/input.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/report.hpp"
#include "kvf/residency_report.hpp"
#include "kvf/table.hpp"

namespace kvf::report::residency {

namespace fs = std::filesystem;

namespace {

// Far above what `kvf residency` writes (--sweep-hbm takes at most 1,000 steps; four policies are built), low
// enough that a hostile file cannot make a chart of a million series.
constexpr std::size_t kMaxPolicies = 64;
constexpr std::size_t kMaxBudgets = 1000;
constexpr double kMaxGiB = 1e9;
constexpr std::int64_t kMaxCount = std::int64_t{1} << 53;  // exact in a double: counts stay whole

std::string text(const CsvTable& t, std::size_t i, const char* column) {
  const std::string& s = t.at(i, column);
  if (s.empty()) throw UsageError(t.where(i) + ": column '" + column + "': empty");
  return s;
}

}  // namespace

std::vector<double> Replay::budgets() const {
  std::vector<double> b;
  for (const auto& r : rows) b.push_back(r.hbm_gib);
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

std::vector<std::string> Replay::policies() const {
  std::vector<std::string> p;
  for (const auto& r : rows)
    if (std::find(p.begin(), p.end(), r.policy) == p.end()) p.push_back(r.policy);
  return p;
}

std::optional<fs::path> find_replay(const fs::path& results_dir) {
  for (const fs::path& d : {results_dir / "residency", results_dir})
    if (input_exists(d / "residency.csv") || input_exists(d / "residency.json")) return d;
  return std::nullopt;
}

namespace {

void read_json(Replay& r, const fs::path& root) {
  const fs::path path = r.dir / "residency.json";
  const std::string src = path.string();
  if (!input_exists(path)) throw UsageError(src + ": no such file (kvf residency --out writes it beside residency.csv)");
  const nlohmann::json j = read_json_input(path, root);
  if (!j.is_object()) throw UsageError(src + ": expected a JSON object");
  auto need = [&](std::optional<std::string> v, const char* key) {
    if (!v || v->empty()) throw UsageError(src + ": key '" + key + "': missing or empty (a name is needed)");
    return *v;
  };
  r.model = need(json_string(j, "model", src, "model"), "model");
  r.gpu = need(json_string(j, "gpu", src, "gpu"), "gpu");
  r.calibrate = json_string(j, "calibrate", src, "calibrate").value_or("");
  r.block_form = json_string(j, "block_form", src, "block_form").value_or("");
  r.block_tokens = json_integer(j, "block_tokens", src, "block_tokens", 1, kMaxCount).value_or(0);
  r.block_bytes = json_number(j, "block_bytes", src, "block_bytes", 0, 1e18).value_or(0);
  r.peer_tier = json_number(j, "peer_gib", src, "peer_gib", 0, 1e18).value_or(0) > 0;
  if (!j.contains("trace") || !j["trace"].is_object()) throw UsageError(src + ": key 'trace': expected an object");
  const auto& t = j["trace"];
  r.trace = json_string(t, "path", src, "trace.path").value_or("");
  auto count = [&](const char* key) {
    const auto v = json_integer(t, key, src, std::string("trace.") + key, 0, kMaxCount);
    if (!v) throw UsageError(src + ": key 'trace." + key + "': missing (a whole number is needed)");
    return *v;
  };
  r.requests = count("requests");
  r.references = count("references");
  r.distinct_blocks = count("distinct_blocks");
  r.warnings = count("warnings");
  r.prefix_violations = count("prefix_violations");
  if (j.contains("calibration") && !j["calibration"].is_null()) {
    const auto& c = j["calibration"];
    if (!c.is_array() || c.size() > 64) throw UsageError(src + ": key 'calibration': expected an array of at most 64 strings");
    for (const auto& line : c) {
      if (!line.is_string()) throw UsageError(src + ": key 'calibration': expected an array of at most 64 strings");
      r.calibration.push_back(line.get<std::string>());
    }
  }
}

Row read_row(const CsvTable& t, std::size_t i) {
  Row w;
  w.where = t.where(i);
  w.policy = text(t, i, "policy");
  w.prefill_source = text(t, i, "prefill_source");
  w.fetch_source = text(t, i, "fetch_source");
  if (t.column("compress_to")) w.compress_to = t.at(i, "compress_to");
  if (t.column("offline")) {
    const std::string& o = t.at(i, "offline");
    if (o != "true" && o != "false" && !o.empty())
      throw UsageError(w.where + ": column 'offline': '" + o + "' (allowed: true, false)");
    w.offline = o == "true";
  }
  const double inf = std::numeric_limits<double>::max();
  w.hbm_gib = cell_number(t, i, "hbm_gib", 0, kMaxGiB);
  if (!(w.hbm_gib > 0)) throw UsageError(w.where + ": column 'hbm_gib': 0 (allowed: a budget > 0 GiB)");
  w.host_gib = cell_number(t, i, "host_gib", 0, kMaxGiB);
  w.hit_rate_hbm = cell_number(t, i, "hit_rate_hbm", 0, 1);
  w.hit_rate_host = cell_number(t, i, "hit_rate_host", 0, 1);
  // The third tier's columns are named disk for a peer pool too (residency.json's peer_gib says which).
  if (t.column("disk_gib") && parse_number(t, i, "disk_gib")) w.tier3_gib = cell_number(t, i, "disk_gib", 0, kMaxGiB);
  if (t.column("hit_rate_disk") && parse_number(t, i, "hit_rate_disk"))
    w.hit_rate_tier3 = cell_number(t, i, "hit_rate_disk", 0, 1);
  w.hit_rate = t.column("hit_rate") && parse_number(t, i, "hit_rate") ? cell_number(t, i, "hit_rate", 0, 1)
                                                                       : w.hit_rate_hbm + w.hit_rate_host;
  w.prefill_avoided = cell_number(t, i, "prefill_avoided", 0, 1);
  w.prefill_avoided_s = cell_number(t, i, "prefill_avoided_s", -inf, inf);
  w.prefill_total_s = cell_number(t, i, "prefill_total_s", 0, inf);
  w.added_total_s = cell_number(t, i, "added_total_s", 0, inf);
  w.added_p50_us = cell_number(t, i, "added_p50_us", 0, inf);
  w.added_p99_us = cell_number(t, i, "added_p99_us", 0, inf);
  w.nocache_p50_us = cell_number(t, i, "nocache_p50_us", 0, inf);
  w.nocache_p99_us = cell_number(t, i, "nocache_p99_us", 0, inf);
  w.host_link_bytes = cell_number(t, i, "host_link_bytes", 0, inf);
  if (t.column("host_link_demote_bytes") && parse_number(t, i, "host_link_demote_bytes"))
    w.host_link_demote_bytes = cell_number(t, i, "host_link_demote_bytes", 0, inf);
  if (t.column("compress_total_s") && parse_number(t, i, "compress_total_s"))
    w.compress_total_s = cell_number(t, i, "compress_total_s", 0, inf);
  if (t.column("oracle_bound_hit_rate") && parse_number(t, i, "oracle_bound_hit_rate"))
    w.oracle_bound_hit_rate = cell_number(t, i, "oracle_bound_hit_rate", 0, 1);
  return w;
}

}  // namespace

Replay read_replay(const fs::path& dir, const fs::path& root) {
  Replay r;
  r.dir = dir;
  read_json(r, root);
  const fs::path csv = dir / "residency.csv";
  if (!input_exists(csv)) throw UsageError(csv.string() + ": no such file (kvf residency --out writes it beside residency.json)");
  CsvTable t = read_csv_table(csv.string(), root);
  if (t.torn) r.read_around.push_back(*t.torn);
  for (const char* c : {"policy", "hbm_gib", "host_gib", "hit_rate_hbm", "hit_rate_host", "prefill_avoided",
                        "prefill_avoided_s", "prefill_total_s", "added_total_s", "added_p50_us", "added_p99_us",
                        "nocache_p50_us", "nocache_p99_us", "host_link_bytes", "prefill_source", "fetch_source"})
    t.require_column(c);
  std::map<std::pair<std::string, double>, std::string> seen;
  std::set<std::string> policies;
  std::set<double> budgets;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    Row w = read_row(t, i);
    if (t.column("requests")) {
      const auto n = parse_integer(t, i, "requests", 0, kMaxCount);
      if (n && *n != r.requests)
        throw UsageError(w.where + ": column 'requests': " + std::to_string(*n) + " requests, residency.json's trace has " +
                         std::to_string(r.requests) + " (the two files are not one replay's)");
    }
    const auto [it, fresh] = seen.emplace(std::make_pair(w.policy, w.hbm_gib), w.where);
    if (!fresh)
      throw UsageError(w.where + ": policy '" + w.policy + "' at " + fmt(w.hbm_gib) + " GiB again (first at " + it->second +
                       "): which row is right cannot be told");
    policies.insert(w.policy);
    budgets.insert(w.hbm_gib);
    if (policies.size() > kMaxPolicies)
      throw UsageError(w.where + ": more than " + std::to_string(kMaxPolicies) + " policies (the report charts each)");
    if (budgets.size() > kMaxBudgets)
      throw UsageError(w.where + ": more than " + std::to_string(kMaxBudgets) +
                       " HBM budgets (kvf residency sweeps at most 1000)");
    r.rows.push_back(std::move(w));
  }
  if (r.rows.empty()) throw UsageError(csv.string() + ": no rows (a replay writes one per policy and budget)");
  return r;
}

double chosen_budget(const std::vector<double>& budgets, const std::optional<double>& wanted) {
  if (!wanted) return budgets[(budgets.size() - 1) / 2];
  double best = budgets.front();
  for (double b : budgets)
    if (std::abs(b - *wanted) < std::abs(best - *wanted)) best = b;
  return best;
}

}  // namespace kvf::report::residency
