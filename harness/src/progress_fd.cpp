#include "progress_fd.hpp"

#include "kvf/csv.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

namespace kvf::bench {

namespace {

// The fd from the environment, checked once: a number naming an open descriptor, else -1 (protocol off).
int progress_fd() {
  static const int fd = [] {
    const char* v = std::getenv("KVF_PROGRESS_FD");
    if (!v || !*v) return -1;
    int n = -1;
    const auto [p, ec] = std::from_chars(v, v + std::strlen(v), n);
    if (ec != std::errc{} || *p != '\0' || n < 3 || ::fcntl(n, F_GETFD) < 0) return -1;
    return n;
  }();
  return fd;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Set when the bench starts (static initialization), so the first case's seconds include the backend's start.
std::chrono::steady_clock::time_point g_last = std::chrono::steady_clock::now();

}  // namespace

// From the note bench_run.cpp gives a row it did not measure; a measured row may carry a note of its own.
const char* progress_status(const CaseRecord& rec) {
  if (starts_with(rec.note, "skipped: ")) return "skipped";
  if (starts_with(rec.note, "not run: ")) return "not_run";
  if (starts_with(rec.note, "verify failed")) return "verify_failed";
  if (starts_with(rec.note, "error: ") || rec.summary.n == 0) return "failed";
  return "ok";
}

void progress_case_done(const CaseRecord& rec) {
  static int fd = progress_fd();
  if (fd < 0) return;
  const auto now = std::chrono::steady_clock::now();
  nlohmann::json j = {{"study", rec.study},
                      {"case", rec.case_name},
                      {"mode", rec.mode},
                      {"status", progress_status(rec)},
                      {"seconds", std::chrono::duration<double>(now - g_last).count()}};
  g_last = now;
  if (std::strcmp(progress_status(rec), "ok") != 0) j["note"] = rec.note;
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (write_all(fd, line) != 0) fd = -1;  // kvf went away or the fd was something else: no more lines
}

}  // namespace kvf::bench
