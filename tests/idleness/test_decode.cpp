// The CPU decode step against its reference (tolerance in kernels/decode/decode.hpp), the check's teeth, and the
// counts / idleness arithmetic the study reports.
#include "kvf/model_shapes.hpp"
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "decode.hpp"
#include "test_shapes.hpp"
#include "recompute.hpp"

namespace dc = kvf::decode;
namespace fr = kvf::frontier;
namespace md = kvf::models;

namespace {
md::ModelShape tiny(int hidden = 1024, int heads = 8, int kv = 2, int d = 128, int inter = 3584, bool bias = false) {
  return kvf::test::tiny_shape(hidden, heads, kv, d, inter, bias);
}
}  // namespace

// The full layer, several seeds and shapes (incl. biases, head dim 64, GQA groups 4 and 1): within tolerance.
TEST(DecodeCpu, LayerMatchesReference) {
  struct Sh { md::ModelShape m; int B, C; };
  const std::vector<Sh> shapes = {{tiny(), 3, 1024}, {tiny(512, 8, 2, 64, 1536, true), 2, 2048},
                                  {tiny(512, 4, 4, 128, 1024), 1, 1024}};
  for (const auto& sh : shapes)
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const auto w = fr::make_layer_weights(sh.m, seed);
      auto s = dc::make_decode_state(sh.m, sh.B, sh.C, 1, seed);
      std::vector<int> rows;
      for (int b = 0; b < sh.B; ++b) rows.push_back(b);
      const auto r = dc::verify_cpu(w, s, rows);
      EXPECT_TRUE(r.ok()) << "hidden " << sh.m.hidden << " seed " << seed << ": " << r.text();
    }
}

// Attention + O projection + residual alone (MLP zeroed: no bf16 rounding cascade): tight.
TEST(DecodeCpu, AttentionPathTight) {
  const auto m = tiny();
  auto w = fr::make_layer_weights(m, 5);
  std::fill(w.wd.begin(), w.wd.end(), 0.0f);
  auto s = dc::make_decode_state(m, 2, 1024, 1, 5);
  const auto r = dc::verify_cpu(w, s, {0, 1});
  EXPECT_LE(r.max_err_rel, dc::kVerifyPathTol) << r.text();
}

// The tolerance has teeth: attention dropped (V zeroed after the reference), the new token not written, a wrong
// RoPE position: each one fails the check.
TEST(DecodeCpu, VerifyCatchesWrongAttention) {
  const auto m = tiny();
  const auto w = fr::make_layer_weights(m, 9);
  auto s = dc::make_decode_state(m, 2, 1024, 1, 9);
  std::vector<std::vector<double>> refs(2);
  for (int b = 0; b < 2; ++b) dc::reference_layer_row(w, s, b, refs[b]);
  {
    auto bad = s;
    std::fill(bad.v[0].begin(), bad.v[0].end(), std::uint16_t(0));
    std::copy(bad.h0.begin(), bad.h0.end(), bad.h.begin());
    dc::decode_layer_cpu(w, bad, 0);
    // V zero except the new token's: the attention output collapses.
    EXPECT_FALSE(dc::compare_rows(bad.h, bad.H, {0, 1}, refs).ok());
  }
  {
    auto bad = s;
    bad.rope = dc::rope_row(m, 17);  // wrong position
    std::copy(bad.h0.begin(), bad.h0.end(), bad.h.begin());
    dc::decode_layer_cpu(w, bad, 0);
    EXPECT_FALSE(dc::compare_rows(bad.h, bad.H, {0, 1}, refs).ok());
  }
  {
    auto good = s;
    std::copy(good.h0.begin(), good.h0.end(), good.h.begin());
    dc::decode_layer_cpu(w, good, 0);
    EXPECT_TRUE(dc::compare_rows(good.h, good.H, {0, 1}, refs).ok());
  }
}

