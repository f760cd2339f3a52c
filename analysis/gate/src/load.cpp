// Loading the two sides of a gate: a kvf results directory (cases.csv + samples.csv + meta.json) or a
// Google Benchmark JSON file with repetitions. Every problem is a UsageError naming the file.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/gate.hpp"
#include "gate_detail.hpp"
#include "kvf/result_tables.hpp"

namespace kvf::gate {

namespace fs = std::filesystem;

std::string CaseKey::label() const {
  std::string s;
  for (const std::string* part : {&study, &case_name, &mode}) {
    if (part->empty()) continue;
    if (!s.empty()) s += '/';
    s += *part;
  }
  return s;
}

std::string CaseKey::params_string() const {
  std::string s;
  for (const auto& p : params) {
    if (!s.empty()) s += ',';
    s += p.name + '=' + p.value;
  }
  return s;
}

namespace {
auto key_tuple(const CaseKey& k) { return std::tie(k.study, k.case_name, k.mode); }
}  // namespace

bool operator<(const CaseKey& a, const CaseKey& b) {
  if (key_tuple(a) != key_tuple(b)) return key_tuple(a) < key_tuple(b);
  return std::lexicographical_compare(
      a.params.begin(), a.params.end(), b.params.begin(), b.params.end(),
      [](const Param& x, const Param& y) { return std::tie(x.name, x.value) < std::tie(y.name, y.value); });
}

bool operator==(const CaseKey& a, const CaseKey& b) { return !(a < b) && !(b < a); }

namespace {

// A whole, non-negative count in a numeric column (range-checked before any conversion).
long long parse_count(const CsvTable& t, std::size_t row, const std::string& col) {
  const auto v = parse_integer(t, row, col, 0, std::int64_t{1} << 53);
  if (!v) throw UsageError(t.where(row) + ": column '" + col + "': empty, expected a whole number >= 0");
  return *v;
}

}  // namespace

ResultSet load_kvf_tables(CsvTable cases_table, const CsvTable& samples, const std::string& source) {
  ResultSet rs;
  rs.source = source;
  rs.format = "kvf results";
  if (cases_table.torn) rs.warnings.push_back(*cases_table.torn);
  if (samples.torn) rs.warnings.push_back(*samples.torn);
  const CasesCsv cases = read_cases_csv(std::move(cases_table), {"note"});
  for (const char* c : {"study", "case", "mode", "seconds", "throttled"}) samples.require_column(c);

  using Sub = std::tuple<std::string, std::string, std::string>;  // study, case, mode
  std::map<Sub, std::size_t> by_sub;
  std::set<CaseKey> seen;
  std::vector<long long> declared;
  for (std::size_t r = 0; r < cases.size(); ++r) {
    CaseEntry e = cases.entry(r);
    CaseData cd;
    cd.key.study = std::move(e.study);
    cd.key.case_name = std::move(e.case_name);
    cd.key.mode = std::move(e.mode);
    cd.key.params = std::move(e.params);  // matched by name: sorted; what the run measured is no part of the key
    std::erase_if(cd.key.params, [](const Param& p) {
      const auto& m = measured_param_columns();
      return std::find(m.begin(), m.end(), p.name) != m.end();
    });
    std::sort(cd.key.params.begin(), cd.key.params.end(), [](const Param& a, const Param& b) { return a.name < b.name; });
    cd.backend = std::move(e.backend);
    cd.device = std::move(e.device);
    cd.note = std::move(e.note);
    cd.injected = cd.note.find("FAULT INJECTED") != std::string::npos;  // harness/src/bench_run.cpp's marker
    // The harness counts unthrottled samples here; a row with 0 and no sample rows is a skipped case.
    const long long n = parse_count(cases.table, r, "samples");
    if (!seen.insert(cd.key).second)
      throw UsageError(cases.table.where(r) + ": duplicate case " + cd.key.label() +
                       (cd.key.params.empty() ? "" : " (" + cd.key.params_string() + ")"));
    Sub sub{cd.key.study, cd.key.case_name, cd.key.mode};
    if (by_sub.count(sub))
      throw UsageError(cases.table.where(r) + ": case " + cd.key.label() +
                       " appears twice with different parameters (samples.csv cannot tell them apart)");
    by_sub[sub] = rs.cases.size();
    declared.push_back(n);
    rs.cases.push_back(std::move(cd));
  }

  std::vector<long long> found(rs.cases.size(), 0);
  std::size_t orphans = 0;
  for (std::size_t r = 0; r < samples.rows.size(); ++r) {
    Sub sub{samples.at(r, "study"), samples.at(r, "case"), samples.at(r, "mode")};
    auto it = by_sub.find(sub);
    const auto secs = parse_number(samples, r, "seconds");
    if (!secs || !std::isfinite(*secs) || *secs <= 0)
      throw UsageError(samples.where(r) + ": column 'seconds': '" + samples.at(r, "seconds") +
                       "' is not a positive time");
    const long long thr = parse_count(samples, r, "throttled");
    if (thr > 1) throw UsageError(samples.where(r) + ": column 'throttled': must be 0 or 1");
    if (it == by_sub.end()) {
      ++orphans;
      continue;
    }
    CaseData& cd = rs.cases[it->second];
    ++found[it->second];
    if (thr) ++cd.throttled;
    else cd.samples.push_back(*secs);
  }
  if (orphans)
    rs.warnings.push_back(samples.path + ": " + std::to_string(orphans) +
                          " sample rows belong to no case in cases.csv (an interrupted run?); ignored");
  for (const auto& cd : rs.cases)
    if (cd.injected) rs.fault_injection.push_back(cd.key.label() + " (its note)");
  for (std::size_t i = 0; i < rs.cases.size(); ++i) {
    CaseData& cd = rs.cases[i];
    if (declared[i] == 0 && found[i] == 0) {
      cd.skipped = true;
      continue;
    }
    if (found[i] == 0)
      throw UsageError(samples.path + ": no samples for " + cd.key.label() + " (cases.csv says " +
                       std::to_string(declared[i]) + ")");
    // cases.csv counts the unthrottled samples; accept the total too (older writers).
    const auto usable = static_cast<long long>(cd.samples.size());
    if (declared[i] != usable && declared[i] != found[i])
      rs.warnings.push_back(cd.key.label() + ": cases.csv says " + std::to_string(declared[i]) +
                            " samples, samples.csv has " + std::to_string(usable) + " usable of " +
                            std::to_string(found[i]) + "; using samples.csv");
  }
  return rs;
}

std::set<std::string> meta_device_names(const nlohmann::json& meta) {
  // meta.json carries a device description per study; we gather the name of every "device" object
  // (or string) wherever it sits, so the layout can grow without the gate breaking. The walk keeps
  // its own stack: a hostile file must not be able to overflow ours (the reader also bounds depth).
  std::set<std::string> out;
  std::vector<const nlohmann::json*> todo = {&meta};
  while (!todo.empty()) {
    const nlohmann::json& j = *todo.back();
    todo.pop_back();
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "device") {
          if (it->is_string() && !it->get<std::string>().empty()) out.insert(it->get<std::string>());
          else if (it->is_object() && it->contains("name") && (*it)["name"].is_string() &&
                   !(*it)["name"].get<std::string>().empty())
            out.insert((*it)["name"].get<std::string>());
        }
        todo.push_back(&*it);
      }
    } else if (j.is_array()) {
      for (const auto& e : j) todo.push_back(&e);
    }
  }
  return out;
}

