// Interference with a decode step: how much a background recompute, page copy or file read slows the
// decode running beside it (pct_of_ceiling = 100 / slowdown against background none).
// CPU: one thread runs a decode step's attention (one layer, one sequence of N tokens, bf16 K/V) while
// one background thread recomputes pages (OpenBLAS on one thread), copies 512 KiB pages DRAM to DRAM,
// or reads pages from the O_DIRECT file tier, for the whole case. GPU: the decode step is the access
// study's split-KV attention over the layer's K/V of N tokens, timed on the main stream while a second
// stream holds enough page recomputes or pinned H2D page copies to outlast it.
// The idleness study's corun arm is the same experiment; a later step merges the two.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "frontier.hpp"
#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "side_stream.hpp"
#include "x_state.hpp"

#if defined(KVF_HAVE_CUDA)
#include "access.hpp"
#include "access_gpu.hpp"
#endif

namespace kvf::frontier_study {
namespace {

class InterferenceCpu final : public Case {
 public:
  InterferenceCpu(const md::ModelShape& m, int N, std::string background, std::string dir)
      : m_(m), N_(N), bg_kind_(std::move(background)), dir_(std::move(dir)) {}
  ~InterferenceCpu() override { stop_background(); }
  void setup(Backend&) override {
    const int D = m_.head_dim;
    q_.resize(std::size_t(m_.n_heads) * D);
    fr::fill_f32_uniform(q_.data(), q_.size(), kSeed + 60, 1.f);
    k_.resize(std::size_t(N_) * m_.kv_dim());
    v_.resize(k_.size());
    fr::fill_bf16_uniform(k_.data(), k_.size(), kSeed + 61, 1.f);
    fr::fill_bf16_uniform(v_.data(), v_.size(), kSeed + 62, 1.f);
    out_.resize(q_.size());
    scratch_.resize(std::size_t(m_.n_heads / m_.n_kv_heads) * N_);
    stop_ = false;
    if (bg_kind_ != "none") bg_ = std::thread([this] { background(); });
  }
  void run(Backend&) override {
    fr::decode_attention_cpu(q_.data(), k_.data(), v_.data(), N_, m_.n_heads, m_.n_kv_heads, m_.head_dim, out_.data(),
                             scratch_.data());
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override;
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
    if (!bg_error_.empty() && bg_.joinable()) bg_.join();
    if (!bg_error_.empty()) throw std::runtime_error("background thread failed: " + bg_error_);
    return "background iterations so far: " + i2s(bg_iters_.load());
  }
  void teardown(Backend&) override {
    stop_background();
    q_.clear();
    k_.clear();
    v_.clear();
    out_.clear();
    scratch_.clear();
  }