// The step over L layers uses copy l % copies and restarts from h0: two runs give the same h.
TEST(DecodeCpu, StepIsRepeatable) {
  const auto m = tiny(512, 8, 2, 64, 1024);
  const auto w = fr::make_layer_weights(m, 4);
  auto s = dc::make_decode_state(m, 2, 1024, 2, 4);
  dc::decode_step_cpu(w, s, 3);
  const auto h1 = s.h;
  dc::decode_step_cpu(w, s, 3);
  EXPECT_EQ(h1, s.h);
  for (float x : s.h) ASSERT_TRUE(std::isfinite(x));
}

// Prefill chunk runs and stays finite; recompute from X writes the page.
TEST(DecodeCpu, PrefillAndRecomputeRun) {
  const auto m = tiny(512, 8, 2, 64, 1024);
  const auto w = fr::make_layer_weights(m, 4);
  auto p = dc::make_prefill_state(m, 32, 1024, 4);
  dc::prefill_step_cpu(w, p, 2);
  for (float x : p.h) ASSERT_TRUE(std::isfinite(x));
  auto r = dc::make_recompute_state(m, 16, 2, 4);
  dc::recompute_cpu(r);
  std::size_t nz = 0;
  for (auto v : r.cache) nz += v != 0;
  EXPECT_GE(nz, std::size_t(32) * 2 * m.kv_dim() * 9 / 10);
}

TEST(DecodeMath, CountsForLlama8B) {
  const auto all = md::load_models(md::default_models_path());
  const auto& m = md::find_model(all, "Llama-3.1-8B");
  // 4096*(4096+2*1024) + 4096*4096 + 3*14336*4096 = 218,103,808 parameters per layer.
  EXPECT_DOUBLE_EQ(dc::layer_params(m), 218103808.0);
  EXPECT_DOUBLE_EQ(dc::decode_flops(m, 1, 1024, 1), 2.0 * 218103808.0 + 4.0 * 32 * 128 * 1024);
  EXPECT_DOUBLE_EQ(dc::kv_layer_bytes(m, 2, 1024), 2.0 * 1024 * 2 * 1024 * 2);
  EXPECT_DOUBLE_EQ(dc::decode_bytes(m, 2, 1024, 3, 2), 3 * (218103808.0 * 2 + 2.0 * 1024 * 2 * 1024 * 2));
  // H100 SXM: 989 TFLOP/s dense bf16, 3.35 TB/s: ridge 295 FLOP/B, bound batch 295 with bf16 weights.
  EXPECT_NEAR(dc::ridge_flop_per_byte(989e12, 3.35e12), 295.2, 0.1);
  EXPECT_NEAR(dc::bound_batch(989e12, 3.35e12, 2), 295.2, 0.1);
  EXPECT_EQ(dc::unsupported_reason(md::find_model(all, "DeepSeek-V3")).empty(), false);
  EXPECT_EQ(dc::unsupported_reason(m), "");
}

TEST(DecodeMath, CpuIdleness) {
  const auto x = dc::cpu_idleness(10e9, 4e9, 0.5, 100e9, 16e9);
  EXPECT_DOUBLE_EQ(x.achieved_gflops, 20);
  EXPECT_DOUBLE_EQ(x.idle_compute_pct, 80);
  EXPECT_DOUBLE_EQ(x.achieved_gbps, 8);
  EXPECT_DOUBLE_EQ(x.mem_use_pct, 50);
  const auto y = dc::cpu_idleness(1, 1, 1, 0, 0);
  EXPECT_TRUE(std::isnan(y.idle_compute_pct));
  EXPECT_TRUE(std::isnan(y.mem_use_pct));
}

TEST(DecodeMath, Validation) {
  EXPECT_THROW(dc::validate_batch(0), std::invalid_argument);
  EXPECT_THROW(dc::validate_batch(257), std::invalid_argument);
  EXPECT_NO_THROW(dc::validate_batch(256));
  EXPECT_THROW(dc::validate_context(1023), std::invalid_argument);
  EXPECT_THROW(dc::validate_context(1536), std::invalid_argument);  // not a multiple of 1024
  EXPECT_THROW(dc::validate_context(131072 + 1024), std::invalid_argument);
  EXPECT_NO_THROW(dc::validate_context(131072));
}

