// Running a bench's cases: one Google Benchmark registration per (case, mode), manual time, one iteration
// whose time is the median of our own samples (so --benchmark_out JSON carries medians for compare.py).
// Our measurement loop (measure.hpp) takes the samples; KvfReporter, a pluggable Google Benchmark reporter,
// writes each finished case to the results directory and then lets the console reporter print it.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
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

struct Pending {
  CaseRecord rec;
  std::vector<Sample> samples;
};

// Writes finished cases (rows are flushed as each case ends), then prints through the console reporter.
class KvfReporter final : public benchmark::ConsoleReporter {
 public:
  KvfReporter(ResultsDir& dir, std::map<std::string, std::vector<Pending>>& pending)
      : ConsoleReporter(isatty(1) ? OO_ColorTabular : OO_Tabular), dir_(dir), pending_(pending) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      flush(r.run_name.function_name);  // the registered name, without "/iterations:1/manual_time"
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void flush(const std::string& name) {
    auto it = pending_.find(name);
    if (it == pending_.end()) return;
    for (auto& p : it->second) dir_.write_case(p.rec, p.samples);
    pending_.erase(it);
  }
  void flush_all() {
    while (!pending_.empty()) flush(pending_.begin()->first);
  }

 private:
  ResultsDir& dir_;
  std::map<std::string, std::vector<Pending>>& pending_;
};