 private:
  void background();
  void stop_background() {
    stop_ = true;
    if (bg_.joinable()) bg_.join();
  }
  md::ModelShape m_;
  int N_;
  std::string bg_kind_, dir_;
  std::vector<float> q_, out_, scratch_;
  std::vector<std::uint16_t> k_, v_;
  std::thread bg_;
  std::atomic<bool> stop_{false};
  std::atomic<long> bg_iters_{0};
  std::string bg_error_;  // written by the background thread before it ends
};

void InterferenceCpu::background() {
  // One core: this thread's OpenMP team is itself (gemm_xwT's parallelism is the caller's team;
  // OpenBLAS is single-threaded everywhere, kernels/frontier/recompute.hpp).
  omp_set_num_threads(1);
  try {
    if (bg_kind_ == "recompute") {
      XState x;
      x_setup_host(x, m_, 128, 1, 16, false);
      while (!stop_) {
        x_run_cpu(x);
        ++bg_iters_;
      }
    } else if (bg_kind_ == "copy") {
      const std::size_t pool = std::size_t(128) << 20, page = std::size_t(512) << 10;
      std::vector<unsigned char> a(pool, 1), b(pool, 2);
      for (std::size_t off = 0; !stop_; off = (off + page) % pool) {
        std::memcpy(b.data() + off, a.data() + off, page);
        ++bg_iters_;
      }
    } else {
      fr::DirectFile f(dir_, std::size_t(64) << 20, kSeed + 63);
      const std::size_t page = std::size_t(512) << 10;
      void* buf = std::aligned_alloc(fr::kDirectAlign, page);
      for (std::size_t off = 0; !stop_; off = (off + page) % f.bytes()) {
        f.read(off, page, buf);
        ++bg_iters_;
      }
      std::free(buf);
    }
  } catch (const std::exception& e) {
    bg_error_ = e.what();
  }
}

// Head 0 of the decode output against an fp64 softmax over the same bf16 K/V.
void InterferenceCpu::verify(Backend& be) {
  run(be);
  const int D = m_.head_dim, Hkv = m_.n_kv_heads;
  std::vector<double> sc(N_), o(D, 0.0);
  double mx = -1e300, sum = 0;
  for (int n = 0; n < N_; ++n) {
    double d = 0;
    for (int i = 0; i < D; ++i) d += double(q_[i]) * fr::bf16_to_f32(k_[std::size_t(n) * Hkv * D + i]);
    sc[n] = d / std::sqrt(double(D));
    mx = std::max(mx, sc[n]);
  }
  for (auto& x : sc) {
    x = std::exp(x - mx);
    sum += x;
  }
  for (int n = 0; n < N_; ++n)
    for (int i = 0; i < D; ++i) o[i] += sc[n] / sum * fr::bf16_to_f32(v_[std::size_t(n) * Hkv * D + i]);
  for (int i = 0; i < D; ++i)
    if (std::fabs(o[i] - out_[i]) > 1e-3 * (std::fabs(o[i]) + 0.05))
      throw kvf::VerifyError("decode attention dim " + i2s(i) + ": got " + str(out_[i]) + " ref " + str(o[i]));
}

#if defined(KVF_HAVE_CUDA)
namespace ka = kvf::access;

// The decode step: dense selection (entries of 16 tokens), bf16 HND K/V of one sequence, as in the
// idleness study's decode layer.
class InterferenceGpu final : public Case {
 public:
  InterferenceGpu(const md::ModelShape& m, int N, std::string background)
      : m_(m), N_(N), bg_kind_(std::move(background)) {}
  void setup(Backend& be) override;
  void before_sample(Backend&) override;
  void run(Backend& be) override { decode_op(kvf::cuda_stream(be)); }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override;
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
    return "background ops queued per sample: " + i2s(reps_) + "; background drained before the decode ended in " +
           i2s(drained_) + " of " + i2s(samples_ - 1) + " executions, warm-up included (0 expected)";
  }
  void teardown(Backend&) override {
    side_.reset();  // drains the background before its buffers go
    for (BufferHandle* b : {&q_, &k_, &v_, &idx_, &ws_, &out_, &src_, &dst_}) b->reset();
    x_ = XState{};
    reps_ = 1;
    samples_ = drained_ = 0;
  }

 private:
  void decode_op(cudaStream_t st) {
    ka::gpu::attention(dims_, q_->ptr, k_->ptr, v_->ptr, sel_.geom, idx_->as<std::uint32_t>(), plan_,
                       ws_->as<float>(), out_->as<float>(), st);
  }
  void bg_op(cudaStream_t st) {
    if (bg_kind_ == "recompute") x_run_gpu(x_, st);
    else KVF_CUDA_CHECK(cudaMemcpyAsync(dst_->ptr, src_->ptr, src_->bytes, cudaMemcpyHostToDevice, st));
  }
  void setup_decode(Backend& be);
  int background_reps(cudaStream_t st);

