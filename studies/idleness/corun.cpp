// The corun arm: is work placed beside decode free? Decode steps alone and beside a background load on a second
// thread (CPU) or stream (GPU): recompute from X (the frontier study's arm; also alone), page copies (CPU: DRAM to
// DRAM; GPU: pinned H2D/D2H over the host link) and, CPU, O_DIRECT reads of the file tier (--file-dir); on the GPU
// also recompute on SM partitions (green contexts). Each background and how a row shows that it overlapped the
// steps: background.hpp. (The frontier study's former interference arm was this experiment; merged here.)
#if defined(KVF_HAVE_CUDA)
#include "decode_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/green_ctx.hpp"
#endif

#include "background.hpp"
#include "idleness.hpp"
#include "kvf/errors.hpp"

namespace kvf::idleness {
namespace {

// The co-run's fixed shape: a mid-size batch at a context whose K/V read dominates the step.
constexpr int kBatch = 16, kContextCpu = 4096, kContextGpu = 32768;
constexpr int kTokens = 128;  // one page of recompute, one page per call

class RecomputeAloneCpu final : public kvf::Case {
 public:
  explicit RecomputeAloneCpu(const md::ModelShape& m) : m_(m) {}
  void setup(kvf::Backend&) override {
    rc_ = std::make_unique<dc::RecomputeState>(dc::make_recompute_state(m_, kTokens, 1, kSeed + 90));
  }
  void run(kvf::Backend&) override { dc::recompute_cpu(*rc_); }
  std::string after_measure(kvf::Backend&, const kvf::Summary& sm, const std::string&) override {
    return "pages_per_s=" + num(1.0 / sm.median);
  }
  void teardown(kvf::Backend&) override { rc_.reset(); }

 private:
  const md::ModelShape m_;
  std::unique_ptr<dc::RecomputeState> rc_;
};

#if defined(KVF_HAVE_CUDA)
class RecomputeAloneGpu final : public kvf::Case {
 public:
  RecomputeAloneGpu(const md::ModelShape& m, bool green, int green_request)
      : m_(m), green_(green), green_request_(green_request) {}
  void setup(kvf::Backend& be) override {
    cudaStream_t st = kvf::cuda_stream(be);
    if (green_) {
      int dev = 0;
      KVF_CUDA_CHECK(cudaGetDevice(&dev));
      split_ = std::make_unique<kvf::GreenSplit>(dev, green_request_);
      if (!split_->available()) throw std::runtime_error("green contexts: " + split_->reason());
      KVF_CUDA_CHECK(cudaEventCreateWithFlags(&hop_in_, cudaEventDisableTiming));
      hop_out_ = split_->make_event(0);
      st = split_->stream(0);  // constructed (and run once) on the partition: a failure shows here
    }
    rc_ = std::make_unique<dc::gpu::RecomputeGpu>(m_, kTokens, 1, kSeed + 90, st);
  }
  void run(kvf::Backend& be) override {
    const cudaStream_t st = kvf::cuda_stream(be);
    if (!split_) {
      rc_->run(st);
      return;
    }
    // Recompute on partition 0 of the split, between event hops from and back to the backend's stream.
    KVF_CUDA_CHECK(cudaEventRecord(hop_in_, st));
    split_->wait(split_->stream(0), hop_in_);
    rc_->run(split_->stream(0));
    split_->record(hop_out_, 0);
    split_->wait(st, hop_out_);
  }
  std::string after_measure(kvf::Backend&, const kvf::Summary& sm, const std::string&) override {
    std::string note = "pages_per_s=" + num(1.0 / sm.median);
    if (split_) note += " on " + i2s(split_->sm_count(0)) + " SMs (event hops included)";
    return note;
  }
  void teardown(kvf::Backend&) override {
    if (split_) split_->synchronize();
    if (hop_in_) (void)cudaEventDestroy(hop_in_);
    hop_in_ = hop_out_ = nullptr;
    rc_.reset();
    split_.reset();
  }

