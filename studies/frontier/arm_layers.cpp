// Recompute a page's K/V from its token ids through L layers over a resident prefix of N tokens: layers
// 1..L-1 run whole (attention over the prefix), layer L computes only its K/V. CPU: the twin in
// kernels/frontier/layers.hpp; GPU: the idleness study's prefill chunk (kernels/decode PrefillGpu).
#include "frontier.hpp"
#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/pattern.hpp"
#include "recompute.hpp"

#if defined(KVF_HAVE_CUDA)
#include "decode.hpp"
#include "decode_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::frontier_study {
namespace {

// The bf16 weights one page's recompute through L layers reads: L-1 whole layers, then layer L's K/V rows.
double weight_bytes(const md::ModelShape& m, int L) {
  const double kvd = m.kv_dim(), H = m.hidden, qd = m.q_dim(), I = m.intermediate;
  const double layer_w = 2 * (H * (qd + 2 * kvd) + H * qd + 3 * H * I);
  return (L - 1) * layer_w + 2 * H * 2 * kvd;
}

class LayersCpu final : public Case {
 public:
  LayersCpu(const md::ModelShape& m, int T, int L, int N, Env& env) : m_(m), T_(T), L_(L), N_(N), env_(env) {}
  void setup(Backend&) override {
    w_ = &env_.weights(m_);
    pc_ = fr::make_prefix(m_, L_, N_, T_, kSeed + 11);
    inv_freq_ = fr::rope_inv_freq(m_, m_.head_dim);
    cs_ = fr::rope_table(inv_freq_, N_ + T_);
    tok_.resize(T_);
    for (int t = 0; t < T_; ++t) tok_[t] = int(kvf::pattern_word(kSeed, t) % 100000);
    const std::int64_t blocks = 2 * (T_ / fr::kBlockTokens);
    slot_ = fr::scattered_slots(T_, blocks, kSeed + 12);
    pages_.assign(L_, std::vector<std::uint16_t>(std::size_t(blocks) * 2 * fr::kBlockTokens * m_.kv_dim()));
    gemms_ = fr::make_layer_gemms(*w_, T_, L_ > 1);
    set_gemm_column(*this, *gemms_.kv, weight_bytes(m_, L_) / 2);
  }
  void run(Backend&) override {
    fr::through_layers_cpu(*w_, gemms_, L_, T_, N_, tok_.data(), pc_, cs_.data(), slot_.data(), pages_, scratch_);
  }
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
    return gemm_kernel_note(*gemms_.kv);
  }
  bool has_verify() const override { return true; }
  // Layer 0's K/V against the fp64 reference of RMSNorm(embedding) . Wkv (the deeper layers are checked
  // against a naive fp64 forward in tests/frontier).
  void verify(Backend& be) override {
    run(be);
    const auto rows = fr::sample_rows(T_, 16);
    std::vector<std::vector<float>> xr;
    for (int r : rows) xr.push_back(fr::layer0_input(*w_, tok_[r]));
    std::vector<std::int32_t> pos(T_);
    for (int t = 0; t < T_; ++t) pos[t] = pc_.capacity - T_ + t;
    const int qd = m_.q_dim();
    const auto st = fr::verify_rows(rows, xr, w_->wqkv_bf16.data() + std::size_t(qd) * m_.hidden,
                                    w_->bqkv.empty() ? nullptr : w_->bqkv.data() + qd, m_.hidden,
                                    {m_.n_kv_heads, m_.head_dim}, inv_freq_, pos.data(), slot_.data(), pages_[0].data());
    if (st.bad) throw kvf::VerifyError("layer 0: " + i2s(st.bad) + " K/V values outside tolerance; first: " + st.first_bad);
  }
  void teardown(Backend&) override {
    w_ = nullptr;
    pc_ = {};
    cs_ = {};
    inv_freq_ = {};
    tok_ = {};
    slot_ = {};
    pages_ = {};
    scratch_ = {};
    gemms_ = {};
  }

 private:
  md::ModelShape m_;
  int T_, L_, N_;
  Env& env_;
  const fr::LayerWeights* w_ = nullptr;
  fr::PrefixCache pc_;
  std::vector<float> cs_;
  std::vector<double> inv_freq_;
  std::vector<std::int32_t> tok_;
  std::vector<std::int64_t> slot_;
  std::vector<std::vector<std::uint16_t>> pages_;
  fr::LayerScratch scratch_;
  fr::LayerGemms gemms_;
};

