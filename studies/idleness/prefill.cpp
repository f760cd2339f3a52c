// The prefill arm: a chunk of T tokens after N resident, the compute-bound contrast to decode, stated against
// the GEMM ceiling of the run. Verified against the reference before timing on both backends.
#include "idleness.hpp"
#include "kvf/errors.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/units.hpp"

#if defined(KVF_HAVE_CUDA)
#include "decode_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::idleness {
namespace {

class PrefillCpu final : public kvf::Case {
 public:
  PrefillCpu(Env& env, const md::ModelShape& m, int T, int N, int L) : env_(env), m_(m), T_(T), N_(N), L_(L) {}
  void setup(kvf::Backend&) override {
    w_ = env_.weights(m_);
    st_ = dc::make_prefill_state(m_, T_, N_, kSeed);
  }
  bool has_verify() const override { return true; }
  void verify(kvf::Backend&) override {
    const auto r = dc::verify_prefill_cpu(*w_, m_, st_, dc::prefill_check_rows(T_));
    if (!r.ok()) throw kvf::VerifyError("prefill layer vs reference: " + r.text());
  }
  void run(kvf::Backend&) override { dc::prefill_step_cpu(*w_, st_, L_); }
  std::string after_measure(kvf::Backend&, const kvf::Summary& sm, const std::string& mode) override {
    return cpu_after(env_, *this, sm, mode, [this] { dc::prefill_step_cpu(*w_, st_, L_); });
  }
  void teardown(kvf::Backend&) override {
    w_.reset();
    st_ = dc::PrefillState{};
  }

 private:
  Env& env_;
  const md::ModelShape m_;
  const int T_, N_, L_;
  std::shared_ptr<fr::LayerWeights> w_;
  dc::PrefillState st_;
};

#if defined(KVF_HAVE_CUDA)
// GEMMs through cuBLASLt (tensor cores), the causal attention on tensor cores or (the attention axis) the CUDA-core
// kernel; CUPTI counters of the hot mode as for decode.
class PrefillGpu final : public kvf::Case {
 public:
  PrefillGpu(Env& env, const md::ModelShape& m, int T, int N, int L, const std::string& launch, bool mma_attention)
      : env_(env), m_(m), T_(T), N_(N), L_(L), launch_(launch), mma_attention_(mma_attention) {}
  void setup(kvf::Backend& be) override {
    w_ = env_.weights(m_);
    pre_ = std::make_unique<dc::gpu::PrefillGpu>(*w_, m_, T_, N_, kSeed, kvf::cuda_props(be).multiProcessorCount,
                                                 kvf::cuda_stream(be), mma_attention_);
    launch_.set([this](cudaStream_t st) { pre_->step(L_, st); }, kvf::cuda_stream(be), "the prefill chunk");
  }
  bool has_verify() const override { return true; }
  void verify(kvf::Backend& be) override {
    const cudaStream_t st = kvf::cuda_stream(be);
    const auto r = pre_->verify(*w_, dc::prefill_check_rows(T_), st);
    if (!r.ok()) throw kvf::VerifyError("GPU prefill layer vs reference: " + r.text());
    launch_.verify_graph(
        st,
        [&] {
          return kvf::study::Outputs{{"h after L layers", pre_->hidden(st)}, {"appended K/V", pre_->appended_kv(st)}};
        },
        [&] { pre_->poison_outputs(st); });
  }
  void run(kvf::Backend& be) override { launch_.run(kvf::cuda_stream(be)); }
  std::string after_measure(kvf::Backend& be, const kvf::Summary&, const std::string& mode) override {
    const std::string splits = std::string("attention on ") + pre_->attention_kernel() + ", KV splits " +
                               i2s(pre_->attention_splits());
    // The same kernels as the eager row's: their counters are that row's.
    if (launch_.graph()) return splits + "; " + launch_.note() + (mode == "hot" ? "; counters: collected on the eager row" : "");
    return splits + counters_note(env_, counted_, name, mode, be, [this](cudaStream_t st) { pre_->step(L_, st); });
  }
  void teardown(kvf::Backend&) override {
    launch_.reset();
    pre_.reset();
    w_.reset();
  }

