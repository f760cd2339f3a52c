// The GEMM ceiling: a square GEMM in the form the recompute arms run theirs, measured first in the same
// run; every recompute arm states its TFLOP/s against it (pct_of_ceiling: the best row). On the CPU beside
// OpenBLAS fp32 it measures oneDNN's bf16 matmul, the kernel CPU inference engines run (AMX-BF16 or
// AVX-512-BF16 where the CPU has them): the row names the kernel oneDNN dispatched.
#include <omp.h>

#include <cstdio>
#include <optional>

#include "fma_peak.hpp"
#include "frontier.hpp"
#include "gemm_onednn.hpp"
#include "recompute.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/cuda_backend.hpp"
#include "recompute_gpu.hpp"
#endif

namespace kvf::frontier_study {
namespace {

namespace ka = kvf::access;

// CPU: OpenBLAS sgemm on its own pthread pool (own_threads), or through gemm_xwT on the OpenMP team the
// arms use (kernels/frontier/recompute.hpp, "BLAS threading"). On a loaded machine either can come out
// ahead, so the arms take the better row.
class GemmCeilingCpu final : public Case {
 public:
  GemmCeilingCpu(int n, bool own_threads) : n_(n), own_(own_threads) {}
  void setup(Backend&) override {
    const std::size_t nn = std::size_t(n_) * n_;
    buf_.resize(3 * nn);
    fr::fill_f32_uniform(buf_.data(), nn, 1, 1.f);
    fr::fill_f32_uniform(buf_.data() + nn, nn, 2, 1.f);
  }
  void run(Backend&) override {
    const std::size_t nn = std::size_t(n_) * n_;
    const float* a = buf_.data();
    if (own_) fr::gemm_xwT_blas_threads(a, a + nn, buf_.data() + 2 * nn, n_, n_, n_);
    else fr::gemm_xwT(a, a + nn, buf_.data() + 2 * nn, n_, n_, n_);
  }
  void teardown(Backend&) override { buf_ = {}; }
  // How near the hardware the ceiling is: the fp32 FMA issue rate of this CPU on every thread, measured once per
  // process (a BLAS sgemm reaches 0.8-0.9 of it on a quiet machine; far below, the rows stated against this
  // ceiling are stated against a slow GEMM, not the CPU).
  std::string after_measure(Backend&, const Summary& median, const std::string&) override {
    static std::optional<ka::FmaPeak> peak;
    if (!peak) peak = ka::cpu_fma_peak(omp_get_max_threads());
    if (peak->flops_per_s <= 0 || median.median <= 0) return {};
    const double rate = 2.0 * n_ * n_ * n_ / median.median;
    char text[200];
    std::snprintf(text, sizeof text, "fp32 FMA peak of this CPU in the same process %.1f GFLOP/s (%s, %d threads): "
                  "this row at %.2f of it", peak->flops_per_s / 1e9, peak->isa.c_str(), peak->threads,
                  rate / peak->flops_per_s);
    return text;
  }

 private:
  int n_;
  bool own_;
  std::vector<float> buf_;
};

// oneDNN bf16 x bf16 -> fp32, weights packed once (as an engine does at load), on the process's OpenMP team.
class GemmCeilingOnednn final : public Case {
 public:
  explicit GemmCeilingOnednn(int n) : n_(n) {}
  void setup(Backend&) override { g_ = std::make_unique<fr::OnednnGemmProblem>(n_, n_, n_); }
  void run(Backend&) override { g_->run(); }
  void teardown(Backend&) override { g_.reset(); }

 private:
  int n_;
  std::unique_ptr<fr::OnednnGemmProblem> g_;
};

#if defined(KVF_HAVE_CUDA)
class GemmCeilingGpu final : public Case {
 public:
  explicit GemmCeilingGpu(int n) : n_(n) {}
  void setup(Backend& be) override {
    std::vector<std::uint16_t> h(std::size_t(n_) * n_);
    fr::fill_bf16_uniform(h.data(), h.size(), 1, 1.f);
    da_ = upload(be, h.data(), h.size() * 2);
    db_ = upload(be, h.data(), h.size() * 2);
    dy_ = BufferHandle(be, std::size_t(n_) * n_ * 4, MemKind::device);
    g_ = std::make_unique<fr::gpu::LtGemm>();
    g_->plan(n_, n_, n_);
    run(be);  // loads the kernel before timing
    be.synchronize();
  }
  void run(Backend& be) override { g_->run(da_->ptr, db_->ptr, dy_->ptr, kvf::cuda_stream(be)); }
  void teardown(Backend&) override {
    g_.reset();
    da_.reset();
    db_.reset();
    dy_.reset();
  }

