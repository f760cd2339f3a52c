#include "run_console.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace kvf::cli {

namespace {

// Until a few seconds of cases are measured, the estimates are trusted as they are: one fast first case must not
// swing the ETA (the old per-study ETA jumped 00:15 -> 02:53 -> 01:28).
constexpr double kPriorS = 3.0;
constexpr std::size_t kShownPerReason = 3;
constexpr std::size_t kShownFailures = 10;

std::size_t terminal_width() {
  winsize w{};
  return ::ioctl(2, TIOCGWINSZ, &w) == 0 && w.ws_col > 20 ? w.ws_col : 80;
}

std::string strip_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

}  // namespace

std::string clock_text(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
  return buf;
}

RunConsole::RunConsole(bool tty) : tty_(tty) {}

void RunConsole::plan(const std::vector<PlannedStudy>& studies) {
  studies_ = studies;
  for (const auto& s : studies_) {
    runs_total_ += s.runs;
    est_total_ += s.est_s;
  }
  start_ = std::chrono::steady_clock::now();
}

void RunConsole::clear() {
  if (tty_ && drawn_) std::fputs("\r\033[K", stderr);
  drawn_ = false;
}

void RunConsole::say(const std::string& line) { relay(2, line); }

void RunConsole::relay(int fd, const std::string& line) {
  clear();
  std::FILE* f = fd == 1 ? stdout : stderr;
  std::fputs(line.c_str(), f);
  std::fputc('\n', f);
  std::fflush(f);
  draw();
}

void RunConsole::begin_study(std::size_t index) {
  current_ = index;
  study_runs_done_ = 0;
  study_est_done_ = 0;
  studies_run_.push_back(studies_[index].label);
  const auto& s = studies_[index];
  say("kvf run: [" + std::to_string(index + 1) + "/" + std::to_string(studies_.size()) + "] " + s.label + ": " +
      std::to_string(s.runs) + " case runs, ~" + clock_text(s.est_s) + " estimated");
}

double RunConsole::eta_s() const {
  const double factor = (measured_s_ + kPriorS) / (est_done_ + kPriorS);
  return std::max(0.0, (est_total_ - est_done_) * factor);
}

std::string RunConsole::progress_text() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string& label = current_ < studies_.size() ? studies_[current_].label : std::string();
  const double frac = runs_total_ ? double(runs_done_) / double(runs_total_) : 0;
  constexpr int kBar = 16;
  const int filled = static_cast<int>(std::lround(std::min(1.0, frac) * kBar));
  // The study last: a narrow terminal cuts it, not the counts or the ETA.
  return "kvf run [" + std::string(filled, '#') + std::string(kBar - filled, '.') + "] " + std::to_string(runs_done_) +
         "/" + std::to_string(runs_total_) + " case runs, " + clock_text(elapsed) + " elapsed, ETA ~" +
         clock_text(eta_s()) + "  " + label;
}

void RunConsole::draw() {
  if (!tty_ || studies_.empty()) return;
  std::string text = progress_text();
  const std::size_t width = terminal_width() - 1;  // a wrapped line could not be redrawn in place
  if (text.size() > width) text.resize(width);
  std::fputs(("\r\033[K" + text).c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void RunConsole::tick() { draw(); }

void RunConsole::progress_line(const std::string& json_line) {
  const auto j = nlohmann::json::parse(json_line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  const std::string cs = j.value("case", std::string());
  const std::string mode = j.value("mode", std::string());
  const std::string status = j.value("status", std::string());
  const std::string note = j.value("note", std::string());
  double seconds = j.contains("seconds") && j["seconds"].is_number() ? j["seconds"].get<double>() : 0;
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const PlannedStudy* s = current_ < studies_.size() ? &studies_[current_] : nullptr;
  double est = 0;
  if (s)
    if (const auto it = s->est_per_run.find(cs); it != s->est_per_run.end()) est = it->second;
  ++runs_done_;
  ++study_runs_done_;
  if (s && study_runs_done_ > s->runs) ++runs_total_;  // more than --list said (a repetition count it did not see)
  est_done_ += est;
  study_est_done_ += est;
  measured_s_ += seconds;
  ++totals_.runs;
  const std::string where = (s ? s->label : std::string("?")) + "/" + cs;
  if (status == "ok") {
    ++totals_.ok;
  } else if (status == "skipped") {
    ++totals_.skipped;
    auto& v = skipped_[strip_prefix(note, "skipped: ")];
    if (std::find(v.begin(), v.end(), where) == v.end()) v.push_back(where);
  } else if (status == "not_run") {
    ++totals_.not_run;
  } else {
    ++totals_.failed;
    failures_.push_back(where + "/" + mode + ": " + note);
  }
  if (tty_) {
    draw();
  } else {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f s", seconds);
    std::fprintf(stderr, "kvf run: [%zu/%zu] %s/%s %s %s, ETA ~%s\n", runs_done_, runs_total_, where.c_str(),
                 mode.c_str(), status.c_str(), secs, clock_text(eta_s()).c_str());
  }
}

void RunConsole::end_study(int rc, bool timed_out) {
  if (current_ >= studies_.size()) return;
  const PlannedStudy& s = studies_[current_];
  if (study_runs_done_ < s.runs) {
    const std::size_t left = s.runs - study_runs_done_;
    runs_total_ -= left;
    est_total_ -= std::max(0.0, s.est_s - study_est_done_);
    stopped_.push_back(s.label + ": " + std::to_string(left) + " case runs not reached (" +
                       (timed_out ? std::string("stopped at its share of --time-limit")
                                  : "the bench exited with " + std::to_string(rc)) +
                       ")");
  }
  draw();
}

std::vector<std::string> RunConsole::summary_lines() const {
  std::vector<std::string> out;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string names;
  for (const auto& n : studies_run_) names += (names.empty() ? "" : ", ") + n;
  char head[512];
  std::snprintf(head, sizeof head,
                "kvf run: finished in %s: %zu %s (%s); %zu case runs (case x mode): %zu measured, %zu failed, %zu "
                "skipped, %zu not run",
                clock_text(elapsed).c_str(), studies_run_.size(), studies_run_.size() == 1 ? "study" : "studies",
                names.c_str(), totals_.runs, totals_.ok, totals_.failed, totals_.skipped, totals_.not_run);
  out.push_back(head);
  for (const auto& [reason, cases] : skipped_) {
    std::string l = "kvf run: skipped " + std::to_string(cases.size()) + (cases.size() == 1 ? " case" : " cases") +
                    ": " + reason + ": ";
    for (std::size_t i = 0; i < cases.size() && i < kShownPerReason; ++i) l += (i ? ", " : "") + cases[i];
    if (cases.size() > kShownPerReason) l += ", +" + std::to_string(cases.size() - kShownPerReason) + " more";
    out.push_back(l);
  }
  for (std::size_t i = 0; i < failures_.size() && i < kShownFailures; ++i) out.push_back("kvf run: failed: " + failures_[i]);
  if (failures_.size() > kShownFailures)
    out.push_back("kvf run: failed: +" + std::to_string(failures_.size() - kShownFailures) +
                  " more (each row's note in cases.csv says why)");
  for (const auto& s : stopped_) out.push_back("kvf run: stopped early: " + s);
  return out;
}

}  // namespace kvf::cli
