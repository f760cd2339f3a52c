// The idleness study (issue 5): how idle is compute during memory-bound decode, by which definition, and is
// recompute placed beside decode free?
//
// Run:   build/bin/bench_idleness [--quick] [--models Llama-3.1-8B] [--batches 1,16] [--contexts 1024,4096]
//        [--layers 1] [--arms decode,prefill,corun] [--green-sms N] [--metric-set decode_idleness] [--out DIR]
//
// Workload (kernels/decode/): a decoder layer's decode step (RMSNorm, QKV projection, RoPE, attention over
// context C, O projection, SwiGLU MLP) over L layers for a batch of B sequences; a prefill chunk for contrast.
// Every step is verified against a reference of one layer (kernels/decode/decode.hpp: tolerance) before timing.
// GPU prefill chunk: GEMMs through cuBLASLt (tensor cores), the causal attention over the prefix a CUDA-core kernel
// (kernels/decode/prefill_attn_gpu.hpp), so its achieved FLOP/s understate a FlashAttention prefill.
//
// CPU: idleness = 1 - achieved FLOP/s over the GEMM ceiling measured first in the same run (case
// gemm_ceiling), memory use = achieved bytes/s over the read ceiling (case read_ceiling, or the stream study's
// read row when present). Written to the note and to DIR/counters.csv (source "cpu_model", the long format of
// harness/cupti/counters_io.hpp). Hardware counters through perf events where the kernel allows; absent
// otherwise (said once, and in every note).
// GPU: every measured step is also run under the CUPTI range profiler (one range per step, one pass) and the
// Activity API (kernel records: gaps between kernels vs idleness inside kernels); the images are saved under
// DIR/counters/ and counters.csv joins them to the cases. Without the collector (no privileges, another
// profiler attached): one line, timings only.
// Co-run: recompute from X (the frontier study's arm) on a second thread (CPU) or stream (GPU) while decode
// steps run: decode slowdown and recompute pages/s against each alone.
// GPU co-run on SM partitions (green contexts, harness/include/kvf/green_ctx.hpp): recompute gets --green-sms SMs
// (default about a quarter of the device), decode the rest; decode alone on its partition, recompute alone on its
// partition and both at once (bg_green_*). The timed work runs on the partitions' streams between event hops from
// and back to the backend's stream, so the harness's events bracket it (the hops are inside the figure). Without
// green contexts (driver, device): one skipped row naming the failing driver call and its error.
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "decode.hpp"
#include "kvf/csv.hpp"
#include "kvf/errors.hpp"
#include "kvf/nvtx.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"
#include "kvf/perf_events.hpp"
#include "kvf/fn_case.hpp"
#include "kvf/study.hpp"
#include "kvf/units.hpp"
#include "layers.hpp"
#include "kvf/model_shapes.hpp"
#include "models.hpp"
#include "recompute.hpp"
#include "stream.hpp"

#if defined(KVF_HAVE_CUDA)
#include "decode_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/green_ctx.hpp"
#include "kvf/stream_gate.hpp"
#endif
#if defined(KVF_HAVE_CUPTI)
#include "kvf/cupti/activity.hpp"
#include "kvf/cupti/clock_alignment.hpp"
#include "kvf/cupti/metric_sets.hpp"
#include "kvf/cupti/pm_sampler.hpp"
#include "kvf/cupti/range_profiler.hpp"
#endif

namespace {

using kvf::FnCase;

using kvf::Backend;
using kvf::Param;
namespace dc = kvf::decode;
namespace fr = kvf::frontier;
namespace md = kvf::models;

constexpr std::uint64_t kSeed = 0x1d1e;
std::string g_out_dir;  // the results directory (main() makes sure bench_main gets an explicit --out)

std::string num(double v, int prec = 4) {
  std::ostringstream o;
  o.precision(prec);
  o << v;
  return o.str();
}
std::string i2s(long long v) { return std::to_string(v); }
std::string ctx_name(int c) { return c % 1024 == 0 ? i2s(c / 1024) + "K" : i2s(c); }

// Seconds a case takes: setup + warm-up and samples of each mode under the default stop rule.
double est(double t, double setup_s, int modes = 2) {
  return setup_s + modes * (2 * t + std::max(std::min(0.5, 1000 * t), 5 * t)) + 0.02;
}

const char* kAllArms = "decode,prefill,corun";

// Seconds of the prefill check's double-precision reference (a few rows, ~1 ns per multiply-add).
double prefill_verify_s(const md::ModelShape& m, int T, int N) {
  return double(dc::prefill_check_rows(T).size()) *
         (dc::layer_params(m) + 2.0 * m.n_heads * m.head_dim * (N + T)) * 1e-9;
}

// Ceilings measured in this run, looked up in the results directory (rows are written as each case ends).
// The idleness figures of a step divide by both ceilings of this run; --case-filter keeps them for a kept step.
std::vector<kvf::CeilingRef> idle_ceilings() {
  return {kvf::CeilingRef{"idleness", {{"arm", "gemm_ceiling"}}, "tflops"},
          kvf::CeilingRef{"idleness", {{"arm", "read_ceiling"}}, "gbps"}};
}

double ceiling_value(const kvf::CeilingRef& ref, const std::string& mode) {
  if (g_out_dir.empty()) return 0;
  const auto v = kvf::find_ceiling(g_out_dir, ref, mode);
  return v ? *v * (ref.metric == "tflops" ? 1e12 : 1e9) : 0;
}


#if defined(KVF_HAVE_CUDA)
// ---------------------------------------------------------------- GPU arms
std::string sanitize(std::string s) {
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.') ch = '_';
  return s;
}

#if defined(KVF_HAVE_CUPTI)
void append_cupti_rows(const std::vector<kvf::cupti::CounterRow>& rows) {
  if (g_out_dir.empty() || rows.empty()) return;
  kvf::CsvAppender out((std::filesystem::path(g_out_dir) / "counters.csv").string(), kvf::cupti::counter_columns());
  for (const auto& r : rows) out.append(kvf::cupti::to_fields(r));
}
#endif

// Counters of a GPU case, after its timings (hot mode only, once): (1) range profiler, one range per step named like
// the step's NVTX range, (2) PM sampling across many steps, (3) Activity API kernel records per step. Separate
// phases: the first two both program the device-wide PM hardware. Returns the note text.
#if defined(KVF_HAVE_CUPTI)
std::string collect_counters(const std::string& case_name, const std::function<void(cudaStream_t)>& step,
                             cudaStream_t st, const kvf::cupti::RangeProfilerOptions& opts, bool& said_unavailable) {
#if defined(KVF_HAVE_CUPTI)
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
    prof.save(g_out_dir, "range_" + cap, "idleness", case_name);
    append_cupti_rows(prof.rows("idleness", case_name));
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
      pm.save(g_out_dir, "pm_" + cap, "idleness", case_name);
      append_cupti_rows(pm.rows("idleness", case_name));
      std::string clock_note = ", clock check: no kernel records during sampling";
      if (pm_tr) {
        const auto& ks = pm_tr->flush();
        pm_tr->save(g_out_dir, "activity_pm_" + cap, "idleness", case_name);
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
      tr.save(g_out_dir, "activity_" + cap, "idleness", case_name);
      append_cupti_rows(tr.rows("idleness", case_name));
      note += ", kernel records of " + std::to_string(steps) + " steps";
    }
  }
  return note;
#endif
}
#endif
#endif

class IdlenessStudy final : public kvf::Study {
 public:
  std::string name() const override { return "idleness"; }

  void add_options(CLI::App& app) override {
    app_ = &app;
    app.add_option("--models", models_, "model names from data/models.json (default Llama-3.1-8B)")->delimiter(',');
    app.add_option("--models-file", models_file_, "model shape file (default: <source>/data/models.json)");
    app.add_option("--batches", batches_text_, "batch sizes B, 1..256 (default CPU 1,4,16,64; GPU 1,4,16,64,256)")
        ->delimiter(',');
    app.add_option("--contexts", contexts_text_, "contexts C in tokens, multiples of 1024 in 1024..131072 (default CPU "
                   "1024,4096; GPU 1024,8192,32768,131072)")->delimiter(',');
    app.add_option("--layers", layers_text_, "layers L per step, 1..model layers (default CPU 1; GPU 4)");
    app.add_option("--prefill-tokens", prefill_tokens_text_, "prefill chunk tokens T, 16..4096 (default CPU 128; GPU 512)");
    app.add_option("--arms", arms_, std::string("arms to run (default all): ") + kAllArms)->delimiter(',');
    app.add_option("--metric-set", metric_set_, "range-profiler metric set (GPU): decode_idleness (default)");
    app.add_option("--metrics", metrics_, "range-profiler metrics instead of the set's (must fit one pass)")
        ->delimiter(',');
    app.add_option("--chip", chip_, "check the metric set for this chip (GA100, GH100, GB100) instead of the device's");
    app.add_flag("--no-counters", no_counters_, "GPU: timings only, no CUPTI collection");
    app.add_option("--green-sms", green_sms_text_,
                   "GPU co-run on SM partitions (green contexts): SMs for the recompute partition, 0..4096, decode "
                   "gets the rest; rounded up to the device's granularity (Hopper: multiples of 8); 0 = no "
                   "green-context cases (default: about a quarter of the SMs)");
  }

