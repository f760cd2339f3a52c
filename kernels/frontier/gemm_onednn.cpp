// oneDNN matmul (kernels/frontier/gemm_onednn.hpp). oneDNN 2.6 API: matmul::desc, then primitive_desc.
#include "gemm_onednn.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <stdexcept>

#include "kvf/host_memory.hpp"
#include "recompute.hpp"

namespace kvf::frontier {

struct OnednnGemm::State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::memory::desc x_md, y_md;
  dnnl::memory w_packed;
  dnnl::matmul prim;
};

PackArena::~PackArena() { host_free(p_, n_); }

void* PackArena::reserve(std::size_t bytes) {
  if (bytes <= n_) return p_;
  host_free(p_, n_);
  p_ = nullptr;
  n_ = 0;
  p_ = host_alloc(bytes, true);  // 2 MiB aligned; huge pages where the OS grants them
  n_ = bytes;
  return p_;
}

OnednnGemm::OnednnGemm(int M, int N, int K, const std::uint16_t* W, PackArena* arena)
    : s_(std::make_unique<State>()), M_(M), N_(N), K_(K) {
  if (M < 1 || N < 1 || K < 1)
    throw std::invalid_argument("OnednnGemm " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                                ": every dimension must be at least 1");
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  s_->x_md = dnnl::memory::desc({M, K}, dt::bf16, tag::ab);
  s_->y_md = dnnl::memory::desc({M, N}, dt::f32, tag::ab);
  // W[N][K] row-major is the K x N weights matrix in layout "ba"; `any` lets oneDNN choose the blocked
  // layout its kernel reads, and the weights are reordered into it once, as an engine does at load time.
  const dnnl::memory::desc w_any({K, N}, dt::bf16, tag::any), w_user({K, N}, dt::bf16, tag::ba);
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(s_->x_md, w_any, s_->y_md), s_->eng);
    impl_ = pd.impl_info_str();
    s_->prim = dnnl::matmul(pd);
    s_->w_packed = arena ? dnnl::memory(pd.weights_desc(), s_->eng, arena->reserve(pd.weights_desc().get_size()))
                         : dnnl::memory(pd.weights_desc(), s_->eng);
    dnnl::memory w_src(w_user, s_->eng, const_cast<std::uint16_t*>(W));
    dnnl::reorder(w_src, s_->w_packed).execute(s_->strm, w_src, s_->w_packed);
    s_->strm.wait();
  } catch (const dnnl::error& e) {
    throw std::runtime_error(std::string("oneDNN bf16 matmul: ") + e.what());
  }
}

OnednnGemm::~OnednnGemm() = default;

void OnednnGemm::run(const std::uint16_t* X, float* Y) const {
  dnnl::memory x(s_->x_md, s_->eng, const_cast<std::uint16_t*>(X)), y(s_->y_md, s_->eng, Y);
  s_->prim.execute(s_->strm, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, s_->w_packed}, {DNNL_ARG_DST, y}});
  s_->strm.wait();
}

OnednnGemmProblem::OnednnGemmProblem(int M, int N, int K) {
  if (M < 1 || N < 1 || K < 1)  // before the sizes below are computed from them
    throw std::invalid_argument("OnednnGemmProblem " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                std::to_string(K) + ": every dimension must be at least 1");
  std::vector<std::uint16_t> w(std::size_t(N) * K);
  fill_bf16_uniform(w.data(), w.size(), 2, 1.f);
  x_.resize(std::size_t(M) * K);
  fill_bf16_uniform(x_.data(), x_.size(), 1, 1.f);
  y_.resize(std::size_t(M) * N);
  gemm_ = std::make_unique<OnednnGemm>(M, N, K, w.data());
}

std::string onednn_isa(const std::string& impl) {
  if (impl.find("amx") != std::string::npos) return "amx_bf16";
  if (impl.find("avx512_core_bf16") != std::string::npos) return "avx512_bf16";
  if (impl.find("avx512") != std::string::npos) return "avx512";
  if (impl.find("avx2") != std::string::npos) return "avx2";
  return impl;
}

