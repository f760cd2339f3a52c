// The tables of a results directory as every reader of results sees them (`kvf gate`, `kvf report`, the
// CUPTI counters code): cases.csv split into the harness's fixed columns and the parameter columns, and the
// rows of counters.csv. One reader, so the gate and the report cannot disagree on what a row is; and for
// counters.csv, which several writers append to (CPU model rows, perf events, CUPTI), the one row type and
// writer, so every row has the columns the reader expects.
// Built on kvf::read_csv_table (table.hpp): the file limits of kvf/input.hpp hold here too.
#pragma once
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvf/results.hpp"
#include "kvf/table.hpp"

namespace kvf {

// ------------------------------------------------------------------------------------------ cases.csv
// One row of cases.csv: the fixed text columns and the parameters. The summary columns (median_s, bytes, ...)
// and the counts are parsed by CasesCsv::number / whole where a reader wants them, so a reader never refuses
// a column it does not use, and each reader keeps the order in which it checks a row.
struct CaseEntry {
  std::size_t row = 0;  // index into CasesCsv::table: table.where(row) is "<path>:<line>"
  std::string study, case_name, backend, device, mode, note;  // note: "" when the file has no note column
  std::vector<Param> params;  // every column that is not one of case_columns(), header order; empty values left out
};

struct CasesCsv {
  CsvTable table;
  std::vector<std::string> param_columns;  // header order

  std::size_t size() const { return table.rows.size(); }
  // Row `row`: UsageError "<path>:<line>: empty 'study' or 'case'" when either is empty.
  CaseEntry entry(std::size_t row) const;
  // The number in `column`: nullopt when the file has no such column or the field is empty; UsageError naming
  // file:line:column when it is not a finite number.
  std::optional<double> number(std::size_t row, const std::string& column) const;
  // A count (samples, throttled_samples): nullopt when the file has no such column or the field is empty; a
  // whole number in [0, 2^53] otherwise (UsageError naming file:line:column, before any conversion).
  std::optional<long long> whole(std::size_t row, const std::string& column) const;
};

// Requires the columns study, case, backend, device, mode, samples, then `also_required` (UsageError
// "<path>: missing column '<name>'" for the first missing in that order).
CasesCsv read_cases_csv(CsvTable table, const std::vector<std::string>& also_required = {});

// ------------------------------------------------------------------------------------------ counters.csv
// One row of counters.csv (cupti/counters_io.hpp describes the columns). A number that is absent is NaN
// (an empty field in the file).
struct CounterRow {
  std::string study, case_name, source, capture;
  long range_index = 0;
  std::string range;
  double t_start_ns = std::numeric_limits<double>::quiet_NaN();
  double t_end_ns = std::numeric_limits<double>::quiet_NaN();
  std::string chip, metric;
  double value = std::numeric_limits<double>::quiet_NaN();
  std::string unit;
};

// Requires study, case, source, metric, value; capture, range, chip, unit, range_index, t_start_ns and t_end_ns
// are read where the file has them. An empty metric, a number that is not finite or a range_index that is not
// a whole number in [0, 2^53] is UsageError naming file:line.
std::vector<CounterRow> read_counters_csv(const CsvTable& table);

// The columns of counters.csv, in file order, and a row as its fields.
const std::vector<std::string>& counter_columns();
std::vector<std::string> to_fields(const CounterRow& r);
// A row of key's range (study, case, source, capture, range, times, chip) holding one metric.
inline CounterRow metric_row(const CounterRow& key, std::string metric, double value, std::string unit) {
  CounterRow r = key;
  r.metric = std::move(metric);
  r.value = value;
  r.unit = std::move(unit);
  return r;
}
// Appends rows to DIR/counters.csv in one write, whole or not at all (kvf::CsvAppender: the header written
// when the file is new, UsageError on a foreign header, WriteError when the write fails).
void append_counters_csv(const std::string& results_dir, const std::vector<CounterRow>& rows);

}  // namespace kvf
