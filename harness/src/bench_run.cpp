// Running a bench's cases: one Google Benchmark registration per (case, mode), manual time, one iteration
// whose time is the median of our own samples (so --benchmark_out JSON carries medians for compare.py).
// Our measurement loop (measure.hpp) takes the samples; KvfReporter, a pluggable Google Benchmark reporter,
// writes each finished case to the results directory and then lets the console reporter print it.
#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "bench_detail.hpp"
#include "kvf/errors.hpp"
#include "kvf/nvtx.hpp"

namespace kvf::bench {

namespace {

std::string fmt_eta(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

// One (case, mode) row: every repetition's samples pooled (Sample::repetition says whose).
struct Pending {
  CaseRecord rec;
  std::vector<Sample> samples;
  std::vector<std::string> extras;  // the study's after_measure notes, each distinct one once
  std::vector<std::string> failed;  // why a repetition after a measured one was not measured
  int measured_reps = 0;
  // Involuntary context switches of this process while its samples were taken, and the seconds that took: the
  // trace another workload leaves on a shared machine (the load average does not tell it from our own threads).
  long involuntary_switches = 0;
  double measured_s = 0;
};

long involuntary_switches_now() {
  rusage u{};
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_nivcsw : 0;  // every thread of the process
}

// Involuntary switches per second and thread above which a row is said to be measured on a busy machine. On the
// 2-core Zen 3 VM: ~20 quiet, ~90 beside one busy loop (2026-11-29).
constexpr double kBusySwitchesPerThreadS = 50;

// Three significant digits in the unit a person reads: "16.5 us", "3.08 TB/s".
std::string fmt_scaled(double v, const char* const units[], int n_units, double step) {
  int u = 0;
  while (u + 1 < n_units && std::fabs(v) >= step * 0.9995) v /= step, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g %s", v, units[u]);
  return buf;
}
std::string fmt_seconds(double s) {
  static const char* const units[] = {"ns", "us", "ms", "s"};
  return fmt_scaled(s * 1e9, units, 4, 1000);
}
std::string fmt_gbps(double gbps) {
  static const char* const units[] = {"GB/s", "TB/s"};
  return fmt_scaled(gbps, units, 2, 1000);
}
std::string fmt_tflops(double tflops) {
  static const char* const units[] = {"GFLOP/s", "TFLOP/s"};
  return fmt_scaled(tflops * 1000, units, 2, 1000);
}

// The console line of a finished row: name, median with unit, spread in percent, rate, percent of ceiling.
std::string console_line(const CaseRecord& r, std::size_t name_width) {
  std::string name = r.study + "/" + r.case_name + "/" + r.mode;
  if (name.size() < name_width) name.resize(name_width, ' ');
  const Summary& s = r.summary;
  if (s.n == 0) return name + "  " + (r.verified == "no" ? "VERIFY FAILED: " : "") + r.note;
  char spread[48];
  std::snprintf(spread, sizeof spread, "+-%.1f%%", 100.0 * s.rel_stdev);
  std::string line = name + "  " + fmt_seconds(s.median) + "  " + spread + "  n=" + std::to_string(s.n);
  if (r.bytes > 0) line += "  " + fmt_gbps(r.gbps);
  if (r.flops > 0) line += "  " + fmt_tflops(r.tflops);
  if (r.pct_of_ceiling) {
    char pct[64];
    std::snprintf(pct, sizeof pct, "  %.0f%% of %s", *r.pct_of_ceiling, r.ceiling.empty() ? "ceiling" : r.ceiling.c_str());
    line += pct;
  }
  if (r.stop_reason == "profile") line += "  (profile run: not a measurement)";
  return line;
}

// Writes finished rows (flushed as each case ends) and prints one line per row. Google Benchmark's own
// table is not printed: its time column is our median already, its CPU column means nothing for a GPU or a
// multi-threaded case, and its names carry "/iterations:1/manual_time". Its JSON (--benchmark_out) is
// unchanged, one entry per repetition.
class KvfReporter final : public benchmark::BenchmarkReporter {
 public:
  KvfReporter(ResultsDir& dir, std::map<std::string, Pending>& pending, std::size_t name_width,
              std::function<void()> clear_progress)
      : dir_(dir), pending_(pending), name_width_(name_width), clear_progress_(std::move(clear_progress)) {}
  bool ReportContext(const Context&) override {
    // Said once instead of the library's own "***WARNING*** Library was built as DEBUG" (Debian's build).
    std::fprintf(stderr,
                 "timing: kvf's own sampling loop (medians of samples, clocks and throttling checked); Google "
                 "Benchmark only registers and reports the cases, so its build type does not affect any figure\n");
    return true;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      flush(r.run_name.function_name);  // the registered name, without "/iterations:1/manual_time"
    }
  }
  void flush(const std::string& name) {
    auto it = pending_.find(name);
    if (it == pending_.end()) return;
    dir_.write_case(it->second.rec, it->second.samples);
    clear_progress_();
    std::printf("%s\n", console_line(it->second.rec, name_width_).c_str());
    std::fflush(stdout);
    pending_.erase(it);
  }
  void flush_all() {
    while (!pending_.empty()) flush(pending_.begin()->first);
  }

 private:
  ResultsDir& dir_;
  std::map<std::string, Pending>& pending_;
  std::size_t name_width_;
  std::function<void()> clear_progress_;
};

// The state of one run across its benchmark invocations: which cases are set up, what is pending a write,
// progress for the ETA, and why the study stopped (a verify failure or bad input: later cases are not run).
class Runner {
 public:
  Runner(const std::string& study, Backend& be, ResultsDir& dir, std::vector<std::unique_ptr<Case>>& cases,
         const Flags& f, const std::string& prog)
      : study_(study), be_(be), dir_(dir), cases_(cases), f_(f), prog_(prog), state_(cases.size()) {
    for (const auto& c : cases_) {
      const std::size_t modes = (c->cold ? 1 : 0) + (c->hot ? 1 : 0);
      total_est_ += c->est_seconds * f_.reps;
      total_runs_ += modes * static_cast<std::size_t>(f_.reps);
      name_width_ = std::max(name_width_, std::min<std::size_t>(72, study_.size() + c->name.size() + 6));
    }
  }

