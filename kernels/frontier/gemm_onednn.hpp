// bf16 x bf16 -> fp32 GEMM on the CPU through oneDNN (Debian libdnnl-dev): the path CPU inference engines
// run their projections on. oneDNN picks its kernel for the ISA at run time (AMX-BF16 on Sapphire Rapids and
// newer Xeons, AVX-512-BF16 on Zen 4/5 and Cooper Lake, else an AVX-512/AVX2 kernel that converts), and
// says which: isa() records it beside every row that uses it. Its OpenMP team is the process's (libgomp).
//
//   OnednnGemm g(M, N, K, W);   // W[N][K] bf16, row-major: reordered once into oneDNN's blocked layout
//   g.run(X, Y);                // Y[M][N] (fp32) = X[M][K] (bf16) . W^T
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvf::frontier {

// Caller-owned memory a product packs its weights into, reused by the next product once the last is gone: a
// model's layers packed one after another then touch the same pages. Fresh pages fault once each, and that
// cost more than the packing itself (a 2-vCPU Zen 5 VM: 224 MB took 0.98 s to zero and 0.76 s to pack into new
// pages). From kvf::host_alloc: 2 MiB aligned, huge pages where the OS grants them (a fault per 2 MiB, not per
// 4 KiB); grows when a product needs more; one live product per arena.
class PackArena {
 public:
  PackArena() = default;
  PackArena(const PackArena&) = delete;
  PackArena& operator=(const PackArena&) = delete;
  ~PackArena();
  void* reserve(std::size_t bytes);

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

class OnednnGemm {
 public:
  // Plans the product and packs W (copied: the caller's W may go). Throws std::invalid_argument for a
  // dimension < 1, std::runtime_error when oneDNN has no implementation.
  OnednnGemm(int M, int N, int K, const std::uint16_t* W, PackArena* arena = nullptr);  // arena: where W is packed
  ~OnednnGemm();
  OnednnGemm(const OnednnGemm&) = delete;
  OnednnGemm& operator=(const OnednnGemm&) = delete;

  void run(const std::uint16_t* X, float* Y) const;
  // oneDNN's name of the kernel it dispatched, e.g. "brg:avx512_core_amx_bf16".
  const std::string& impl() const { return impl_; }
  int M() const { return M_; }
  int N() const { return N_; }
  int K() const { return K_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  int M_, N_, K_;
  std::string impl_;
};

// Whether this oneDNN has a bf16 matmul for this CPU (and ISA cap): Debian's 2.6 has none below AVX-512
// (avx2 hosts). *why gets oneDNN's refusal. The answer is taken once (the cap cannot change afterwards).
bool onednn_bf16_available(std::string* why = nullptr);

// The recompute arms' product: oneDNN's bf16 matmul where onednn_bf16_available(), else OpenBLAS sgemm on W
// widened to fp32 once and X widened per call (gemm_xwT), so every x86 and ARM host runs the arms; impl()
// says which ran.
class Bf16Gemm {
 public:
  // Not copyable: it owns its oneDNN product. arena: where oneDNN packs W (PackArena), else memory of its own.
  Bf16Gemm(int M, int N, int K, const std::uint16_t* W, PackArena* arena = nullptr);
  void run(const std::uint16_t* X, float* Y) const;
  const std::string& impl() const { return impl_; }
  std::string isa() const;  // onednn_isa(impl()), or "openblas_fp32"
  int M() const { return M_; }
  int N() const { return N_; }
  int K() const { return K_; }

 private:
  int M_, N_, K_;
  std::unique_ptr<OnednnGemm> onednn_;
  std::vector<float> wf_;
  mutable std::vector<float> xf_;
  std::string impl_;
};

// A product that owns its operands, for the ceilings: X and W bf16 uniform in [-1, 1) from fixed seeds,
// W packed at construction, Y fp32. Two studies state their CPU compute ceiling with it.
class OnednnGemmProblem {
 public:
  OnednnGemmProblem(int M, int N, int K);
  void run() { gemm_->run(x_.data(), y_.data()); }
  const OnednnGemm& gemm() const { return *gemm_; }

 private:
  std::vector<std::uint16_t> x_;
  std::vector<float> y_;
  std::unique_ptr<OnednnGemm> gemm_;
};

// The ISA family of an oneDNN implementation name, for a parameter column: "amx_bf16", "avx512_bf16",
// "avx512", "avx2", or the name itself when none of these is in it.
std::string onednn_isa(const std::string& impl);
// Caps the ISA oneDNN dispatches to (dnnl_set_max_cpu_isa), so one machine can compare its kernels: AMX
// against AVX-512-BF16 against AVX2. Names as onednn_isa_names(): "all" lifts the cap. Must come before the
// first product is planned in the process. std::invalid_argument for another name, std::runtime_error when
// oneDNN refuses (too late, or built without the feature).
void set_onednn_max_isa(const std::string& name);
const std::vector<std::string>& onednn_isa_names();  // all, avx2, avx512_core, ..., avx512_core_amx
// oneDNN's version, "2.6.3".
std::string onednn_version();

// C[M][N] = alpha A[M][K] op(B) in fp32 through oneDNN's matmul (row-major with leading dimensions; op(B) = B^T for
// B[N][K] when trans_b, else B[K][N]): cblas_sgemm's row-major NoTrans/Trans cases with beta 0. Inside an OpenMP
// parallel region it runs on the calling thread. The primitive is made per call (oneDNN's primitive cache makes a
// repeated shape cheap). Why not OpenBLAS: for the prefill attention's shapes (256 queries over 16K keys, head dim
// 128, one thread) Debian's OpenBLAS 0.3.21 runs its Haswell kernel at 83-86 GFLOP/s on a Zen 5 core where this runs
// 127-153. std::runtime_error when oneDNN refuses the shape.
void onednn_sgemm(bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                  float* C, int ldc);

}  // namespace kvf::frontier
