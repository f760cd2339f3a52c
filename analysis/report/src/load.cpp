// Loading results directories for the report: cases.csv (required), samples.csv, meta.json, counters.csv
// (each optional: absence is recorded and reported, never guessed around).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
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
    if (r.study == study && r.measured() && r.invalid.empty()) out.push_back(&r);
  return out;
}

namespace {

// Raw samples onto their rows, and the validity flags. A row whose own check failed is listed and never
// scored. A (study, case, mode) measured more than once in one directory (a run appended to an existing --out,
// or a hand merge of runs) is never picked silently: when every repeat agrees with the first within 5% (the
// 95% interval of their median ratio inside [1/1.05, 1.05]; without raw samples, the ratio of cases.csv's
// medians) the first is scored and the repeats are listed;
// otherwise none of them is scored (occurrences without samples do not count). Samples of repeats are told apart by their index restarting at 0.
constexpr double kRepeatAgreement = 1.05;

// A row's own check, from its note: "co-run INVALID" (since the co-run overlap guard), or, in rows written
// before it, a background that "drained before the decode ended in N of N executions" (frontier) or "drained before
// the step ended in N of N executions" (idleness): nothing overlapped.
std::string own_check_failed(const std::string& note) {
  if (note.find("co-run INVALID") != std::string::npos)
    return "its own check failed: co-run INVALID (the background did not overlap the measured steps)";
  if (note.find("INVALID") != std::string::npos) return "its own check failed: the row's note says INVALID";
  if (note.find("profile run (--profile)") != std::string::npos)
    return "a profile run (--profile: one execution for a profiler), not a measurement";
  if (note.find("drained before the ") == std::string::npos) return "";  // std::regex is slow per row
  static const std::regex drained(R"(drained before the (decode|step) ended in (\d+) of (\d+) executions)");
  std::smatch m;
  if (std::regex_search(note, m, drained) && note.find("background: none") == std::string::npos &&
      m[2].str() == m[3].str() && m[2].str() != "0")
    return "its own check failed: the background drained before the " + m[1].str() + " ended in " + m[2].str() +
           " of " + m[3].str() + " executions (nothing overlapped)";
  return "";
}

void attach_samples_and_validity(ResultSet& rs, std::map<std::string, std::vector<std::vector<double>>>& samples_of) {
  std::map<std::string, std::vector<CaseRow*>> occurrences;
  for (auto& r : rs.cases) occurrences[r.key()].push_back(&r);
  for (auto& [key, rows] : occurrences) {
    // Sample runs belong to the occurrences that have samples, in file order (a row left without samples by an
    // interrupted run wrote none).
    auto it = samples_of.find(key);
    std::size_t next = 0;
    for (CaseRow* r : rows)
      if (r->samples > 0 && it != samples_of.end() && next < it->second.size()) r->samples_s = std::move(it->second[next++]);
    for (CaseRow* r : rows) r->invalid = own_check_failed(r->note);
    // Only measured occurrences compete: a row an interrupted run left without samples is no result, and one whose
    // own check failed measured something else (a co-run that overlapped nothing), so a later valid run stands alone.
    std::erase_if(rows, [](const CaseRow* r) { return !r->measured() || !r->invalid.empty(); });
    if (rows.size() < 2) continue;
    bool agree = true;
    std::string figures;
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const Ratio q = median_ratio(*rows[i], *rows[0]);
      agree = agree && q.value > 0 && q.lo >= 1 / kRepeatAgreement && q.hi <= kRepeatAgreement;
      figures += (figures.empty() ? "" : ", ") + rows[i]->where + " / first: " + q.text();
    }
    const std::string times = std::to_string(rows.size()) + " times in this directory";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!agree)
        rows[i]->invalid = "measured " + times + " with results that differ or cannot be compared (" + figures +
                           "): which is right cannot be told, so none is scored";
      else if (i > 0)
        rows[i]->invalid = "repeat of " + rows[0]->where + " (measured " + times + ", agreeing within 5%: " + figures +
                           "); the first is scored";
    }
  }
}

