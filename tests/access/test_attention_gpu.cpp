// gpu::attention on a real device (skips without a usable GPU): the fused merge (one kernel, tickets in
// the workspace) and the merge-kernel path against the fp32 reference, repeated on one workspace zeroed
// once (a call that left a ticket dirty fails the next one), over split counts from 1 to
// kAttnMaxSplits, batch 1..8, bf16/fp16/fp8 and sparse token lists; both ways of loading K/V (regs, the
// smem ring) over every instantiation (heads per CTA 1, 2, 4, 8 and two head groups; d 64 and 128).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

#include "access.hpp"
#include "access_gpu.hpp"

using namespace kvf::access;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Buf {
  void* p = nullptr;
  explicit Buf(std::size_t n) { EXPECT_EQ(cudaMalloc(&p, n < 16 ? 16 : n), cudaSuccess); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// q_mul scales the 16-bit query after the fill (a sharper or a flatter softmax).
void check(const AttnShape& s, const Selection& sel, gpu::AttnMerge merge, const char* what,
           gpu::AttnLoads loads = gpu::AttnLoads::smem, float q_mul = 1.0f) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::vector<unsigned char> q(s.q_bytes()), k(s.kv_bytes()), v(s.kv_bytes());
  fill_qkv(s, q.data(), k.data(), v.data(), 5);
  if (q_mul != 1.0f) {
    auto* qh = reinterpret_cast<std::uint16_t*>(q.data());
    for (std::uint64_t i = 0; i < s.q_elems(); ++i)
      qh[i] = s.q_dtype() == DType::bf16 ? f32_to_bf16(bf16_to_f32(qh[i]) * q_mul) : f32_to_fp16(fp16_to_f32(qh[i]) * q_mul);
  }
  std::vector<float> ref(s.q_elems()), got(s.q_elems());
  attention_ref(s, q.data(), k.data(), v.data(), sel, ref.data());
  const gpu::AttnDims dims{s.batch, s.hq, s.hkv, s.d, s.ctx, s.dtype, s.layout, s.scale(), s.page};
  const gpu::AttnPlan plan = gpu::plan_attention(dims, sel.geom, sms, merge, 0, loads);
  Buf dq(q.size()), dk(k.size()), dv(v.size()), di(sel.idx.size() * 4), dout(got.size() * 4);
  const std::size_t wsb = gpu::attention_workspace_floats(dims, plan) * 4;
  Buf dws(wsb);
  ASSERT_EQ(cudaMemcpy(dq.p, q.data(), q.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dk.p, k.data(), k.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dv.p, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(di.p, sel.idx.data(), sel.idx.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dws.p, 0, wsb), cudaSuccess);
  for (int call = 0; call < 3; ++call) {
    ASSERT_EQ(cudaMemset(dout.p, 0xFF, got.size() * 4), cudaSuccess);  // NaN unless every output is written
    gpu::attention(dims, dq.p, dk.p, dv.p, sel.geom, static_cast<const std::uint32_t*>(di.p), plan,
                   static_cast<float*>(dws.p), static_cast<float*>(dout.p), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const double err = attention_rel_error(got.data(), ref.data(), got.size());
    EXPECT_LT(err, kAttnTolerance) << what << " call " << call << " splits " << plan.split.n_splits << " hq " << s.hq
                                   << " d " << s.d << " dtype " << to_string(s.dtype) << " loads "
                                   << (loads == gpu::AttnLoads::smem ? "smem" : loads == gpu::AttnLoads::mma ? "mma" : "regs");
  }
  std::printf("%s: %u splits, %u ring stages, %u CTAs/SM, rel err ok\n", what, plan.split.n_splits, plan.ring_stages,
              plan.ctas_per_sm);
}

bool fp8_ok() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor >= 89;  // e4m3 conversions need sm_89+
}

}  // namespace

TEST(AttentionGpu, FusedAndKernelMergeMatchReference) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const bool fp8 = fp8_ok();
  for (auto merge : {gpu::AttnMerge::fused, gpu::AttnMerge::kernel}) {
    for (std::uint32_t ctx : {256u, 1024u, 4096u, 65536u}) {
      for (std::uint32_t batch : {1u, 8u}) {
        for (DType t : {DType::bf16, DType::fp16, DType::fp8_e4m3}) {
          AttnShape s;
          s.batch = batch;
          s.ctx = ctx;
          s.dtype = t;
          s.page = 16;
          if (batch * ctx > 65536u * 2 || (t == DType::fp8_e4m3 && !fp8)) continue;
          const Selection dense = place(s, make_page_map(ctx, 16, 3), select_dense(s, 256 < ctx ? 256 : ctx));
          check(s, dense, merge, "dense");
          if (ctx >= 1024) {
            const std::uint32_t kb = sparse_blocks(ctx, 64, 0.125);
            const Selection tok = place(s, make_page_map(ctx, 16, 3),
                                        select_tokens_random(s, 64, kb, false, Scatter::uniform, 8, 9));
            check(s, tok, merge, "token");
          }
        }
      }
    }
  }
}

