#include "kvf/csv.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "kvf/errors.hpp"

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

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') { cur.push_back('"'); ++i; }
        else quoted = false;
      } else {
        cur.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\r' && c != '\n') {
      cur.push_back(c);
    }
  }
  out.push_back(std::move(cur));
  return out;
}

std::vector<std::string> read_csv_header(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  return split_csv_line(line);
}

CsvAppender::CsvAppender(const std::string& path, std::vector<std::string> header)
    : path_(path), header_(std::move(header)) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
  if (exists) {
    const auto have = read_csv_header(path);
    if (have != header_)
      throw UsageError(path + ": exists with different columns; write to a new --out directory");
  }
  f_ = std::fopen(path.c_str(), "ab");
  if (!f_) throw UsageError(path + ": cannot open for writing: " + std::strerror(errno));
  if (!exists) append(header_);
}

CsvAppender::CsvAppender(CsvAppender&& o) noexcept
    : f_(o.f_), path_(std::move(o.path_)), header_(std::move(o.header_)) {
  o.f_ = nullptr;
}
CsvAppender& CsvAppender::operator=(CsvAppender&& o) noexcept {
  if (this != &o) {
    if (f_) std::fclose(f_);
    f_ = o.f_;
    o.f_ = nullptr;
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
  }
  return *this;
}
CsvAppender::~CsvAppender() {
  if (f_) std::fclose(f_);
}

void CsvAppender::append(const std::vector<std::string>& row) {
  if (row.size() != header_.size())
    throw std::logic_error(path_ + ": row has " + std::to_string(row.size()) + " fields, header has " +
                           std::to_string(header_.size()));
  const std::string line = csv_line(row);
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
}

}  // namespace kvf