void read_run_settings(const nlohmann::json& meta, ResultSet& rs) {
  // Written by harness/src/bench_main.cpp (open_results); anything else in the file is left alone, and a value of
  // the wrong type only loses the remedy's detail or the injection check (a case's note still carries its marker).
  if (meta.contains("kvf_run") && meta["kvf_run"].is_object()) {
    const auto& q = meta["kvf_run"];
    if (q.contains("quick") && q["quick"].is_boolean()) rs.quick = rs.quick || q["quick"].get<bool>();
  }
  if (!meta.contains("studies") || !meta["studies"].is_object()) return;
  for (const auto& [study, s] : meta["studies"].items()) {
    if (!s.is_object()) continue;
    if (s.contains("measure") && s["measure"].is_object()) {
      const auto& m = s["measure"];
      if (m.contains("quick") && m["quick"].is_boolean()) rs.quick = rs.quick || m["quick"].get<bool>();
      if (m.contains("min_samples") && m["min_samples"].is_number_integer()) {
        const auto n = m["min_samples"].get<long long>();
        if (n > 0 && n < (1 << 30) && (rs.run_min_samples == 0 || n < rs.run_min_samples))
          rs.run_min_samples = static_cast<int>(n);
      }
      if (m.contains("budget_s") && m["budget_s"].is_number()) {
        const double b = m["budget_s"].get<double>();
        if (std::isfinite(b) && b > rs.run_budget_s) rs.run_budget_s = b;
      }
    }
    // A study still "running" in the file was stopped (killed, interrupted) before its last case, one "stopped:
    // time limit" by kvf run --time-limit: the cases it did not reach would be gated as MISSING, which passes
    // without --fail-on-missing.
    const std::string status = s.contains("status") && s["status"].is_string() ? s["status"].get<std::string>() : "";
    if (status == "running" || status.rfind(kTimeLimitStatus, 0) == 0) rs.unfinished.push_back(study);
    if (s.contains("fault_injection") && !s["fault_injection"].is_null()) {
      const auto& f = s["fault_injection"];
      std::string what = study + ": ";
      if (f.is_object() && f.contains("case_regex") && f["case_regex"].is_string() && f.contains("fraction") &&
          f["fraction"].is_number())
        what += f["case_regex"].get<std::string>() + "=" + nlohmann::json(f["fraction"].get<double>()).dump();
      else
        what += "fault_injection " + f.dump().substr(0, 80);
      rs.fault_injection.push_back(what);
    }
  }
}