  std::vector<std::unique_ptr<kvf::Case>> cases(const kvf::StudyContext& ctx) override;

 private:
  std::vector<std::string> models_, arms_, metrics_;
  std::string models_file_, metric_set_ = "decode_idleness", chip_;
  // Numbers are kept as text and parsed in cases(): plain digits in a stated range, one clear line otherwise.
  std::vector<std::string> batches_text_, contexts_text_;
  std::string layers_text_, prefill_tokens_text_, green_sms_text_;
  CLI::App* app_ = nullptr;  // outlives cases(): bench_main owns it
  std::vector<int> batches_, contexts_;
  // Absent: the flag was not given (the default applies); a given value is always in range.
  std::optional<int> layers_, prefill_tokens_;
  bool no_counters_ = false, gpu_ = false, quick_ = false;
  std::optional<int> green_sms_;  // absent: about a quarter of the device
  // The SM split of the green-context cases, probed once when the case list is made (GPU co-run only).
  int green_request_ = 0, green_decode_sms_ = 0, green_bg_sms_ = 0;
  std::string green_skip_;  // non-empty: why the green-context cases are a skipped row
  std::vector<md::ModelShape> all_;
  std::map<std::string, std::shared_ptr<fr::LayerWeights>> weights_;
  bool counters_unavailable_said_ = false;
  std::string perf_reason_;
  bool perf_ok_ = false;
  std::string cpu_name_;

  using Out = std::vector<std::unique_ptr<kvf::Case>>;
  bool arm_on(const std::string& a) const {
    return arms_.empty() || std::find(arms_.begin(), arms_.end(), a) != arms_.end();
  }
  FnCase& add(Out& out, std::string name, std::vector<Param> params) {
    return kvf::add_fn_case(out, std::move(name), std::move(params));
  }
  // Layer weights of a model, built once and shared by every case of the model.
  std::shared_ptr<fr::LayerWeights> weights(const md::ModelShape& m) {
    auto& w = weights_[m.name];
    if (!w) w = std::make_shared<fr::LayerWeights>(fr::make_layer_weights(m, kSeed));
    return w;
  }
  void validate_counters_flags();
  void add_ceilings(Out& out);
  void add_decode(Out& out, const md::ModelShape& m, int B, int C, int L, const std::string& arm,
                  const std::string& background);
  void add_prefill(Out& out, const md::ModelShape& m, int T, int N, int L);
  void add_recompute_alone(Out& out, const md::ModelShape& m, bool green = false);
#if defined(KVF_HAVE_CUDA)
  void add_decode_gpu(FnCase& c, const md::ModelShape& m, int B, int C, int L, const std::string& background);
  void add_recompute_gpu(FnCase& c, const md::ModelShape& m, int T, int P, bool green);
  void probe_green(Backend& be);
  std::string green_slowdown_note(const FnCase& c, const kvf::Summary& s, const std::string& mode, bool vs_partition);
  void add_prefill_gpu(FnCase& c, const md::ModelShape& m, int T, int N, int L);
#endif
  std::string cpu_after(FnCase& c, const kvf::Summary& s, const std::string& mode, const std::function<void()>& once);
#if defined(KVF_HAVE_CUDA)
  // The counters phases of a GPU case, once, after its hot samples ("; counters: ..." for the note).
  std::string counters_note(bool& counted, const std::string& case_name, const std::string& mode, Backend& be,
                            const std::function<void(cudaStream_t)>& step) {
#if defined(KVF_HAVE_CUPTI)
    if (mode != "hot" || no_counters_ || counted) return {};
    counted = true;
    kvf::cupti::RangeProfilerOptions o;
    o.set = metric_set_;
    o.metrics = metrics_;
    return "; " + collect_counters(case_name, step, kvf::cuda_stream(be), o, counters_unavailable_said_);
#else
    (void)counted; (void)case_name; (void)be; (void)step;
    return mode == "hot" ? "; counters: this build has no CUPTI" : "";
#endif
  }
#endif
};

// ---------------------------------------------------------------- validation and case list
// Every flag value is checked before any case exists: one line naming the flag, the value and what is allowed.



void IdlenessStudy::validate_counters_flags() {
  if (metric_set_ != "decode_idleness")
    kvf::bad_flag("--metric-set", metric_set_, "unknown metric set; allowed: decode_idleness "
        "(the one-pass range-profiler set; idleness_timeline is the PM-sampling set)");
  if (app_ && app_->count("--chip") && chip_.empty()) kvf::bad_flag("--chip", chip_, "allowed GA100, GH100, GB100");
  for (const auto& m : metrics_)
    if (m.empty()) kvf::bad_flag("--metrics", m, "a metric name (e.g. sm__cycles_active.avg)");
#if defined(KVF_HAVE_CUPTI)
  if (!chip_.empty() || !metrics_.empty()) {
    // Offline check with the Profiler Host API: unknown chip, unknown metric, more than one pass -> exit 2.
    const std::string chip = chip_.empty() ? std::string("GH100") : chip_;
    kvf::cupti::require_study_chip(chip);
    auto set = kvf::cupti::default_set(chip, kvf::cupti::Profiler::range);
    if (!metrics_.empty()) set.metrics = metrics_;
    set.one_pass = true;
    const auto chk = kvf::cupti::check_set(chip, set);
    if (!chk.ok()) throw kvf::UsageError("--metrics: " + chk.problem());
  }
#else
  if (!chip_.empty() || !metrics_.empty())
    throw kvf::UsageError(std::string(!chip_.empty() ? "--chip " + chip_ : "--metrics") +
                          ": metric checks need a build with CUDA and CUPTI (this build has neither)");
#endif
}

