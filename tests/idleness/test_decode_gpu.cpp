// The GPU decode layer against the reference (same tolerance as the CPU twin); skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "decode.hpp"
#include "decode_gpu.hpp"
#include "recompute.hpp"

namespace dc = kvf::decode;
namespace fr = kvf::frontier;

namespace {
bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
}  // namespace

TEST(DecodeGpu, LayerMatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  kvf::models::ModelShape m;
  m.name = "test";
  m.hidden = 1024; m.n_heads = 8; m.n_kv_heads = 2; m.head_dim = 128; m.layers = 4; m.intermediate = 3584;
  m.qkv_bias = true;
  const auto w = fr::make_layer_weights(m, 3);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int B : {1, 5, 64}) {
    dc::gpu::DecodeGpu g(w, m, B, 2048, 1, 3, sms, s);
    std::vector<int> rows = {0, B - 1};
    const auto r = g.verify(w, rows, s);
    EXPECT_TRUE(r.ok()) << "B " << B << ": " << r.text();
    g.step(3, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaStreamDestroy(s);
}