ResultSet load_gbench_json(const nlohmann::json& j, const std::string& source) {
  ResultSet rs;
  rs.source = source;
  rs.format = "Google Benchmark JSON";
  if (!j.is_object() || !j.contains("benchmarks") || !j["benchmarks"].is_array())
    throw UsageError(source + ": not Google Benchmark JSON (no \"benchmarks\" array)");
  std::string device;
  if (j.contains("context") && j["context"].is_object()) {
    const auto& ctx = j["context"];
    for (const char* k : {"kvf_device", "device"})
      if (auto d = json_string(ctx, k, source, std::string("context.") + k)) { device = *d; break; }
  }
  if (!device.empty()) rs.meta_devices.insert(device);

  std::map<std::string, std::size_t> index;
  std::size_t aggregates = 0;
  for (std::size_t i = 0; i < j["benchmarks"].size(); ++i) {
    const auto& b = j["benchmarks"][i];
    const std::string at = source + ": benchmarks[" + std::to_string(i) + "]";
    if (!b.is_object()) throw UsageError(at + ": not an object");
    const std::string key = "benchmarks[" + std::to_string(i) + "]";
    if (auto rt = json_string(b, "run_type", source, key + ".run_type"); rt && *rt != "iteration") {
      ++aggregates;  // mean, median, stddev, ...
      continue;
    }
    std::string name;
    if (auto rn = json_string(b, "run_name", source, key + ".run_name")) name = *rn;
    else if (auto n = json_string(b, "name", source, key + ".name")) name = *n;
    else throw UsageError(at + ": no \"run_name\" or \"name\"");
    auto [it, fresh] = index.try_emplace(name, rs.cases.size());
    if (fresh) {
      CaseData cd;
      cd.key.case_name = name;
      cd.device = device;
      rs.cases.push_back(std::move(cd));
    }
    CaseData& cd = rs.cases[it->second];
    const auto error_occurred = b.find("error_occurred");
    if (error_occurred != b.end() && !error_occurred->is_boolean())
      throw UsageError(source + ": key '" + key + ".error_occurred': expected true or false, got " +
                       error_occurred->type_name());
    if (error_occurred != b.end() && error_occurred->get<bool>()) {
      cd.skipped = true;
      cd.note = "error: " + json_string(b, "error_message", source, key + ".error_message").value_or("(no message)");
      continue;
    }
    if (!b.contains("real_time") || !b["real_time"].is_number())
      throw UsageError(at + " (" + name + "): no numeric \"real_time\"");
    const std::string unit = json_string(b, "time_unit", source, key + ".time_unit").value_or("ns");
    double scale;
    if (unit == "ns") scale = 1e-9;
    else if (unit == "us") scale = 1e-6;
    else if (unit == "ms") scale = 1e-3;
    else if (unit == "s") scale = 1.0;
    else throw UsageError(at + " (" + name + "): time_unit '" + unit + "': expected ns, us, ms or s");
    const double t = b["real_time"].get<double>() * scale;
    if (!std::isfinite(t) || t <= 0) throw UsageError(at + " (" + name + "): real_time must be > 0");
    cd.samples.push_back(t);
  }
  if (rs.cases.empty() && aggregates > 0)
    throw UsageError(source + ": holds only aggregates; rerun without --benchmark_report_aggregates_only "
                              "so every repetition is kept");
  for (auto& cd : rs.cases)
    if (cd.skipped) cd.samples.clear();  // a run with an error in any repetition is not compared
  return rs;
}