  md::ModelShape m_;
  int N_;
  std::string bg_kind_;
  BufferHandle q_, k_, v_, idx_, ws_, out_, src_, dst_;
  ka::AttnShape sh_;
  ka::Selection sel_;
  ka::gpu::AttnDims dims_{};
  ka::gpu::AttnPlan plan_{};
  XState x_;
  std::unique_ptr<SideStream> side_;  // the background's stream
  int reps_ = 1;
  long samples_ = 0, drained_ = 0;
};

void InterferenceGpu::setup_decode(Backend& be) {
  sh_.batch = 1;
  sh_.hq = std::uint32_t(m_.n_heads);
  sh_.hkv = std::uint32_t(m_.n_kv_heads);
  sh_.d = std::uint32_t(m_.head_dim);
  sh_.ctx = std::uint32_t(N_);
  sh_.dtype = ka::DType::bf16;
  sh_.layout = ka::Layout::HND;
  ka::validate_shape(sh_);
  sel_ = ka::select_dense(sh_, 16);
  dims_ = {1u, sh_.hq, sh_.hkv, sh_.d, sh_.ctx, ka::DType::bf16, ka::Layout::HND, sh_.scale()};
  const std::size_t kv = std::size_t(N_) * sh_.hkv * sh_.d * 2;
  q_ = BufferHandle(be, std::size_t(sh_.hq) * sh_.d * 2, MemKind::device);
  k_ = BufferHandle(be, kv, MemKind::device);
  v_ = BufferHandle(be, kv, MemKind::device);
  idx_ = BufferHandle(be, sel_.idx.size() * 4, MemKind::device);
  // On the harness stream (non-blocking: a legacy-stream copy would not be ordered with it), then synchronized.
  KVF_CUDA_CHECK(cudaMemcpyAsync(idx_->ptr, sel_.idx.data(), sel_.idx.size() * 4, cudaMemcpyHostToDevice,
                                 kvf::cuda_stream(be)));
  KVF_CUDA_CHECK(cudaStreamSynchronize(kvf::cuda_stream(be)));
  plan_ = ka::gpu::plan_attention(dims_, sel_.geom, kvf::cuda_props(be).multiProcessorCount);
  ws_ = BufferHandle(be, ka::gpu::attention_workspace_floats(dims_, plan_) * 4, MemKind::device);
  out_ = BufferHandle(be, std::size_t(sh_.hq) * sh_.d * 4, MemKind::device);
  ka::gpu::fill_qkv(dims_, q_->ptr, k_->ptr, v_->ptr, kSeed + 64, kvf::cuda_stream(be));
  decode_op(kvf::cuda_stream(be));  // loads the kernels before anything is timed
  KVF_CUDA_CHECK(cudaStreamSynchronize(kvf::cuda_stream(be)));
}

void InterferenceGpu::setup(Backend& be) {
  setup_decode(be);
  side_ = SideStream::make();
  if (bg_kind_ == "none") return;
  if (bg_kind_ == "recompute") {
    x_setup_host(x_, m_, 128, 1, 16, true);
    x_setup_gpu(x_, be);
  } else {
    src_ = BufferHandle(be, std::size_t(512) << 10, MemKind::pinned_host);
    dst_ = BufferHandle(be, std::size_t(512) << 10, MemKind::device);
    be.fill(src_.get(), kSeed + 65);
  }
  reps_ = background_reps(kvf::cuda_stream(be));
}

// Sizes the background so it outlasts a decode step several times over.
int InterferenceGpu::background_reps(cudaStream_t st) {
  cudaEvent_t a, b;
  KVF_CUDA_CHECK(cudaEventCreate(&a));
  KVF_CUDA_CHECK(cudaEventCreate(&b));
  float t_dec = 0, t_bg = 0;
  for (int i = 0; i < 2; ++i) {  // the second round is warm
    KVF_CUDA_CHECK(cudaEventRecord(a, st));
    decode_op(st);
    KVF_CUDA_CHECK(cudaEventRecord(b, st));
    KVF_CUDA_CHECK(cudaEventSynchronize(b));
    KVF_CUDA_CHECK(cudaEventElapsedTime(&t_dec, a, b));
    KVF_CUDA_CHECK(cudaEventRecord(a, st));
    bg_op(st);
    KVF_CUDA_CHECK(cudaEventRecord(b, st));
    KVF_CUDA_CHECK(cudaEventSynchronize(b));
    KVF_CUDA_CHECK(cudaEventElapsedTime(&t_bg, a, b));
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return std::min(2000, int(std::ceil((4 * t_dec + 1.0f) / std::max(t_bg, 1e-3f))) + 2);
}

// Background still queued when the next sample begins: it outlasted the decode step it was meant to run
// beside. Counted, so a drained background cannot pass for no interference.
void InterferenceGpu::before_sample(Backend&) {
  if (samples_ > 0 && bg_kind_ != "none") {
    const cudaError_t q = cudaStreamQuery(side_->s);
    if (q == cudaSuccess) ++drained_;
    else if (q != cudaErrorNotReady) kvf::cuda_check(q, "cudaStreamQuery(background)");
  }
  KVF_CUDA_CHECK(cudaStreamSynchronize(side_->s));
  ++samples_;
  if (bg_kind_ == "none") return;
  for (int i = 0; i < reps_; ++i) bg_op(side_->s);
}

// The decode attention against the access study's fp64 reference over the same values (filled on the host).
void InterferenceGpu::verify(Backend& be) {
  decode_op(kvf::cuda_stream(be));
  KVF_CUDA_CHECK(cudaStreamSynchronize(kvf::cuda_stream(be)));
  std::vector<float> got(std::size_t(sh_.hq) * sh_.d), ref(got.size());
  KVF_CUDA_CHECK(cudaMemcpy(got.data(), out_->ptr, got.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<std::uint16_t> hq(std::size_t(sh_.hq) * sh_.d), hk(std::size_t(sh_.ctx) * sh_.hkv * sh_.d), hv(hk.size());
  ka::fill_qkv(sh_, hq.data(), hk.data(), hv.data(), kSeed + 64);
  ka::attention_ref(sh_, hq.data(), hk.data(), hv.data(), sel_, ref.data());
  const double err = ka::attention_rel_error(got.data(), ref.data(), got.size());
  if (!(err <= ka::kAttnTolerance))
    throw kvf::VerifyError("GPU decode attention vs reference: relative error " + str(err) + " > " +
                           str(ka::kAttnTolerance));
}

// The split-KV kernel's shapes only (head dim 64/128, GQA group a power of two <= 16), and whole 16-token
// entries so the bytes and FLOPs below are what it reads.
std::string gpu_unsupported(const md::ModelShape& m, int N) {
  std::string why;
  if (N < 16 || N % 16) why = "decode tokens " + i2s(N) + ": the GPU decode step needs a positive multiple of 16";
  const int g = m.n_kv_heads > 0 ? m.n_heads / m.n_kv_heads : 0;
  if (m.head_dim != 64 && m.head_dim != 128) why = "head dim " + i2s(m.head_dim) + ": the decode kernel takes 64 or 128";
  else if (g < 1 || g > 16 || (g & (g - 1)) || m.n_heads % m.n_kv_heads)
    why = "GQA group " + i2s(m.n_heads) + "/" + i2s(m.n_kv_heads) + ": the decode kernel takes 1, 2, 4, 8 or 16";
  return why;
}
#endif

std::unique_ptr<Case> make_interference(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.model(p["model"]);
  const int N = int(p.integer("decode_tokens"));
  const std::string& background = p["background"];
  std::unique_ptr<Case> c;
  if (env.gpu) {
#if defined(KVF_HAVE_CUDA)
    if (const std::string why = gpu_unsupported(m, N); !why.empty()) return kvf::skipped_case("", {}, why);
    c = std::make_unique<InterferenceGpu>(m, N, background);
#endif
  } else {
    c = std::make_unique<InterferenceCpu>(m, N, background, env.file_dir);
  }
  const std::size_t kv_bytes = std::size_t(N) * m.kv_values_per_token() * 2;
  c->params = {{"tokens", "128"}, {"layers", "1"}};
  c->bytes = double(kv_bytes);
  c->flops = 4.0 * N * m.n_heads * m.head_dim;
  c->ceiling = kvf::CeilingRef{"frontier", {{"arm", "interference"}, {"background", "none"}, {"decode_tokens", i2s(N)}}, "gbps"};
  c->note = std::string(env.gpu ? "decode step = one layer's GQA attention over N tokens (the access study's split-KV "
                                  "kernel, bf16 HND, batch 1)"
                                : "decode step = one layer's GQA attention over N tokens on one thread") +
            "; background: " + background + "; pct_of_ceiling = 100 / slowdown against background none";
  c->est_seconds = est(double(kv_bytes) / (env.gpu ? 2e12 : 8e9), 0.5);
  return c;
}

}  // namespace

Arm interference_arm(const Env& env) {
  const md::ModelShape* m = env.first_gqa();
  // The first --prefix value, not a sweep of them.
  const int N = env.prefix.empty() ? (env.gpu ? 32768 : 16384) : env.prefix.front();
  return Arm{
      .name = "interference",
      .doc = "slowdown of a decode step beside a background recompute, page copy or file read",
      .axes = {arm_axis({"interference"}),
               {.name = "model", .doc = "the first GQA model of --models",
                .cpu = m ? std::vector<std::string>{m->name} : std::vector<std::string>{}},
               {.name = "decode_tokens", .doc = "decode step's tokens N: the first --prefix (default CPU 16384, GPU 32768)",
                .cpu = {i2s(N)}},
               {.name = "background", .doc = "none is the reference of the others", .cpu = {"none", "recompute", "copy", "file"},
                .gpu = {"none", "recompute", "copy"}}},
      .case_name = "interference/{model}/N{decode_tokens}/{background}",
      .make = make_interference};
}

}  // namespace kvf::frontier_study
