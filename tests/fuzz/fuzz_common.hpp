// Shared by the libFuzzer targets in tests/fuzz (docs/fuzzing.md).
//
// Contract of every target: a kvf::UsageError is the expected answer to bad input and is caught; anything
// else is a finding: another exception escaping (libFuzzer reports it as a crash: "deadly signal" after
// std::terminate), a crash, an ASan/UBSan report, a leak, an out-of-memory or a timeout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvf/errors.hpp"
#include "kvf/report.hpp"

namespace kvf::fuzz {

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Once per process: smaller read limits than the CLI's defaults (kvf/input.hpp), so inputs of a few KiB reach
// the limit checks too (set KVF_FUZZ_CLI_LIMITS=1 to fuzz with the CLI's defaults instead).
void init_limits();

// A scratch directory of this process (under /dev/shm when writable, else $TMPDIR or /tmp), made on first
// use and removed at exit; `sub` is a subdirectory of it, made on first use.
const std::filesystem::path& scratch();
std::filesystem::path scratch_dir(const std::string& sub);

// Writes `bytes` to `path` (replacing it). Aborts when the write fails: that is the harness, not the reader.
void write_file(const std::filesystem::path& path, std::string_view bytes);
void remove_file(const std::filesystem::path& path);

// A fixed, valid companion file: tests/fuzz/companions/<rel> (read once).
const std::string& companion(const std::string& rel);

// A results directory `sub` of the scratch directory holding the given companions (written once) and the
// fuzz input as `name`. Returns the directory.
std::filesystem::path results_dir(const std::string& sub, const std::vector<std::pair<std::string, std::string>>& companions,
                                  const std::string& name, std::string_view input);

// Runs f; a kvf::UsageError (bad input, exit 2 in the CLI) is the expected outcome and is swallowed.
template <class F>
bool expect_usage_errors(F&& f) {
  try {
    f();
    return true;
  } catch (const kvf::UsageError&) {
    return false;
  }
}

// Properties of the untrusted-text escapers of the report (kvf/report.hpp), checked on a text that came
// from the fuzz input (device names, case names); a violation aborts (a finding).
void check_escapers(const std::string& s);
// The report of `dir` written with charts off into a scratch directory; every .gp file is checked to hold
// no backquote and no line that starts a shell command (`!`, system, shell): data never becomes code.
// Also renders report.md and report.html (markdown_to_html) on the way.
void check_report(const kvf::report::ResultSet& rs);

// Aborts with a message (a finding) when `ok` is false.
void require(bool ok, const char* what, const std::string& detail = {});

}  // namespace kvf::fuzz
