// Reading what we did not write in this process: results directories users share (attached to issues,
// CI artifacts, a colleague's GPU box), GPU and model spec files, Google Benchmark JSON. Every reader
// goes through here, so the limits hold everywhere:
//   - regular files only: a FIFO, a device (/dev/zero), a socket or a directory is bad input, and
//     opening never blocks (O_NONBLOCK, then fstat);
//   - a symlink inside a results directory whose target lies outside that directory is refused unless
//     the user allows it (`--follow-symlinks`);
//   - at most max_file_bytes per file, max_line_bytes per CSV record, max_field_bytes per CSV field
//     and per JSON string;
//   - JSON nested at most max_json_depth deep (checked by a SAX pass before the tree is built);
//   - numbers range-checked before any integer conversion; NaN and infinities are explicit.
// Beyond a limit is bad input: UsageError "<file>:<line>: ..." (exit 2).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

#include <nlohmann/json.hpp>

namespace kvf {

struct ReadLimits {
  std::uint64_t max_file_bytes = 256ull << 20;  // --max-file-mib 256
  std::size_t max_line_bytes = 1u << 20;        // --max-line-kib 1024 (one CSV record, quoted line breaks included)
  std::size_t max_field_bytes = 64u << 10;      // --max-field-kib 64
  std::size_t max_json_depth = 64;              // meta.json is 4 deep; Google Benchmark JSON 3
  bool follow_symlinks = false;                 // --follow-symlinks: allow links leaving the directory
};

// Process-wide limits (set once from flags before anything is read).
const ReadLimits& read_limits();
void set_read_limits(const ReadLimits& limits);

// True when `path` names anything, a dangling symlink included (lstat), so "missing" and "refused"
// stay apart.
bool input_exists(const std::filesystem::path& path);

// The whole content of a regular file, at most max_file_bytes. `root`, when given, is the directory the
// file was found in: a symlink (anywhere on the way) that resolves outside it is refused unless
// follow_symlinks. Throws UsageError naming the file.
std::string read_input_file(const std::filesystem::path& path, const std::filesystem::path& root = {});

// At most the first `bytes` of a regular file (same checks, no symlink rule): a header without the rows.
std::string read_input_head(const std::filesystem::path& path, std::size_t bytes);

// What a stat mode is, for messages: "a regular file", "a directory", "a FIFO", "a character device", ...
const char* file_kind(mode_t mode);

// JSON text to a tree: malformed JSON, nesting deeper than max_json_depth, a string longer than
// max_field_bytes, or text longer than max_file_bytes is UsageError("<source>: ..."). Non-finite numbers cannot occur (JSON has none).
nlohmann::json parse_json_input(std::string_view text, const std::string& source);
nlohmann::json read_json_input(const std::filesystem::path& path, const std::filesystem::path& root = {});

// Typed access to an object member, naming the file and the key on a wrong type or range:
//   "<source>: key 'device.llc_bytes': expected a whole number in [0, 9.2e18], got string".
// Absent (or null) members give nullopt; `key_path` is the dotted path printed in messages.
std::optional<std::string> json_string(const nlohmann::json& obj, std::string_view key, const std::string& source,
                                       const std::string& key_path);
std::optional<double> json_number(const nlohmann::json& obj, std::string_view key, const std::string& source,
                                  const std::string& key_path, double lo, double hi);
std::optional<std::int64_t> json_integer(const nlohmann::json& obj, std::string_view key, const std::string& source,
                                         const std::string& key_path, std::int64_t lo, std::int64_t hi);

// A double (from CSV or JSON) as an integer: NaN, an infinity, a fraction or a value outside [lo, hi]
// is UsageError("<what>: '<v>' is not a whole number in [lo, hi]"). Never converts out of range.
std::int64_t checked_integer(double v, std::int64_t lo, std::int64_t hi, const std::string& what);

}  // namespace kvf