bool onednn_bf16_available(std::string* why) {
  static const std::string refusal = [] {
    try {
      const std::uint16_t w = 0;
      OnednnGemm probe(1, 1, 1, &w);
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  }();
  if (why) *why = refusal;
  return refusal.empty();
}

Bf16Gemm::Bf16Gemm(int M, int N, int K, const std::uint16_t* W, PackArena* arena) : M_(M), N_(N), K_(K) {
  std::string why;
  if (onednn_bf16_available(&why)) {
    onednn_ = std::make_unique<OnednnGemm>(M, N, K, W, arena);
    impl_ = onednn_->impl();
    return;
  }
  if (M < 1 || N < 1 || K < 1)
    throw std::invalid_argument("Bf16Gemm " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                                ": every dimension must be at least 1");
  wf_.resize(std::size_t(N) * K);
  bf16_to_f32(W, wf_.data(), wf_.size());
  xf_.resize(std::size_t(M) * K);
  impl_ = "OpenBLAS sgemm fp32 (" + why + ")";
}

void Bf16Gemm::run(const std::uint16_t* X, float* Y) const {
  if (onednn_) return onednn_->run(X, Y);
  bf16_to_f32(X, xf_.data(), xf_.size());
  gemm_xwT(xf_.data(), wf_.data(), Y, M_, N_, K_);
}

std::string Bf16Gemm::isa() const { return onednn_ ? onednn_isa(impl_) : "openblas_fp32"; }

namespace {
struct IsaName {
  const char* name;
  dnnl::cpu_isa isa;
};
// Ordered as oneDNN orders them (AVX2 < AVX512_CORE < ..._VNNI < ..._BF16 < ..._AMX).
constexpr IsaName kIsas[] = {{"all", dnnl::cpu_isa::all},
                             {"avx2", dnnl::cpu_isa::avx2},
                             {"avx512_core", dnnl::cpu_isa::avx512_core},
                             {"avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni},
                             {"avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16},
                             {"avx512_core_amx", dnnl::cpu_isa::avx512_core_amx}};
}  // namespace

const std::vector<std::string>& onednn_isa_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& i : kIsas) v.push_back(i.name);
    return v;
  }();
  return names;
}

void set_onednn_max_isa(const std::string& name) {
  for (const auto& i : kIsas)
    if (name == i.name) {
      const dnnl::status st = dnnl::set_max_cpu_isa(i.isa);
      if (st != dnnl::status::success)
        throw std::runtime_error("oneDNN refused the ISA cap " + name +
                                 (st == dnnl::status::unimplemented ? " (this build of oneDNN has no such control)"
                                                                    : " (set after its first product was planned)"));
      return;
    }
  std::string allowed;
  for (const auto& i : kIsas) allowed += std::string(allowed.empty() ? "" : ", ") + i.name;
  throw std::invalid_argument("oneDNN ISA '" + name + "': unknown; allowed " + allowed);
}

void onednn_sgemm(bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                  float* C, int ldc) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  thread_local dnnl::stream strm(eng);
  try {
    const dnnl::memory::desc a({M, K}, dt::f32, dims{lda, 1}), c({M, N}, dt::f32, dims{ldc, 1});
    const dnnl::memory::desc b({K, N}, dt::f32, trans_b ? dims{1, ldb} : dims{ldb, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, eng);
    dnnl::memory am(a, eng, const_cast<float*>(A)), bm(b, eng, const_cast<float*>(B)), cm(c, eng, C);
    dnnl::matmul(pd).execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    strm.wait();
  } catch (const dnnl::error& e) {
    throw std::runtime_error("oneDNN f32 matmul " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                             std::to_string(K) + ": " + e.what());
  }
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace kvf::frontier
