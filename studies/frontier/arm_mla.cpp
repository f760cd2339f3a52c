// MLA (DeepSeek-V3): recompute the cached latent from X (mla_latent: c_KV = RMSNorm(X Wdkv^T[:512]),
// k_pe = RoPE(.[512:576]) written as bf16 latent cache rows), and the up-projection a decode step runs on
// the latent (mla_up: c_KV . Wukv^T -> per-head k_nope and v, not cached).
#include <cmath>

#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "kvf/launch_axis.hpp"
#include "frontier.hpp"
#include "gemm_onednn.hpp"
#include "recompute.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/cuda_backend.hpp"
#include "recompute_gpu.hpp"
#endif

namespace kvf::frontier_study {
namespace {

class MlaCase final : public Case {
 public:
  MlaCase(const md::ModelShape& m, int T, int P, bool latent, bool gpu, const std::string& launch)
      : g_(fr::mla_geom(m)), m_(m), T_(T), R_(T * P), K_(latent ? g_.hidden : g_.rank),
        N_(latent ? g_.latent() : g_.up_out()), latent_(latent), gpu_(gpu), eps_(float(m.rms_eps)),
        amp_(fr::rope_amplitude(m.rope_scaling))
#if defined(KVF_HAVE_CUDA)
        , launch_(launch)
#endif
  {
    (void)launch;
  }
  int k() const { return K_; }
  int n() const { return N_; }
  void setup(Backend& be) override;
  void run(Backend& be) override;
  bool has_verify() const override { return true; }
  void verify(Backend& be) override;
  void teardown(Backend&) override {
#if defined(KVF_HAVE_CUDA)
    launch_.reset();
#endif
    s_ = S{};
  }
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
#if defined(KVF_HAVE_CUDA)
    if (gpu_) return launch_.note();
#endif
    return gemm_kernel_note(*s_.gemm_cpu);
  }

