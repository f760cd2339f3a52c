// kvf run's console: one whole-run progress line with an ETA (from the benches' --list estimates, scaled by the
// measured time of the finished cases), redrawn in place on a terminal and printed as plain lines elsewhere;
// the benches' own output relayed above it; and the closing summary.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace kvf::cli {

// One planned study of one device, as its --list pass described it.
struct PlannedStudy {
  std::string label;  // "access", or "dev1/access" under --device all
  std::string study;
  std::map<std::string, double> est_per_run;  // case -> estimated seconds of one (case, mode) run
  std::size_t runs = 0;                       // (case, mode) runs, repetitions included
  double est_s = 0;
};

class RunConsole {
 public:
  explicit RunConsole(bool tty);
  void plan(const std::vector<PlannedStudy>& studies);
  // Lines of kvf itself and lines the bench printed (fd 1: stdout, 2: stderr), kept apart from the progress line.
  void say(const std::string& line);
  void relay(int fd, const std::string& line);
  void begin_study(std::size_t index);
  void progress_line(const std::string& json_line);  // one KVF_PROGRESS_FD line of the running bench
  void tick();                                         // redraw (the clock moved)
  // The study ended: what it did not report (stopped by a time limit, a crash) leaves the estimate.
  void end_study(int rc, bool timed_out);
  void clear();  // takes the progress line off a terminal before kvf's last lines

  struct Totals {
    std::size_t ok = 0, failed = 0, skipped = 0, not_run = 0, runs = 0;
  };
  const Totals& totals() const { return totals_; }
  // The closing lines: studies and cases, failures, skipped cases grouped by reason, elapsed time.
  std::vector<std::string> summary_lines() const;

 private:
  void draw();
  std::string progress_text() const;
  double eta_s() const;

  bool tty_;
  bool drawn_ = false;
  std::vector<PlannedStudy> studies_;
  std::size_t current_ = 0;
  std::size_t runs_total_ = 0, runs_done_ = 0, study_runs_done_ = 0;
  double est_total_ = 0, est_done_ = 0, measured_s_ = 0, study_est_done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  Totals totals_;
  std::vector<std::string> studies_run_;
  std::map<std::string, std::vector<std::string>> skipped_;  // reason -> "study/case" (once per case)
  std::vector<std::string> failures_;                        // "study/case/mode: note"
  std::vector<std::string> stopped_;                         // "study: why"
};

std::string clock_text(double seconds);  // "01:05", "1:02:03"

}  // namespace kvf::cli