std::unique_ptr<Case> make_layers_cpu(const md::ModelShape& m, int T, int L, int N, Env& env) {
  auto c = std::make_unique<LayersCpu>(m, T, L, N, env);
  c->flops = fr::through_layers_flops(m, L, T, N);
  const double kvd = m.kv_dim();
  c->bytes = weight_bytes(m, L) + double(fr::prefix_bytes(m, L - 1, N, 0)) + double(T) * 2 * kvd * 2 * L;
  c->note = "CPU twin: bf16 matmuls through oneDNN, or OpenBLAS fp32 where this oneDNN has none (the gemm column and "
            "the GEMM kernel below say which; weights packed once; one synthetic layer reused by every layer), fp32 "
            "activations rounded to bf16 as GEMM inputs, fp32 prefix K/V and attention per layer; layer L computes only "
            "its K/V; bytes = weights + prefix K/V read + page K/V written";
  c->ceiling = kGemmCeiling;
  c->est_seconds = est(env, c->flops / 150e9, 1.0 + weight_bytes(m, 2) / 1e9);
  return c;
}

#if defined(KVF_HAVE_CUDA)
// step_kv runs L-1 full layers and then only layer L's K/V, as the CPU twin does. Verified (one layer: h
// and the appended K/V against the fp64 reference) before timing.
class LayersGpu final : public Case {
 public:
  LayersGpu(const md::ModelShape& m, int T, int L, int N, Env& env, const std::string& launch)
      : m_(m), T_(T), L_(L), N_(N), env_(env), launch_(launch) {}
  void setup(Backend& be) override {
    w_ = &env_.weights(m_);
    pre_ = std::make_unique<kvf::decode::gpu::PrefillGpu>(*w_, m_, T_, N_, kSeed + 11,
                                                          kvf::cuda_props(be).multiProcessorCount, kvf::cuda_stream(be));
    launch_.set([this](cudaStream_t st) { pre_->step_kv(L_, st); }, kvf::cuda_stream(be),
                "the through-layers recompute");
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    const cudaStream_t st = kvf::cuda_stream(be);
    const auto r = pre_->verify(*w_, kvf::decode::prefill_check_rows(T_), st);
    if (!r.ok()) throw kvf::VerifyError("GPU through-layers (one layer) vs reference: " + r.text());
    // The timed path (step_kv: layer L computes only its K/V) on its own, against the reference K/V.
    const auto kv = pre_->verify_kv(*w_, kvf::decode::prefill_check_rows(T_), st);
    if (!kv.ok()) throw kvf::VerifyError("GPU through-layers K/V-only layer vs reference: " + kv.text());
    launch_.verify_graph(
        st,
        [&] {
          return kvf::study::Outputs{{"h after L-1 layers", pre_->hidden(st)}, {"appended K/V", pre_->appended_kv(st)}};
        },
        [&] { pre_->poison_outputs(st); });
  }
  void run(Backend& be) override { launch_.run(kvf::cuda_stream(be)); }
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
    const std::string graph = launch_.note();
    return std::string("attention on ") + pre_->attention_kernel() + ", KV splits " +
           std::to_string(pre_->attention_splits()) + (graph.empty() ? "" : "; " + graph);
  }
  void teardown(Backend&) override {
    launch_.reset();
    pre_.reset();
    w_ = nullptr;
  }

 private:
  md::ModelShape m_;
  int T_, L_, N_;
  Env& env_;
  const fr::LayerWeights* w_ = nullptr;
  std::unique_ptr<kvf::decode::gpu::PrefillGpu> pre_;
  kvf::study::LaunchPath launch_;
};