 private:
  Env& env_;
  const md::ModelShape m_;
  const int T_, N_, L_;
  std::shared_ptr<fr::LayerWeights> w_;
  std::unique_ptr<dc::gpu::PrefillGpu> pre_;
  kvf::study::LaunchPath launch_;
  const bool mma_attention_;
  bool counted_ = false;
};
#endif

// The GPU prefill's attention kernel (GPU targets only; decode_math.hpp PfKernel).
constexpr const char* kAttentionAxis = "attention";
kvf::Axis attention_axis() {
  return {.name = kAttentionAxis,
          .doc = "the GPU prefill's causal attention: mma (tensor cores) or cuda_core (fp32 FMAs, the kernel before "
                 "2026-11-27)",
          .cpu = {"mma"},
          .quick = {"mma"},
          .flag = "--prefill-attention"};
}

std::unique_ptr<kvf::Case> make_prefill(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.shape(p["model"]);
  const int T = int(p.integer("tokens")), N = int(p.integer("context")), L = int(p.integer("layers"));
  std::unique_ptr<kvf::Case> c;
  double est_s = 0;
  const bool mma_attention = !p.has(kAttentionAxis) || p[kAttentionAxis] == "mma";
  if (env.gpu) {
#if defined(KVF_HAVE_CUDA)
    const double need = double(dc::gpu::PrefillGpu::device_bytes(m, T, N));
    if (need > env.usable_bytes)
      return kvf::skipped_case("", {}, m.name + " T " + i2s(T) + " N " + i2s(N) + ": the prefill chunk needs " +
                                           kvf::format_bytes(need) + " of device memory, more than the " +
                                           kvf::format_bytes(env.usable_bytes) + " usable");
    c = std::make_unique<PrefillGpu>(env, m, T, N, L, kvf::study::launch_of(p), mma_attention);
#endif
  } else {
    c = std::make_unique<PrefillCpu>(env, m, T, N, L);
  }
  const double wb = env.gpu ? 2 : 4;
  c->params = {{"weight_bytes", num(wb)}};
  c->flops = dc::prefill_flops(m, T, N, L);
  c->bytes = dc::prefill_bytes(m, T, N, L, wb);
  c->ceiling = env.gpu ? gemm_ceiling_ref() : gemm_fp32_ceiling_ref();  // the CPU twin computes in fp32
  c->uses = idle_ceilings();
  c->note = "prefill chunk of T tokens after N resident: the compute-bound contrast to decode";
  c->cold = false;  // weights exceed the LLC/L2; compute bound
  if (env.gpu) {
    // GEMMs on the tensor pipe (~400 TFLOP/s achieved), attention on tensor cores too (H200: 233-260 TFLOP/s after
    // 8K-32K keys, 48 with none; 150 taken) or on CUDA cores (~15 TFLOP/s, ~27 on an H200), plus the counters phases
    // after the hot samples (8 + 64 + 8 steps).
    const double attn = 4.0 * T * m.n_heads * m.head_dim * (N + (T + 1) / 2.0) * L;
    const double t = (c->flops - attn) / 400e12 + attn / (mma_attention ? 150e12 : 15e12) + L * 100e-6;
    est_s = est(env, t, 2.0 + prefill_verify_s(m, T, N) + (kvf::study::launch_of(p) == "graph" ? 0 : 80 * t), 1);
    c->note += "; GEMMs cuBLASLt bf16 (tensor cores), causal attention kernels/decode/prefill_attn_gpu.cu (the "
               "after-measure note names its kernel)";
  } else {
    est_s = est(env, c->flops / 150e9, 0.5 + prefill_verify_s(m, T, N) + c->flops / L / 150e9, 1);
  }
  c->est_seconds = est_s;
  return c;
}

}  // namespace

Arm prefill_arm(bool gpu) {
  std::vector<kvf::Axis> axes = launch_axes({arm_axis("prefill", false), model_axis(),
                                             {.name = "tokens", .doc = "tokens T of the chunk", .cpu = {"128"},
                                              .gpu = {"512"}, .flag = "--prefill-tokens"},
                                             context_axis(), layers_axis()},
                                            gpu);
  if (gpu) axes.push_back(attention_axis());
  return Arm{
      .name = "prefill",
      .doc = "prefill chunk of T tokens after N resident (the first context of the sweep): the compute-bound contrast",
      .axes = std::move(axes),
      // One chunk per model: at the first context of the decode sweep, not at each.
      .valid = [](const kvf::Point& p, const Env& env) { return p.integer("context") == env.first_context; },
      .case_name_fn =
          [](const kvf::Point& p) {
            // The tensor-core rows keep the names the CUDA-core rows had before 2026-11-27 (a gate sees the change
            // of kernel as a change of speed; the note and the attention column say which ran).
            return "prefill/" + p["model"] + "/T" + p["tokens"] + "/N" + ctx_name(p.integer("context")) + "/L" +
                   p["layers"] + kvf::study::launch_suffix(p) +
                   (p.has(kAttentionAxis) && p[kAttentionAxis] == "cuda_core" ? "/cuda_core" : "");
          },
      .make = make_prefill};
}

}  // namespace kvf::idleness