  void register_all() {
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      Case* c = cases_[i].get();
      std::vector<std::string> modes;
      if (c->cold) modes.push_back("cold");
      if (c->hot) modes.push_back("hot");
      state_[i].runs_left = static_cast<int>(modes.size()) * f_.reps;
      for (const auto& mode : modes) {
        const std::string bname = study_ + "/" + c->name + "/" + mode;
        auto* b = benchmark::RegisterBenchmark(bname.c_str(),
                                               [this, i, mode, bname](benchmark::State& st) { run_one(i, mode, bname, st); });
        b->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
      }
    }
  }

  RunOutcome run_all() {
    KvfReporter reporter(dir_, pending_, name_width_, [this] { clear_progress(); });
    // A failed results write (full disk, EIO, the file size limit) ends the run: the files hold whole rows
    // only (ResultsDir cuts a failed case off), and nothing more is measured that could not be kept.
    try {
      const std::size_t first_row = dir_.case_row_count();
      benchmark::RunSpecifiedBenchmarks(&reporter);
      reporter.flush_all();
      restate_ceilings(first_row);
    } catch (const WriteError& e) {
      out_.write_failure = e.what();
    } catch (const std::exception& e) {
      print_error(prog_, e.what());
      out_.exit_code = kExitFailure;
      try {
        reporter.flush_all();
      } catch (const WriteError& w) {
        out_.write_failure = w.what();
      } catch (const std::exception& w) {
        print_error(prog_, w.what());
      }
    }
    clear_progress();
    benchmark::Shutdown();
    for (std::size_t i = 0; i < cases_.size(); ++i)
      if (state_[i].set_up) cases_[i]->teardown(be_);
    return out_;
  }

 private:
  // A row stated against its own study's ceiling while that ceiling was still being measured (the stream study's
  // read variants: each is a candidate, the best so far at its time) is stated again against the run's best.
  // The console lines and --benchmark_out keep the figure as it stood then.
  void restate_ceilings(std::size_t first_row) {
    std::map<std::string, const CeilingRef*> ceiling_of;
    for (const auto& c : cases_)
      if (c->ceiling && c->ceiling->study == study_) ceiling_of[c->name] = &*c->ceiling;
    if (ceiling_of.empty()) return;
    const std::size_t n = dir_.restate_ceilings(first_row, [&](const std::string& name) -> const CeilingRef* {
      const auto it = ceiling_of.find(name);
      return it == ceiling_of.end() ? nullptr : it->second;
    });
    if (n > 0)
      std::fprintf(stderr,
                   "%s: pct_of_ceiling of %zu %s restated in cases.csv against this run's best ceiling rows (measured "
                   "before it; the lines above show them as they stood then)\n",
                   prog_.c_str(), n, n == 1 ? "row" : "rows");
    // Rows of other studies run before this one into the same directory named this study's ceiling and found none.
    if (const std::size_t late = dir_.state_late_ceilings(study_))
      std::fprintf(stderr,
                   "%s: pct_of_ceiling of %zu earlier %s in cases.csv stated against this run's ceiling (measured "
                   "before it, they had none)\n",
                   prog_.c_str(), late, late == 1 ? "row" : "rows");
  }

