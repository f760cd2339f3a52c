// The two ceilings every idleness figure is stated against, measured first in the same run: a GEMM (the
// compute ceiling) and a large read (the memory ceiling). They always run; --arms does not select them.
#include <cstring>

#include "gemm_onednn.hpp"
#include "idleness.hpp"
#include "kvf/host_memory.hpp"
#include "recompute.hpp"
#include "stream.hpp"

#if defined(KVF_HAVE_CUDA)
#include "decode_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::idleness {
namespace {

// The oneDNN bf16 rows; the others (gemm_lib=openblas_fp32, or none on the GPU) are OpenBLAS fp32 or cuBLASLt.
bool onednn_bf16(const kvf::Point& p) { return p.has("gemm_lib") && p["gemm_lib"] == "onednn_bf16"; }

class GemmCeilingCpu final : public kvf::Case {
 public:
  GemmCeilingCpu(int m, int n, int k) : m_(m), n_(n), k_(k) {}
  void setup(kvf::Backend&) override {
    a_.resize(std::size_t(m_) * k_);
    b_.resize(std::size_t(n_) * k_);
    y_.resize(std::size_t(m_) * n_);
    fr::fill_f32_uniform(a_.data(), a_.size(), 1, 1.f);
    fr::fill_f32_uniform(b_.data(), b_.size(), 2, 1.f);
  }
  void run(kvf::Backend&) override { fr::gemm_xwT(a_.data(), b_.data(), y_.data(), m_, n_, k_); }
  void teardown(kvf::Backend&) override { a_ = b_ = y_ = {}; }

 private:
  int m_, n_, k_;
  std::vector<float> a_, b_, y_;
};

// oneDNN bf16 matmul, weights packed once: the kernel CPU inference engines run (AMX-BF16 or AVX-512-BF16
// where the CPU has them), so idleness on the CPU is stated against the best this CPU offers.
class GemmCeilingOnednn final : public kvf::Case {
 public:
  GemmCeilingOnednn(int m, int n, int k) : m_(m), n_(n), k_(k) {}
  void setup(kvf::Backend&) override { g_ = std::make_unique<fr::OnednnGemmProblem>(m_, n_, k_); }
  void run(kvf::Backend&) override { g_->run(); }
  std::string after_measure(kvf::Backend&, const kvf::Summary&, const std::string&) override {
    return "kernel " + g_->gemm().impl() + " (ISA " + fr::onednn_isa(g_->gemm().impl()) + ")";
  }
  void teardown(kvf::Backend&) override { g_.reset(); }

 private:
  int m_, n_, k_;
  std::unique_ptr<fr::OnednnGemmProblem> g_;
};

class ReadCeilingCpu final : public kvf::Case {
 public:
  using ReadFn = std::uint64_t (*)(const void*, std::size_t);
  ReadCeilingCpu(std::size_t bytes, ReadFn read) : bytes_(bytes), read_(read) {}
  void setup(kvf::Backend&) override {
    p_ = kvf::host_alloc(bytes_, true);
    std::memset(p_, 1, bytes_);
  }
  void run(kvf::Backend&) override {
    sink_ ^= read_(p_, bytes_);
  }
  void teardown(kvf::Backend&) override {
    if (p_) kvf::host_free(p_, bytes_);
    p_ = nullptr;
  }

 private:
  std::size_t bytes_;
  ReadFn read_;
  void* p_ = nullptr;
  std::uint64_t sink_ = 0;
};

#if defined(KVF_HAVE_CUDA)
class GemmCeilingGpu final : public kvf::Case {
 public:
  explicit GemmCeilingGpu(int n) : n_(n) {}
  void setup(kvf::Backend& be) override { g_ = std::make_unique<dc::gpu::GemmCeiling>(n_, kvf::cuda_stream(be)); }
  void run(kvf::Backend& be) override { g_->run(kvf::cuda_stream(be)); }
  void teardown(kvf::Backend&) override { g_.reset(); }

