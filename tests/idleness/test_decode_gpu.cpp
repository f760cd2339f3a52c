// The GPU decode layer and prefill chunk against the reference (same tolerance as the CPU twin), and their graph
// against their eager path (the launch axis); skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "decode.hpp"
#include "decode_gpu.hpp"
#include "decode_math.hpp"
#include "prefill_attn_gpu.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/model_shapes.hpp"
#include "models.hpp"
#include "recompute.hpp"

namespace dc = kvf::decode;
namespace fr = kvf::frontier;

namespace {
bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// Head dim 128, GQA group 4, with bias: the decode tests' shape.
kvf::models::ModelShape decode_shape() {
  kvf::models::ModelShape m;
  m.name = "test";
  m.hidden = 1024; m.n_heads = 8; m.n_kv_heads = 2; m.head_dim = 128; m.layers = 4; m.intermediate = 3584;
  m.qkv_bias = true;
  return m;
}
int sm_count() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;
}
}  // namespace

TEST(DecodeGpu, LayerMatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const auto m = decode_shape();
  const auto w = fr::make_layer_weights(m, 3);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const int sms = sm_count();
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

// The GPU prefill chunk (causal attention, split-KV and merge, appended K/V; the tensor-core and the CUDA-core
// attention kernels) against the reference on the tiny shapes: Tiny-GQA (tiny_models.json: head dim 64, bias) and
// a head-dim-128 GQA-4 shape; SM counts that give many splits, a few, and none; prefix 0 and > 0; T not a multiple
// of the query tile.
TEST(PrefillGpu, LayerMatchesReference) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const auto all = kvf::models::load_models(std::string(KVF_IDLENESS_TEST_DIR) + "/tiny_models.json");
  kvf::models::ModelShape big = kvf::models::find_model(all, "Tiny-GQA");
  big.name = "test-128";
  big.hidden = 1024; big.n_heads = 8; big.n_kv_heads = 2; big.head_dim = 128; big.intermediate = 3584;
  // Group sizes at both ends of the tile layout: G = 1 (32 tokens per tile) and G = 16 (2 tokens per tile).
  kvf::models::ModelShape mha = big, g16 = big;
  mha.name = "test-mha"; mha.n_heads = 8; mha.n_kv_heads = 8;
  g16.name = "test-g16"; g16.n_heads = 16; g16.n_kv_heads = 1; g16.hidden = 2048;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  struct C { kvf::models::ModelShape m; int T, N, sms; };
  const std::vector<C> cases = {{kvf::models::find_model(all, "Tiny-GQA"), 37, 3000, 132},
                                {kvf::models::find_model(all, "Tiny-GQA"), 16, 0, 132},
                                {big, 300, 1024, 132},
                                {big, 1100, 1024, 132},
                                {big, 129, 4096, 1},
                                // T = 600 after no prefix on 132 SMs: two splits, the second empty for tile 0
                                {kvf::models::find_model(all, "Tiny-GQA"), 600, 0, 132},
                                {mha, 70, 500, 132},
                                {g16, 33, 2000, 132}};
  for (const bool mma : {true, false})
  for (const auto& c : cases) {
    const auto w = fr::make_layer_weights(c.m, 7);
    dc::gpu::PrefillGpu g(w, c.m, c.T, c.N, 7, c.sms, s, mma);
    const auto r = g.verify(w, dc::prefill_check_rows(c.T), s);
    EXPECT_TRUE(r.ok()) << g.attention_kernel() << ": " << c.m.name << " T " << c.T << " N " << c.N << " splits "
                        << g.attention_splits() << ": " << r.text();
    // The frontier arm's timed form: layer L computes only its K/V (its own GEMM on the K/V rows of Wqkv).
    const auto kv = g.verify_kv(w, dc::prefill_check_rows(c.T), s);
    EXPECT_TRUE(kv.ok()) << c.m.name << " T " << c.T << " N " << c.N << " K/V-only path: " << kv.text();
    g.step(3, s);
    g.step_kv(3, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  {
    // The GPU and the twin start from the same inputs: after one layer their h agree within the same tolerance.
    const auto& m = cases[0].m;
    const auto w = fr::make_layer_weights(m, 9);
    dc::gpu::PrefillGpu g(w, m, 40, 2048, 9, 132, s);
    auto twin = dc::make_prefill_state(m, 40, 2048, 9);
    const auto rc = dc::verify_prefill_cpu(w, m, twin, dc::prefill_check_rows(40));
    const auto rg = g.verify(w, dc::prefill_check_rows(40), s);
    EXPECT_TRUE(rc.ok()) << rc.text();
    EXPECT_TRUE(rg.ok()) << rg.text();
    EXPECT_NEAR(rc.h.rms_ref, rg.h.rms_ref, 1e-4 * rc.h.rms_ref) << "same h0 and prefix on both";
  }
  cudaStreamDestroy(s);
}

// The launch axis's graph rows: the decode step and the through-layers K/V step captured into one CUDA graph
// (kvf/launch_axis.hpp LaunchPath) give the eager path's outputs, and the graph holds the step's kernels.
TEST(DecodeGpu, GraphOfTheStepMatchesEager) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const auto m = decode_shape();
  const auto w = fr::make_layer_weights(m, 3);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int sms = sm_count();
  {
    dc::gpu::DecodeGpu g(w, m, 4, 2048, 2, 3, sms, s);
    kvf::study::LaunchPath path("graph");
    path.set([&](cudaStream_t st) { g.step(3, st); }, s, "the test decode step");
    EXPECT_NO_THROW(path.verify_graph(
        s, [&] { return kvf::study::Outputs{{"h", g.hidden(s)}}; }, [&] { g.poison_hidden(s); }));
    EXPECT_NE(path.note().find("kernel nodes"), std::string::npos) << path.note();
    EXPECT_EQ(path.note().find("graph: 0 kernel"), std::string::npos) << path.note();
  }
  {
    dc::gpu::PrefillGpu p(w, m, 48, 100, 4, sms, s);
    kvf::study::LaunchPath path("graph");
    path.set([&](cudaStream_t st) { p.step_kv(2, st); }, s, "the test through-layers step");
    EXPECT_NO_THROW(path.verify_graph(
        s, [&] { return kvf::study::Outputs{{"h", p.hidden(s)}, {"kv", p.appended_kv(s)}}; },
        [&] { p.poison_outputs(s); }));
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

// The two prefill attention kernels side by side at Llama-3.1-8B's attention shape (32 query heads, 8 kv heads, d 128),
// a 512-token chunk after 0, 8K and 32K resident tokens: their outputs against each other (within the layer's verify
// tolerance: the tensor-core kernel rounds P to bf16), and their times printed (median of 20 launches; causal FLOPs
// 4 T Hq D (N + (T + 1) / 2)). Prints, asserts no speed.
TEST(PrefillGpu, AttentionKernelsSideBySide) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const int T = 512, Hq = 32, Hkv = 8, D = 128, G = Hq / Hkv, sms = sm_count();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (const int N : {0, 8192, 32256}) {
    const int cap = N + T;
    std::vector<std::uint16_t> q(std::size_t(T) * Hq * D), kv(std::size_t(Hkv) * cap * D);
    fr::fill_bf16_uniform(q.data(), q.size(), 31, 2.0f);
    std::uint16_t *dq = nullptr, *dk = nullptr, *dv = nullptr, *dout[2] = {nullptr, nullptr};
    float* ws = nullptr;
    ASSERT_EQ(cudaMalloc(&dq, q.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dk, kv.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dv, kv.size() * 2), cudaSuccess);
    for (auto& o : dout) ASSERT_EQ(cudaMalloc(&o, q.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    fr::fill_bf16_uniform(kv.data(), kv.size(), 32, 2.0f);
    ASSERT_EQ(cudaMemcpy(dk, kv.data(), kv.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    fr::fill_bf16_uniform(kv.data(), kv.size(), 33, 1.0f);
    ASSERT_EQ(cudaMemcpy(dv, kv.data(), kv.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    const dc::elems::PfKernel kernels[2] = {dc::elems::PfKernel::cuda_core, dc::elems::PfKernel::mma};
    std::int64_t ws_floats = 0;
    for (const auto kk : kernels) {
      const auto plan = dc::elems::pf_plan(T, N, Hkv, G, sms, kk);
      ws_floats = std::max(ws_floats, dc::elems::pf_workspace_floats(plan, T, Hq, D));
    }
    if (ws_floats) {
      ASSERT_EQ(cudaMalloc(&ws, std::size_t(ws_floats) * 4), cudaSuccess);
    }
    const dc::gpu::PrefillAttnDims dims{T, N, cap, Hq, Hkv, D};
    double ms[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const auto plan = dc::elems::pf_plan(T, N, Hkv, G, sms, kernels[i]);
      auto launch = [&] { dc::gpu::prefill_attention(dims, plan, dq, dk, dv, ws, dout[i], s); };
      launch();
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << dc::gpu::prefill_attention_kernel_name(kernels[i]);
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      std::vector<float> t(20);
      for (float& x : t) {
        cudaEventRecord(a, s);
        launch();
        cudaEventRecord(b, s);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&x, a, b);
      }
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      std::nth_element(t.begin(), t.begin() + 10, t.end());
      ms[i] = t[10];
      const double flops = 4.0 * T * Hq * D * (N + (T + 1) / 2.0);
      std::printf("prefill attention T %d N %d: %s, splits %d: %.3f ms, %.1f TFLOP/s\n", T, N,
                  dc::gpu::prefill_attention_kernel_name(kernels[i]), plan.splits, ms[i],
                  flops / (ms[i] * 1e-3) / 1e12);
    }
    std::printf("prefill attention T %d N %d: tensor cores %.2fx the CUDA-core kernel\n", T, N, ms[0] / ms[1]);
    std::vector<std::uint16_t> o0(q.size()), o1(q.size());
    ASSERT_EQ(cudaMemcpy(o0.data(), dout[0], o0.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(o1.data(), dout[1], o1.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    // Both round the output to bf16 and the tensor-core kernel P too: their difference is held to the layer's rms
    // tolerance, and its largest to twice the max one (a wrong key, row or dim differs by O(rms)) plus one bf16 ulp
    // of the element: two fp32 results either side of a rounding boundary land one ulp apart, and at long contexts
    // the outputs are small beside their ulp (H200, N 32256: rms 0.0077, a 1-ulp difference 0.00049 at |o| ~0.07).
    double ss = 0, sd = 0, worst = 0;
    for (std::size_t i = 0; i < o0.size(); ++i) {
      const double a = fr::bf16_to_f32(o0[i]), b = fr::bf16_to_f32(o1[i]);
      ASSERT_TRUE(std::isfinite(b)) << "tensor-core output " << i;
      ss += a * a;
      sd += (a - b) * (a - b);
      const double big = std::max(std::fabs(a), std::fabs(b));
      const double ulp = big > 0 ? std::ldexp(1.0, std::ilogb(big) - 7) : 0.0;  // bf16: 8 significant bits
      worst = std::max(worst, std::fabs(a - b) - ulp);
    }
    const double rms = std::sqrt(ss / double(o0.size())), rms_diff = std::sqrt(sd / double(o0.size()));
    EXPECT_LE(rms_diff, dc::kVerifyRmsTol * rms) << "N " << N << ": rms difference " << rms_diff << ", rms " << rms;
    EXPECT_LE(worst, 2 * dc::kVerifyMaxTol * rms)
        << "N " << N << ": largest difference beyond one ulp " << worst << ", rms " << rms;
    for (auto* p : {dq, dk, dv, dout[0], dout[1]}) cudaFree(p);
    if (ws) cudaFree(ws);
  }
  cudaStreamDestroy(s);
}
