// GPU counters of a measured case (CUPTI): after its hot samples, once, (1) the range profiler, one range per step
// named like the step's NVTX range, (2) PM sampling across many steps, (3) Activity API kernel records per step.
// Separate phases: the first two both program the device-wide PM hardware. Timings never depend on them: without
// the collector (no privileges, another profiler attached) a row says so in one line.
#if defined(KVF_HAVE_CUDA)
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>

#include "idleness.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/nvtx.hpp"

#if defined(KVF_HAVE_CUPTI)
#include "kvf/cupti/activity.hpp"
#include "kvf/cupti/clock_alignment.hpp"
#include "kvf/cupti/metric_sets.hpp"
#include "kvf/cupti/pm_sampler.hpp"
#include "kvf/cupti/range_profiler.hpp"
#endif

namespace kvf::idleness {

#if defined(KVF_HAVE_CUPTI)
namespace {

std::string sanitize(std::string s) {
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = '_';
  return s;
}

void append_cupti_rows(const std::string& out_dir, const std::vector<kvf::cupti::CounterRow>& rows) {
  if (!out_dir.empty()) kvf::append_counters_csv(out_dir, rows);
}

// Returns the note text.
std::string collect_counters(const std::string& case_name, const std::function<void(cudaStream_t)>& step,
                             cudaStream_t st, const kvf::cupti::RangeProfilerOptions& opts, bool& said_unavailable,
                             const std::string& out_dir) {
  namespace cu = kvf::cupti;
  const std::string cap = sanitize(case_name);
  std::string note;
  const int steps = 8;
  {
    cu::RangeProfiler prof(opts);
    if (!prof.available()) {
      if (!said_unavailable)
        std::fprintf(stderr, "bench_idleness: GPU counters unavailable, timings only: %s\n", prof.status().reason.c_str());
      said_unavailable = true;
      return "counters: unavailable (" + prof.status().reason + ")";
    }
    prof.start();
    for (int i = 0; i < steps; ++i) {
      const std::string rn = "idleness/" + case_name + "/step";
      kvf::NvtxRange nvtx(rn);
      cu::ScopedRange r(prof, rn, case_name);
      step(st);
    }
    prof.stop();
    prof.save(out_dir, "range_" + cap, "idleness", case_name);
    append_cupti_rows(out_dir, prof.rows("idleness", case_name));
    note += "counters: " + std::to_string(steps) + " range-profiler steps";
  }
  {
    cu::PmSampler pm;
    if (pm.available()) {
      // Kernel records through the PM phase: `kvf counters` checks from them whether the PM samples' timestamps
      // share the kernel records' clock (clock_alignment.hpp) before the timeline is joined to kernels.
      std::optional<cu::KernelTracer> pm_tr;
      pm_tr.emplace();
      if (!pm_tr->available()) pm_tr.reset();
      pm.start();
      for (int i = 0; i < 64; ++i) {
        step(st);
        if (i % 8 == 7) {
          (void)cudaStreamSynchronize(st);
          pm.decode();
        }
      }
      (void)cudaStreamSynchronize(st);
      pm.stop();
      pm.save(out_dir, "pm_" + cap, "idleness", case_name);
      append_cupti_rows(out_dir, pm.rows("idleness", case_name));
      std::string clock_note = ", clock check: no kernel records during sampling";
      if (pm_tr) {
        const auto& ks = pm_tr->flush();
        pm_tr->save(out_dir, "activity_pm_" + cap, "idleness", case_name);
        std::vector<cu::PmPoint> pts;
        for (const auto& r : pm.rows("idleness", case_name))
          if (r.metric == cu::kGrActiveMetric && std::isfinite(r.t_start_ns)) pts.push_back({r.t_start_ns, r.t_end_ns, r.value});
        if (!ks.empty()) {
          std::uint64_t lo = ks.front().start_ns, hi = ks.front().end_ns;
          for (const auto& k : ks) { lo = std::min(lo, k.start_ns); hi = std::max(hi, k.end_ns); }
          const double span = double(hi - lo);
          const auto a = cu::align_pm_to_kernels(pts, ks, std::max(0.0, span / 10));
          clock_note = a.samples == 0 ? ", clock check: no PM sample inside the kernel records (different time bases?)"
                                      : ", clock check: " + std::string(a.shared_clock ? "shared" : "NOT shared") +
                                            " (best shift " + num(a.best_shift_ns, 3) + " ns, correlation " +
                                            num(a.corr_at_zero, 3) + " at 0)";
        }
        pm_tr.reset();  // one tracer at a time: the per-step windows below make their own
      }
      note += ", " + std::to_string(pm.samples()) + " PM samples over 64 steps" + (pm.overflowed() ? " (overflowed)" : "");
      note += clock_note;
    } else {
      note += ", PM sampling unavailable (" + pm.status().reason + ")";
    }
  }
  {
    cu::KernelTracer tr;
    if (tr.available()) {
      for (int i = 0; i < steps; ++i) {
        (void)cudaStreamSynchronize(st);
        tr.begin_window("step" + std::to_string(i), case_name);
        step(st);
        (void)cudaStreamSynchronize(st);
        tr.end_window();
      }
      tr.flush();
      tr.save(out_dir, "activity_" + cap, "idleness", case_name);
      append_cupti_rows(out_dir, tr.rows("idleness", case_name));
      note += ", kernel records of " + std::to_string(steps) + " steps";
    }
  }
  return note;
}

kvf::cupti::RangeProfilerOptions profiler_options(const Env& env) {
  kvf::cupti::RangeProfilerOptions o;
  o.set = env.metric_set;
  o.metrics = env.metrics;
  return o;
}

}  // namespace
#endif

void probe_counters(Env& env) {
#if defined(KVF_HAVE_CUPTI)
  if (!env.gpu || env.no_counters) return;
  // Bad metrics (unknown, more than one pass) are bad input before anything runs; an unavailable collector is not.
  kvf::cupti::RangeProfiler probe(profiler_options(env));
  if (!probe.available()) {
    std::fprintf(stderr, "bench_idleness: GPU counters unavailable, timings only: %s\n", probe.status().reason.c_str());
    env.counters_unavailable_said = true;
  }
#else
  (void)env;
#endif
}

std::string counters_note(Env& env, bool& counted, const std::string& case_name, const std::string& mode,
                          kvf::Backend& be, const std::function<void(cudaStream_t)>& step) {
#if defined(KVF_HAVE_CUPTI)
  if (mode != "hot" || env.no_counters || counted) return {};
  counted = true;
  return "; " + collect_counters(case_name, step, kvf::cuda_stream(be), profiler_options(env),
                                 env.counters_unavailable_said, env.out_dir);
#else
  (void)env;
  (void)counted;
  (void)case_name;
  (void)be;
  (void)step;
  return mode == "hot" ? "; counters: this build has no CUPTI" : "";
#endif
}

}  // namespace kvf::idleness
#endif
