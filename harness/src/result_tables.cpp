#include "kvf/result_tables.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "kvf/csv.hpp"
#include "kvf/errors.hpp"

namespace kvf {

namespace {
// Counts are range-checked before conversion: a hostile 9e18 or 1e30 is bad input, not a wrapped integer.
constexpr long long kMaxCount = std::int64_t{1} << 53;
}  // namespace

CasesCsv read_cases_csv(CsvTable table, const std::vector<std::string>& also_required) {
  for (const char* c : {"study", "case", "backend", "device", "mode", "samples"}) table.require_column(c);
  for (const auto& c : also_required) table.require_column(c);
  CasesCsv out;
  const auto& fixed = case_columns();
  for (const auto& h : table.header)
    if (std::find(fixed.begin(), fixed.end(), h) == fixed.end()) out.param_columns.push_back(h);
  out.table = std::move(table);
  return out;
}

CaseEntry CasesCsv::entry(std::size_t row) const {
  CaseEntry e;
  e.row = row;
  e.study = table.at(row, "study");
  e.case_name = table.at(row, "case");
  e.backend = table.at(row, "backend");
  e.device = table.at(row, "device");
  e.mode = table.at(row, "mode");
  if (e.study.empty() || e.case_name.empty()) throw UsageError(table.where(row) + ": empty 'study' or 'case'");
  if (table.column("note")) e.note = table.at(row, "note");
  for (const auto& p : param_columns) {
    const std::string& v = table.at(row, p);
    if (!v.empty()) e.params.push_back({p, v});
  }
  return e;
}

std::optional<double> CasesCsv::number(std::size_t row, const std::string& column) const {
  if (!table.column(column)) return std::nullopt;
  return parse_number(table, row, column);
}

std::optional<long long> CasesCsv::whole(std::size_t row, const std::string& column) const {
  if (!table.column(column)) return std::nullopt;
  return parse_integer(table, row, column, 0, kMaxCount);
}

std::vector<CounterRow> read_counters_csv(const CsvTable& t) {
  for (const char* c : {"study", "case", "source", "metric", "value"}) t.require_column(c);
  const auto text = [&](std::size_t i, const char* col) { return t.column(col) ? t.at(i, col) : std::string(); };
  const auto number = [&](std::size_t i, const char* col) {
    const auto v = t.column(col) ? parse_number(t, i, col) : std::nullopt;
    return v.value_or(std::numeric_limits<double>::quiet_NaN());
  };
  std::vector<CounterRow> rows;
  rows.reserve(t.rows.size());
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    CounterRow c;
    c.study = t.at(i, "study");
    c.case_name = t.at(i, "case");
    c.source = t.at(i, "source");
    c.metric = t.at(i, "metric");
    c.value = number(i, "value");
    c.capture = text(i, "capture");
    c.range = text(i, "range");
    c.chip = text(i, "chip");
    c.unit = text(i, "unit");
    if (t.column("range_index"))
      c.range_index = static_cast<long>(parse_integer(t, i, "range_index", 0, kMaxCount).value_or(0));
    c.t_start_ns = number(i, "t_start_ns");
    c.t_end_ns = number(i, "t_end_ns");
    if (c.metric.empty()) throw UsageError(t.where(i) + ": empty 'metric'");
    rows.push_back(std::move(c));
  }
  return rows;
}

const std::vector<std::string>& counter_columns() {
  static const std::vector<std::string> cols = {"study", "case", "source", "capture", "range_index", "range",
                                                "t_start_ns", "t_end_ns", "chip", "metric", "value", "unit"};
  return cols;
}

std::vector<std::string> to_fields(const CounterRow& r) {
  return {r.study, r.case_name, r.source, r.capture, std::to_string(r.range_index), r.range,
          csv_number(r.t_start_ns), csv_number(r.t_end_ns), r.chip, r.metric, csv_number(r.value), r.unit};
}

void append_counters_csv(const std::string& results_dir, const std::vector<CounterRow>& rows) {
  if (rows.empty()) return;
  std::vector<std::vector<std::string>> fields;
  fields.reserve(rows.size());
  for (const auto& r : rows) fields.push_back(to_fields(r));
  CsvAppender out((std::filesystem::path(results_dir) / "counters.csv").string(), counter_columns());
  out.append_rows(fields);
}

}  // namespace kvf