 private:
#if defined(KVF_HAVE_CUDA)
  void enqueue_gpu(cudaStream_t st);
  void verify_graph(Backend& be);
#endif
  void verify_latent(Backend& be, const std::vector<int>& rows);
  void verify_up(Backend& be, const std::vector<int>& rows);
  struct S {
    std::vector<std::uint16_t> w, x;
    std::vector<float> y, cs;
    std::unique_ptr<fr::Bf16Gemm> gemm_cpu;  // CPU: bf16 matmul, W packed once
    std::vector<double> inv_freq;
    std::vector<std::int32_t> pos;
    std::vector<std::int64_t> slot;
    std::vector<std::uint16_t> cache;
#if defined(KVF_HAVE_CUDA)
    BufferHandle dw, dx, dy, dcs, dpos, dslot, dcache;
    std::unique_ptr<fr::gpu::LtGemm> gemm;
#endif
  };
  fr::MlaGeom g_;
  md::ModelShape m_;
  int T_, R_, K_, N_;
  bool latent_, gpu_;
  float eps_;
  double amp_;  // the RoPE table's cos/sin amplitude (1 for DeepSeek-V3)
  S s_;
#if defined(KVF_HAVE_CUDA)
  kvf::study::LaunchPath launch_;
#endif
};

void MlaCase::setup(Backend& be) {
  s_.w.resize(std::size_t(N_) * K_);
  fr::fill_bf16_uniform(s_.w.data(), s_.w.size(), kSeed + 20, float(std::sqrt(3.0 / K_)));
  s_.x.resize(std::size_t(R_) * K_);
  fr::fill_bf16_uniform(s_.x.data(), s_.x.size(), kSeed + 21, 1.f);
  if (!gpu_) {
    s_.y.resize(std::size_t(R_) * N_);
    s_.gemm_cpu = std::make_unique<fr::Bf16Gemm>(R_, N_, K_, s_.w.data());
    set_gemm_column(*this, *s_.gemm_cpu, double(N_) * K_);
  }
  if (latent_) {
    s_.inv_freq = fr::rope_inv_freq(m_, g_.rope);
    s_.cs = fr::rope_table(s_.inv_freq, kPos0 + T_, fr::rope_amplitude(m_.rope_scaling));
    s_.pos.resize(R_);
    for (int r = 0; r < R_; ++r) s_.pos[r] = kPos0 + r % T_;
    const std::int64_t blocks = 2 * ((R_ + 15) / 16);
    s_.slot = fr::scattered_slots(R_, blocks, kSeed + 22);
    s_.cache.assign(std::size_t(blocks) * fr::kBlockTokens * g_.latent(), 0);
  }
#if defined(KVF_HAVE_CUDA)
  if (gpu_) {
    s_.dw = upload(be, s_.w.data(), s_.w.size() * 2);
    s_.dx = upload(be, s_.x.data(), s_.x.size() * 2);
    s_.dy = BufferHandle(be, std::size_t(R_) * N_ * 4, MemKind::device);
    if (latent_) {
      s_.dcs = upload(be, s_.cs.data(), s_.cs.size() * 4);
      s_.dpos = upload(be, s_.pos.data(), s_.pos.size() * 4);
      s_.dslot = upload(be, s_.slot.data(), s_.slot.size() * 8);
      s_.dcache = upload(be, s_.cache.data(), s_.cache.size() * 2);
    }
    s_.gemm = std::make_unique<fr::gpu::LtGemm>();
    s_.gemm->plan(R_, N_, K_);
    launch_.set([this](cudaStream_t st) { enqueue_gpu(st); }, kvf::cuda_stream(be),
                latent_ ? "the MLA latent recompute" : "the MLA up-projection");
  }
#endif
  (void)be;
}

#if defined(KVF_HAVE_CUDA)
void MlaCase::enqueue_gpu(cudaStream_t st) {
  s_.gemm->run(s_.dx->ptr, s_.dw->ptr, s_.dy->ptr, st);
  if (latent_)
    fr::gpu::mla_latent_write(s_.dy->as<float>(), R_, g_.rank, g_.rope, eps_, s_.dcs->as<float>(),
                              s_.dpos->as<std::int32_t>(), s_.dslot->as<std::int64_t>(), s_.dcache->as<std::uint16_t>(),
                              st);
}

// The graph row's outputs against the eager row's: the latent cache rows, or the up-projection's fp32 output.
void MlaCase::verify_graph(Backend& be) {
  const auto read = [&] {
    kvf::study::Outputs out;
    if (latent_) {
      std::vector<std::uint16_t> v(s_.cache.size());
      download(be, v.data(), s_.dcache, v.size() * 2);
      out.push_back({"latent cache", kvf::study::widen_bf16(v.data(), v.size())});
    } else {
      std::vector<float> y(std::size_t(R_) * N_);
      download(be, y.data(), s_.dy, y.size() * 4);
      out.push_back({"up-projection", std::move(y)});
    }
    return out;
  };
  const cudaStream_t st = kvf::cuda_stream(be);
  launch_.verify_graph(st, read, [&] {
    if (latent_) kvf::study::poison(s_.dcache->ptr, s_.cache.size() * 2, st);
    else kvf::study::poison(s_.dy->ptr, std::size_t(R_) * N_ * 4, st);
  });
}
#endif

void MlaCase::run(Backend& be) {
#if defined(KVF_HAVE_CUDA)
  if (gpu_) return launch_.run(kvf::cuda_stream(be));
#endif
  (void)be;
  s_.gemm_cpu->run(s_.x.data(), s_.y.data());
  if (latent_)
    fr::mla_latent_write_cpu(s_.y.data(), R_, g_, eps_, s_.cs.data(), s_.pos.data(), s_.slot.data(), s_.cache.data());
}

void MlaCase::verify(Backend& be) {
  run(be);
  be.synchronize();
  const auto rows = fr::sample_rows(R_, 16);
  if (latent_) verify_latent(be, rows);
  else verify_up(be, rows);
#if defined(KVF_HAVE_CUDA)
  if (gpu_) verify_graph(be);
#endif
}

void MlaCase::verify_latent(Backend& be, const std::vector<int>& rows) {
#if defined(KVF_HAVE_CUDA)
  if (gpu_) download(be, s_.cache.data(), s_.dcache, s_.cache.size() * 2);
#endif
  (void)be;
  std::vector<float> xr(K_);
  std::vector<double> ref(g_.latent());
  for (int r : rows) {
    fr::bf16_to_f32(s_.x.data() + std::size_t(r) * K_, xr.data(), K_);
    fr::mla_reference_row(xr.data(), s_.w.data(), K_, g_, eps_, s_.inv_freq, s_.pos[r], ref.data(), amp_);
    double ss = 0;
    for (double v : ref) ss += v * v;
    const double rms = std::sqrt(ss / ref.size());
    for (int i = 0; i < g_.latent(); ++i) {
      const double got = fr::bf16_to_f32(s_.cache[std::size_t(s_.slot[r]) * g_.latent() + i]);
      if (std::fabs(got - ref[i]) > fr::kRelTol * std::fabs(ref[i]) + fr::kAbsTol * rms)
        throw kvf::VerifyError("MLA latent row " + i2s(r) + " value " + i2s(i) + ": got " + str(got) + " ref " +
                               str(ref[i]));
    }
  }
}

void MlaCase::verify_up(Backend& be, const std::vector<int>& rows) {
  std::vector<float> y(std::size_t(R_) * N_);
#if defined(KVF_HAVE_CUDA)
  if (gpu_) download(be, y.data(), s_.dy, y.size() * 4);
#endif
  (void)be;
  if (!gpu_) y = s_.y;
  std::vector<float> xr(K_);
  for (int r : rows) {
    fr::bf16_to_f32(s_.x.data() + std::size_t(r) * K_, xr.data(), K_);
    for (int o = 0; o < N_; o += 97) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K_; ++k) {
        const double p = double(xr[k]) * fr::bf16_to_f32(s_.w[std::size_t(o) * K_ + k]);
        ref += p;
        mag += std::fabs(p);
      }
      const double got = y[std::size_t(r) * N_ + o];
      if (std::fabs(got - ref) > 1e-5 * mag + 1e-6)
        throw kvf::VerifyError("MLA up-projection row " + i2s(r) + " col " + i2s(o) + ": got " + str(got) + " ref " +
                               str(ref));
    }
  }
}