// A merged directory names what it was merged from: "sources": [{"dir", "git_sha", "studies": [...], optional
// "command", "status"}]. The first source of a study is the run meta.json's "studies" entry describes; each later
// one is a run of its own. Every run carries its source's commit, so the Inputs list every commit, not the merge's.
void read_sources(ResultSet& rs, const nlohmann::json& meta, const std::string& src) {
  if (!meta.contains("sources")) return;
  if (!meta["sources"].is_array()) throw UsageError(src + ": 'sources': expected an array");
  for (std::size_t i = 0; i < meta["sources"].size() && i < 1024; ++i) {
    const auto& o = meta["sources"][i];
    const std::string key = "sources[" + std::to_string(i) + "]";
    if (!o.is_object()) throw UsageError(src + ": '" + key + "': expected an object");
    const std::string dir = json_string(o, "dir", src, key + ".dir").value_or("");
    const std::string git = json_string(o, "git_sha", src, key + ".git_sha").value_or("");
    if (!o.contains("studies") || !o["studies"].is_array())
      throw UsageError(src + ": '" + key + ".studies': expected an array of study names");
    for (const auto& st : o["studies"]) {
      if (!st.is_string()) throw UsageError(src + ": '" + key + ".studies': expected an array of study names");
      bool found = false;
      for (auto& r : rs.runs)
        if (r.study == st.get<std::string>() && r.source.empty() && !found) {
          r.git_sha = git;
          r.source = dir;
          found = true;
        }
      if (!found)
        rs.runs.push_back({st.get<std::string>(), json_string(o, "command", src, key + ".command").value_or(""),
                           json_string(o, "status", src, key + ".status").value_or(""), "", "", git, dir});
    }
  }
}

// meta.json (optional, but without it the device is only what cases.csv says). Every field is typed: a wrong type
// or range names the file and the key (exit 2), never a library message.
void load_meta(ResultSet& rs, const fs::path& d) {
  const fs::path meta_path = d / "meta.json";
  if (!input_exists(meta_path)) {
    rs.missing.push_back("meta.json missing: device details, suite version and run times unknown");
    return;
  }
  {
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
    std::vector<std::string> bound;  // the studies' omp_proc_bind values
    if (meta.contains("studies") && meta["studies"].is_object()) {
      for (auto it = meta["studies"].begin(); it != meta["studies"].end(); ++it) {
        rs.studies_run.push_back(it.key());
        const auto& s = it.value();
        if (!s.is_object()) continue;
        const std::string key = "studies." + it.key();
        const std::string st = json_string(s, "status", src, key + ".status").value_or("");
        if (!st.empty() && st != "complete")
          rs.missing.push_back("study " + it.key() + ": status '" + st + "' in meta.json (" +
                               (st.rfind(kTimeLimitStatus, 0) == 0 ? "stopped by kvf run --time-limit"
                                                                         : "interrupted run") +
                               ": only finished cases are reported)");
        for (const char* k : {"machine_load", "machine_load_at_end"})
          if (s.contains(k) && s[k].is_object()) {
            const auto& ml = s[k];
            const std::string mk = key + "." + k;
            if (const auto b = json_string(ml, "omp_proc_bind", src, mk + ".omp_proc_bind"))
              if (std::find(bound.begin(), bound.end(), *b) == bound.end()) bound.push_back(*b);
            if (auto l = json_number(ml, "loadavg_1m", src, mk + ".loadavg_1m", 0, 1e6))
              rs.max_load = std::max(rs.max_load, *l);
            if (auto h = json_integer(ml, "hardware_threads", src, mk + ".hardware_threads", 0, 1 << 20))
              rs.hardware_threads = static_cast<int>(*h);
          }
        const std::string a = json_string(s, "started_utc", src, key + ".started_utc").value_or("");
        const std::string b = json_string(s, "finished_utc", src, key + ".finished_utc").value_or("");
        if (!a.empty() && (rs.started.empty() || a < rs.started)) rs.started = a;
        if (!b.empty() && (rs.finished.empty() || b > rs.finished)) rs.finished = b;
        rs.runs.push_back({it.key(), json_string(s, "command", src, key + ".command").value_or(""), st, a, b,
                           rs.git_sha, ""});
      }
    }
    if (meta.contains("kvf_run") && meta["kvf_run"].is_object() && meta["kvf_run"].contains("thread_placement") &&
        meta["kvf_run"]["thread_placement"].is_object()) {
      const auto& tp = meta["kvf_run"]["thread_placement"];
      const std::string tk = "kvf_run.thread_placement";
      rs.thread_placement = json_string(tp, "choice", src, tk + ".choice").value_or("?");
      std::string env;
      if (tp.contains("env") && tp["env"].is_array())
        for (const auto& e : tp["env"])
          if (e.is_string()) env += (env.empty() ? "" : " ") + e.get<std::string>();
      if (!env.empty()) rs.thread_placement += " (" + env + ")";
      if (tp.contains("calibration")) rs.thread_placement += ", calibrated";
    } else if (!bound.empty()) {
      rs.thread_placement = "omp_proc_bind";
      for (std::size_t i = 0; i < bound.size(); ++i) rs.thread_placement += (i ? " / " : " ") + bound[i];
    }
    if (rs.started.empty()) rs.started = json_string(meta, "created_utc", src, "created_utc").value_or("");
    read_sources(rs, meta, src);
  }

}

}  // namespace