 private:
  int n_;
  BufferHandle da_, db_, dy_;
  std::unique_ptr<fr::gpu::LtGemm> g_;
};
#endif

std::unique_ptr<Case> make_gemm_ceiling(const kvf::Point& p, Env& env) {
  const int n = int(p.integer("gemm_m"));
  std::unique_ptr<Case> c;
  if (!env.gpu && p.has("gemm_lib")) {
    // The kernel oneDNN picks on this CPU (planning a primitive takes milliseconds). In the note, not a
    // parameter column: a case's identity (gate, golden lists) must not change with the machine.
    std::string why;
    if (!fr::onednn_bf16_available(&why))
      return kvf::skipped_case("", {}, "this oneDNN has no bf16 matmul for this CPU and ISA cap (" + why + ")");
    const std::uint16_t w1 = 0;
    const std::string impl = fr::OnednnGemm(1, 1, 1, &w1).impl();
    c = std::make_unique<GemmCeilingOnednn>(n);
    c->note = "oneDNN " + fr::onednn_version() + " matmul bf16 x bf16 -> fp32, square, weights packed once; kernel " +
              impl + " (ISA " + fr::onednn_isa(impl) + "); the CPU recompute arms are stated against the best " +
              "gemm_ceiling row";
    c->flops = 2.0 * n * n * n;
    c->est_seconds = est(env, c->flops / 180e9, 0.1);
  } else if (!env.gpu) {
    const bool own = p["blas_threading"] == "openblas_pthreads";
    c = std::make_unique<GemmCeilingCpu>(n, own);
    c->note = own ? "OpenBLAS cblas_sgemm, fp32, square, OpenBLAS's own threads"
                  : "OpenBLAS sgemm, fp32, square, through gemm_xwT like the arms (one-thread OpenBLAS per OpenMP "
                    "thread, N split)";
    c->note += "; the CPU recompute arms are stated against the better of the two rows";
    c->flops = 2.0 * n * n * n;
    c->est_seconds = est(env, c->flops / 180e9, 0.1);
  } else {
#if defined(KVF_HAVE_CUDA)
    c = std::make_unique<GemmCeilingGpu>(n);
    c->note = "cuBLASLt bf16 x bf16 -> fp32 (TN), square: the GPU recompute arms are stated against it";
    c->flops = 2.0 * n * n * n;
    c->est_seconds = est(env, c->flops / 600e12, 1.0);
#endif
  }
  c->ceiling = kGemmCeiling;
  return c;
}

}  // namespace

Arm gemm_ceiling_arm(const Env&) {
  const std::vector<std::string> cpu = {"2048"}, gpu = {"8192"}, quick = {"1024"};
  const auto size = [&](const char* name) {
    return kvf::Axis{.name = name, .doc = "square GEMM size", .cpu = cpu, .gpu = gpu, .quick = quick, .quick_gpu = gpu};
  };
  return Arm{
      .name = "gemm_ceiling",
      .doc = "the GEMM ceiling the recompute arms are stated against (always run, first)",
      .axes = {arm_axis({"gemm_ceiling"}), size("gemm_m"), size("gemm_n"), size("gemm_k"),
               {.name = "blas_threading", .doc = "CPU OpenBLAS fp32 rows: OpenBLAS's own threads, or the arms' OpenMP split",
                .cpu = {"openblas_pthreads", "openmp_split"}},
               {.name = "gemm_lib", .doc = "CPU: onednn_bf16, the oneDNN bf16 row (the kernel and ISA it dispatched in the note)",
                .cpu = {"onednn_bf16"}}},
      // The GPU has one GEMM library and no threading choice: no blas_threading column there.
      .default_grid =
          [=](const kvf::Target& t, const Env&) {
            const auto& n = t.gpu ? gpu : t.quick ? quick : cpu;
            kvf::Product p{{{"arm", {"gemm_ceiling"}}, {"gemm_m", n}, {"gemm_n", n}, {"gemm_k", n}}};
            if (t.gpu) return kvf::Grid{p};
            kvf::Product onednn = p;
            p.lists.push_back({"blas_threading", {"openblas_pthreads", "openmp_split"}});
            onednn.lists.push_back({"gemm_lib", {"onednn_bf16"}});
            return kvf::Grid{p, onednn};
          },
      .case_name_fn =
          [](const kvf::Point& p) {
            const bool split = p.has("blas_threading") && p["blas_threading"] == "openmp_split";
            if (p.has("gemm_lib")) return "gemm_ceiling/" + p["gemm_m"] + "/" + p["gemm_lib"];
            return "gemm_ceiling/" + p["gemm_m"] + (split ? "/openmp_split" : "");
          },
      .make = make_gemm_ceiling};
}

}  // namespace kvf::frontier_study
