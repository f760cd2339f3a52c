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
// A size exactly, for a case name: "256MiB", "64KiB", "1000000B" (the largest unit that divides it).
std::string exact_size_name(unsigned long long bytes);

}  // namespace kvf