 private:
  int n_;
  std::unique_ptr<dc::gpu::GemmCeiling> g_;
};

class ReadCeilingGpu final : public kvf::Case {
 public:
  explicit ReadCeilingGpu(std::size_t bytes) : bytes_(bytes) {}
  void setup(kvf::Backend& be) override { r_ = std::make_unique<dc::gpu::ReadCeiling>(bytes_, kvf::cuda_stream(be)); }
  void run(kvf::Backend& be) override { r_->run(kvf::cuda_stream(be)); }
  void teardown(kvf::Backend&) override { r_.reset(); }

 private:
  std::size_t bytes_;
  std::unique_ptr<dc::gpu::ReadCeiling> r_;
};
#endif

std::unique_ptr<kvf::Case> make_gemm_ceiling(const kvf::Point& p, Env& env) {
  const int m = int(p.integer("gemm_m"));
  if (env.gpu) {
#if defined(KVF_HAVE_CUDA)
    auto c = std::make_unique<GemmCeilingGpu>(m);
    c->flops = 2.0 * m * m * m;
    c->note = "cuBLASLt bf16 x bf16 -> fp32 (TN), square: tensor-pipe ceiling of this run";
    c->est_seconds = est(env, c->flops / 600e12, 1.0);
    c->ceiling = gemm_ceiling_ref();
    return c;
#endif
  }
  const int n = int(p.integer("gemm_n")), k = int(p.integer("gemm_k"));
  std::unique_ptr<kvf::Case> c;
  if (onednn_bf16(p)) {
    std::string why;
    if (!fr::onednn_bf16_available(&why))
      return kvf::skipped_case("", {}, "this oneDNN has no bf16 matmul for this CPU and ISA cap (" + why + ")");
    c = std::make_unique<GemmCeilingOnednn>(m, n, k);
    c->note = "oneDNN " + fr::onednn_version() + " matmul bf16 x bf16 -> fp32, weights packed once, all cores; the "
              "CPU compute ceiling is the best gemm_ceiling row";
  } else {
    c = std::make_unique<GemmCeilingCpu>(m, n, k);
    c->note = "OpenBLAS cblas_sgemm fp32, all cores (OpenMP splits N, one-thread OpenBLAS per slice, as in the "
              "decode twin): the ceiling of the fp32 twins (decode, prefill); the CPU's compute ceiling is the best "
              "gemm_ceiling row";
  }
  c->flops = 2.0 * m * n * k;
  c->ceiling = gemm_ceiling_ref();
  c->est_seconds = est(env, c->flops / 180e9, 0.1);
  c->cold = false;  // compute bound: cold and hot are the same figure
  return c;
}

std::unique_ptr<kvf::Case> make_read_ceiling(const kvf::Point& p, Env& env) {
  const auto bytes = std::size_t(p.integer("array_bytes"));
  if (env.gpu) {
#if defined(KVF_HAVE_CUDA)
    auto c = std::make_unique<ReadCeilingGpu>(bytes);
    c->bytes = double(bytes);
    c->ceiling = read_ceiling_ref();
    c->note = "device read with 16-byte loads (frontier read_xor): the DRAM ceiling of this run";
    c->est_seconds = est(env, double(bytes) / 3e12, 0.5);
    return c;
#endif
  }
  auto c = std::make_unique<ReadCeilingCpu>(bytes, kvf::stream::cpu_read_kernel(p["kernel"]).read);
  c->bytes = double(bytes);
  c->ceiling = read_ceiling_ref();
  c->note = "all-core read (the stream study's kernels); the read ceiling is the best of " +
            kvf::stream::cpu_read_kernel_names();
  c->est_seconds = est(env, double(bytes) / 20e9, 0.3, 1);
  c->hot = false;  // larger than the LLC either way; cold is the honest one
  return c;
}

}  // namespace

