#include "kvf/errors.hpp"

#include <charconv>

namespace kvf {

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += '?';
    else out.push_back(c);
  }
  return out;
}

std::string shown_value(std::string_view t) {
  if (t.empty()) return "''";
  std::string r;
  for (char ch : t.substr(0, 64)) r.push_back(static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f ? '?' : ch);
  if (t.size() > 64) r += "...";
  // A space at either end would not be seen in the line: quoted, it is.
  const auto blank = [](char ch) { return ch == ' ' || ch == '\t'; };
  if (blank(t.front()) || blank(t.back())) return "'" + r + "'";
  return r;
}

void bad_flag(const std::string& flag, std::string_view value, const std::string& allowed) {
  throw UsageError(flag + " " + shown_value(value) + ": " + allowed);
}

int flag_int(std::string_view t, const std::string& flag, int lo, int hi, int multiple, const std::string& allowed) {
  long long v = 0;
  const char* b = t.data();
  const char* e = b + t.size();
  const auto [p, ec] = std::from_chars(b, e, v);
  if (t.empty() || *b < '0' || *b > '9' || ec != std::errc{} || p != e || v < lo || v > hi || v % multiple)
    bad_flag(flag, t, allowed);
  return static_cast<int>(v);
}

}  // namespace kvf