  struct CaseState {
    bool set_up = false;
    int runs_left = 0;
  };

  // On a terminal: one progress line on stderr, redrawn in place and cleared before each result line, so the
  // two never interleave. Elsewhere (a log, kvf run's pipe) nothing: the result lines say it all.
  void progress(const Case& c, const std::string& bname) {
    const double share = c.est_seconds / std::max<std::size_t>(1, (c.cold ? 1 : 0) + (c.hot ? 1 : 0));
    if (tty_) {
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
      const double scale = est_done_ > 0 ? spent / est_done_ : 1.0;
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s  ETA %s", done_ + 1, total_runs_, bname.c_str(),
                   fmt_eta((total_est_ - est_done_) * scale).c_str());
      std::fflush(stderr);
      progress_shown_ = true;
    }
    ++done_;
    est_done_ += share;
  }
  void clear_progress() {
    if (!progress_shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    progress_shown_ = false;
  }

  CaseRecord record(const Case& c, const std::string& mode) {
    CaseRecord rec;
    rec.study = study_;
    rec.case_name = c.name;
    rec.backend = be_.name();
    rec.device = be_.info().name;
    rec.mode = mode;
    rec.params = c.params;
    rec.bytes = c.bytes;
    rec.flops = c.flops;
    rec.verified = c.has_verify() ? "yes" : "n/a";
    rec.note = c.note;
    if (c.ceiling) rec.ceiling = c.ceiling->label();
    return rec;
  }

  // A hot row of a case whose hot samples read from cache: no memory-read ceiling is stated for it.
  static bool hot_from_cache(const Case& c, const std::string& mode) { return mode == "hot" && c.hot_in_cache; }

  // pct_of_ceiling: against the ceiling this run measured (results directory), or this case itself when it
  // is the ceiling and beats what was measured before it.
  void state_ceiling(const Case& c, const std::string& mode, CaseRecord& rec) {
    if (!c.ceiling) return;
    if (hot_from_cache(c, mode)) {  // compose_note says why
      rec.ceiling.clear();
      return;
    }
    const double rate = c.ceiling->metric == "tflops" ? rec.tflops : rec.gbps;
    auto ceil = find_ceiling(dir_.path(), *c.ceiling, mode, rec.backend, rec.device);
    bool self = c.ceiling->study == study_;
    for (const auto& want : c.ceiling->match) {
      const auto it = std::find_if(c.params.begin(), c.params.end(), [&](const Param& q) { return q.name == want.name; });
      self = self && it != c.params.end() && it->value == want.value;
    }
    if (self && (!ceil || rate > *ceil)) ceil = rate;
    if (ceil && *ceil > 0) {
      rec.ceiling_value = *ceil;
      rec.pct_of_ceiling = 100.0 * rate / *ceil;
    }
  }

  // The row's figures from every sample taken so far (all repetitions pooled; throttled samples left out
  // unless nothing else is left).
  void score(const Case& c, const std::string& mode, Pending& p, StopReason this_stop) {
    CaseRecord& rec = p.rec;
    std::vector<double> kept;
    std::size_t throttled = 0;
    for (const auto& s : p.samples) {
      if (!s.throttled) kept.push_back(s.seconds);
      throttled += s.throttled ? 1 : 0;
    }
    if (kept.empty())
      for (const auto& s : p.samples) kept.push_back(s.seconds);
    rec.summary = summarize(kept);
    rec.throttled_samples = static_cast<int>(throttled);
    // Pooled: converged only when every repetition converged; otherwise the first other reason stays.
    if (f_.profile) rec.stop_reason = "profile";
    else if (rec.stop_reason.empty() || rec.stop_reason == to_string(StopReason::converged)) rec.stop_reason = to_string(this_stop);
    const double med = rec.summary.median;
    rec.gbps = med > 0 ? c.bytes / med / 1e9 : 0;
    rec.tflops = med > 0 ? c.flops / med / 1e12 : 0;
    rec.pct_of_ceiling.reset();
    rec.ceiling_value.reset();
    state_ceiling(c, mode, rec);
  }

  void measure_case(std::size_t i, const std::string& mode, const std::string& bname, int rep, Pending& p,
                    benchmark::State& st) {
    Case* c = cases_[i].get();
    if (!state_[i].set_up) {
      c->setup(be_);
      // A case may add what its setup measured (the access study's FMA floor) or found (the width of the weights a
      // CPU recompute reads: bf16 through oneDNN, fp32 through the OpenBLAS fallback).
      p.rec.params = c->params;
      p.rec.bytes = c->bytes;
      state_[i].set_up = true;
      if (c->has_verify()) c->verify(be_);
    }
    c->before_measure(be_, mode);
    Measurement m;
    {
      NvtxRange range(bname);
      std::function<void()> region = [&] { c->run(be_); };
      if (injected(f_, bname)) region = slowed_region(std::move(region), f_.inject_fraction);
      const long switches0 = involuntary_switches_now();
      const auto t0 = std::chrono::steady_clock::now();
      m = measure(be_, mode, f_.cfg, region, c->time_opts, [&] { c->before_sample(be_); });
      p.measured_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      p.involuntary_switches += involuntary_switches_now() - switches0;
    }
    std::vector<double> this_rep;
    for (const auto& s : m.samples) this_rep.push_back(s.seconds);
    const double rep_median = summarize(this_rep).median;
    for (auto s : m.samples) {
      s.repetition = rep;
      p.samples.push_back(s);
    }
    score(*c, mode, p, m.stop);
    const std::string extra = c->after_measure(be_, p.rec.summary, mode);
    p.rec.params = c->params;  // and what it measured beside this mode (the remote study's other readers)
    if (!extra.empty() && std::find(p.extras.begin(), p.extras.end(), extra) == p.extras.end()) p.extras.push_back(extra);
    ++p.measured_reps;
    compose_note(*c, p, bname);
    // Google Benchmark sees each repetition on its own (its aggregates then show the spread between them).
    for (auto _ : st) st.SetIterationTime(rep_median);
    st.counters["samples"] = static_cast<double>(this_rep.size());
    const double rep_rate_bytes = rep_median > 0 ? c->bytes / rep_median : 0;
    if (c->bytes > 0) {
      st.SetBytesProcessed(static_cast<std::int64_t>(c->bytes));  // Google Benchmark's own bytes_per_second
      st.counters["GBps"] = rep_rate_bytes / 1e9;
    }
    if (c->flops > 0) {
      st.SetItemsProcessed(static_cast<std::int64_t>(c->flops));  // items_per_second: FLOP/s
      st.counters["TFLOPs"] = rep_median > 0 ? c->flops / rep_median / 1e12 : 0;
    }
    st.counters["rel_stdev_pct"] = 100.0 * summarize(this_rep).rel_stdev;
    if (p.rec.pct_of_ceiling) st.counters["pct_ceiling"] = *p.rec.pct_of_ceiling;
  }

  // A repetition that was not measured: the reason is the row's note, and Google Benchmark shows it as an
  // error. Repetitions measured before it keep their samples.
  void keep_unmeasured(const Case& c, std::string note, Pending& p, benchmark::State& st) {
    st.SkipWithError(note.c_str());
    if (p.samples.empty()) {
      p.rec.note = std::move(note);
      return;
    }
    p.failed.push_back(std::move(note));
    compose_note(c, p, p.rec.study + "/" + p.rec.case_name + "/" + p.rec.mode);
  }

  // The case's own note, the study's after-measure figures, then what a reader of the row must know.
  void compose_note(const Case& c, Pending& p, const std::string& bname) const {
    std::vector<std::string> parts;
    // First, so no reader (or `kvf gate`) can take the row for a measurement.
    if (injected(f_, bname) && !p.samples.empty()) {
      char frac[32];
      std::snprintf(frac, sizeof frac, "%g", f_.inject_fraction);
      parts.push_back(std::string(kFaultInjectedMarker) + ": slowed by " + frac +
                      " of its time (--inject-slowdown, test only): not a measurement");
    }
    if (!c.note.empty()) parts.push_back(c.note);
    parts.insert(parts.end(), p.extras.begin(), p.extras.end());
    if (c.ceiling && hot_from_cache(c, p.rec.mode))
      parts.push_back("hot reads (partly) from cache: no pct_of_ceiling against " + c.ceiling->label() +
                      " (a memory read)");
    // Well above its ceiling: a figure no reader should take as the hardware's (the ceiling row ran on a loaded
    // machine, the row moves its bytes a faster way than the ceiling's loop, or it read bytes the flush left in
    // cache). Said, not hidden: the samples stay as measured.
    if (p.rec.pct_of_ceiling && *p.rec.pct_of_ceiling > 110) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.0f%%", *p.rec.pct_of_ceiling);
      parts.push_back(std::string("above its ceiling (") + buf + " of " + c.ceiling->label() +
                      "): the ceiling measured less than this row runs at (a loaded machine when it ran, a " +
                      "faster way than the ceiling's own loop" +
                      (c.ceiling->metric == "gbps" ? ", or bytes the cache kept)" : ")"));
    }
    const int threads = be_.name() == "cpu" ? std::max(1, omp_get_max_threads()) : 1;
    const double switch_rate = p.measured_s > 0 ? double(p.involuntary_switches) / p.measured_s / threads : 0;
    if (switch_rate > kBusySwitchesPerThreadS) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: %ld involuntary context switches in %.2f s of samples (%.0f/s per thread)",
                    kBusyMachineMarker, p.involuntary_switches, p.measured_s, switch_rate);
      parts.push_back(std::string(buf) + ": other work took the CPUs, the samples may hold its stalls");
    }
    if (f_.reps > 1)
      parts.push_back(std::to_string(p.measured_reps) + " of " + std::to_string(f_.reps) +
                      " repetitions pooled (samples.csv: repetition)");
    if (f_.profile) parts.push_back("profile run (--profile): one execution, not a measurement");
    for (const auto& why : p.failed) parts.push_back("a repetition not measured: " + why);
    p.rec.note.clear();
    for (const auto& s : parts) p.rec.note += (p.rec.note.empty() ? "" : "; ") + s;
  }

  void run_one(std::size_t i, const std::string& mode, const std::string& bname, benchmark::State& st) {
    Case* c = cases_[i].get();
    progress(*c, bname);
    const int rep = invocations_[bname]++;
    auto [it, fresh] = pending_.try_emplace(bname);
    Pending& p = it->second;
    if (fresh) p.rec = record(*c, mode);
    const auto* skipped = dynamic_cast<const SkippedCase*>(c);
    if (skipped || !out_.stop_study.empty()) {
      if (p.samples.empty()) p.rec.verified = "n/a";
      keep_unmeasured(*c, skipped ? "skipped: " + skipped->reason : "not run: " + out_.stop_study, p, st);
    } else {
      try {
        measure_case(i, mode, bname, rep, p, st);
      } catch (const VerifyError& e) {
        out_.stop_study = std::string("verify failed in ") + c->name;
        out_.exit_code = kExitVerify;
        clear_progress();
        std::fprintf(stderr, "%s: VERIFY FAILED: %s: %s; the study stops here, no timing of it is trusted\n",
                     prog_.c_str(), c->name.c_str(), e.what());
        p.rec.verified = "no";
        keep_unmeasured(*c, std::string("verify failed: ") + e.what(), p, st);
      } catch (const WriteError&) {
        throw;  // a full disk ends the run (run_all), not just this case
      } catch (const UsageError& e) {
        out_.stop_study = std::string("bad input in ") + c->name;
        out_.exit_code = kExitUsage;
        clear_progress();
        print_error(prog_, e.what());
        keep_unmeasured(*c, std::string("error: ") + e.what(), p, st);
      } catch (const std::exception& e) {
        if (out_.exit_code == kExitOk) out_.exit_code = kExitFailure;
        clear_progress();
        print_error(prog_, "case " + c->name + " failed: " + e.what());
        keep_unmeasured(*c, std::string("error: ") + e.what(), p, st);
      }
    }
    progress_case_done(pending_[bname].rec);  // to `kvf run`, when it asked (progress_fd.hpp)
    if (--state_[i].runs_left <= 0 && state_[i].set_up) {
      c->teardown(be_);
      state_[i].set_up = false;
    }
  }

  const std::string& study_;
  Backend& be_;
  ResultsDir& dir_;
  std::vector<std::unique_ptr<Case>>& cases_;
  const Flags& f_;
  const std::string& prog_;
  std::vector<CaseState> state_;
  std::map<std::string, Pending> pending_;
  std::map<std::string, int> invocations_;
  RunOutcome out_;
  const bool tty_ = isatty(2);
  bool progress_shown_ = false;
  const std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
  double total_est_ = 0, est_done_ = 0;
  std::size_t done_ = 0, total_runs_ = 0, name_width_ = 0;
};

}  // namespace

RunOutcome run_cases(const std::string& study, Backend& be, ResultsDir& dir, std::vector<std::unique_ptr<Case>>& cases,
                     const Flags& f, const std::string& prog) {
  Runner runner(study, be, dir, cases, f, prog);
  runner.register_all();
  return runner.run_all();
}

}  // namespace kvf::bench