std::unique_ptr<Case> make_layers_gpu(const md::ModelShape& m, int T, int L, int N, Env& env,
                                      std::vector<Param> params, const std::string& launch) {
  if (const std::string why = kvf::decode::unsupported_reason(m); !why.empty())
    return kvf::skipped_case("", std::move(params), "GPU through-layers: " + why);
  const double need = double(kvf::decode::gpu::PrefillGpu::device_bytes(m, T, N));
  if (need > 0.9 * double(env.gpu_memory_bytes))
    return kvf::skipped_case("", std::move(params),
                             "GPU through-layers needs " + str(need / (1 << 30)) + " GiB of device memory; the device has " +
                                 str(double(env.gpu_memory_bytes) / (1 << 30)));
  auto c = std::make_unique<LayersGpu>(m, T, L, N, env, launch);
  c->params = std::move(params);
  c->flops = fr::through_layers_flops(m, L, T, N);
  const double kvd = m.kv_dim();
  // the weights, the shared prefix K/V read by L-1 attentions, the page's K/V written
  c->bytes = weight_bytes(m, L) + (L - 1) * kvf::decode::kv_layer_bytes(m, 1, N) + double(T) * 2 * kvd * 2 * L;
  c->note = "GPU: kernels/decode PrefillGpu::step_kv: cuBLASLt bf16 GEMMs, the causal attention of "
            "prefill_attn_gpu.cu (its kernel named after the measurement), one bf16 prefix cache shared by the layers "
            "(the CPU twin keeps one per layer: a prefix small enough for the L2 is re-read from L2 here), K/V appended "
            "contiguously (not paged); layer L computes only its K/V";
  c->ceiling = kGemmCeiling;
  c->est_seconds = est(env, c->flops / 200e12 + c->bytes / 2e12, 3.0);
  return c;
}
#endif

std::unique_ptr<Case> make_layers(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.model(p["model"]);
  const int T = int(p.integer("tokens")), L = int(p.integer("layers")), N = int(p.integer("prefix"));
  std::vector<Param> params = page_columns(m, T, 1, L);
  params.insert(params.end(),
                {{"resident_form", "token_ids"},
                 {"resident_bytes_per_page", i2s(fr::resident_bytes(fr::Resident::token_ids, T, m.hidden, 0))},
                 {"prefix_kv_bytes", i2s(fr::resident_bytes(fr::Resident::kv_bf16, N, m.hidden, m.kv_values_per_token()) * L)}});
  std::unique_ptr<Case> c;
  if (env.gpu) {
#if defined(KVF_HAVE_CUDA)
    c = make_layers_gpu(m, T, L, N, env, params, kvf::study::launch_of(p));
#else
    return kvf::skipped_case("", std::move(params), "this build has no CUDA");
#endif
  } else {
    c = make_layers_cpu(m, T, L, N, env);
    c->params = std::move(params);
  }
  return c;
}

}  // namespace

Arm layers_arm(const Env& env) {
  const auto models = env.model_names(false);
  const std::vector<std::string> layers_default = env.gpu ? std::vector<std::string>{"1"} : std::vector<std::string>{"1", "2"};
  return Arm{
      .name = "layers",
      .doc = "recompute K/V from token ids through L layers over a resident prefix of N tokens",
      .axes = launch_axes(
          {arm_axis({"layers"}),
           {.name = "model", .doc = "GQA models of --models", .cpu = models, .fixed = models},
           {.name = "tokens", .doc = "tokens per page T", .cpu = {"128"}, .flag = "--tokens", .fixed = {"128"}},
           // The user's --tokens or --prefix keeps every default layer count (not only the first).
           {.name = "layers", .doc = "layers L (the last computes only its K/V)", .cpu = {"1", "2"},
            .gpu = {"1", "2", "4", "8"}, .flag = "--layers", .fixed = layers_default},
           {.name = "prefix", .doc = "resident prefix N tokens", .cpu = {"1024"}, .flag = "--prefix", .fixed = {"1024"}}},
          env),
      // GPU: L = 1, 2, 4, 8 and the model's own depth, model by model (the H100 run had L = 1 only), each eager and
      // as one graph (about 14 kernels a layer: the launch cost grows with L); a depth the GPU's memory cannot hold
      // is a skipped row. CPU: 1 and 2 (one 8B layer costs ~0.3 s there).
      .default_grid =
          [](const kvf::Target& t, const Env& e) {
            kvf::Grid g;
            if (t.quick) return g;  // not in the quick subset
            for (const auto& name : e.model_names(false)) {
              std::vector<std::string> ls = {"1", "2"};
              if (t.gpu) {
                ls = {"1", "2", "4", "8"};
                const int depth = e.model(name).layers;
                if (depth > 8) ls.push_back(i2s(depth));
              }
              g.push_back(kvf::Product{{{"arm", {"layers"}}, {"model", {name}}, {"tokens", {"128"}},
                                        {"layers", ls}, {"prefix", {"1024"}}}});
            }
            return t.gpu ? kvf::study::with_launch(g, kvf::study::launch_values()) : g;
          },
      .case_name_fn = launch_named("layers/{model}/T{tokens}/L{layers}/N{prefix}"),
      .make = make_layers};
}

}  // namespace kvf::frontier_study
