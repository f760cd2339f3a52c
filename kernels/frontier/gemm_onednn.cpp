// oneDNN matmul (kernels/frontier/gemm_onednn.hpp). oneDNN 2.6 API: matmul::desc, then primitive_desc.
#include "gemm_onednn.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <stdexcept>

#include "recompute.hpp"

namespace kvf::frontier {

struct OnednnGemm::State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::memory::desc x_md, y_md;
  dnnl::memory w_packed;
  dnnl::matmul prim;
};

OnednnGemm::OnednnGemm(int M, int N, int K, const std::uint16_t* W) : s_(std::make_unique<State>()), M_(M), N_(N), K_(K) {
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
    s_->w_packed = dnnl::memory(pd.weights_desc(), s_->eng);
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

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace kvf::frontier
