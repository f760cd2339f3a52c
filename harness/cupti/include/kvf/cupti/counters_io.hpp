// What a study saves of its counters, and counters.csv, the table that joins them to the cases.
//
// Layout under a results directory DIR:
//   DIR/counters/chip.txt                chip name of the last capture (e.g. "GH100"), one line
//   DIR/counters/<capture>.json          manifest: format, kind, chip, study, case, set, metrics, passes, ranges
//   DIR/counters/<capture>.config        config image (range profiler, PM sampling)
//   DIR/counters/<capture>.counterdata   raw counter-data image as CUPTI decoded it (range profiler, PM sampling)
//   DIR/counters/<capture>.kernels.csv   Activity API kernel records (activity captures)
// `kvf counters DIR` re-evaluates every manifest from these files with the host API alone (no GPU) and rewrites
// DIR/counters.csv.
//
// counters.csv is long ("tidy"): one row per (capture, range or sample or window, metric), columns
// kvf::counter_columns() (kvf/result_tables.hpp):
//   study, case        join keys to cases.csv (the case the range belongs to)
//   source             "range" (range profiler, one range per decode step), "pm_sampling" (one row per sample),
//                      "activity" (one row per window)
//   capture            manifest stem under DIR/counters/
//   range_index, range index within the capture and its name (the user range's name, "sample" for PM sampling,
//                      the window's name for activity)
//   t_start_ns, t_end_ns  GPU timestamps of a PM sample or an activity window (empty for ranges)
//   chip, metric, value, unit
// Besides the raw CUPTI metrics, derived rows are added where their inputs are present (metric names start with
// "kvf:"): kvf:idle_sm_pct (100 - sm__cycles_active...), kvf:idle_issue_pct (100 - smsp__issue_active...),
// kvf:idle_tensor_pct (100 - sm__pipe_tensor_cycles_active...), kvf:idle_gr_pct (100 - gr__cycles_active...),
// kvf:sm_clock_mhz (gpc__cycles_elapsed.avg.per_second / 1e6), kvf:host_clock_mhz (clock read by the host when the
// range closed, where the study recorded one), and the activity window figures (kvf:kernels, kvf:busy_ns, ...).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/result_tables.hpp"

namespace kvf::cupti {

inline constexpr const char* kManifestFormat = "kvf-counters-1";

// One row of counters.csv: the harness's CounterRow, with its columns, writer and reader
// (kvf/result_tables.hpp: counter_columns, to_fields, metric_row, append_counters_csv, read_counters_csv).
using CounterRow = kvf::CounterRow;

// One range, sample or window of a capture.
struct RangeMeta {
  std::size_t index = 0;
  std::string name;
  std::string case_name;  // empty: the capture's case
  double t_start_ns = std::numeric_limits<double>::quiet_NaN();
  double t_end_ns = std::numeric_limits<double>::quiet_NaN();
  double host_clock_mhz = std::numeric_limits<double>::quiet_NaN();
};

struct CaptureManifest {
  std::string name;   // file stem
  std::string kind;   // "range" | "pm_sampling" | "activity"
  std::string chip;   // empty for activity captures without a chip
  std::string study, case_name;
  std::string set;    // metric set name
  std::vector<std::string> metrics;
  std::size_t passes = 0;
  std::vector<RangeMeta> ranges;
  nlohmann::json extra = nlohmann::json::object();  // sampling interval, dropped ranges, overflow, ...
  nlohmann::json to_json() const;
  static CaptureManifest from_json(const nlohmann::json& j, const std::string& where);
};

std::filesystem::path counters_dir(const std::filesystem::path& results_dir);
// Writes the manifest, the images (when non-empty) and chip.txt. Throws UsageError when the directory cannot be
// written.
void save_capture(const std::filesystem::path& results_dir, const CaptureManifest& m,
                  const std::vector<std::uint8_t>& config_image, const std::vector<std::uint8_t>& counter_data);

std::vector<std::uint8_t> read_binary(const std::filesystem::path& p);   // UsageError naming the file if absent
void write_binary(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes);

// Rows of one capture evaluated from its saved files (UsageError naming a missing or unreadable file).
std::vector<CounterRow> evaluate_capture(const std::filesystem::path& results_dir, const CaptureManifest& m);
// Rows of a range or PM-sampling capture whose images are in memory (used right after collection too).
std::vector<CounterRow> evaluate_images(const CaptureManifest& m, const std::vector<std::uint8_t>& counter_data);
// Derived kvf:* rows for one range from its raw rows.
std::vector<CounterRow> derived_rows(const std::vector<CounterRow>& raw_rows_of_one_range, double host_clock_mhz);

struct EvaluateSummary {
  std::size_t captures = 0, rows = 0;
  std::filesystem::path csv;
};
// `kvf counters DIR`: every DIR/counters/*.json evaluated, DIR/counters.csv rewritten atomically.
// Throws UsageError when DIR/counters is absent, holds no manifest, or a named file is missing.
EvaluateSummary evaluate_dir(const std::filesystem::path& results_dir);
// Writes rows to `path` through a temporary file and rename(2).
void write_counters_csv(const std::filesystem::path& path, const std::vector<CounterRow>& rows);

}  // namespace kvf::cupti
