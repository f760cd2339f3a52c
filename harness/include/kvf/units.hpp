// Parsing and printing sizes for flags: "4096", "64KiB", "256MiB", "2GiB" (also K/M/G = KiB/MiB/GiB,
// KB/MB/GB = powers of 1000).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace kvf {

// Throws UsageError("<flag> <text>: ...") for anything that is not a positive size.
std::size_t parse_bytes(std::string_view text, std::string_view flag);
std::string format_bytes(double bytes);  // "256 MiB", "1.5 GiB", "512 B"

}  // namespace kvf