Arm gemm_ceiling_arm() {
  return Arm{
      .name = "gemm_ceiling",
      .doc = "compute ceiling: OpenBLAS sgemm fp32 and oneDNN bf16 matmul on all cores, the better (CPU); cuBLASLt "
             "bf16 square GEMM (GPU)",
      .axes = {arm_axis("gemm_ceiling", true),
               {.name = "gemm_m", .doc = "rows of the activations", .cpu = {"2048", "256"}, .gpu = {"8192"},
                .quick = {"1024"}, .quick_gpu = {"8192"}},
               {.name = "gemm_n", .doc = "rows of the weights (CPU only)", .cpu = {"2048", "8192"}, .quick = {"1024"}},
               {.name = "gemm_k", .doc = "inner dimension (CPU only)", .cpu = {"2048", "4096"}, .quick = {"1024"}},
               {.name = "gemm_lib", .doc = "CPU: openblas_fp32 (the fp32 twins' ceiling; not in the case name, as in "
                "runs before the column) and onednn_bf16 (the oneDNN bf16 rows; kernel and ISA in the note)",
                .cpu = {"openblas_fp32", "onednn_bf16"}, .quick = {"openblas_fp32", "onednn_bf16"}}},
      // Two shapes on the CPU, square and the decode/prefill shape (M activations against a wide weight
      // matrix), not their product: the ceiling is the better row. On the GPU one square GEMM named by its
      // side, --quick or not.
      .default_grid =
          [](const kvf::Target& t, const Env&) {
            // Each CPU shape twice: OpenBLAS fp32 (named as the rows of earlier runs) and oneDNN bf16.
            kvf::Grid g;
            const auto shape = [&g](const char* m, const char* n, const char* k) {
              kvf::Product prod{{{"arm", {"gemm_ceiling"}}, {"gemm_m", {m}}, {"gemm_n", {n}}, {"gemm_k", {k}}}};
              for (const char* lib : {"openblas_fp32", "onednn_bf16"}) {
                g.push_back(prod);
                g.back().lists.push_back({"gemm_lib", {lib}});
              }
            };
            if (t.gpu) return kvf::Grid{kvf::Product{{{"arm", {"gemm_ceiling"}}, {"gemm_m", {"8192"}}}}};
            if (t.quick) {
              shape("1024", "1024", "1024");
            } else {
              shape("2048", "2048", "2048");
              shape("256", "8192", "4096");
            }
            return g;
          },
      .case_name_fn =
          [](const kvf::Point& p) {
            const bool square = !p.has("gemm_n") || (p["gemm_m"] == p["gemm_n"] && p["gemm_n"] == p["gemm_k"]);
            return "gemm_ceiling/" + p["gemm_m"] + (square ? "" : "x" + p["gemm_n"] + "x" + p["gemm_k"]) +
                   (onednn_bf16(p) ? "/onednn_bf16" : "");
          },
      .make = make_gemm_ceiling};
}

Arm read_ceiling_arm() {
  std::vector<std::string> names;
  for (const auto& k : kvf::stream::kCpuReadKernels) names.push_back(k.name);
  const kvf::Axis kernel{.name = "kernel", .doc = "CPU read kernel (CPU only, the stream study's): " +
                         kvf::stream::cpu_read_kernel_names(), .cpu = names, .quick = names};
  const kvf::Axis bytes{.name = "array_bytes", .doc = "bytes read, far above the LLC/L2",
                        .cpu = {i2s(512LL << 20)}, .gpu = {i2s(4LL << 30)}, .quick = {i2s(128LL << 20)},
                        .quick_gpu = {i2s(4LL << 30)}};
  return Arm{
      .name = "read_ceiling",
      .doc = "memory ceiling: all-core read, each of the stream study's read kernels (CPU); 16-byte-load device "
             "read (GPU)",
      .axes = {arm_axis("read_ceiling", true), kernel, bytes},
      // One device read on the GPU: no kernel column there.
      .default_grid =
          [kernel, bytes](const kvf::Target& t, const Env&) {
            kvf::Product prod{{{"arm", {"read_ceiling"}}}};
            if (!t.gpu) prod.lists.push_back({"kernel", kernel.defaults(t)});
            prod.lists.push_back({"array_bytes", bytes.defaults(t)});
            return kvf::Grid{prod};
          },
      .case_name_fn =
          [](const kvf::Point& p) {
            const auto n = p.integer("array_bytes");
            if (!p.has("kernel")) return "read_ceiling/" + i2s(n >> 30) + "GiB";
            return "read_ceiling/" + p["kernel"] + "/" + i2s(n >> 20) + "MiB";
          },
      .make = make_read_ceiling};
}

}  // namespace kvf::idleness
