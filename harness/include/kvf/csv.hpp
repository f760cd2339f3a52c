// RFC 4180 CSV writing (reading goes through the Fast C++ CSV Parser, see results_reader.hpp).
#pragma once
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace kvf {

// Quote a field when it holds a comma, quote, CR or LF (or leading/trailing space); double inner quotes.
std::string csv_escape(std::string_view field);
std::string csv_line(const std::vector<std::string>& fields);  // escaped, comma-joined, ends with "\n"
// Numbers: shortest round-trip form; NaN and infinities as an empty field (the missing value).
std::string csv_number(double v);

// Appends rows to a CSV file with a fixed header, flushing each row to the OS so an interrupted
// run leaves every finished row readable. Opening an existing file checks its header matches.
class CsvAppender {
 public:
  CsvAppender() = default;
  // Throws UsageError when the file exists with a different header or cannot be opened.
  CsvAppender(const std::string& path, std::vector<std::string> header);
  CsvAppender(CsvAppender&&) noexcept;
  CsvAppender& operator=(CsvAppender&&) noexcept;
  ~CsvAppender();
  void append(const std::vector<std::string>& row);  // row.size() must equal header.size()
  const std::vector<std::string>& header() const { return header_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::vector<std::string> header_;
};

// Reads only the first line of a CSV file; empty when the file is absent.
std::vector<std::string> read_csv_header(const std::string& path);
std::vector<std::string> split_csv_line(std::string_view line);

}  // namespace kvf
