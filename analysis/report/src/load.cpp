// Loading results directories for the report: cases.csv (required), samples.csv, meta.json, counters.csv
// (each optional: absence is recorded and reported, never guessed around).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/report.hpp"
#include "kvf/result_tables.hpp"
#include "kvf/studies.hpp"
#include "kvf/table.hpp"

namespace kvf::report {

namespace fs = std::filesystem;

const std::string& CaseRow::param(const std::string& name) const {
  static const std::string empty;
  auto it = params.find(name);
  return it == params.end() ? empty : it->second;
}

std::optional<double> CaseRow::num(const std::string& name) const {
  const std::string& s = param(name);
  if (s.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

std::vector<const CaseRow*> ResultSet::rows(const std::string& study) const {
  std::vector<const CaseRow*> out;
  for (const auto& r : cases)
    if (r.study == study && r.measured()) out.push_back(&r);
  return out;
}

ResultSet load_results(const std::string& dir) {
  ResultSet rs;
  rs.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(dir + ": no such results directory");
  const fs::path d(dir);

  // meta.json (optional, but without it the device is only what cases.csv says). Every field is typed:
  // a wrong type or range names the file and the key (exit 2), never a library message.
  const fs::path meta_path = d / "meta.json";
  if (input_exists(meta_path)) {
    const std::string src = meta_path.string();
    const nlohmann::json meta = read_json_input(meta_path, d);
    if (!meta.is_object()) throw UsageError(src + ": expected a JSON object");
    rs.has_meta = true;
    rs.suite_version = json_string(meta, "suite_version", src, "suite_version").value_or("");
    rs.git_sha = json_string(meta, "git_sha", src, "git_sha").value_or("");
    if (rs.suite_version.empty()) throw UsageError(src + ": no 'suite_version'");
    if (meta.contains("device") && meta["device"].is_object()) {
      const auto& dev = meta["device"];
      rs.device = json_string(dev, "name", src, "device.name").value_or("");
      rs.backend = json_string(dev, "backend", src, "device.backend").value_or("");
      rs.llc_bytes = static_cast<std::uint64_t>(
          json_integer(dev, "llc_bytes", src, "device.llc_bytes", 0, std::int64_t{1} << 50).value_or(0));
      rs.compute_units =
          static_cast<int>(json_integer(dev, "compute_units", src, "device.compute_units", 0, 1 << 20).value_or(0));
    }
    if (meta.contains("studies") && meta["studies"].is_object()) {
      for (auto it = meta["studies"].begin(); it != meta["studies"].end(); ++it) {
        rs.studies_run.push_back(it.key());
        const auto& s = it.value();
        if (!s.is_object()) continue;
        const std::string key = "studies." + it.key();
        const std::string st = json_string(s, "status", src, key + ".status").value_or("");
        if (!st.empty() && st != "complete")
          rs.missing.push_back("study " + it.key() + ": status '" + st + "' in meta.json (interrupted run: only finished cases are reported)");
        for (const char* k : {"machine_load", "machine_load_at_end"})
          if (s.contains(k) && s[k].is_object()) {
            const auto& ml = s[k];
            const std::string mk = key + "." + k;
            if (auto l = json_number(ml, "loadavg_1m", src, mk + ".loadavg_1m", 0, 1e6))
              rs.max_load = std::max(rs.max_load, *l);
            if (auto h = json_integer(ml, "hardware_threads", src, mk + ".hardware_threads", 0, 1 << 20))
              rs.hardware_threads = static_cast<int>(*h);
          }
        const std::string a = json_string(s, "started_utc", src, key + ".started_utc").value_or("");
        const std::string b = json_string(s, "finished_utc", src, key + ".finished_utc").value_or("");
        if (!a.empty() && (rs.started.empty() || a < rs.started)) rs.started = a;
        if (!b.empty() && (rs.finished.empty() || b > rs.finished)) rs.finished = b;
      }
    }
    if (rs.started.empty()) rs.started = json_string(meta, "created_utc", src, "created_utc").value_or("");
  } else {
    rs.missing.push_back("meta.json missing: device details, suite version and run times unknown");
  }

  // cases.csv (required), through the reader the gate uses too
  const fs::path cases_path = d / "cases.csv";
  if (!input_exists(cases_path)) throw UsageError(cases_path.string() + ": no such file (not a kvf results directory)");
  CsvTable cases_table = read_csv_table(cases_path.string(), d);
  const bool cases_torn = cases_table.torn.has_value();
  if (cases_torn) rs.warnings.push_back(*cases_table.torn);
  const CasesCsv ct = read_cases_csv(std::move(cases_table), {"median_s"});
  std::set<std::string> case_keys;
  std::set<std::string> studies_in_cases;
  for (std::size_t i = 0; i < ct.size(); ++i) {
    CaseEntry e = ct.entry(i);
    CaseRow r;
    r.where = ct.table.where(i);
    r.study = std::move(e.study);
    r.case_name = std::move(e.case_name);
    r.backend = std::move(e.backend);
    r.device = std::move(e.device);
    r.mode = std::move(e.mode);
    r.note = std::move(e.note);
    if (!r.mode.empty() && r.mode != "cold" && r.mode != "hot")
      throw UsageError(r.where + ": column 'mode': '" + r.mode + "' (allowed: cold, hot)");
    r.samples = static_cast<long>(ct.whole(i, "samples").value_or(0));
    r.throttled_samples = static_cast<long>(ct.whole(i, "throttled_samples").value_or(0));
    r.median_s = ct.number(i, "median_s");
    r.q1_s = ct.number(i, "q1_s");
    r.q3_s = ct.number(i, "q3_s");
    r.bytes = ct.number(i, "bytes");
    r.flops = ct.number(i, "flops");
    r.gbps = ct.number(i, "gbps");
    r.tflops = ct.number(i, "tflops");
    r.ceiling_value = ct.number(i, "ceiling_value");
    if (r.median_s && *r.median_s < 0) throw UsageError(r.where + ": column 'median_s': negative time");
    for (auto& p : e.params) r.params.emplace(std::move(p.name), std::move(p.value));
    case_keys.insert(r.study + "\x1f" + r.case_name);
    studies_in_cases.insert(r.study);
    if (rs.device.empty()) rs.device = r.device;
    if (rs.backend.empty()) rs.backend = r.backend;
    rs.cases.push_back(std::move(r));
  }
  if (rs.studies_run.empty()) rs.studies_run.assign(studies_in_cases.begin(), studies_in_cases.end());

  // samples.csv (optional for the report: the summary columns of cases.csv carry the figures)
  const fs::path samples_path = d / "samples.csv";
  if (input_exists(samples_path)) {
    const CsvTable st = read_csv_table(samples_path.string(), d);
    if (st.torn) rs.warnings.push_back(*st.torn);
    for (const char* c : {"study", "case", "mode", "seconds"}) st.require_column(c);
    std::size_t orphans = 0;
    for (std::size_t i = 0; i < st.rows.size(); ++i) {
      auto v = parse_number(st, i, "seconds");
      if (!v) throw UsageError(st.where(i) + ": column 'seconds': empty");
      if (!case_keys.count(st.at(i, "study") + "\x1f" + st.at(i, "case"))) {
        // The samples of a case whose row was torn off cases.csv (written first, so a reader that finds
        // a row finds its samples) are expected; anywhere else they mean mixed or edited files.
        if (!cases_torn)
          throw UsageError(st.where(i) + ": sample of case '" + st.at(i, "study") + "/" + st.at(i, "case") +
                           "' that cases.csv does not list");
        ++orphans;
      }
    }
    if (orphans)
      rs.warnings.push_back(samples_path.string() + ": " + std::to_string(orphans) +
                            " samples of the torn case row left out");
    rs.has_samples = true;
    rs.n_samples = st.rows.size();
  } else {
    rs.missing.push_back("samples.csv missing: raw samples not available (summaries from cases.csv only)");
  }

  // counters.csv (optional: written by `kvf counters` on a GPU run of the idleness study)
  const fs::path counters_path = d / "counters.csv";
  if (input_exists(counters_path)) {
    const CsvTable kt = read_csv_table(counters_path.string(), d);
    if (kt.torn) rs.warnings.push_back(*kt.torn);
    rs.counters = read_counters_csv(kt);
    rs.has_counters = true;
  } else {
    rs.missing.push_back("counters.csv missing: idleness not measured here (GPU run of the idleness study + `kvf counters`)");
  }

  for (const auto& s : kStudies)
    if (!studies_in_cases.count(std::string(s.name)))
      rs.missing.push_back("study " + std::string(s.name) + ": no rows in cases.csv (not run)");
  std::size_t skipped = 0;
  for (const auto& r : rs.cases)
    if (!r.measured()) ++skipped;
  if (skipped)
    rs.missing.push_back(std::to_string(skipped) + " case rows without samples (skipped or failed; reasons in their notes)");

  rs.label = (rs.device.empty() ? std::string("unknown device") : rs.device) + " (" +
             (rs.backend.empty() ? std::string("?") : rs.backend) + ")";
  return rs;
}

std::vector<ResultSet> load_all(const std::vector<std::string>& dirs) {
  if (dirs.empty()) throw UsageError("kvf report: no results directory given");
  std::vector<ResultSet> sets;
  for (const auto& d : dirs) sets.push_back(load_results(d));
  const ResultSet* first = nullptr;
  for (const auto& s : sets) {
    if (!s.has_meta) continue;
    if (!first) {
      first = &s;
      continue;
    }
    if (s.suite_version != first->suite_version)
      throw UsageError((fs::path(s.dir) / "meta.json").string() + ": suite version " + s.suite_version + " differs from " +
                       (fs::path(first->dir) / "meta.json").string() + " (" + first->suite_version +
                       "): results of different suite versions cannot be overlaid");
  }
  // Unique labels: the same device twice gets " #2", " #3".
  std::map<std::string, int> seen;
  for (auto& s : sets) {
    const int n = ++seen[s.label];
    if (n > 1) s.label += " #" + std::to_string(n);
  }
  return sets;
}

}  // namespace kvf::report
