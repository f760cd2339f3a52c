// Reading CSV files of any width: a header row, then rows of strings, each remembering its line number
// so errors can name file and line. RFC 4180: quoted fields may hold commas, doubled quotes and line
// breaks. Reading goes through kvf/input.hpp, so a file is a bounded regular file and every record
// and field is bounded (ReadLimits).
//
// Why not libfccp (the Fast C++ CSV Parser) any more: it splits records at every line break before it
// looks at quotes, so a quoted field holding a line break (RFC 4180, promised by the README) could not
// be read, and its column count is a template parameter (160 std::strings per row, whatever the width).
#pragma once
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvf {

struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each row has header.size() fields
  std::vector<std::size_t> line;               // file line where each row starts (1-based)
  // A last record without its line end (an interrupted or full-disk write) is not a row: it is left
  // out and named here ("<path>:<line>: torn last row ... left out"), for the reader to pass on.
  std::optional<std::string> torn;
  // Column name -> index, built by the readers: at() by name is called per row and per column, so a
  // scan of a wide header there made loading 100,000 rows quadratic-looking.
  std::unordered_map<std::string, std::size_t> index;

  std::optional<std::size_t> column(const std::string& name) const;
  // Throws UsageError("<path>: missing column '<name>'") when absent.
  std::size_t require_column(const std::string& name) const;
  const std::string& at(std::size_t row, const std::string& name) const;
  std::string where(std::size_t row) const;  // "<path>:<line>"
};

// At most kMaxCsvColumns columns. Throws UsageError naming the file (and line) when the file is
// missing, not a regular file, over a limit, has a malformed row, a duplicate column, or too many columns.
// `root`: the results directory the file belongs to (symlinks leaving it are refused, see input.hpp).
inline constexpr std::size_t kMaxCsvColumns = 1024;
CsvTable read_csv_table(const std::string& path, const std::filesystem::path& root = {});
// The same on text already in memory (fuzzing, tests); `path` only names it in messages.
CsvTable parse_csv_text(std::string_view text, const std::string& path);

// Parses a number field; empty (or "nan", as older writers wrote) means missing (nullopt). Throws
// UsageError naming file:line:column when the field is not a number or is infinite.
std::optional<double> parse_number(const CsvTable& t, std::size_t row, const std::string& column);
// A whole number in [lo, hi] (empty: nullopt; "nan" is refused: a count is never a missing measurement);
// anything else names file:line:column.
std::optional<long long> parse_integer(const CsvTable& t, std::size_t row, const std::string& column, long long lo,
                                       long long hi);

}  // namespace kvf
