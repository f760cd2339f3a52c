// The results directory: cases.csv, samples.csv, meta.json (format in README "Results format").
//
// cases.csv  fixed columns (kCaseColumns) first, then one column per parameter name seen in any
//            case of any study written to this directory (empty where a case lacks it).
// samples.csv study, case, mode, sample, seconds, clock_mhz, throttled
// meta.json  suite version, git sha, host, command lines, per-study device description and times.
//
// Every row is written as its case finishes. A case's samples and its row reach the files whole or not
// at all: on a failed write (full disk, EIO, file size limit) both files are cut back to their sizes
// before the case and WriteError is thrown. When a case brings a parameter column the file does not
// have yet, cases.csv is rewritten with the wider header through a temporary file and rename(2), so
// an interruption at any moment leaves either the old or the new file, never a torn one. Termination
// signals are held off while a file is being changed (see guard_termination_signals).
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/backend.hpp"
#include "kvf/csv.hpp"
#include "kvf/stats.hpp"

namespace kvf {

struct Param {
  std::string name;
  std::string value;
};
// Sets `name` to `value` in params: the existing entry's value, else a new entry at the end.
void set_param(std::vector<Param>& params, const std::string& name, std::string value);

inline const std::vector<std::string>& case_columns() {
  static const std::vector<std::string> cols = {
      "study", "case", "backend", "device", "mode", "samples", "median_s", "mean_s", "min_s", "max_s",
      "q1_s", "q3_s", "rel_stdev", "bytes", "flops", "gbps", "tflops", "pct_of_ceiling", "ceiling",
      "ceiling_value", "verified", "stop_reason", "throttled_samples", "note"};
  return cols;
}
// Columns a case writes beside its parameters whose values are measured in the run, not part of what the case is:
// the FMA peak and the arithmetic floor taken from it (the access study's fma_peak_gflops, fma_floor_s), the
// share of an array the kernel got huge pages for (huge_backed_pct) and the other readers' rate beside a remote row
// (readers_gbps). Readers that match a case across runs (kvf
// gate) leave them out of its key: two runs of one case differ in them. A study adds here any such column it writes.
inline const std::vector<std::string>& measured_param_columns() {
  static const std::vector<std::string> cols = {"fma_peak_gflops", "fma_floor_s", "huge_backed_pct", "readers_gbps"};
  return cols;
}
// meta.json's status of a study kvf run stopped at its share of --time-limit (the bench, killed, had left
// "running"), followed by the share; readers (kvf gate, kvf report) take it as unfinished, as "running".
inline constexpr const char* kTimeLimitStatus = "stopped: time limit";
inline const std::vector<std::string>& sample_columns() {
  // repetition: which --benchmark_repetitions pass took the sample (0 without repetitions); the case row
  // pools them. Readers take it as optional (files written before it have none).
  static const std::vector<std::string> cols = {"study", "case", "mode", "sample", "seconds", "clock_mhz",
                                                "throttled", "repetition"};
  return cols;
}

struct CaseRecord {
  std::string study, case_name, backend, device, mode;  // mode: "cold" | "hot"
  std::vector<Param> params;
  Summary summary;
  double bytes = 0;  // bytes moved per execution of the region (read + written, as the study defines)
  double flops = 0;  // floating-point operations per execution
  double gbps = 0, tflops = 0;                 // derived from the median
  std::optional<double> pct_of_ceiling;        // 100 * rate / ceiling_value
  std::string ceiling;                         // which ceiling, e.g. "stream:read:cold"
  std::optional<double> ceiling_value;         // in the same unit as the rate it divides
  std::string verified;                        // "yes" | "no" | "n/a"
  std::string stop_reason;
  int throttled_samples = 0;
  std::string note;
};

struct CsvTable;

// What a figure is stated against: the best `metric` ("gbps" or "tflops") over the rows of cases.csv in
// `dir` with study == `study`, mode == `mode` and every (param, value) in `match`.
struct CeilingRef {
  std::string study;                 // e.g. "stream"
  std::vector<Param> match;          // e.g. {{"op","read"}}
  std::string metric = "gbps";
  std::string label() const;         // "stream:op=read:gbps", as cases.csv's `ceiling` column holds it
  // The reference a label names; nothing when it is not one (an empty column, a hand-edited file).
  static std::optional<CeilingRef> parse(const std::string& label);
};

class ResultsDir {
 public:
  // Creates the directory (and meta.json when absent). Throws UsageError if it cannot be created.
  explicit ResultsDir(std::filesystem::path dir);
  const std::filesystem::path& path() const { return dir_; }

