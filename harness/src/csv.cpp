#include "kvf/csv.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/table.hpp"

namespace kvf {

std::string csv_escape(std::string_view f) {
  const bool needs = f.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!f.empty() && (f.front() == ' ' || f.back() == ' '));
  if (!needs) return std::string(f);
  std::string out;
  out.reserve(f.size() + 2);
  out.push_back('"');
  for (char c : f) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string line;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) line.push_back(',');
    line += csv_escape(fields[i]);
  }
  line.push_back('\n');
  return line;
}

std::string csv_number(double v) {
  if (!std::isfinite(v)) return {};
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, p) : std::string{};
}

std::vector<std::string> read_csv_header(const std::string& path) {
  if (!input_exists(path)) return {};
  // The first record only: every case a bench writes reopens samples.csv and cases.csv, and reading
  // the whole file there made a run's I/O quadratic in its cases. A header longer than a record may
  // be is bad input, as in the readers.
  const std::string head = read_input_head(path, read_limits().max_line_bytes);
  if (head.empty()) return {};
  const auto nl = head.find('\n');
  if (nl == std::string::npos && head.size() == read_limits().max_line_bytes)
    throw UsageError(path + ":1: header longer than " + std::to_string(head.size()) + " bytes");
  return parse_csv_text(std::string_view(head).substr(0, nl == std::string::npos ? head.size() : nl + 1), path).header;
}

WriteError::WriteError(const std::string& p, int e, const std::string& more)
    : std::runtime_error(p + ": write failed: " + std::strerror(e) + more), path(p), err(e) {}

CsvAppender::CsvAppender(const std::string& path, std::vector<std::string> header)
    : path_(path), header_(std::move(header)) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
  if (exists) {
    const auto have = read_csv_header(path);
    if (have != header_)
      throw UsageError(path + ": exists with different columns; write to a new --out directory");
  }
  // O_NONBLOCK: opening a FIFO in place of the file never blocks (fstat below refuses it); O_RDWR: the
  // torn-row check reads the last byte.
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd_ < 0) throw UsageError(path + ": cannot open for writing: " + std::strerror(errno));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw UsageError(path + ": not a regular file" + (err ? std::string(": ") + std::strerror(err) : ""));
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ > 0) {
    // A row appended after a torn one (a run killed mid-write before rows were written whole) would be
    // glued onto it and make both unreadable.
    char last = 0;
    if (::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') {
      ::close(fd_);
      fd_ = -1;
      throw UsageError(path + ": ends in a torn row (no line break at the end); write to a new --out directory");
    }
  } else {
    write_whole(csv_line(header_));
  }
}

CsvAppender::CsvAppender(CsvAppender&& o) noexcept
    : fd_(o.fd_), size_(o.size_), path_(std::move(o.path_)), header_(std::move(o.header_)) {
  o.fd_ = -1;
}
CsvAppender& CsvAppender::operator=(CsvAppender&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
    size_ = o.size_;
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
  }
  return *this;
}
CsvAppender::~CsvAppender() {
  if (fd_ >= 0) ::close(fd_);
}

int write_all(int fd, std::string_view bytes, std::size_t* written) {
  std::size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      err = n < 0 ? errno : EIO;  // write() returning 0 for a non-empty buffer: no progress
      break;
    }
  }
  if (written) *written = done;
  return err;
}

bool CsvAppender::truncate_to(std::uint64_t size) noexcept {
  if (fd_ < 0) return false;
  int rc;
  do rc = ::ftruncate(fd_, static_cast<off_t>(size));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) return false;
  size_ = size;
  return true;
}

// One write(2) loop on an O_APPEND descriptor; a short write followed by an error (EFBIG at the file
// size limit, ENOSPC) is cut back so the file ends where the last whole batch ended.
void CsvAppender::write_whole(const std::string& bytes) {
  if (fd_ < 0) throw std::logic_error(path_ + ": append to a closed CsvAppender");
  const std::uint64_t before = size_;
  std::size_t done = 0;
  if (const int err = write_all(fd_, bytes, &done)) {
    if (done > 0 && !truncate_to(before)) {
      const int cut_err = errno;
      throw WriteError(path_, err, std::string("; cutting the partial row off failed too: ") + std::strerror(cut_err));
    }
    throw WriteError(path_, err);
  }
  size_ = before + bytes.size();
}

void CsvAppender::append(const std::vector<std::string>& row) { append_rows({row}); }

void CsvAppender::append_rows(const std::vector<std::vector<std::string>>& rows) {
  std::string text;
  for (const auto& row : rows) {
    if (row.size() != header_.size())
      throw std::logic_error(path_ + ": row has " + std::to_string(row.size()) + " fields, header has " +
                             std::to_string(header_.size()));
    text += csv_line(row);
  }
  if (!text.empty()) write_whole(text);
}

}  // namespace kvf
