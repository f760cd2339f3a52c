// On a machine with a GPU: the CUDA kernels and the cuBLASLt GEMM against the CPU twin (skipped
// without a usable GPU, e.g. on the CPU-only build machine).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>

#include "cublaslt_dl.hpp"
#include "recompute.hpp"
#include "recompute_gpu.hpp"

using namespace kvf::frontier;

namespace {
bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
template <class T>
T* dev(const std::vector<T>& h) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<std::size_t>(16, h.size() * sizeof(T))), cudaSuccess);
  if (!h.empty()) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return p;
}
template <class T>
std::vector<T> host(const T* p, std::size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}
}  // namespace

// Runs without a GPU: loading the library, binding its symbols and the host-only calls below need no driver.
TEST(FrontierGpu, CublasLtLoadsOnFirstUseWithEverySymbol) {
  const gpu::CublasLt* lt = nullptr;
  ASSERT_NO_THROW(lt = &gpu::cublaslt());
  EXPECT_NE(lt->path.find("libcublasLt.so."), std::string::npos) << lt->path;
  EXPECT_STREQ(lt->GetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_EQ(&gpu::cublaslt(), lt) << "loaded once";
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(lt->MatrixLayoutCreate(&layout, CUDA_R_16BF, 128, 64, 128), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt->MatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
}

TEST(FrontierGpu, RecomputeFromXMatchesTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const int rows = 64, hidden = 512, nkv = 2, D = 128, kvd = nkv * D;
  std::vector<std::uint16_t> x(std::size_t(rows) * hidden), w(std::size_t(2 * kvd) * hidden);
  fill_bf16_uniform(x.data(), x.size(), 1, 1.f);
  fill_bf16_uniform(w.data(), w.size(), 2, std::sqrt(3.f / hidden));
  kvf::models::ModelShape m;
  m.rope_theta = 500000;
  const auto f = rope_inv_freq(m, D);
  const auto cs = rope_table(f, 5000);
  std::vector<std::int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = 4096 + r;
  const auto slot = scattered_slots(rows, 8, 3);
  const std::size_t cn = std::size_t(8) * 2 * kBlockTokens * kvd;
  auto *dx = dev(x), *dw = dev(w);
  auto* dcs = dev(cs);
  auto* dpos = dev(pos);
  auto* dslot = dev(slot);
  auto* dcache = dev(std::vector<std::uint16_t>(cn, 0));
  float* dy = dev(std::vector<float>(std::size_t(rows) * 2 * kvd));
  gpu::LtGemm g;
  g.plan(rows, 2 * kvd, hidden);
  g.run(dx, dw, dy, nullptr);
  gpu::rope_write(dy, nullptr, rows, nkv, D, dcs, dpos, dslot, dcache, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto cache = host(dcache, cn);
  std::vector<int> rr;
  std::vector<std::vector<float>> xr;
  for (int r = 0; r < rows; ++r) {
    rr.push_back(r);
    std::vector<float> v(hidden);
    bf16_to_f32(x.data() + std::size_t(r) * hidden, v.data(), hidden);
    xr.push_back(v);
  }
  const auto st = verify_rows(rr, xr, w.data(), nullptr, hidden, {nkv, D}, f, pos.data(), slot.data(), cache.data());
  EXPECT_EQ(st.bad, 0) << st.first_bad;
  for (void* p : {(void*)dx, (void*)dw, (void*)dcs, (void*)dpos, (void*)dslot, (void*)dcache, (void*)dy}) cudaFree(p);
}

TEST(FrontierGpu, DequantKernelsMatchTheTwinBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const int rows = 7, hidden = 4096;
  std::vector<std::uint16_t> x(std::size_t(rows) * hidden);
  fill_bf16_uniform(x.data(), x.size(), 4, 2.f);
  for (int bits : {8, 4}) {
    std::vector<std::uint8_t> q(std::size_t(rows) * hidden * bits / 8);
    std::vector<float> sc(std::size_t(rows) * hidden / kQuantGroup);
    quantize_x(x.data(), rows, hidden, bits, q.data(), sc.data());
    std::vector<std::uint16_t> twin(x.size());
    dequant_x_bf16(q.data(), sc.data(), rows, hidden, bits, twin.data());
    auto* dq = dev(q);
    auto* dsc = dev(sc);
    auto* dx = dev(std::vector<std::uint16_t>(x.size()));
    gpu::dequant_x(dq, dsc, rows, hidden, bits, dx, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(host(dx, x.size()), twin) << "bits " << bits;
    cudaFree(dq);
    cudaFree(dsc);
    cudaFree(dx);
  }
}