std::vector<std::unique_ptr<kvf::Case>> IdlenessStudy::cases(const kvf::StudyContext& ctx) {
  Backend& be = *ctx.backend;
  gpu_ = be.name() == "cuda";
  quick_ = ctx.quick;
#if !defined(KVF_HAVE_CUDA)
  if (gpu_) throw kvf::UsageError("--backend cuda: this build of bench_idleness has no CUDA kernels");
#endif
  validate_counters_flags();
  // A flag given with an empty value is refused, never taken for "not given".
  const auto given = [&](const char* flag) { return app_ && app_->count(flag) > 0; };
  for (const auto& a : arms_)
    if (("," + std::string(kAllArms) + ",").find("," + a + ",") == std::string::npos)
      kvf::bad_flag("--arms", a, std::string("unknown arm; allowed: ") + kAllArms);
  batches_.clear();
  contexts_.clear();
  for (const auto& t : batches_text_)
    batches_.push_back(kvf::flag_int(t, "--batches", dc::kMinBatch, dc::kMaxBatch, 1, "batch must be a whole number in 1..256"));
  for (const auto& t : contexts_text_)
    contexts_.push_back(kvf::flag_int(t, "--contexts", dc::kMinContext, dc::kMaxContext, 1024,
                                  "context must be a multiple of 1024 in 1024..131072 (1K..128K), as plain digits"));
  if (given("--prefill-tokens"))
    prefill_tokens_ = kvf::flag_int(prefill_tokens_text_, "--prefill-tokens", 16, 4096, 1, "must be a whole number in 16..4096");
  // The device's own limits are checked once the GPU is known (probe_green); the CPU backend ignores the flag.
  if (given("--green-sms"))
    green_sms_ = kvf::flag_int(green_sms_text_, "--green-sms", 0, 4096, 1,
                           "must be 0 (no green-context cases) or 1..4096 SMs (and leave the rest of the device a "
                           "partition)");
  if (given("--layers"))
    layers_ = kvf::flag_int(layers_text_, "--layers", 1, 1 << 16, 1, "must be a whole number in 1..the model's layers");
  if (given("--models-file") && models_file_.empty()) kvf::bad_flag("--models-file", "", "the path of a model shape file");
  all_ = md::load_models(models_file_.empty() ? md::default_models_path() : models_file_);
  const std::vector<std::string> names = models_.empty() ? std::vector<std::string>{"Llama-3.1-8B"} : models_;
  std::vector<const md::ModelShape*> ms;
  for (const auto& n : names) ms.push_back(&md::find_model(all_, n));
  const int L = layers_.value_or(gpu_ ? 4 : 1);
  for (const auto* m : ms)
    if (L > m->layers)
      throw kvf::UsageError("--layers " + i2s(L) + ": " + m->name + " has " + i2s(m->layers) + " layers");
  const std::vector<int> Bs = !batches_.empty() ? batches_
                              : quick_          ? std::vector<int>{1, 16}
                              : gpu_            ? std::vector<int>{1, 4, 16, 64, 256}
                                                : std::vector<int>{1, 4, 16, 64};
  const std::vector<int> Cs = !contexts_.empty() ? contexts_
                              : quick_           ? std::vector<int>{1024}
                              : gpu_             ? std::vector<int>{1024, 8192, 32768, 131072}
                                                 : std::vector<int>{1024, 4096};
  // Memory: weights + one layer's K/V must fit (bad input when the user asked for it; skipped otherwise).
  const double mem = gpu_ ? double(be.info().memory_bytes) * 0.85
                          : double(kvf::host_memory_bytes() ? kvf::host_memory_bytes() : (std::size_t(8) << 30)) * 0.6;
  if (!gpu_) {
    const auto p = kvf::probe_perf();
    perf_ok_ = p.available;
    perf_reason_ = p.reason;
    if (!perf_ok_) std::fprintf(stderr, "bench_idleness: CPU hardware counters absent: %s\n", p.reason.c_str());
  }
  cpu_name_ = be.info().name;
#if defined(KVF_HAVE_CUPTI)
  if (gpu_ && !no_counters_) {
    // Bad metrics (unknown, more than one pass) are bad input before anything runs; an unavailable collector is not.
    kvf::cupti::RangeProfilerOptions o;
    o.set = metric_set_;
    o.metrics = metrics_;
    kvf::cupti::RangeProfiler probe(o);
    if (!probe.available()) {
      std::fprintf(stderr, "bench_idleness: GPU counters unavailable, timings only: %s\n", probe.status().reason.c_str());
      counters_unavailable_said_ = true;
    }
  }
#endif

  Out out;
  add_ceilings(out);
  for (const auto* m : ms) {
    const std::string why = dc::unsupported_reason(*m);
    if (!why.empty()) {
      out.push_back(kvf::skipped_case("decode/" + m->name, {{"arm", "decode"}, {"model", m->name}}, why));
      continue;
    }
    if (arm_on("decode"))
      for (int C : Cs)
        for (int B : Bs) {
          const double need = dc::layer_params(*m) * (gpu_ ? 2 : 4) + dc::kv_layer_bytes(*m, B, C);
          if (need > mem) {
            const std::string msg = m->name + " B " + i2s(B) + " C " + i2s(C) + ": weights and one layer's K/V need " +
                                    kvf::format_bytes(need) + ", more than the " + kvf::format_bytes(mem) + " usable";
            if (!batches_.empty() && !contexts_.empty()) throw kvf::UsageError("--batches/--contexts " + msg);
            out.push_back(kvf::skipped_case("decode/" + m->name + "/B" + i2s(B) + "/C" + ctx_name(C) + "/L" + i2s(L),
                                            {{"arm", "decode"}, {"model", m->name}, {"batch", i2s(B)},
                                             {"context", i2s(C)}, {"layers", i2s(L)}},
                                            msg));
            continue;
          }
          add_decode(out, *m, B, C, L, "decode", "none");
        }
    if (arm_on("prefill") && !quick_) {
      const int T = prefill_tokens_.value_or(gpu_ ? 512 : 128), N = Cs.front();
#if defined(KVF_HAVE_CUDA)
      const double need = gpu_ ? double(dc::gpu::PrefillGpu::device_bytes(*m, T, N)) : 0.0;
#else
      const double need = 0.0;
#endif
      if (need > mem)
        out.push_back(kvf::skipped_case("prefill/" + m->name + "/T" + i2s(T) + "/N" + ctx_name(N) + "/L" + i2s(L),
                                        {{"arm", "prefill"}, {"model", m->name}, {"tokens", i2s(T)},
                                         {"context", i2s(N)}, {"layers", i2s(L)}},
                                        m->name + " T " + i2s(T) + " N " + i2s(N) + ": the prefill chunk needs " +
                                            kvf::format_bytes(need) + " of device memory, more than the " +
                                            kvf::format_bytes(mem) + " usable"));
      else
        add_prefill(out, *m, T, N, L);
    }
    if (arm_on("corun") && !quick_) {
      const int B = gpu_ ? 16 : 16, C = gpu_ ? 32768 : 4096;
      add_decode(out, *m, B, C, L, "corun", "none");
      add_recompute_alone(out, *m);
      add_decode(out, *m, B, C, L, "corun", "recompute");
#if defined(KVF_HAVE_CUDA)
      if (gpu_) {
        // Recompute on its own SM partition (green contexts): decode alone on the rest, recompute alone on its
        // partition, both at once.
        probe_green(be);
        if (!green_skip_.empty()) {
          out.push_back(kvf::skipped_case("corun/" + m->name + "/green_context",
                                          {{"arm", "corun"}, {"model", m->name}, {"background", "green_recompute"}},
                                          green_skip_));
        } else {
          add_decode(out, *m, B, C, L, "corun", "green_none");
          add_recompute_alone(out, *m, true);
          add_decode(out, *m, B, C, L, "corun", "green_recompute");
        }
      }
#endif
    }
  }
  return out;
}