 private:
  const md::ModelShape m_;
  const bool green_;
  const int green_request_;
  std::unique_ptr<dc::gpu::RecomputeGpu> rc_;
  std::unique_ptr<kvf::GreenSplit> split_;
  cudaEvent_t hop_in_ = nullptr, hop_out_ = nullptr;
};
#endif

std::vector<kvf::Param> partition_params(const Env& env) {
  const std::string dec = i2s(env.green_decode_sms), bg = i2s(env.green_bg_sms);
  return {{"sm_partition", "decode " + dec + " SMs / recompute " + bg + " SMs"},
          {"decode_sms", dec},
          {"background_sms", bg}};
}

std::unique_ptr<kvf::Case> make_recompute_alone(const md::ModelShape& m, Env& env, bool green) {
  std::unique_ptr<kvf::Case> c;
#if defined(KVF_HAVE_CUDA)
  if (env.gpu) c = std::make_unique<RecomputeAloneGpu>(m, green, env.green_request);
#endif
  if (!c) c = std::make_unique<RecomputeAloneCpu>(m);
  if (green) c->params = partition_params(env);
  const double T = kTokens, P = 1;
  c->flops = 2.0 * T * P * m.hidden * 2 * m.kv_dim();
  c->bytes = 2.0 * m.kv_dim() * m.hidden * (env.gpu ? 2 : 4) + T * P * m.hidden * 2;
  c->note = "recompute one page of T tokens from bf16 X (the frontier study's arm: K/V GEMM, RoPE, paged write); "
            "pages/s alone = 1 / median";
  if (green)
    c->note += "; on a green-context partition of " + i2s(env.green_bg_sms) +
               " SMs, the figure includes the cross-context event hops (backend stream -> partition stream -> backend "
               "stream)";
  c->ceiling = gemm_ceiling_ref();
  c->est_seconds = est(env, env.gpu ? 30e-6 : c->flops / 100e9, 0.3);
  return c;
}

std::unique_ptr<kvf::Case> make_corun(const kvf::Point& p, Env& env) {
  const std::string& bg = p["background"];
  if (!p.has("batch") && !p.has("tokens")) return kvf::skipped_case("", {}, env.green_skip);
  if (bg == "recompute_alone" || bg == "green_recompute_alone")
    return make_recompute_alone(env.shape(p["model"]), env, bg == "green_recompute_alone");
  if (bg == "file" && !env.file_skip.empty()) return kvf::skipped_case("", {}, env.file_skip);
  return make_decode_case(p, env, bg);
}

}  // namespace

void probe_file_dir(Env& env, bool given, bool used) {
  if (given && env.file_dir.empty()) kvf::study::check_file_dir_flag(env.file_dir);  // bad input: exit 2
  if (!used) return;
  if (given) {
    kvf::study::check_file_dir_flag(env.file_dir);
    return;
  }
  try {
    kvf::study::check_file_dir_flag(env.file_dir);
  } catch (const kvf::UsageError& e) {
    env.file_skip = std::string("the tier file's default directory: ") + e.what();
  }
}

Arm corun_arm() {
  return Arm{
      .name = "corun",
      .doc = "decode steps beside recompute from X, page copies or (CPU) O_DIRECT file reads on a second thread / "
             "stream (GPU also recompute on SM partitions) vs each alone",
      .axes = {arm_axis("corun", false),
               {.name = "model", .doc = "each of --models"},
               {.name = "batch", .doc = "fixed", .cpu = {i2s(kBatch)}},
               {.name = "context", .doc = "fixed", .cpu = {i2s(kContextCpu)}, .gpu = {i2s(kContextGpu)}},
               {.name = "layers", .doc = "as --layers"},
               {.name = "background",
                .doc = "what runs beside the step (recompute_alone: recompute without a step; copy: 512 KiB page "
                       "copies, CPU DRAM to DRAM, GPU pinned H2D then D2H; file: 512 KiB O_DIRECT reads, CPU)",
                .cpu = {"none", "recompute_alone", "recompute", "copy", "file"},
                .gpu = {"none", "recompute_alone", "recompute", "copy", "green_none", "green_recompute_alone",
                        "green_recompute"}},
               {.name = "tokens", .doc = "recompute page (recompute_alone rows)", .cpu = {i2s(kTokens)}}},
      // Not a product: decode steps (batch, context, layers) and recompute alone (tokens) interleaved, so each
      // co-run row follows its references; the green rows are one skipped row when the split is unavailable.
      // No flag of its own: --models and --layers reach it through the Env.
      .default_grid =
          [](const kvf::Target& t, const Env& env) {
            if (t.quick) return kvf::Grid{};
            const auto head = [&](const std::string& bg) {
              return std::vector<std::pair<std::string, std::vector<std::string>>>{
                  {"arm", {"corun"}}, {"model", {env.model}}, {"background", {bg}}};
            };
            const auto step = [&](const std::string& bg) {
              return kvf::Product{{{"arm", {"corun"}},
                                   {"model", {env.model}},
                                   {"batch", {i2s(kBatch)}},
                                   {"context", {i2s(t.gpu ? kContextGpu : kContextCpu)}},
                                   {"layers", {i2s(env.layers)}},
                                   {"background", {bg}}}};
            };
            const auto alone = [&](const std::string& bg) {
              auto l = head(bg);
              l.push_back({"tokens", {i2s(kTokens)}});
              return kvf::Product{l};
            };
            kvf::Grid g = {step("none"), alone("recompute_alone"), step("recompute"), step("copy")};
            if (!t.gpu) {
              g.push_back(step("file"));  // the file tier is a CPU tier (the GPU study reads no file)
              return g;
            }
            if (!env.green_skip.empty()) {
              g.push_back(kvf::Product{head("green_recompute")});
            } else {
              for (auto p : {step("green_none"), alone("green_recompute_alone"), step("green_recompute")}) g.push_back(p);
            }
            return g;
          },
      .case_name_fn =
          [](const kvf::Point& p) {
            const std::string head = "corun/" + p["model"] + "/";
            if (p.has("tokens")) return head + p["background"] + "/T" + p["tokens"];
            if (!p.has("batch")) return head + "green_context";
            return head + "B" + p["batch"] + "/C" + ctx_name(p.integer("context")) + "/L" + p["layers"] + "/bg_" +
                   p["background"];
          },
      .make = make_corun};
}

#if defined(KVF_HAVE_CUDA)
// Once per case list: the request (--green-sms, or about a quarter of the device), checked against the driver's
// granularity (bad flag: exit 2), then a trial split whose failure (driver without green contexts, a split the
// device refuses) becomes the skipped row's reason.
void probe_green(Env& env) {
  if (env.green_request > 0 || !env.green_skip.empty()) return;  // probed already
  if (env.green_sms == 0) {
    env.green_skip = "--green-sms 0: green-context cases not asked for";
    return;
  }
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) {
    (void)cudaGetLastError();
    env.green_skip = std::string("green contexts unavailable: cudaGetDevice: ") + cudaGetErrorName(e);
    return;
  }
  kvf::SmLimits lim;
  std::string why;
  if (!kvf::query_sm_limits(dev, lim, why)) {
    env.green_skip = "green contexts unavailable: " + why;
    return;
  }
  if (env.green_sms) {
    const std::string p = kvf::partition_request_problem(*env.green_sms, lim);
    if (!p.empty()) throw kvf::UsageError("--green-sms " + p);
    env.green_request = *env.green_sms;
  } else {
    env.green_request = kvf::default_partition_sms(lim);
    if (env.green_request == 0) {
      env.green_skip = "green contexts: " + kvf::partition_request_problem(1, lim);
      return;
    }
  }
  kvf::GreenSplit trial(dev, env.green_request);
  if (!trial.available()) {
    env.green_skip = "green contexts unavailable: " + trial.reason();
#if defined(KVF_HAVE_CUPTI)
    // Measured on an H100 (driver 580.159): once CUPTI's profiler is set up in the process (the counters probe),
    // cuGreenCtxCreate returns CUDA_ERROR_NOT_SUPPORTED; without counters the same split works.
    if (!env.no_counters && trial.reason().find("cuGreenCtxCreate") != std::string::npos)
      env.green_skip += " (CUPTI counters are on in this process: green contexts were refused with CUPTI's profiler "
                        "set up on the H100 tried; run the co-run arm with --no-counters for the green-context rows)";
#endif
    env.green_request = 0;
    return;
  }
  env.green_bg_sms = trial.sm_count(0);
  env.green_decode_sms = trial.sm_count(1);
}
#endif

}  // namespace kvf::idleness