std::unique_ptr<Case> make_mla(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.model(p["model"]);
  const int T = int(p.integer("tokens")), P = int(p.integer("pages"));
  const bool latent = p["arm"] == "mla_latent";
  const fr::MlaGeom g = fr::mla_geom(m);
  auto c = std::make_unique<MlaCase>(m, T, P, latent, env.gpu, kvf::study::launch_of(p));
  const int K = c->k(), N = c->n();
  const double rows = double(T) * P;
  // kv_bytes_per_page of an MLA model is its latent cache; the decompressed K/V is what "up" makes.
  const std::int64_t lat = fr::resident_bytes(fr::Resident::mla_latent_bf16, T, m.hidden, g.latent());
  c->params = page_columns(m, T, P, 1);
  c->params.insert(c->params.end(),
                   {{"resident_form", latent ? "x_bf16" : "mla_latent_bf16"},
                    {"resident_bytes_per_page", i2s(latent ? fr::resident_bytes(fr::Resident::x_bf16, T, m.hidden, 0) : lat)},
                    {"gemm", env.gpu ? "cublaslt_bf16_fp32out" : "onednn_bf16_fp32out"}});
  c->flops = 2.0 * rows * K * N;
  c->bytes = rows * K * 2 + double(N) * K * 2 + rows * N * (latent ? 2 : 4);
  c->ceiling = kGemmCeiling;
  c->note = latent ? "c_KV = RMSNorm(X Wdkv^T[:512]), k_pe = RoPE(.[512:576]) (YaRN frequencies, cos/sin amplitude " +
                         str(fr::rope_amplitude(m.rope_scaling)) + ") -> bf16 latent cache rows"
                   : "up-projection c_KV . Wukv^T -> per-head [k_nope | v] in fp32, H*(128+128) per token; not written to a cache";
  c->est_seconds = est(env, c->flops / (env.gpu ? 300e12 : 150e9) + (env.gpu ? 10e-6 : 0),
                       env.gpu ? 0.3 : 0.1 + double(N) * K * 6e-9);
  return c;
}

const std::vector<std::string> kGpuTokens = {"16", "128", "1024", "4096"};
const std::vector<std::string> kGpuPages = {"1", "8", "64"};
const std::vector<std::string> kParts = {"mla_latent", "mla_up"};

}  // namespace

Arm mla_arm(const Env& env) {
  const auto models = env.model_names(true);
  return Arm{
      .name = "mla",
      .doc = "MLA: recompute the latent cache rows from X (mla_latent), and the up-projection of the latent (mla_up)",
      .axes = launch_axes(
          {{.name = "model", .doc = "MLA models of --models", .cpu = models, .fixed = models},
           {.name = "tokens", .doc = "tokens per page T", .cpu = {"128"}, .gpu = kGpuTokens, .flag = "--tokens",
            .fixed = {"128"}},
           {.name = "pages", .doc = "pages per call P", .cpu = {"1"}, .gpu = kGpuPages, .flag = "--pages",
            .fixed = {"1"}},
           arm_axis(kParts, "mla_latent, then mla_up, at each point")},
          env),
      // GPU: every T x P up to 65536 rows, model by model, a graph row beside the launch-bound ones (launch_rows).
      .default_grid =
          [](const kvf::Target& t, const Env& e) {
            kvf::Grid g;
            if (t.quick) return g;
            for (const auto& m : e.model_names(true))
              for (const auto& T : t.gpu ? kGpuTokens : std::vector<std::string>{"128"}) {
                std::vector<std::string> ps;
                for (const auto& P : t.gpu ? kGpuPages : std::vector<std::string>{"1"})
                  if (std::stoll(T) * std::stoll(P) <= 65536) ps.push_back(P);
                g.push_back(kvf::Product{{{"model", {m}}, {"tokens", {T}}, {"pages", ps}, {"arm", kParts}}});
              }
            return t.gpu ? launch_rows(g) : g;
          },
      .case_name_fn = launch_named("{arm}/{model}/T{tokens}/P{pages}"),
      .make = make_mla};
}

}  // namespace kvf::frontier_study