ResultSet load_results(const std::string& dir) {
  ResultSet rs;
  rs.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(dir + (fs::exists(dir, ec) ? ": not a directory (a results directory is needed)"
                                               : ": no such results directory"));
  const fs::path d(dir);

  load_meta(rs, d);

  // cases.csv (required), through the reader the gate uses too
  const fs::path cases_path = d / "cases.csv";
  if (!input_exists(cases_path)) throw UsageError(cases_path.string() + ": no such file (not a kvf results directory)");
  CsvTable cases_table = read_csv_table(cases_path.string(), d);
  const bool cases_torn = cases_table.torn.has_value();
  if (cases_torn) rs.warnings.push_back(*cases_table.torn);
  const CasesCsv ct = read_cases_csv(std::move(cases_table), {"median_s"});
  std::set<std::string> case_keys;
  std::set<std::string> studies_in_cases;
  std::map<std::string, std::vector<std::vector<double>>> samples_of;  // study, case, mode -> kept samples per run
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
    r.pct_of_ceiling = ct.number(i, "pct_of_ceiling");
    if (ct.table.column("ceiling")) r.ceiling = ct.table.at(i, "ceiling");
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
    std::string orphan_case;
    const bool has_throttled = st.column("throttled").has_value(), has_index = st.column("sample").has_value();
    for (std::size_t i = 0; i < st.rows.size(); ++i) {
      auto v = parse_number(st, i, "seconds");
      if (!v) throw UsageError(st.where(i) + ": column 'seconds': empty");
      auto& runs = samples_of[st.at(i, "study") + "\x1f" + st.at(i, "case") + "\x1f" + st.at(i, "mode")];
      if (runs.empty() || (has_index && st.at(i, "sample") == "0")) runs.emplace_back();
      const bool throttled = has_throttled && (st.at(i, "throttled") == "1" || st.at(i, "throttled") == "yes");
      if (!throttled) runs.back().push_back(*v);
      if (!case_keys.count(st.at(i, "study") + "\x1f" + st.at(i, "case"))) {
        // The samples of a case whose row was torn off cases.csv (written first, so a reader that finds
        // a row finds its samples) are expected; anywhere else they mean mixed or edited files.
        // Only one case can lose its row that way: the one being written when the run stopped.
        const std::string orphan = st.at(i, "study") + "/" + st.at(i, "case");
        if (!cases_torn || (!orphan_case.empty() && orphan != orphan_case))
          throw UsageError(st.where(i) + ": sample of case '" + orphan + "' that cases.csv does not list" +
                           (cases_torn ? " (its torn last row can account for one case only: '" + orphan_case +
                                             "'; the file is cut short or mixed with another run)"
                                       : ""));
        orphan_case = orphan;
        ++orphans;
      }
    }
    if (orphans)
      rs.warnings.push_back(samples_path.string() + ": " + std::to_string(orphans) +
                            " samples of the torn case row left out (" + orphan_case + ")");
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
    // No Markdown code marks: "What is missing" escapes its lines (they may quote paths), so they showed as such.
    rs.missing.push_back(
        "counters.csv missing: idleness not measured here (GPU run of the idleness study + kvf counters)");
  }

  attach_samples_and_validity(rs, samples_of);
  for (const auto& s : kStudies)
    if (!studies_in_cases.count(std::string(s.name)))
      rs.missing.push_back("study " + std::string(s.name) + ": no rows in cases.csv (not run)");
  // Not measured: no samples (skipped or failed), or samples but no median (a hand-edited or damaged cases.csv).
  // Medians without their raw samples (a samples.csv that lost rows, or a merge that kept cases.csv only): the
  // figures stand, their intervals and the noise checks that need samples do not. Rows whose samples were all
  // throttled keep none by design.
  std::size_t skipped = 0, no_median = 0, no_raw = 0, measured = 0;
  for (const auto& r : rs.cases)
    if (!r.measured()) ++(r.samples > 0 ? no_median : skipped);
    else ++measured, no_raw += r.samples_s.empty() && r.samples > r.throttled_samples;
  if (skipped)
    rs.missing.push_back(std::to_string(skipped) + " case rows without samples (skipped or failed; reasons in their notes)");
  if (no_median)
    rs.missing.push_back(std::to_string(no_median) + " case rows with samples but no finite median_s: not scored");
  if (no_raw && rs.has_samples)  // without samples.csv its own line says so
    rs.missing.push_back(std::to_string(no_raw) + " of " + std::to_string(measured) +
                         " measured case rows have no raw samples in samples.csv: their medians are reported without "
                         "intervals");

  rs.label = (rs.device.empty() ? std::string("unknown device") : rs.device) + " (" +
             (rs.backend.empty() ? std::string("?") : rs.backend) + ")";
  return rs;
}