// ---------------------------------------------------------------- ceilings
void IdlenessStudy::add_ceilings(Out& out) {
  if (gpu_) {
#if defined(KVF_HAVE_CUDA)
    // GPU ceilings: cuBLASLt bf16 GEMM (the tensor pipe) and a device read (read_xor), both in this run.
    {
      const int n = 8192;
      auto& c = add(out, "gemm_ceiling/" + i2s(n), {{"arm", "gemm_ceiling"}, {"gemm_m", i2s(n)}});
      c.flops = 2.0 * n * n * n;
      c.ceiling = kvf::CeilingRef{"idleness", {{"arm", "gemm_ceiling"}}, "tflops"};
      c.note = "cuBLASLt bf16 x bf16 -> fp32 (TN), square: tensor-pipe ceiling of this run";
      c.est_seconds = est(c.flops / 600e12, 1.0);
      auto g = std::make_shared<std::unique_ptr<dc::gpu::GemmCeiling>>();
      c.on_setup = [g, n](Backend& be) { *g = std::make_unique<dc::gpu::GemmCeiling>(n, kvf::cuda_stream(be)); };
      c.on_run = [g](Backend& be) { (*g)->run(kvf::cuda_stream(be)); };
      c.on_teardown = [g](Backend&) { g->reset(); };
    }
    {
      const std::size_t bytes = std::size_t(4) << 30;
      auto& c = add(out, "read_ceiling/4GiB", {{"arm", "read_ceiling"}, {"array_bytes", i2s(bytes)}});
      c.bytes = double(bytes);
      c.ceiling = kvf::CeilingRef{"idleness", {{"arm", "read_ceiling"}}, "gbps"};
      c.note = "device read with 16-byte loads (frontier read_xor): the DRAM ceiling of this run";
      c.est_seconds = est(bytes / 3e12, 0.5);
      auto s = std::make_shared<std::unique_ptr<dc::gpu::ReadCeiling>>();
      c.on_setup = [s, bytes](Backend& be) { *s = std::make_unique<dc::gpu::ReadCeiling>(bytes, kvf::cuda_stream(be)); };
      c.on_run = [s](Backend& be) { (*s)->run(kvf::cuda_stream(be)); };
      c.on_teardown = [s](Backend&) { s->reset(); };
    }
#endif
    return;
  }
  // Two shapes: square, and the decode/prefill shape (M rows of activations against a wide weight matrix); the
  // ceiling is the better of the two (find_ceiling takes the best row of arm=gemm_ceiling).
  for (const auto& shape : quick_ ? std::vector<std::array<int, 3>>{{1024, 1024, 1024}}
                                   : std::vector<std::array<int, 3>>{{2048, 2048, 2048}, {256, 8192, 4096}}) {
    const int gm = shape[0], gn = shape[1], gk = shape[2];  // named copies: clang 14 cannot capture bindings
    const int n = gm;
    auto& c = add(out, gm == gn && gn == gk ? "gemm_ceiling/" + i2s(n)
                                            : "gemm_ceiling/" + i2s(gm) + "x" + i2s(gn) + "x" + i2s(gk),
                  {{"arm", "gemm_ceiling"}, {"gemm_m", i2s(gm)}, {"gemm_n", i2s(gn)}, {"gemm_k", i2s(gk)}});
    c.flops = 2.0 * gm * gn * gk;
    c.ceiling = kvf::CeilingRef{"idleness", {{"arm", "gemm_ceiling"}}, "tflops"};
    c.note = "OpenBLAS cblas_sgemm fp32, square, all cores (OpenMP splits N, one-thread OpenBLAS per slice, as in "
             "the decode twin): the CPU compute ceiling of this run";
    c.est_seconds = est(c.flops / 180e9, 0.1);
    c.cold = false;  // compute bound: cold and hot are the same figure
    struct S { std::vector<float> a, b, y; };
    auto s = std::make_shared<S>();
    c.on_setup = [s, gm, gn, gk](Backend&) {
      s->a.resize(std::size_t(gm) * gk);
      s->b.resize(std::size_t(gn) * gk);
      s->y.resize(std::size_t(gm) * gn);
      fr::fill_f32_uniform(s->a.data(), s->a.size(), 1, 1.f);
      fr::fill_f32_uniform(s->b.data(), s->b.size(), 2, 1.f);
    };
    c.on_run = [s, gm, gn, gk](Backend&) { fr::gemm_xwT(s->a.data(), s->b.data(), s->y.data(), gm, gn, gk); };
    c.on_teardown = [s](Backend&) { *s = S{}; };
  }
  for (const char* kind : {"plain", "prefetch"}) {
    const std::size_t bytes = quick_ ? std::size_t(128) << 20 : std::size_t(512) << 20;
    const bool pf = std::string(kind) == "prefetch";
    auto& c = add(out, "read_ceiling/" + std::string(kind) + "/" + i2s(bytes >> 20) + "MiB",
                  {{"arm", "read_ceiling"}, {"kernel", kind}, {"array_bytes", i2s(bytes)}});
    c.bytes = double(bytes);
    c.ceiling = kvf::CeilingRef{"idleness", {{"arm", "read_ceiling"}}, "gbps"};
    c.note = "all-core read (the stream study's kernels); the read ceiling is the better of plain and prefetch";
    c.est_seconds = est(double(bytes) / 20e9, 0.3, 1);
    c.hot = false;  // larger than the LLC either way; cold is the honest one
    struct S { void* p = nullptr; std::size_t n = 0; std::uint64_t sink = 0; };
    auto s = std::make_shared<S>();
    c.on_setup = [s, bytes](Backend&) {
      s->p = kvf::host_alloc(bytes, true);
      s->n = bytes;
      std::memset(s->p, 1, bytes);
    };
    c.on_run = [s, pf](Backend&) {
      s->sink ^= pf ? kvf::stream::cpu_read_prefetch(s->p, s->n) : kvf::stream::cpu_read(s->p, s->n);
    };
    c.on_teardown = [s](Backend&) {
      if (s->p) kvf::host_free(s->p, s->n);
      s->p = nullptr;
    };
  }
}

// CPU idleness of a measured case: note text and counters.csv rows. `once` runs one more step (perf counters).
std::string IdlenessStudy::cpu_after(FnCase& c, const kvf::Summary& s, const std::string& mode,
                                     const std::function<void()>& once) {
  const double gemm = ceiling_value({"idleness", {{"arm", "gemm_ceiling"}}, "tflops"}, "hot");
  const double rd = std::max(ceiling_value({"idleness", {{"arm", "read_ceiling"}}, "gbps"}, "cold"),
                             ceiling_value({"stream", {{"op", "read"}}, "gbps"}, mode));
  const auto x = dc::cpu_idleness(c.flops, c.bytes, s.median, gemm, rd);
  auto rows = dc::cpu_rows("idleness", c.name, mode, cpu_name_, x);
  std::string perf = "perf counters: absent (" + perf_reason_ + ")";
  if (perf_ok_ && once) {
    const auto pc = kvf::perf_count(once);
    if (pc.ok) {
      rows.push_back({"idleness", c.name, "perf", "perf", mode == "cold" ? 0 : 1, mode, cpu_name_, "cycles",
                      pc.cycles, "cycle"});
      rows.push_back({"idleness", c.name, "perf", "perf", mode == "cold" ? 0 : 1, mode, cpu_name_, "instructions",
                      pc.instructions, "instruction"});
      perf = "perf (calling thread, one extra step): ipc=" + num(pc.instructions / std::max(pc.cycles, 1.0), 3);
    }
  }
  // The device's ridge point and the batch where the decode GEMMs turn compute bound (weights as the twin stores them).
  const double wb = 4, ridge = dc::ridge_flop_per_byte(gemm, rd), bound = dc::bound_batch(gemm, rd, wb);
  rows.push_back({"idleness", c.name, "cpu_model", "cpu_model", mode == "cold" ? 0 : 1, mode, cpu_name_,
                  "kvf:ridge_flop_per_byte", ridge, "FLOP/byte"});
  rows.push_back({"idleness", c.name, "cpu_model", "cpu_model", mode == "cold" ? 0 : 1, mode, cpu_name_,
                  "kvf:bound_batch", bound, "sequences"});
  if (!g_out_dir.empty()) dc::append_counters_csv(g_out_dir, rows);
  const std::string above = x.idle_compute_pct < 0 ? " (achieved above the GEMM ceiling: the ceiling case ran under "
                                                      "a different machine load; re-run on a quiet machine)" : "";
  return "ridge_flop_per_byte=" + num(ridge, 3) + " bound_batch=" + num(bound, 3) + " (fp32 weights); " +
         "cpu_idle_compute_pct=" + num(x.idle_compute_pct, 3) + " achieved_gflops=" + num(x.achieved_gflops) +
         " gemm_ceiling_gflops=" + num(x.ceiling_gflops) + " mem_use_pct=" + num(x.mem_use_pct, 3) +
         " achieved_gbps=" + num(x.achieved_gbps) + " read_ceiling_gbps=" + num(x.read_ceiling_gbps) + above + "; " + perf;
}

