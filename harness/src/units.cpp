#include "kvf/units.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "kvf/errors.hpp"

namespace kvf {

std::size_t parse_bytes(std::string_view text, std::string_view flag) {
  auto fail = [&](const char* why) -> std::size_t {
    throw UsageError(std::string(flag) + " " + (text.empty() ? std::string("''") : std::string(text)) + ": " + why +
                     "; allowed: a positive size like 4096, 64KiB, 256MiB, 2GiB");
  };
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return fail("empty size");
  if (s.front() == '-') return fail("negative size");
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || !std::isfinite(v)) return fail("not a number");
  std::string unit(p, s.data() + s.size());
  for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else return fail("unknown unit");
  const double bytes = v * mult;
  if (bytes <= 0) return fail("size must be positive");
  if (bytes > 1e18) return fail("size too large");
  // A size is whole bytes: 4096.4 or 0.6 was rounded before, and a rounded size is not the one asked for.
  if (bytes != std::floor(bytes)) return fail("not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  if (b == std::floor(b)) std::snprintf(buf, sizeof buf, "%.0f %s", b, units[u]);
  else std::snprintf(buf, sizeof buf, "%.3g %s", b, units[u]);
  return buf;
}

std::string exact_size_name(unsigned long long bytes) {
  if (bytes > 0 && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes > 0 && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

}  // namespace kvf
