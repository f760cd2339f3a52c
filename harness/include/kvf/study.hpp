// How a study plugs into the harness. The harness knows no study: a bench binary defines one Study,
// the Study returns its cases, and bench_main() does the rest (flags, Google Benchmark registration,
// verify, cold/hot measurement, results, progress).
//
//   class StreamStudy : public kvf::Study { ... };
//   int main(int argc, char** argv) { StreamStudy s; return kvf::bench_main(argc, argv, s); }
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvf/backend.hpp"
#include "kvf/results.hpp"
#include "kvf/stats.hpp"
#include "kvf/study_flags.hpp"

namespace kvf {

struct StudyContext {
  Backend* backend = nullptr;
  bool quick = false;  // the `--quick` subset: a handful of cases that finishes in seconds
};

// One measured case. The harness calls, in order:
//   setup() once; verify() once (throw VerifyError on mismatch); then for each mode (cold, hot)
//   before_measure(mode), then run() for warm-up and for every sample (the timed region: enqueue or do exactly
//   the work that is measured, nothing else); teardown() once.
// Cold samples are preceded by Backend::flush_caches(); before_sample() runs before every sample,
// untimed (e.g. to reset an output or re-randomize offsets).
class Case {
 public:
  virtual ~Case() = default;

  std::string name;                 // unique within the study; becomes the "case" column
  std::vector<Param> params;        // every parameter as its own column
  double bytes = 0;                 // per execution of run()
  double flops = 0;                 // per execution of run()
  std::optional<CeilingRef> ceiling;  // what pct_of_ceiling divides by (absent: not stated)
  std::vector<CeilingRef> uses;     // other ceilings this case reads (e.g. its idleness figures)
  double est_seconds = 0.5;         // for --list and the ETA (setup + verify + both modes)
  TimeOptions time_opts{};
  bool cold = true, hot = true;     // which modes make sense for this case
  // Hot samples read wholly or partly from the LLC (CPU) or L2 (GPU), e.g. a working set under 4x of it: a
  // memory-read ceiling does not bound them, so hot rows state no pct_of_ceiling (and say why).
  bool hot_in_cache = false;
  std::string note;                 // carried to the "note" column

  virtual void setup(Backend&) {}
  virtual void verify(Backend&) {}  // default: nothing to verify -> verified = "n/a"
  virtual bool has_verify() const { return false; }
  virtual void before_sample(Backend&) {}
  // Untimed, before the samples of each mode (and of each repetition): a case that tunes a choice to the mode
  // does it here (the access study's CPU attention times its far prefetch on and off, caches flushed for cold).
  virtual void before_measure(Backend&, const std::string& /*mode*/) {}
  virtual void run(Backend&) = 0;
  virtual void teardown(Backend&) {}
  // Extra figures a study adds to the note after measuring (e.g. "working_set_vs_llc=3.2"). Parameters it sets
  // in params here (kvf::set_param) reach this mode's row, as those its setup sets reach every row.
  virtual std::string after_measure(Backend&, const Summary& /*median of this mode*/, const std::string& /*mode*/) {
    return {};
  }
};

// A case that is listed but cannot run here: written as a row with samples=0 and the reason in
// "note" (e.g. "skipped: needs 2 GPUs"), never a silent gap.
std::unique_ptr<Case> skipped_case(std::string name, std::vector<Param> params, std::string reason);

class Study {
 public:
  virtual ~Study() = default;
  virtual std::string name() const = 0;
  // Study-specific flags (e.g. --size). Validate in cases(): throw UsageError with one clear line.
  virtual void add_options(StudyFlags&) {}
  // The cases for this backend. Called after flags are parsed and the backend is chosen.
  virtual std::vector<std::unique_ptr<Case>> cases(const StudyContext& ctx) = 0;
  // A study that moves host memory and times it on the host (the remote study: UCX between the ranks' host pools)
  // runs on the CPU backend whatever --backend and --device say (kvf run passes its own to every study), and the
  // backend line says so: under CUDA its samples would be timed by events on an idle stream, its cold flush would
  // flush the GPU's L2 and leave the host's caches warm.
  virtual bool host_only() const { return false; }
};

int bench_main(int argc, char** argv, Study& study);

}  // namespace kvf