// ---------------------------------------------------------------- decode step (and its co-run arms)
void IdlenessStudy::add_decode(Out& out, const md::ModelShape& m, int B, int C, int L, const std::string& arm,
                               const std::string& background) {
  const double wb = gpu_ ? 2 : 4;
  std::string name = arm + "/" + m.name + "/B" + i2s(B) + "/C" + ctx_name(C) + "/L" + i2s(L);
  if (arm == "corun") name += "/bg_" + background;
  auto& c = add(out, name,
                {{"arm", arm}, {"model", m.name}, {"batch", i2s(B)}, {"context", i2s(C)}, {"layers", i2s(L)},
                 {"background", background}, {"weight_bytes", num(wb)}});
  c.flops = dc::decode_flops(m, B, C, L);
  c.bytes = dc::decode_bytes(m, B, C, L, wb);
  c.ceiling = arm == "corun" ? kvf::CeilingRef{"idleness", {{"arm", "corun"}, {"background", "none"}}, "gbps"}
                             : kvf::CeilingRef{"idleness", {{"arm", "read_ceiling"}}, "gbps"};
  c.uses = idle_ceilings();
  const double t = gpu_ ? c.bytes / 2.5e12 + L * 60e-6 : c.bytes / 15e9 + c.flops / 150e9;
  // GPU: plus the counters phases after the hot samples (8 + 64 + 8 steps).
  c.est_seconds = gpu_ ? est(t, 1.0 + 80 * t + 0.5 * std::min(B, 2)) : est(t, 0.4 + 0.25 * std::min(B, 2));
  c.note = std::string("bytes = ") + (gpu_ ? "bf16" : "fp32 (bf16 values)") +
           " weights of L layers + bf16 K/V read; flops = GEMMs + attention; one synthetic layer's weights serve "
           "every layer (each exceeds the LLC/L2)" +
           (arm == "corun" ? std::string("; pct_of_ceiling = 100 / slowdown against background none") : "");
  if (background.rfind("green_", 0) == 0) {
    // SM partitions (green contexts): decode on the rest of the device, recompute on its partition.
    c.params.push_back({"sm_partition", "decode " + i2s(green_decode_sms_) + " SMs / recompute " +
                                            i2s(green_bg_sms_) + " SMs"});
    c.params.push_back({"decode_sms", i2s(green_decode_sms_)});
    c.params.push_back({"background_sms", i2s(green_bg_sms_)});
    const kvf::CeilingRef full{"idleness", {{"arm", "corun"}, {"background", "none"}}, "gbps"};
    const kvf::CeilingRef part{"idleness", {{"arm", "corun"}, {"background", "green_none"}}, "gbps"};
    c.ceiling = background == "green_none" ? full : part;
    c.uses.push_back(full);
    if (background != "green_none") c.uses.push_back(part);
    c.note = std::string("decode step on a green-context partition of ") + i2s(green_decode_sms_) + " SMs" +
             (background == "green_recompute" ? "; recompute on the other partition of " + i2s(green_bg_sms_) + " SMs"
                                              : std::string(" alone")) +
             "; bf16 weights of L layers + bf16 K/V read; the figure includes the cross-context event hops (backend "
             "stream -> partition stream -> backend stream); pct_of_ceiling = 100 / slowdown against " +
             (background == "green_none" ? "decode alone on the whole device (bg_none)"
                                         : "decode alone on its partition (bg_green_none)");
  }
  const std::size_t mem_cap = std::size_t(double(kvf::host_memory_bytes()) * 0.3);
  if (!gpu_) {
    struct S {
      std::shared_ptr<fr::LayerWeights> w;
      dc::DecodeState st;
      // co-run background
      std::thread bg;
      std::atomic<bool> stop{false};
      std::atomic<long> pages{0};
      std::chrono::steady_clock::time_point t0;
      std::string bg_error;
      std::unique_ptr<dc::RecomputeState> rc;
    };
    auto s = std::make_shared<S>();
    const md::ModelShape mm = m;
    c.on_setup = [this, s, mm, B, C, L, background, mem_cap](Backend&) {
      s->w = weights(mm);
      const double per = dc::kv_layer_bytes(mm, B, C);
      const int copies = std::max(1, std::min(L, int(double(mem_cap) / std::max(per, 1.0))));
      s->st = dc::make_decode_state(mm, B, C, copies, kSeed);
      if (background == "recompute") {
        s->rc = std::make_unique<dc::RecomputeState>(dc::make_recompute_state(mm, 128, 1, kSeed + 90));
        s->stop = false;
        s->bg = std::thread([s] {
          omp_set_num_threads(1);  // one background thread: the recompute runs beside the decode step's team
          try {
            while (!s->stop) {
              dc::recompute_cpu(*s->rc);
              ++s->pages;
            }
          } catch (const std::exception& e) {
            s->bg_error = e.what();
          }
        });
      }
    };
    c.on_verify = [s, B](Backend&) {
      std::vector<int> rows = {0};
      if (B > 1) rows.push_back(B - 1);
      const auto r = dc::verify_cpu(*s->w, s->st, rows);
      if (!r.ok()) throw kvf::VerifyError("decode layer vs reference: " + r.text());
    };
    c.on_before = [s](Backend&) {
      if (s->bg.joinable() && s->t0 == std::chrono::steady_clock::time_point{}) {
        s->pages = 0;
        s->t0 = std::chrono::steady_clock::now();
      }
    };
    c.on_run = [s, L](Backend&) { dc::decode_step_cpu(*s->w, s->st, L); };
    c.on_after = [this, s, L, &c, mm, B, C](Backend&, const kvf::Summary& sm, const std::string& mode) {
      std::string extra = cpu_after(c, sm, mode, [s, L] { dc::decode_step_cpu(*s->w, s->st, L); });
      extra += "; K/V copies " + i2s(s->st.copies()) + " for " + i2s(L) + " layers";
      if (mode == "hot") {
        // Phase split of one extra step: GEMMs (weights) vs attention (K/V) vs the rest, with their rates.
        auto& st = s->st;
        st.t_gemm = st.t_attn = st.t_other = 0;
        st.instrument = true;
        dc::decode_step_cpu(*s->w, st, L);
        st.instrument = false;
        const double wbytes = dc::layer_params(mm) * 4 * L, kvb = dc::kv_layer_bytes(mm, B, C) * L;
        const double gflop = 2.0 * B * dc::layer_params(mm) * L / 1e9;
        extra += "; phase split of one step: gemm " + num(st.t_gemm, 3) + " s (" + num(wbytes / st.t_gemm / 1e9, 3) +
                 " GB/s of weights, " + num(gflop / st.t_gemm, 3) + " GFLOP/s), attention " + num(st.t_attn, 3) +
                 " s (" + num(kvb / st.t_attn / 1e9, 3) + " GB/s of K/V), other " + num(st.t_other, 3) + " s";
      }
      if (s->bg.joinable()) {
        if (!s->bg_error.empty()) throw std::runtime_error("background recompute failed: " + s->bg_error);
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - s->t0).count();
        extra += "; background recompute pages_per_s=" + num(double(s->pages.load()) / el) + " (T=128, 1 page per call)";
        s->pages = 0;
        s->t0 = std::chrono::steady_clock::now();
      }
      return extra;
    };
    c.on_teardown = [s](Backend&) {
      s->stop = true;
      if (s->bg.joinable()) s->bg.join();
      s->rc.reset();
      s->st = dc::DecodeState{};
      s->w.reset();
    };
    return;
  }
#if defined(KVF_HAVE_CUDA)
  add_decode_gpu(c, m, B, C, L, background);
#endif
}

// ---------------------------------------------------------------- recompute alone (co-run reference)
void IdlenessStudy::add_recompute_alone(Out& out, const md::ModelShape& m, bool green) {
  const int T = 128, P = 1;
  std::vector<Param> params = {{"arm", "corun"}, {"model", m.name},
                               {"background", green ? "green_recompute_alone" : "recompute_alone"}, {"tokens", i2s(T)}};
  if (green) {
    params.push_back({"sm_partition", "decode " + i2s(green_decode_sms_) + " SMs / recompute " + i2s(green_bg_sms_) +
                                          " SMs"});
    params.push_back({"decode_sms", i2s(green_decode_sms_)});
    params.push_back({"background_sms", i2s(green_bg_sms_)});
  }
  auto& c = add(out, "corun/" + m.name + (green ? "/green_recompute_alone/T" : "/recompute_alone/T") + i2s(T),
                std::move(params));
  c.flops = 2.0 * T * P * m.hidden * 2 * m.kv_dim();
  c.bytes = 2.0 * m.kv_dim() * m.hidden * (gpu_ ? 2 : 4) + double(T) * P * m.hidden * 2;
  c.note = "recompute one page of T tokens from bf16 X (the frontier study's arm: K/V GEMM, RoPE, paged write); "
           "pages/s alone = 1 / median";
  if (green)
    c.note += "; on a green-context partition of " + i2s(green_bg_sms_) +
              " SMs, the figure includes the cross-context event hops (backend stream -> partition stream -> backend "
              "stream)";
  c.ceiling = kvf::CeilingRef{"idleness", {{"arm", "gemm_ceiling"}}, "tflops"};
  c.est_seconds = est(gpu_ ? 30e-6 : c.flops / 100e9, 0.3);
  if (!gpu_) {
    auto s = std::make_shared<std::unique_ptr<dc::RecomputeState>>();
    const md::ModelShape mm = m;
    c.on_setup = [s, mm, T, P](Backend&) {
      *s = std::make_unique<dc::RecomputeState>(dc::make_recompute_state(mm, T, P, kSeed + 90));
    };
    c.on_run = [s](Backend&) { dc::recompute_cpu(**s); };
    c.on_after = [](Backend&, const kvf::Summary& sm, const std::string&) {
      return "pages_per_s=" + num(1.0 / sm.median);
    };
    c.on_teardown = [s](Backend&) { s->reset(); };
    return;
  }
#if defined(KVF_HAVE_CUDA)
  add_recompute_gpu(c, m, T, P, green);
#else
  (void)green;
#endif
}