// The smem ring, the register pipeline and the tensor-core kernel against the reference, over every
// instantiation: heads per CTA 1, 2, 4, 8 (hq 8..64 over hkv 8) and 16 (two head groups), d 64 and 128,
// each type; contexts of a partial step, a few steps and many splits.
TEST(AttentionGpu, EveryLoadsVariantMatchesReferenceForEveryInstantiation) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  const bool fp8 = fp8_ok();
  for (std::uint32_t hq : {8u, 16u, 32u, 64u, 128u}) {
    for (std::uint32_t d : {64u, 128u}) {
      for (DType t : {DType::bf16, DType::fp16, DType::fp8_e4m3}) {
        if (t == DType::fp8_e4m3 && !fp8) continue;
        for (std::uint32_t ctx : {112u, 1024u, 16384u}) {
          AttnShape s;
          s.hq = hq;
          s.hkv = 8;
          s.d = d;
          s.ctx = ctx;
          s.dtype = t;
          s.page = 16;
          const Selection dense = place(s, make_page_map(ctx, 16, 3), select_dense(s, ctx < 256 ? 16 : 256));
          for (auto loads : {gpu::AttnLoads::regs, gpu::AttnLoads::smem, gpu::AttnLoads::mma}) {
            check(s, dense, gpu::AttnMerge::fused, "dense", loads);
            if (ctx >= 1024) {
              const std::uint32_t kb = sparse_blocks(ctx, 64, 0.125);
              const Selection tok = place(s, make_page_map(ctx, 16, 3),
                                          select_tokens_random(s, 64, kb, false, Scatter::uniform, 8, 9));
              check(s, tok, gpu::AttnMerge::kernel, "token", loads);
            }
          }
        }
      }
    }
  }
}

// fp8 K/V on tensor cores runs its own kernel (attn_mma_fp8_kernel: a 5-stage ring of e4m3 tiles), and its f16
// operands hold for a sharp softmax (q x 64) and a tiny query (q / 4096, scaled back up by its power of two).
TEST(AttentionGpu, MmaFp8RunsItsOwnKernelForSharpAndTinyQueries) {
  if (!have_gpu()) GTEST_SKIP() << "no usable GPU";
  if (!fp8_ok()) GTEST_SKIP() << "fp8 e4m3 needs sm_89+";
  AttnShape s;
  s.dtype = DType::fp8_e4m3;
  s.ctx = 16384;
  s.page = 16;
  const Selection dense = place(s, make_page_map(s.ctx, 16, 3), select_dense(s, 256));
  const gpu::AttnDims dims{s.batch, s.hq, s.hkv, s.d, s.ctx, s.dtype, s.layout, s.scale(), s.page};
  const gpu::AttnPlan plan = gpu::plan_attention(dims, dense.geom, 132, gpu::AttnMerge::fused, 0, gpu::AttnLoads::mma);
  EXPECT_EQ(plan.loads, gpu::AttnLoads::mma);
  EXPECT_EQ(plan.ring_stages, 5u);
  for (float q_mul : {1.0f, 64.0f, 1.0f / 4096.0f}) check(s, dense, gpu::AttnMerge::fused, "dense", gpu::AttnLoads::mma, q_mul);
}
