#include "kvf/cupti/counters_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <system_error>

#include "kvf/csv.hpp"
#include "kvf/input.hpp"
#include "kvf/table.hpp"
#include "kvf/cupti/activity.hpp"
#include "kvf/cupti/clock_alignment.hpp"
#include "kvf/cupti/metric_sets.hpp"
#include "kvf/errors.hpp"
#include "kvf/results.hpp"

namespace fs = std::filesystem;

namespace kvf::cupti {

namespace {
nlohmann::json num_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
double num_from(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::numeric_limits<double>::quiet_NaN();
  return it->get<double>();
}
}  // namespace

nlohmann::json CaptureManifest::to_json() const {
  nlohmann::json j;
  j["format"] = kManifestFormat;
  j["name"] = name;
  j["kind"] = kind;
  j["chip"] = chip;
  j["study"] = study;
  j["case"] = case_name;
  j["set"] = set;
  j["metrics"] = metrics;
  j["passes"] = passes;
  auto& rs = j["ranges"] = nlohmann::json::array();
  for (const auto& r : ranges) {
    nlohmann::json o;
    o["index"] = r.index;
    o["name"] = r.name;
    if (!r.case_name.empty()) o["case"] = r.case_name;
    if (std::isfinite(r.t_start_ns)) o["t_start_ns"] = r.t_start_ns;
    if (std::isfinite(r.t_end_ns)) o["t_end_ns"] = r.t_end_ns;
    if (std::isfinite(r.host_clock_mhz)) o["host_clock_mhz"] = num_or_null(r.host_clock_mhz);
    rs.push_back(std::move(o));
  }
  j["extra"] = extra;
  return j;
}

CaptureManifest CaptureManifest::from_json(const nlohmann::json& j, const std::string& where) {
  try {
    if (j.value("format", std::string()) != kManifestFormat)
      throw UsageError(where + ": not a kvf counters manifest (format is not \"" + std::string(kManifestFormat) +
                       "\")");
    CaptureManifest m;
    m.name = j.at("name").get<std::string>();
    m.kind = j.at("kind").get<std::string>();
    if (m.kind != "range" && m.kind != "pm_sampling" && m.kind != "activity")
      throw UsageError(where + ": kind \"" + m.kind + "\": allowed: range, pm_sampling, activity");
    m.chip = j.value("chip", std::string());
    m.study = j.value("study", std::string());
    m.case_name = j.value("case", std::string());
    m.set = j.value("set", std::string());
    m.metrics = j.value("metrics", std::vector<std::string>{});
    m.passes = j.value("passes", std::size_t{0});
    if (j.contains("ranges"))
      for (const auto& o : j.at("ranges")) {
        RangeMeta r;
        r.index = o.value("index", std::size_t{0});
        r.name = o.value("name", std::string());
        r.case_name = o.value("case", std::string());
        r.t_start_ns = num_from(o, "t_start_ns");
        r.t_end_ns = num_from(o, "t_end_ns");
        r.host_clock_mhz = num_from(o, "host_clock_mhz");
        m.ranges.push_back(std::move(r));
      }
    if (j.contains("extra")) m.extra = j.at("extra");
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(where + ": malformed manifest (" + e.what() + ")");
  }
}

fs::path counters_dir(const fs::path& results_dir) { return results_dir / "counters"; }

std::vector<std::uint8_t> read_binary(const fs::path& p) {
  // Bounded and regular files only, like every reader of a results directory (kvf/input.hpp).
  const std::string data = read_input_file(p);
  std::vector<std::uint8_t> bytes(data.begin(), data.end());
  // Images are read by CUPTI with 8-byte alignment; std::vector's allocation satisfies that.
  return bytes;
}

void write_binary(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  if (!out) throw UsageError(p.string() + ": cannot be written");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw UsageError(p.string() + ": write failed");
}

namespace {
void write_text(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw UsageError(tmp.string() + ": cannot be written");
    out << text;
    if (!out) throw UsageError(tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) throw UsageError(p.string() + ": cannot be replaced (" + ec.message() + ")");
}
}  // namespace

void save_capture(const fs::path& results_dir, const CaptureManifest& m, const std::vector<std::uint8_t>& config,
                  const std::vector<std::uint8_t>& counter_data) {
  const fs::path dir = counters_dir(results_dir);
  make_directory(dir, "");
  if (!config.empty()) write_binary(dir / (m.name + ".config"), config);
  if (!counter_data.empty()) write_binary(dir / (m.name + ".counterdata"), counter_data);
  if (!m.chip.empty()) write_text(dir / "chip.txt", m.chip + "\n");
  write_text(dir / (m.name + ".json"), m.to_json().dump(1) + "\n");
}

std::vector<CounterRow> derived_rows(const std::vector<CounterRow>& raw, double host_clock_mhz) {
  std::vector<CounterRow> out;
  if (raw.empty()) return out;
  auto find = [&](const std::string& metric) -> const CounterRow* {
    for (const auto& r : raw)
      if (r.metric == metric) return &r;
    return nullptr;
  };
  auto add = [&](const CounterRow& from, const char* metric, double value, const char* unit) {
    out.push_back(metric_row(from, metric, value, unit));
  };
  struct Idle { const char* in; const char* out; };
  static const Idle idles[] = {
      {"sm__cycles_active.avg.pct_of_peak_sustained_elapsed", "kvf:idle_sm_pct"},
      {"smsp__issue_active.avg.pct_of_peak_sustained_elapsed", "kvf:idle_issue_pct"},
      {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "kvf:idle_tensor_pct"},
      {"gr__cycles_active.avg.pct_of_peak_sustained_elapsed", "kvf:idle_gr_pct"},
  };
  for (const auto& i : idles)
    if (const auto* r = find(i.in)) add(*r, i.out, 100.0 - r->value, "percent");
  if (const auto* r = find("gpc__cycles_elapsed.avg.per_second")) add(*r, "kvf:sm_clock_mhz", r->value / 1e6, "MHz");
  if (std::isfinite(host_clock_mhz)) add(raw.front(), "kvf:host_clock_mhz", host_clock_mhz, "MHz");
  return out;
}

std::vector<CounterRow> evaluate_images(const CaptureManifest& m, const std::vector<std::uint8_t>& counter_data) {
  std::vector<CounterRow> rows;
  if (m.kind != "range" && m.kind != "pm_sampling") return rows;
  const Profiler prof = m.kind == "range" ? Profiler::range : Profiler::pm_sampling;
  if (m.chip.empty()) throw UsageError("capture " + m.name + ": no chip recorded (manifest and chip.txt)");
  HostSession hs(m.chip, prof);
  (void)hs.config_image(m.metrics);  // schedules the metrics on the host object that evaluates them
  std::vector<std::string> units;
  for (const auto& metric : m.metrics) units.push_back(hs.metric_info(metric).dim_unit);
  std::map<std::string, const RangeMeta*> by_name;
  for (const auto& r : m.ranges) by_name[r.name] = &r;

  const std::size_t n = num_ranges(counter_data, prof);
  for (std::size_t i = 0; i < n; ++i) {
    CounterRow key;
    key.study = m.study;
    key.case_name = m.case_name;
    key.source = m.kind;
    key.capture = m.name;
    key.range_index = static_cast<long>(i);
    key.chip = m.chip;
    const RangeMeta* meta = nullptr;
    if (prof == Profiler::range) {
      key.range = range_name(counter_data, i);
      auto it = by_name.find(key.range);
      if (it != by_name.end()) meta = it->second;
    } else {
      key.range = "sample";
      if (i < m.ranges.size() && m.ranges[i].index == i) meta = &m.ranges[i];
    }
    if (meta) {
      if (!meta->case_name.empty()) key.case_name = meta->case_name;
      key.t_start_ns = meta->t_start_ns;
      key.t_end_ns = meta->t_end_ns;
    }
    const auto values = hs.evaluate(counter_data, i, m.metrics);
    std::vector<CounterRow> raw;
    for (std::size_t k = 0; k < m.metrics.size(); ++k) raw.push_back(metric_row(key, m.metrics[k], values[k], units[k]));
    auto derived = derived_rows(raw, meta ? meta->host_clock_mhz : std::numeric_limits<double>::quiet_NaN());
    rows.insert(rows.end(), raw.begin(), raw.end());
    rows.insert(rows.end(), derived.begin(), derived.end());
  }
  return rows;
}

std::vector<CounterRow> evaluate_capture(const fs::path& results_dir, const CaptureManifest& m) {
  const fs::path dir = counters_dir(results_dir);
  if (m.kind == "activity") {
    const auto kernels = read_kernels_csv(dir / (m.name + ".kernels.csv"));
    std::vector<CounterRow> rows;
    for (const auto& w : m.ranges) {
      if (!std::isfinite(w.t_start_ns) || !std::isfinite(w.t_end_ns)) continue;
      CounterRow key;
      key.study = m.study;
      key.case_name = w.case_name.empty() ? m.case_name : w.case_name;
      key.source = "activity";
      key.capture = m.name;
      key.range_index = static_cast<long>(w.index);
      key.range = w.name;
      key.t_start_ns = w.t_start_ns;
      key.t_end_ns = w.t_end_ns;
      key.chip = m.chip;
      auto s = summarize_window(kernels, static_cast<std::uint64_t>(w.t_start_ns),
                                static_cast<std::uint64_t>(w.t_end_ns));
      auto wr = window_rows(s, key);
      rows.insert(rows.end(), wr.begin(), wr.end());
    }
    return rows;
  }
  (void)read_binary(dir / (m.name + ".config"));  // must be saved with the data (kept for re-collection)
  const auto data = read_binary(dir / (m.name + ".counterdata"));
  return evaluate_images(m, data);
}

void write_counters_csv(const fs::path& path, const std::vector<CounterRow>& rows) {
  std::string text = csv_line(counter_columns());
  for (const auto& r : rows) text += csv_line(to_fields(r));
  write_text(path, text);
}

EvaluateSummary evaluate_dir(const fs::path& results_dir) {
  const fs::path dir = counters_dir(results_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(dir.string() + ": missing (no saved counters; a study with counters writes them there)");
  std::vector<fs::path> manifests;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") manifests.push_back(e.path());
  if (ec) throw UsageError(dir.string() + ": cannot be listed (" + ec.message() + ")");
  if (manifests.empty()) throw UsageError(dir.string() + ": no capture manifests (*.json)");
  std::sort(manifests.begin(), manifests.end());

  std::string chip_txt;
  if (input_exists(dir / "chip.txt")) {
    chip_txt = read_input_file(dir / "chip.txt", results_dir);
    chip_txt = chip_txt.substr(0, chip_txt.find('\n'));
  }

  EvaluateSummary sum;
  std::vector<CounterRow> rows;
  std::vector<std::string> captured;  // names of the captures re-evaluated below
  std::vector<CaptureManifest> evaluated;
  for (const auto& p : manifests) {
    const nlohmann::json j = read_json_input(p, results_dir);
    auto m = CaptureManifest::from_json(j, p.string());
    if (m.chip.empty() && m.kind != "activity") {
      if (chip_txt.empty()) throw UsageError((dir / "chip.txt").string() + ": missing (capture " + m.name +
                                             " names no chip)");
      m.chip = chip_txt;
    }
    captured.push_back(m.name);
    auto r = evaluate_capture(results_dir, m);
    rows.insert(rows.end(), r.begin(), r.end());
    ++sum.captures;
    evaluated.push_back(std::move(m));
  }
  // Whether the PM samples and the kernel records share a clock, from the data itself (see clock_alignment.hpp).
  auto clock_rows = clock_check_rows(results_dir, evaluated, rows);
  rows.insert(rows.end(), clock_rows.begin(), clock_rows.end());
  sum.rows = rows.size();
  sum.csv = results_dir / "counters.csv";
  // Rows that came from no saved capture (the CPU twin's cpu_model and perf rows) cannot be
  // re-evaluated: keep them as they are, so re-evaluation never loses a measurement.
  std::string text = csv_line(counter_columns());
  if (input_exists(sum.csv)) {
    const CsvTable old = read_csv_table(sum.csv.string(), results_dir);
    const std::size_t cap = old.require_column("capture");
    for (const auto& row : old.rows) {
      if (std::find(captured.begin(), captured.end(), row[cap]) != captured.end()) continue;
      std::vector<std::string> fields;
      for (const auto& col : counter_columns()) {
        const auto c = old.column(col);
        fields.push_back(c ? row[*c] : std::string());
      }
      text += csv_line(fields);
      ++sum.rows;
    }
  }
  for (const auto& r : rows) text += csv_line(to_fields(r));
  write_text(sum.csv, text);
  return sum;
}

}  // namespace kvf::cupti