// The GPU kernels' per-element bodies (decode_math.hpp), run on the CPU over every index, write what the twin's
// loops write: q, the new K/V row at position C-1, the SwiGLU output, and the device fill matches the host fill.
#include "decode_math.hpp"
TEST(GpuElems, QkvPostSwigluFillMatchTwin) {
  const auto m = tiny(512, 8, 2, 64, 1024, true);
  const auto w = fr::make_layer_weights(m, 11);
  auto s = dc::make_decode_state(m, 3, 1024, 1, 11);
  std::copy(s.h0.begin(), s.h0.end(), s.h.begin());
  dc::decode_layer_cpu(w, s, 0);  // leaves qkv (GEMM output), qb, K/V at C-1, gu and act of the last layer
  const int B = s.B, Hq = s.Hq, Hkv = s.Hkv, D = s.D, C = s.C;
  std::vector<std::uint16_t> q(s.qb.size(), 0), k(s.k[0].size(), 0), v(s.v[0].size(), 0);
  const std::int64_t n = std::int64_t(B) * (Hq + 2 * Hkv) * (D / 2);
  for (std::int64_t i = 0; i < n; ++i)
    kvf::decode::elems::qkv_post(i, s.qkv.data(), w.bqkv.data(), Hq, Hkv, D, C, s.rope.cs.data(), q.data(), k.data(),
                                 v.data());
  EXPECT_EQ(q, s.qb);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hkv; ++h)
      for (int d = 0; d < D; ++d) {
        const std::size_t at = ((std::size_t(b) * Hkv + h) * C + (C - 1)) * D + d;
        ASSERT_EQ(k[at], s.k[0][at]) << b << " " << h << " " << d;
        ASSERT_EQ(v[at], s.v[0][at]) << b << " " << h << " " << d;
      }
  for (std::int64_t e = 0; e < std::int64_t(B) * s.I; ++e)
    ASSERT_EQ(fr::bf16_to_f32(kvf::decode::elems::swiglu(e, s.gu.data(), s.I)), s.act[e]) << e;
  std::vector<std::uint16_t> host(1000);
  fr::fill_bf16_uniform(host.data(), host.size(), 77, 1.0f);
  for (std::size_t i = 0; i < host.size(); ++i) ASSERT_EQ(kvf::decode::elems::fill_bf16(77, i, 1.0f), host[i]);
}

// Background pages while overlapped (the GPU co-run arm's accounting): checkpoints every `stride` pages, the last
// one possibly partial; only checkpoints inside the steps' window count.
TEST(OverlapRate, CountsPagesBetweenCheckpointsInsideTheWindow) {
  // 10 pages, stride 4: checkpoints after 4, 8 and 10 pages at 1, 2, 2.5 ms
  const std::vector<double> t = {1.0, 2.0, 2.5};
  auto r = dc::overlap_rate(t, 4, 10, 0.5, 3.0);
  EXPECT_EQ(r.pages, 6);  // 10 - 4: the last checkpoint is partial (2 pages)
  EXPECT_DOUBLE_EQ(r.ms, 1.5);
  EXPECT_DOUBLE_EQ(r.per_s(), 4000.0);
  r = dc::overlap_rate(t, 4, 10, 0.5, 2.2);  // the steps ended before the last checkpoint
  EXPECT_EQ(r.pages, 4);
  EXPECT_DOUBLE_EQ(r.ms, 1.0);
  r = dc::overlap_rate(t, 4, 10, 1.5, 2.2);  // one checkpoint inside: no rate
  EXPECT_EQ(r.pages, 0);
  EXPECT_DOUBLE_EQ(r.per_s(), 0.0);
  r = dc::overlap_rate(t, 4, 10, 3.0, 4.0);  // the background finished before the steps began
  EXPECT_EQ(r.pages, 0);
  EXPECT_EQ(dc::overlap_rate({}, 4, 10, 0, 1).pages, 0);
}