// ---------------------------------------------------------------- prefill chunk
void IdlenessStudy::add_prefill(Out& out, const md::ModelShape& m, int T, int N, int L) {
  const double wb = gpu_ ? 2 : 4;
  auto& c = add(out, "prefill/" + m.name + "/T" + i2s(T) + "/N" + ctx_name(N) + "/L" + i2s(L),
                {{"arm", "prefill"}, {"model", m.name}, {"tokens", i2s(T)}, {"context", i2s(N)}, {"layers", i2s(L)},
                 {"weight_bytes", num(wb)}});
  c.flops = dc::prefill_flops(m, T, N, L);
  c.bytes = dc::prefill_bytes(m, T, N, L, wb);
  c.ceiling = kvf::CeilingRef{"idleness", {{"arm", "gemm_ceiling"}}, "tflops"};
  c.uses = idle_ceilings();
  c.note = "prefill chunk of T tokens after N resident: the compute-bound contrast to decode";
  c.cold = false;  // weights exceed the LLC/L2; compute bound
  if (gpu_) {
#if defined(KVF_HAVE_CUDA)
    add_prefill_gpu(c, m, T, N, L);
#endif
    return;
  }
  c.est_seconds = est(c.flops / 150e9, 0.5 + prefill_verify_s(m, T, N) + c.flops / L / 150e9, 1);
  struct S {
    std::shared_ptr<fr::LayerWeights> w;
    dc::PrefillState st;
  };
  auto s = std::make_shared<S>();
  const md::ModelShape mm = m;
  c.on_setup = [this, s, mm, T, N](Backend&) {
    s->w = weights(mm);
    s->st = dc::make_prefill_state(mm, T, N, kSeed);
  };
  c.on_verify = [s, mm, T](Backend&) {
    const auto r = dc::verify_prefill_cpu(*s->w, mm, s->st, dc::prefill_check_rows(T));
    if (!r.ok()) throw kvf::VerifyError("prefill layer vs reference: " + r.text());
  };
  c.on_run = [s, L](Backend&) { dc::prefill_step_cpu(*s->w, s->st, L); };
  c.on_after = [this, s, L, &c](Backend&, const kvf::Summary& sm, const std::string& mode) {
    return cpu_after(c, sm, mode, [s, L] { dc::prefill_step_cpu(*s->w, s->st, L); });
  };
  c.on_teardown = [s](Backend&) { *s = S{}; };
}

