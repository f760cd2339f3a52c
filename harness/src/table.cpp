// Any-width CSV through libfccp: its CSVReader takes the column count as a template parameter, so we
// read with a fixed maximum width and name the real columns (padding names never match a header).
#include "kvf/table.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <utility>

#include <libfccp/csv.h>

#include "kvf/csv.hpp"
#include "kvf/errors.hpp"

namespace kvf {

namespace {
constexpr std::size_t N = kMaxCsvColumns;
using Reader = io::CSVReader<N, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>,
                             io::throw_on_overflow, io::no_comment>;

template <std::size_t... I>
void read_header_n(Reader& r, const std::array<std::string, N>& names, std::index_sequence<I...>) {
  r.read_header(io::ignore_missing_column, names[I]...);
}
template <std::size_t... I>
bool read_row_n(Reader& r, std::array<std::string, N>& out, std::index_sequence<I...>) {
  return r.read_row(out[I]...);
}
}  // namespace

std::optional<std::size_t> CsvTable::column(const std::string& name) const {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  return std::nullopt;
}

std::size_t CsvTable::require_column(const std::string& name) const {
  if (auto c = column(name)) return *c;
  throw UsageError(path + ": missing column '" + name + "'");
}

const std::string& CsvTable::at(std::size_t row, const std::string& name) const {
  return rows.at(row).at(require_column(name));
}

CsvTable read_csv_table(const std::string& path) {
  CsvTable t;
  t.path = path;
  {
    std::ifstream probe(path);
    if (!probe) throw UsageError(path + ": cannot open (missing or unreadable)");
    std::string first;
    if (!std::getline(probe, first) || first.empty()) throw UsageError(path + ":1: empty file, expected a header row");
    t.header = split_csv_line(first);
  }
  if (t.header.size() > N)
    throw UsageError(path + ":1: " + std::to_string(t.header.size()) + " columns; at most " + std::to_string(N) +
                     " are supported");
  std::set<std::string> seen;
  for (auto& h : t.header) {
    if (h.empty()) throw UsageError(path + ":1: empty column name in header");
    if (!seen.insert(h).second) throw UsageError(path + ":1: duplicate column '" + h + "'");
  }
  std::array<std::string, N> names;
  for (std::size_t i = 0; i < N; ++i) names[i] = i < t.header.size() ? t.header[i] : "\x01kvf_pad_" + std::to_string(i);
  try {
    Reader r(path);
    read_header_n(r, names, std::make_index_sequence<N>{});
    std::array<std::string, N> cells;
    for (;;) {
      for (auto& c : cells) c.clear();
      if (!read_row_n(r, cells, std::make_index_sequence<N>{})) break;
      t.rows.emplace_back(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(t.header.size()));
      t.line.push_back(r.get_file_line());
    }
  } catch (const io::error::base& e) {
    throw UsageError(std::string("malformed CSV: ") + e.what());
  }
  return t;
}

std::optional<double> parse_number(const CsvTable& t, std::size_t row, const std::string& column) {
  const std::string& s = t.at(row, column);
  if (s.empty()) return std::nullopt;
  if (s == "nan" || s == "NaN") return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size())
    throw UsageError(t.path + ":" + std::to_string(t.line.at(row)) + ": column '" + column + "': '" + s +
                     "' is not a number");
  return v;
}

}  // namespace kvf