  // Throws WriteError when a file cannot be written (nothing of this case is left in it then).
  void write_case(const CaseRecord& rec, std::span<const Sample> samples);
  // Read-modify-write of meta.json (atomic through rename; WriteError leaves the old meta.json).
  void update_meta(const std::function<void(nlohmann::json&)>& edit);
  // Rows in cases.csv now: the index of the first row a run is about to write.
  std::size_t case_row_count() const;
  // States rows [first, end) of cases.csv against their ceilings as they stand now: a row measured before a better
  // ceiling row of the same run (the stream study's read variants, each its own candidate) was stated against
  // the best so far. ceiling_of(case) names a row's ceiling (nullptr: leave the row). Rewrites cases.csv whole
  // (atomically) where a value changed; returns how many rows changed. WriteError leaves the old file.
  std::size_t restate_ceilings(std::size_t first,
                               const std::function<const CeilingRef*(const std::string&)>& ceiling_of);
  // States every row that names a ceiling of `ceiling_study` (its `ceiling` column) but found none when it was
  // measured (an empty ceiling_value: the ceiling's study ran after it into the same directory) against the best
  // such ceiling now in cases.csv. Rows stated before keep the ceiling of their time. Returns how many changed.
  std::size_t state_late_ceilings(const std::string& ceiling_study);

 private:
  void ensure_param_columns(const std::vector<Param>& params);
  std::filesystem::path dir_;
  std::vector<std::string> case_header_;
};

// The best matching row of `mode` measured on `backend` and `device` (a directory may hold a CPU stream study
// beside a CUDA one: neither is the other's ceiling); empty backend/device, or a file without those columns,
// match any.
std::optional<double> find_ceiling(const std::filesystem::path& dir, const CeilingRef& ref,
                                   const std::string& mode, const std::string& backend = {},
                                   const std::string& device = {});
// The same over a cases.csv already read.
std::optional<double> find_ceiling(const CsvTable& cases, const CeilingRef& ref, const std::string& mode,
                                   const std::string& backend = {}, const std::string& device = {});

// Any other output file written whole or not at all (kvf residency's CSV and JSON): `content` to `path`.tmp,
// fsync, rename(2) over `path`, termination signals held off meanwhile; a reader never sees a torn file.
// WriteError on a failed write (the .tmp removed); UsageError when the .tmp cannot be created (a directory in
// the way, permissions).
void write_file_atomically(const std::filesystem::path& path, const std::string& content);
// Before long work whose output goes to DIR: UsageError("FLAG DIR: ...") when DIR could not be created or written
// (an existing non-directory or unwritable directory, or no writable directory above it). Creates nothing.
void check_out_dir(const std::filesystem::path& dir, const std::string& flag);
// Creates DIR and its parents: UsageError("[WHAT ]DIR: cannot create the directory: <why>") when that fails or a
// file is in the way. WHAT names the flag or the output ("--out", "") as the user gave it.
void make_directory(const std::filesystem::path& dir, const std::string& what);
// The same for an output file (written whole with write_file_atomically): UsageError("FLAG FILE: ...") when FILE
// is a directory or another non-regular file, or its directory does not exist or is not writable. Creates nothing.
void check_out_file(const std::filesystem::path& file, const std::string& flag);
// What check_out_file refuses, as the text after "FLAG FILE: "; "" when FILE can be written.
std::string out_file_problem(const std::filesystem::path& file);

// For a bench: blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT in the calling thread, and so in every thread
// it starts later, and starts one thread that takes them. That thread waits for a results write in
// progress to finish, then ends the process by the same signal. Call it first, before any other thread
// exists: a signal blocked only in the writing thread would go to another thread (OpenMP, CUDA) and
// kill the process in the middle of a row.
void guard_termination_signals();

// Suite identity baked in at configure time.
const char* suite_version();
const char* git_sha();
// Now, as every meta.json states its times: "2026-11-29T12:00:00Z".
std::string utc_now();

}  // namespace kvf