#if defined(KVF_HAVE_CUDA)
void IdlenessStudy::add_decode_gpu(FnCase& c, const md::ModelShape& m, int B, int C, int L,
                                   const std::string& background) {
  struct G {
    std::shared_ptr<fr::LayerWeights> w;
    std::unique_ptr<dc::gpu::DecodeGpu> dec;
    std::unique_ptr<dc::gpu::RecomputeGpu> rc;
    // Holds the background queue until the step starts on the device (see StreamGate): queued ahead from the
    // host, a recompute that runs about as fast as the host enqueues it had finished before the step began in
    // every sample on an H100 (the two-stream row measured no co-run).
    std::unique_ptr<kvf::StreamGate> gate;
    cudaStream_t s2 = nullptr;  // background stream (the recompute partition's stream when green)
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    // Overlap accounting: checkpoints on the background stream every `stride` recomputes, and the span of the
    // sample's decode steps on the main stream; pages/s while overlapped = pages between the first checkpoint
    // after the steps began and the last one before they ended, over that time.
    std::vector<cudaEvent_t> marks;
    int stride = 1, reps = 1;
    cudaEvent_t step0 = nullptr, step1 = nullptr;
    bool first_run = true;
    bool counted = false;
    long samples = 0, drained = 0;  // background queues that had finished before the next sample began
    // Green contexts: recompute on partition 0, decode on partition 1 (stream ds); the timed step hops from the
    // backend's stream to ds (hop_in, a primary-context event) and back (hop_out, an event of partition 1).
    std::unique_ptr<kvf::GreenSplit> split;
    cudaStream_t ds = nullptr;
    cudaEvent_t hop_in = nullptr, hop_out = nullptr;
    // Events: partition events are made, recorded, synchronized and timed through the split (the driver's calls
    // for events of a green context); the plain co-run's through the runtime, as before.
    cudaEvent_t event(int part) {
      if (split) return split->make_event(part);
      cudaEvent_t e = nullptr;
      KVF_CUDA_CHECK(cudaEventCreate(&e));
      own.push_back(e);
      return e;
    }
    void record(cudaEvent_t e, cudaStream_t s, int part) {
      if (split) split->record(e, part);
      else KVF_CUDA_CHECK(cudaEventRecord(e, s));
    }
    void sync(cudaEvent_t e) {
      if (split) split->sync(e);
      else KVF_CUDA_CHECK(cudaEventSynchronize(e));
    }
    float elapsed(cudaEvent_t a, cudaEvent_t b) {
      float ms = 0;
      if (!split) {
        KVF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        return ms;
      }
      std::string err;
      if (!split->elapsed_ms(a, b, ms, err)) throw std::runtime_error("green-context event times: " + err);
      return ms;
    }
    std::vector<cudaEvent_t> own;  // runtime events of the plain co-run (the split owns its own)
  };
  const bool green = background.rfind("green_", 0) == 0;
  const bool with_bg = background == "recompute" || background == "green_recompute";
  auto s = std::make_shared<G>();
  const md::ModelShape mm = m;
  const int green_request = green_request_;
  c.on_setup = [this, s, mm, B, C, L, green, with_bg, green_request](Backend& be) {
    s->w = weights(mm);
    const double free_b = double(be.info().memory_bytes) * 0.8 - dc::layer_params(mm) * 2;
    const int copies = std::max(1, std::min(L, int(free_b / std::max(1.0, dc::kv_layer_bytes(mm, B, C)))));
    cudaStream_t st = kvf::cuda_stream(be);
    int sms = kvf::cuda_props(be).multiProcessorCount;
    if (green) {
      int dev = 0;
      KVF_CUDA_CHECK(cudaGetDevice(&dev));
      s->split = std::make_unique<kvf::GreenSplit>(dev, green_request);
      if (!s->split->available()) throw std::runtime_error("green contexts: " + s->split->reason());
      s->ds = s->split->stream(1);
      sms = s->split->sm_count(1);
      KVF_CUDA_CHECK(cudaEventCreateWithFlags(&s->hop_in, cudaEventDisableTiming));
      s->hop_out = s->split->make_event(1);
      KVF_CUDA_CHECK(cudaStreamSynchronize(st));  // nothing of the backend's still queued behind the split
    }
    const cudaStream_t ds = green ? s->ds : st;
    // The attention's split-KV plan sees the SMs decode runs on; cuBLASLt picks its kernels for the whole device.
    s->dec = std::make_unique<dc::gpu::DecodeGpu>(*s->w, mm, B, C, copies, kSeed, sms, ds);
    if (with_bg) {
      if (green) {
        s->s2 = s->split->stream(0);
      } else {
        KVF_CUDA_CHECK(cudaStreamCreateWithFlags(&s->s2, cudaStreamNonBlocking));
      }
      s->rc = std::make_unique<dc::gpu::RecomputeGpu>(mm, 128, 1, kSeed + 90, s->s2);
      s->e0 = s->event(0);
      s->e1 = s->event(0);
      cudaEvent_t d0 = s->event(1), d1 = s->event(1);
      // Size the background so it outlasts a step several times: time both alone once.
      float t_dec = 0, t_bg = 0;
      for (int i = 0; i < 2; ++i) {
        s->record(d0, ds, 1);
        s->dec->step(L, ds);
        s->record(d1, ds, 1);
        s->sync(d1);
        t_dec = s->elapsed(d0, d1);
        s->record(s->e0, s->s2, 0);
        s->rc->run(s->s2);
        s->record(s->e1, s->s2, 0);
        s->sync(s->e1);
        t_bg = s->elapsed(s->e0, s->e1);
      }
      // 4 steps' worth: the queue is gated to start with the step (StreamGate), so it only has to outlast it.
      s->reps = std::min(20000, int(std::ceil(4 * t_dec / std::max(t_bg, 1e-3f))) + 2);
      // A gate that is never opened gives up after 50 steps' worth (at least 5 ms) and the row's note says so: on
      // the H100, in a process that had created green contexts (a --no-counters run), the two-stream gate timed
      // out although the same binary's gate opened in a run with counters and in the unit test (cause not settled).
      s->gate = std::make_unique<kvf::StreamGate>(std::max(0.005, 50.0 * t_dec * 1e-3));
      s->gate->warm(s->s2);  // both kernels loaded in both streams' contexts before any of them spins
      s->gate->warm(ds);
      s->stride = std::max(1, (s->reps + 511) / 512);
      s->marks.resize(static_cast<std::size_t>((s->reps + s->stride - 1) / s->stride));
      for (auto& e : s->marks) e = s->event(0);
      s->step0 = s->event(1);
      s->step1 = s->event(1);
    }
  };
  c.on_verify = [s, B](Backend& be) {
    std::vector<int> rows = {0};
    if (B > 1) rows.push_back(B - 1);
    // Green: on the decode partition's stream, so a partition that cannot run the step fails here, before timing.
    const auto r = s->dec->verify(*s->w, rows, s->split ? s->ds : kvf::cuda_stream(be));
    if (!r.ok())
      throw kvf::VerifyError(std::string("GPU decode layer") + (s->split ? " (green-context partition)" : "") +
                             " vs reference: " + r.text());
  };
  c.on_before = [s](Backend&) {
    if (!s->rc) return;
    // Background already finished when the next sample begins: it did not outlast the step it ran beside.
    // Counted and stated, so a drained background cannot pass for no interference.
    if (s->samples > 0) {
      const cudaError_t q = cudaStreamQuery(s->s2);
      if (q == cudaSuccess) ++s->drained;
      else if (q != cudaErrorNotReady) kvf::cuda_check(q, "cudaStreamQuery(background)");
    }
    ++s->samples;
    // The background queue of the previous sample must be drained; then queue reps recomputes, timed by events.
    KVF_CUDA_CHECK(cudaStreamSynchronize(s->s2));
    s->gate->close(s->s2);  // the queue below starts when the step does (open() in on_run)
    s->record(s->e0, s->s2, 0);
    for (int i = 0; i < s->reps; ++i) {
      s->rc->run(s->s2);
      if ((i + 1) % s->stride == 0 || i + 1 == s->reps)
        s->record(s->marks[static_cast<std::size_t>(i / s->stride)], s->s2, 0);
    }
    s->record(s->e1, s->s2, 0);
    s->first_run = true;
  };
  c.on_run = [s, L](Backend& be) {
    const cudaStream_t st = kvf::cuda_stream(be);
    if (s->split) {
      // Hop to the decode partition behind everything queued on the backend's stream (its start event and the
      // blocking kernel), and back, so the backend's events bracket the partition's work.
      KVF_CUDA_CHECK(cudaEventRecord(s->hop_in, st));
      s->split->wait(s->ds, s->hop_in);
    }
    const cudaStream_t ds = s->split ? s->ds : st;
    if (s->gate) s->gate->open(ds);  // behind the backend's blocking kernel: the background starts with the step
    // Event records cost no GPU time; they mark the span of this sample's steps for the overlap accounting.
    if (s->rc && s->first_run) s->record(s->step0, ds, 1);
    s->dec->step(L, ds);
    if (s->rc) {
      s->record(s->step1, ds, 1);
      s->first_run = false;
    }
    if (s->split) {
      s->split->record(s->hop_out, 1);
      s->split->wait(st, s->hop_out);
    }
  };
  c.on_after = [this, s, L, &c, green, with_bg](Backend& be, const kvf::Summary& sm, const std::string& mode) {
    const double gemm = ceiling_value({"idleness", {{"arm", "gemm_ceiling"}}, "tflops"}, mode);
    const double rd = ceiling_value({"idleness", {{"arm", "read_ceiling"}}, "gbps"}, mode);
    std::string note = "ridge_flop_per_byte=" + num(dc::ridge_flop_per_byte(gemm, rd), 3) +
                       " bound_batch=" + num(dc::bound_batch(gemm, rd, 2), 3) + " (bf16 weights); K/V copies " +
                       i2s(s->dec->copies()) + " for " + i2s(L) + " layers";
    if (green) note += "; " + green_slowdown_note(c, sm, mode, with_bg);
    if (s->rc) {
      KVF_CUDA_CHECK(cudaStreamSynchronize(s->s2));
      if (s->gate->timed_out()) note += "; background gate timed out: some queue started before its step";
      const float ms = s->elapsed(s->e0, s->e1);
      note += "; background drained before the step ended in " + std::to_string(s->drained) + " of " +
              std::to_string(std::max(0L, s->samples - 1)) + " executions (warm-up included; 0 expected)";
      note += "; background recompute over the last sample's whole queue: " + num(s->reps / (ms * 1e-3)) +
              " pages/s (" + i2s(s->reps) + " pages, T=128; the queue starts with the step, so this includes its time after the steps)";
      // While overlapped: checkpoints inside [first step start, last step end] of the same sample. Every time is
      // taken from e0, recorded on the background stream before this sample's steps and checkpoints. Green: e0
      // and the checkpoints are events of the recompute partition, the steps' of the decode partition.
      s->sync(s->step1);
      float t0 = 0, t1 = 0;
      std::string err;
      bool ok = true;
      if (s->split) {
        ok = s->split->elapsed_ms(s->e0, s->step0, t0, err) && s->split->elapsed_ms(s->e0, s->step1, t1, err);
      } else {
        t0 = s->elapsed(s->e0, s->step0);
        t1 = s->elapsed(s->e0, s->step1);
      }
      if (!ok) {
        note += "; while overlapped with the steps: not stated (times between the two partitions' events: " + err + ")";
      } else {
        const float span_ms = t1 - t0;
        std::vector<double> t_marks;
        for (const auto& e : s->marks) t_marks.push_back(s->elapsed(s->e0, e));
        const auto ov = dc::overlap_rate(t_marks, s->stride, s->reps, t0, t1);
        note += ov.pages > 0 ? "; while overlapped with the steps: " + num(ov.per_s()) + " pages/s (" +
                                   std::to_string(ov.pages) + " pages over " + num(ov.ms, 3) + " ms of the steps' " +
                                   num(span_ms, 3) + " ms)"
                             : "; while overlapped with the steps: too few background checkpoints inside the steps' " +
                                   num(span_ms, 3) + " ms to state a rate";
      }
    }
    if (green) {
      // The range profiler and PM sampling configure one context; the partitions are other contexts. Not collected
      // rather than attributed to the wrong context.
      if (mode == "hot") note += "; counters: not collected for green-context rows (CUPTI collects per context)";
    } else {
      note += counters_note(s->counted, c.name, mode, be, [s, L](cudaStream_t st) { s->dec->step(L, st); });
    }
    return note;
  };
  c.on_teardown = [s](Backend& be) {
    if (s->gate) {  // a queue closed by on_before whose step never ran (an error): let it go instead of timing out
      try { s->gate->open(kvf::cuda_stream(be)); } catch (...) {}
    }
    if (s->split) s->split->synchronize();
    if (s->s2) (void)cudaStreamSynchronize(s->s2);
    if (s->s2 && !s->split) (void)cudaStreamDestroy(s->s2);
    for (auto& e : s->own) (void)cudaEventDestroy(e);
    s->own.clear();
    if (s->hop_in) (void)cudaEventDestroy(s->hop_in);
    s->hop_in = s->hop_out = nullptr;
    s->marks.clear();
    s->step0 = s->step1 = nullptr;
    s->s2 = nullptr; s->e0 = s->e1 = nullptr; s->ds = nullptr;
    s->rc.reset();
    s->gate.reset();
    s->dec.reset();
    s->split.reset();  // its events, streams and green contexts, after the work using them
    s->w.reset();
  };
}

