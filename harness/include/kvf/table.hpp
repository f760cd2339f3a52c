// Reading CSV files of any width with the Fast C++ CSV Parser (libfccp): a header row, then rows of
// strings, each remembering its line number so errors can name file and line.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kvf {

struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each row has header.size() fields
  std::vector<std::size_t> line;               // file line of each row (1-based)

  std::optional<std::size_t> column(const std::string& name) const;
  // Throws UsageError("<path>: missing column '<name>'") when absent.
  std::size_t require_column(const std::string& name) const;
  const std::string& at(std::size_t row, const std::string& name) const;
};

// At most kMaxCsvColumns columns. Throws UsageError naming the file (and line) when the file is
// missing, has a malformed row, a duplicate column, or too many columns.
inline constexpr std::size_t kMaxCsvColumns = 160;
CsvTable read_csv_table(const std::string& path);

// Parses a number field; empty means missing (nullopt). Throws UsageError naming file:line:column
// when the field is not a number.
std::optional<double> parse_number(const CsvTable& t, std::size_t row, const std::string& column);

}  // namespace kvf