ResultSet load_results(const std::string& path) {
  if (path.empty()) throw UsageError("empty path");
  std::error_code ec;
  const fs::path p(path);
  if (!input_exists(p)) throw UsageError(path + ": no such file or directory");
  const auto st = fs::status(p, ec);
  fs::path dir;
  if (fs::is_directory(st)) {
    dir = p;
  } else {
    const std::string fname = p.filename().string();
    if (fname == "cases.csv" || fname == "samples.csv" || fname == "meta.json") {
      dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    } else if (p.extension() == ".json") {
      return load_gbench_json(read_json_input(p), path);
    } else {
      throw UsageError(path + ": expected a results directory, its cases.csv or samples.csv, or a "
                              "Google Benchmark JSON file");
    }
  }
  const fs::path cases = dir / "cases.csv", samples = dir / "samples.csv", meta = dir / "meta.json";
  if (!input_exists(cases)) throw UsageError(cases.string() + ": no such file (not a results directory?)");
  if (!input_exists(samples)) throw UsageError(samples.string() + ": no such file (the gate needs the raw samples)");
  ResultSet rs = load_kvf_tables(read_csv_table(cases.string(), dir), read_csv_table(samples.string(), dir), path);
  if (input_exists(meta)) {
    const nlohmann::json m = read_json_input(meta, dir);
    rs.meta_devices = meta_device_names(m);
    read_run_settings(m, rs);
  }
  return rs;
}

ResultSet merge_runs(std::vector<ResultSet> runs) {
  if (runs.empty()) throw UsageError("no baseline run given");
  if (runs.size() == 1) return std::move(runs.front());
  ResultSet out;
  out.format = runs.front().format;
  std::map<CaseKey, std::size_t> index;
  std::map<CaseKey, std::pair<std::string, std::string>> device_seen;  // the first run's device and source
  for (auto& run : runs) {
    out.source += (out.source.empty() ? "" : " + ") + run.source;
    out.meta_devices.insert(run.meta_devices.begin(), run.meta_devices.end());
    out.warnings.insert(out.warnings.end(), run.warnings.begin(), run.warnings.end());
    out.fault_injection.insert(out.fault_injection.end(), run.fault_injection.begin(), run.fault_injection.end());
    for (const auto& s : run.unfinished)
      if (std::find(out.unfinished.begin(), out.unfinished.end(), s) == out.unfinished.end()) out.unfinished.push_back(s);
    out.quick = out.quick || run.quick;
    if (run.run_min_samples > 0 && (out.run_min_samples == 0 || run.run_min_samples < out.run_min_samples))
      out.run_min_samples = run.run_min_samples;
    out.run_budget_s = std::max(out.run_budget_s, run.run_budget_s);
    for (auto& c : run.cases) {
      auto [it, fresh] = index.try_emplace(c.key, out.cases.size());
      if (fresh) {
        CaseData first = c;
        first.run_medians.clear();
        first.skipped = true;  // until some run measured it
        first.samples.clear();
        first.throttled = 0;
        out.cases.push_back(std::move(first));
      }
      CaseData& m = out.cases[it->second];
      // Runs of one baseline on different devices are no baseline: said on the case, for run_gate to refuse
      // where it is compared (not where --filter leaves it out).
      if (const std::string d = detail::device_of(c, run); !d.empty()) {
        const auto [seen, first] = device_seen.try_emplace(c.key, d, run.source);
        if (!first && !detail::same_device(seen->second.first, d) && m.device_conflict.empty())
          m.device_conflict =
              "'" + seen->second.first + "' in " + seen->second.second + ", '" + d + "' in " + run.source;
      }
      m.throttled += c.throttled;
      if (c.skipped || c.samples.empty()) continue;
      std::vector<double> sorted = c.samples;
      std::sort(sorted.begin(), sorted.end());
      m.run_medians.push_back(quantile_sorted(sorted, 0.5));
      m.samples.insert(m.samples.end(), c.samples.begin(), c.samples.end());
      m.skipped = false;
      m.note = c.note;
      m.injected = m.injected || c.injected;
    }
  }
  for (const auto& c : out.cases)
    if (!c.skipped && c.run_medians.size() < runs.size())
      out.warnings.push_back(c.key.label() + ": measured in " + std::to_string(c.run_medians.size()) + " of " +
                             std::to_string(runs.size()) + " baseline runs");
  return out;
}

}  // namespace kvf::gate