// The prefill chunk on the GPU: verified against the reference before timing (a failed check stops the case),
// then timed like the CPU row; CUPTI counters of the hot mode as for decode.
void IdlenessStudy::add_prefill_gpu(FnCase& c, const md::ModelShape& m, int T, int N, int L) {
  // GEMMs on the tensor pipe (~400 TFLOP/s achieved), attention on CUDA cores (~15 TFLOP/s achieved, a guess),
  // plus the counters phases after the hot samples (8 + 64 + 8 steps).
  const double attn = 4.0 * T * m.n_heads * m.head_dim * (N + (T + 1) / 2.0) * L;
  const double t = (c.flops - attn) / 400e12 + attn / 15e12 + L * 100e-6;
  c.est_seconds = est(t, 2.0 + prefill_verify_s(m, T, N) + 80 * t, 1);
  c.note += "; GEMMs cuBLASLt bf16 (tensor cores), causal attention a CUDA-core kernel (fp32 FMAs, not "
            "FlashAttention: kernels/decode/prefill_attn_gpu.hpp), so achieved FLOP/s understate a tensor-core prefill";
  struct G {
    std::shared_ptr<fr::LayerWeights> w;
    std::unique_ptr<dc::gpu::PrefillGpu> pre;
    bool counted = false;
  };
  auto s = std::make_shared<G>();
  const md::ModelShape mm = m;
  c.on_setup = [this, s, mm, T, N](Backend& be) {
    s->w = weights(mm);
    s->pre = std::make_unique<dc::gpu::PrefillGpu>(*s->w, mm, T, N, kSeed, kvf::cuda_props(be).multiProcessorCount,
                                                   kvf::cuda_stream(be));
  };
  c.on_verify = [s, T](Backend& be) {
    const auto r = s->pre->verify(*s->w, dc::prefill_check_rows(T), kvf::cuda_stream(be));
    if (!r.ok()) throw kvf::VerifyError("GPU prefill layer vs reference: " + r.text());
  };
  c.on_run = [s, L](Backend& be) { s->pre->step(L, kvf::cuda_stream(be)); };
  c.on_after = [this, s, L, &c](Backend& be, const kvf::Summary&, const std::string& mode) {
    std::string note = "attention KV splits " + i2s(s->pre->attention_splits());
    note += counters_note(s->counted, c.name, mode, be, [s, L](cudaStream_t st) { s->pre->step(L, st); });
    return note;
  };
  c.on_teardown = [s](Backend&) {
    s->pre.reset();
    s->w.reset();
  };
}

void IdlenessStudy::add_recompute_gpu(FnCase& c, const md::ModelShape& m, int T, int P, bool green) {
  struct R {
    std::unique_ptr<dc::gpu::RecomputeGpu> rc;
    // Green: recompute on partition 0 of the split, between event hops from and back to the backend's stream.
    std::unique_ptr<kvf::GreenSplit> split;
    cudaEvent_t hop_in = nullptr, hop_out = nullptr;
  };
  auto s = std::make_shared<R>();
  const md::ModelShape mm = m;
  const int green_request = green_request_;
  c.on_setup = [s, mm, T, P, green, green_request](Backend& be) {
    cudaStream_t st = kvf::cuda_stream(be);
    if (green) {
      int dev = 0;
      KVF_CUDA_CHECK(cudaGetDevice(&dev));
      s->split = std::make_unique<kvf::GreenSplit>(dev, green_request);
      if (!s->split->available()) throw std::runtime_error("green contexts: " + s->split->reason());
      KVF_CUDA_CHECK(cudaEventCreateWithFlags(&s->hop_in, cudaEventDisableTiming));
      s->hop_out = s->split->make_event(0);
      st = s->split->stream(0);  // constructed (and run once) on the partition: a failure shows here
    }
    s->rc = std::make_unique<dc::gpu::RecomputeGpu>(mm, T, P, kSeed + 90, st);
  };
  c.on_run = [s](Backend& be) {
    const cudaStream_t st = kvf::cuda_stream(be);
    if (!s->split) {
      s->rc->run(st);
      return;
    }
    KVF_CUDA_CHECK(cudaEventRecord(s->hop_in, st));
    s->split->wait(s->split->stream(0), s->hop_in);
    s->rc->run(s->split->stream(0));
    s->split->record(s->hop_out, 0);
    s->split->wait(st, s->hop_out);
  };
  c.on_after = [s](Backend&, const kvf::Summary& sm, const std::string&) {
    std::string note = "pages_per_s=" + num(1.0 / sm.median);
    if (s->split) note += " on " + i2s(s->split->sm_count(0)) + " SMs (event hops included)";
    return note;
  };
  c.on_teardown = [s](Backend&) {
    if (s->split) s->split->synchronize();
    if (s->hop_in) (void)cudaEventDestroy(s->hop_in);
    s->hop_in = s->hop_out = nullptr;
    s->rc.reset();
    s->split.reset();
  };
}

// The SM split of the green-context co-run, once per case list: the request (--green-sms, or about a quarter of the
// device), checked against the driver's granularity (bad flag: exit 2), then a trial split whose failure (driver
// without green contexts, a split the device refuses) becomes the skipped row's reason.
void IdlenessStudy::probe_green(Backend& be) {
  if (green_request_ > 0 || !green_skip_.empty()) return;  // probed already (one split serves every model)
  if (green_sms_ == 0) {
    green_skip_ = "--green-sms 0: green-context cases not asked for";
    return;
  }
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) {
    (void)cudaGetLastError();
    green_skip_ = std::string("green contexts unavailable: cudaGetDevice: ") + cudaGetErrorName(e);
    return;
  }
  kvf::SmLimits lim;
  std::string why;
  if (!kvf::query_sm_limits(dev, lim, why)) {
    green_skip_ = "green contexts unavailable: " + why;
    return;
  }
  if (green_sms_) {
    const std::string p = kvf::partition_request_problem(*green_sms_, lim);
    if (!p.empty()) throw kvf::UsageError("--green-sms " + p);
    green_request_ = *green_sms_;
  } else {
    green_request_ = kvf::default_partition_sms(lim);
    if (green_request_ == 0) {
      green_skip_ = "green contexts: " + kvf::partition_request_problem(1, lim);
      return;
    }
  }
  kvf::GreenSplit trial(dev, green_request_);
  if (!trial.available()) {
    green_skip_ = "green contexts unavailable: " + trial.reason();
#if defined(KVF_HAVE_CUPTI)
    // Measured on an H100 (driver 580.159): once CUPTI's profiler is set up in the process (the counters probe
    // above), cuGreenCtxCreate returns CUDA_ERROR_NOT_SUPPORTED; without counters the same split works.
    if (!no_counters_ && trial.reason().find("cuGreenCtxCreate") != std::string::npos)
      green_skip_ += " (CUPTI counters are on in this process: green contexts were refused with CUPTI's profiler set "
                     "up on the H100 tried; run the co-run arm with --no-counters for the green-context rows)";
#endif
    green_request_ = 0;
    return;
  }
  green_bg_sms_ = trial.sm_count(0);
  green_decode_sms_ = trial.sm_count(1);
  (void)be;
}

// Slowdown of a green-context decode row against decode alone on the whole device (bg_none) and, for the co-run,
// against decode alone on its partition (bg_green_none): rows of the same run and mode, same bytes.
std::string IdlenessStudy::green_slowdown_note(const FnCase& c, const kvf::Summary& s, const std::string& mode,
                                               bool vs_partition) {
  std::vector<Param> match;
  for (const auto& p : c.params)
    if (p.name == "arm" || p.name == "model" || p.name == "batch" || p.name == "context" || p.name == "layers")
      match.push_back(p);
  const double gbps = s.median > 0 ? c.bytes / s.median / 1e9 : 0;
  auto against = [&](const std::string& bg, const std::string& what) {
    auto m = match;
    m.push_back({"background", bg});
    const auto ref = g_out_dir.empty() ? std::nullopt
                                       : kvf::find_ceiling(g_out_dir, kvf::CeilingRef{"idleness", m, "gbps"}, mode);
    if (!ref || gbps <= 0) return "slowdown vs " + what + ": no row of this run";
    return "slowdown vs " + what + " " + num(*ref / gbps, 4) + "x";
  };
  std::string note = against("none", "decode alone on the whole device");
  if (vs_partition) note += ", " + against("green_none", "decode alone on its partition");
  return note;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  // The study writes counters.csv next to cases.csv: make the results directory explicit for bench_main.
  std::vector<std::string> args(argv, argv + argc);
  bool has_out = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--out" && i + 1 < args.size()) { has_out = true; g_out_dir = args[i + 1]; }
    if (args[i].rfind("--out=", 0) == 0) { has_out = true; g_out_dir = args[i].substr(6); }
  }
  if (!has_out) {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
    g_out_dir = "results/runs/" + std::string(buf) + "-idleness";
    args.push_back("--out");
    args.push_back(g_out_dir);
  }
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  fr::blas_on_openmp();  // all BLAS parallelism through OpenMP (kernels/frontier/recompute.hpp)
  IdlenessStudy s;
  return kvf::bench_main(int(args.size()), av.data(), s);
}