std::vector<ResultSet> load_all(const std::vector<std::string>& dirs,
                                const std::function<ResultSet(const std::string&)>& load) {
  if (dirs.empty()) throw UsageError("kvf report: no results directory given");
  // The same directory twice would read as two runs agreeing with each other (the gate refuses the same).
  std::map<std::string, std::string> given;
  for (const auto& d : dirs) {
    std::error_code ec;
    const std::string key = std::filesystem::weakly_canonical(d, ec).string();
    if (ec) continue;  // the load names what is wrong with it
    if (const auto [it, fresh] = given.emplace(key, d); !fresh)
      throw UsageError("kvf report: results directory " + shown_value(d) + " is given twice (also as " +
                       shown_value(it->second) + "); give each directory once");
  }
  std::vector<ResultSet> sets;
  for (const auto& d : dirs) sets.push_back(load ? load(d) : load_results(d));
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
  // Two directories that claim one commit on one device should hold one build's results: where their common cases
  // differ by more than 5% (the repeat rule of a single directory), both say so (neither is picked over the other).
  // "-dirty" (changes on top of the commit) and "unknown" (no git checkout) name no one build: not compared.
  const auto names_one_build = [](const std::string& sha) {
    return !sha.empty() && sha != "unknown" && !sha.ends_with("-dirty");
  };
  for (std::size_t i = 0; i < sets.size(); ++i)
    for (std::size_t j = i + 1; j < sets.size(); ++j) {
      ResultSet &a = sets[i], &b = sets[j];
      if (!names_one_build(a.git_sha) || a.git_sha != b.git_sha || a.device != b.device) continue;
      std::map<std::string, const CaseRow*> in_a;
      for (const auto& r : a.cases)
        if (r.measured() && r.invalid.empty()) in_a.emplace(r.key(), &r);
      std::size_t differ = 0;
      std::string example;
      for (const auto& r : b.cases) {
        if (!r.measured() || !r.invalid.empty()) continue;
        const auto it = in_a.find(r.key());
        if (it == in_a.end()) continue;
        const Ratio q = median_ratio(r, *it->second);
        if (q.value > 0 && (q.lo > kRepeatAgreement || q.hi < 1 / kRepeatAgreement)) {
          if (differ++ == 0) example = r.study + " " + r.case_name + " (" + r.mode + "): " + q.text();
        }
      }
      if (!differ) continue;
      const std::string line = a.dir + " and " + b.dir + " both claim commit " + a.git_sha + " on " + a.device + ", yet " +
                               std::to_string(differ) + " common case(s) differ by more than 5% (e.g. " + example +
                               "): not one build's results; each is reported as its own directory";
      a.warnings.push_back(line);
      b.warnings.push_back(line);
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