// The state of one run across its benchmark invocations: which cases are set up, what is pending a write,
// progress for the ETA, and why the study stopped (a verify failure or bad input: later cases are not run).
class Runner {
 public:
  Runner(const std::string& study, Backend& be, ResultsDir& dir, std::vector<std::unique_ptr<Case>>& cases,
         const Flags& f, const std::string& prog)
      : study_(study), be_(be), dir_(dir), cases_(cases), f_(f), prog_(prog), state_(cases.size()) {
    for (const auto& c : cases_) {
      total_est_ += c->est_seconds;
      total_runs_ += (c->cold ? 1 : 0) + (c->hot ? 1 : 0) + (is_skipped(*c) ? 1 : 0);
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
    KvfReporter reporter(dir_, pending_);
    // A failed results write (full disk, EIO, the file size limit) ends the run: the files hold whole rows
    // only (ResultsDir cuts a failed case off), and nothing more is measured that could not be kept.
    try {
      benchmark::RunSpecifiedBenchmarks(&reporter);
      reporter.flush_all();
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
    benchmark::Shutdown();
    for (std::size_t i = 0; i < cases_.size(); ++i)
      if (state_[i].set_up) cases_[i]->teardown(be_);
    return out_;
  }

 private:
  struct CaseState {
    bool set_up = false;
    int runs_left = 0;
  };

  void progress(const Case& c, const std::string& bname) {
    const double share = c.est_seconds / std::max<std::size_t>(1, (c.cold ? 1 : 0) + (c.hot ? 1 : 0));
    if (tty_) {
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
      const double scale = est_done_ > 0 ? spent / est_done_ : 1.0;
      std::fprintf(stderr, "[%zu/%zu] %s  ETA %s\n", done_ + 1, total_runs_, bname.c_str(),
                   fmt_eta((total_est_ - est_done_) * scale).c_str());
    }
    ++done_;
    est_done_ += share;
  }

  CaseRecord record(const Case& c, const std::string& mode, const std::string& bname) {
    CaseRecord rec;
    rec.study = study_;
    rec.case_name = c.name;
    rec.backend = be_.name();
    rec.device = be_.info().name;
    rec.mode = mode;
    rec.params = c.params;
    // With --benchmark_repetitions each repetition is a full measurement of its own row.
    if (f_.reps > 1) rec.params.push_back({"rep", std::to_string(invocations_[bname]++)});
    rec.bytes = c.bytes;
    rec.flops = c.flops;
    rec.verified = c.has_verify() ? "yes" : "n/a";
    rec.note = c.note;
    if (c.ceiling) rec.ceiling = c.ceiling->label();
    return rec;
  }

  // pct_of_ceiling: against the ceiling this run measured (results directory), or this case itself when it
  // is the ceiling and beats what was measured before it.
  void state_ceiling(const Case& c, const std::string& mode, CaseRecord& rec) {
    if (!c.ceiling) return;
    const double rate = c.ceiling->metric == "tflops" ? rec.tflops : rec.gbps;
    auto ceil = find_ceiling(dir_.path(), *c.ceiling, mode);
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

  void measure_case(std::size_t i, const std::string& mode, const std::string& bname, Pending& p, benchmark::State& st) {
    Case* c = cases_[i].get();
    CaseRecord& rec = p.rec;
    if (!state_[i].set_up) {
      c->setup(be_);
      state_[i].set_up = true;
      if (c->has_verify()) c->verify(be_);
    }
    Measurement m;
    {
      NvtxRange range(bname);
      m = measure(
          be_, mode, f_.cfg, [&] { c->run(be_); }, c->time_opts, [&] { c->before_sample(be_); });
    }
    std::vector<double> kept;
    for (const auto& s : m.samples)
      if (!s.throttled) kept.push_back(s.seconds);
    if (kept.empty())
      for (const auto& s : m.samples) kept.push_back(s.seconds);
    rec.summary = summarize(kept);
    rec.stop_reason = to_string(m.stop);
    rec.throttled_samples = m.throttled;
    const double med = rec.summary.median;
    rec.gbps = med > 0 ? c->bytes / med / 1e9 : 0;
    rec.tflops = med > 0 ? c->flops / med / 1e12 : 0;
    state_ceiling(*c, mode, rec);
    const std::string extra = c->after_measure(be_, rec.summary, mode);
    if (!extra.empty()) rec.note = rec.note.empty() ? extra : rec.note + "; " + extra;
    p.samples = std::move(m.samples);
    for (auto _ : st) st.SetIterationTime(med);
    st.counters["samples"] = static_cast<double>(rec.summary.n);
    st.counters["rel_stdev"] = rec.summary.rel_stdev;
    if (c->bytes > 0) st.counters["GBps"] = rec.gbps;
    if (c->flops > 0) st.counters["TFLOPs"] = rec.tflops;
    if (rec.pct_of_ceiling) st.counters["pct_ceiling"] = *rec.pct_of_ceiling;
  }

  // A row that was not measured: the reason is its note, and Google Benchmark shows it as an error.
  void keep_unmeasured(const std::string& bname, Pending& p, std::string note, benchmark::State& st) {
    p.rec.note = std::move(note);
    st.SkipWithError(p.rec.note.c_str());
    pending_[bname].push_back(std::move(p));
  }

  void run_one(std::size_t i, const std::string& mode, const std::string& bname, benchmark::State& st) {
    Case* c = cases_[i].get();
    progress(*c, bname);
    Pending p;
    p.rec = record(*c, mode, bname);
    const auto* skipped = dynamic_cast<const SkippedCase*>(c);
    if (skipped || !out_.stop_study.empty()) {
      p.rec.verified = "n/a";
      keep_unmeasured(bname, p, skipped ? "skipped: " + skipped->reason : "not run: " + out_.stop_study, st);
    } else {
      try {
        measure_case(i, mode, bname, p, st);
        pending_[bname].push_back(std::move(p));
      } catch (const VerifyError& e) {
        out_.stop_study = std::string("verify failed in ") + c->name;
        out_.exit_code = kExitVerify;
        std::fprintf(stderr, "%s: VERIFY FAILED: %s: %s; the study stops here, no timing of it is trusted\n",
                     prog_.c_str(), c->name.c_str(), e.what());
        p.rec.verified = "no";
        keep_unmeasured(bname, p, std::string("verify failed: ") + e.what(), st);
      } catch (const WriteError&) {
        throw;  // a full disk ends the run (run_all), not just this case
      } catch (const UsageError& e) {
        out_.stop_study = std::string("bad input in ") + c->name;
        out_.exit_code = kExitUsage;
        print_error(prog_, e.what());
        keep_unmeasured(bname, p, std::string("error: ") + e.what(), st);
      } catch (const std::exception& e) {
        if (out_.exit_code == kExitOk) out_.exit_code = kExitFailure;
        print_error(prog_, "case " + c->name + " failed: " + e.what());
        keep_unmeasured(bname, p, std::string("error: ") + e.what(), st);
      }
    }
    progress_case_done(pending_[bname].back().rec);  // to `kvf run`, when it asked (progress_fd.hpp)
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
  std::map<std::string, std::vector<Pending>> pending_;
  std::map<std::string, int> invocations_;
  RunOutcome out_;
  const bool tty_ = isatty(2);
  const std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
  double total_est_ = 0, est_done_ = 0;
  std::size_t done_ = 0, total_runs_ = 0;
};

}  // namespace

RunOutcome run_cases(const std::string& study, Backend& be, ResultsDir& dir, std::vector<std::unique_ptr<Case>>& cases,
                     const Flags& f, const std::string& prog) {
  Runner runner(study, be, dir, cases, f, prog);
  runner.register_all();
  return runner.run_all();
}

}  // namespace kvf::bench
