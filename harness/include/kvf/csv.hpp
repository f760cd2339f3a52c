// RFC 4180 CSV writing (reading goes through kvf/table.hpp).
#pragma once
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvf {

// Quote a field when it holds a comma, quote, CR or LF (or leading/trailing space); double inner quotes.
std::string csv_escape(std::string_view field);
std::string csv_line(const std::vector<std::string>& fields);  // escaped, comma-joined, ends with "\n"
// Numbers: shortest round-trip form; NaN and infinities as an empty field (the missing value).
std::string csv_number(double v);

// A write to a results file failed (ENOSPC, EIO, EFBIG, ...). Not bad input: the run stops, the caller
// prints what() ("<file>: write failed: <strerror(err)><more>") as one line and exits 1.
struct WriteError : std::runtime_error {
  WriteError(const std::string& path, int err, const std::string& more = {});
  std::string path;
  int err = 0;
};

// Writes all of `bytes` to `fd` (EINTR retried). Returns 0, or the errno of the failed write (EIO when
// write(2) made no progress); *written says how much reached the file either way.
int write_all(int fd, std::string_view bytes, std::size_t* written = nullptr);

// Appends rows to a CSV file with a fixed header. Each append() (one row or a batch) reaches the file
// whole or not at all: on a failed write the file is cut back to its size before the call and
// WriteError is thrown, so a full disk never leaves a torn row. Opening an existing file checks its
// header matches; a new file gets the header first.
class CsvAppender {
 public:
  CsvAppender() = default;
  // Throws UsageError when the file exists with a different header or cannot be opened, WriteError
  // when the header of a new file cannot be written.
  CsvAppender(const std::string& path, std::vector<std::string> header);
  CsvAppender(CsvAppender&&) noexcept;
  CsvAppender& operator=(CsvAppender&&) noexcept;
  ~CsvAppender();
  void append(const std::vector<std::string>& row);  // row.size() must equal header.size()
  void append_rows(const std::vector<std::vector<std::string>>& rows);  // one write for the batch
  const std::vector<std::string>& header() const { return header_; }
  const std::string& path() const { return path_; }
  // Bytes in the file as this appender knows it (after the header and every successful append).
  std::uint64_t size() const { return size_; }
  // Cuts the file back to `size` (an earlier size()): undoes appends when a batch spanning several
  // files fails in a later file. Returns false (errno set) when the file could not be cut.
  bool truncate_to(std::uint64_t size) noexcept;

 private:
  void write_whole(const std::string& bytes);
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string path_;
  std::vector<std::string> header_;
};

// The header record of a CSV file; empty when the file is absent or empty.
std::vector<std::string> read_csv_header(const std::string& path);

}  // namespace kvf
