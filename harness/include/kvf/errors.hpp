// Error types shared by the CLI and the bench binaries.
// Exit codes are part of the user contract (README "Exit codes"):
//   0 ok, 1 a gate found a regression / a study failed, 2 bad input or unavailable backend,
//   3 a verify step failed (GPU output differs from its reference: no timing is trusted).
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvf {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitVerify = 3;

// Bad flags, sizes, files, or a backend that cannot run here. The message is one line that names the
// value and what is allowed; callers print "kvf: error: <what()>" and exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An output that does not match its reference. Stops the study before any timing.
struct VerifyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Messages are one line whatever the user typed: line breaks as \n and \r, other control characters as '?'.
std::string one_line(std::string_view s);
// A typed value as a message shows it: '' for empty, control characters as '?', cut after 64 characters, quoted when
// a space or tab begins or ends it (unseen otherwise).
std::string shown_value(std::string_view value);
// Throws UsageError("<flag> <shown value>: <allowed>"): the one line a bad flag value gets.
[[noreturn]] void bad_flag(const std::string& flag, std::string_view value, const std::string& allowed);
// A flag value of plain decimal digits in [lo, hi] and a multiple of `multiple`: a sign, a space, an
// exponent or a suffix is refused and nothing wraps; otherwise bad_flag(flag, value, allowed).
int flag_int(std::string_view value, const std::string& flag, int lo, int hi, int multiple, const std::string& allowed);

}  // namespace kvf
