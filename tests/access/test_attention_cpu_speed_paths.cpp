// The CPU twin's fast-path edges (attention_cpu.cpp): a split's last chunk shorter than 16 tokens (qk4
// reads padded positions whose sums must be masked), splits of one chunk (no next-chunk QK in the
// pipeline) and of two, the even/odd bf16 PV un-permuted at the end, and the in-register score
// transposes for every group size, each against the fp32 reference; and the run-time choices (vdpbf16ps
// or fp32 QK, far prefetch on, off or calibrated) on the same data.
#include <gtest/gtest.h>

#include "kvf/cpu_isa.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "access.hpp"

using namespace kvf::access;

namespace {

double twin_error(const AttnShape& s, const Selection& sel, std::uint64_t seed) {
  std::vector<std::uint16_t> q(s.q_elems()), k(s.kv_elems()), v(s.kv_elems());
  fill_qkv(s, q.data(), k.data(), v.data(), seed);
  AttnWorkspace ws;
  plan_cpu(s, sel, ws);
  std::vector<float> out(s.q_elems(), -7.0f), ref(s.q_elems());
  attention_cpu(s, q.data(), k.data(), v.data(), sel, ws, out.data());
  attention_ref(s, q.data(), k.data(), v.data(), sel, ref.data());
  return attention_rel_error(out.data(), ref.data(), out.size());
}

struct EdgeCase {
  std::uint32_t hq, hkv, d;
  DType dt;
};

class AttnSpeedPaths : public ::testing::TestWithParam<EdgeCase> {};

}  // namespace

// Token counts 1..40 and around the 256-token split minimum: one short chunk, one full chunk, a full
// chunk then a short one, several chunks. Dense entries of span 1 (every token its own entry).
TEST_P(AttnSpeedPaths, ShortAndRaggedSplitsMatchReference) {
  const EdgeCase c = GetParam();
  for (std::uint32_t ctx : {1u, 3u, 8u, 15u, 16u, 17u, 24u, 31u, 32u, 33u, 40u, 264u, 520u}) {
    AttnShape s;
    s.batch = 2; s.hq = c.hq; s.hkv = c.hkv; s.d = c.d; s.ctx = ctx; s.dtype = c.dt; s.layout = Layout::HND;
    validate_shape(s);
    const double e = twin_error(s, select_dense(s, 1), 3 + ctx);
    EXPECT_LT(e, 1e-5) << "ctx " << ctx;  // fp32 twin: far inside kAttnTolerance
  }
}

INSTANTIATE_TEST_SUITE_P(
    Access, AttnSpeedPaths,
    ::testing::Values(EdgeCase{8, 8, 128, DType::bf16}, EdgeCase{16, 8, 128, DType::bf16},
                      EdgeCase{32, 8, 128, DType::bf16}, EdgeCase{64, 8, 128, DType::bf16},
                      EdgeCase{16, 1, 128, DType::bf16}, EdgeCase{8, 8, 64, DType::bf16},
                      EdgeCase{16, 8, 64, DType::bf16}, EdgeCase{32, 8, 64, DType::bf16},
                      EdgeCase{16, 1, 64, DType::bf16}, EdgeCase{8, 8, 128, DType::fp16},
                      EdgeCase{16, 8, 128, DType::fp16}, EdgeCase{32, 8, 128, DType::fp16},
                      EdgeCase{16, 1, 64, DType::fp16}, EdgeCase{16, 8, 64, DType::fp8_e4m3},
                      EdgeCase{32, 8, 128, DType::fp8_e4m3}, EdgeCase{16, 1, 128, DType::fp8_e4m3}));

// The running max must rise late in a split (rescale of accumulators and of l after many chunks): a
// key equal to a large multiple of the query at the last token of the split makes its score dominate.
TEST(AttnSpeedPaths, LateMaxRescalesAccumulatorsAndL) {
  AttnShape s;
  s.batch = 1; s.hq = 4; s.hkv = 1; s.d = 128; s.ctx = 512;
  std::vector<std::uint16_t> q(s.q_elems()), k(s.kv_elems()), v(s.kv_elems());
  fill_qkv(s, q.data(), k.data(), v.data(), 21);
  for (std::uint32_t d = 0; d < s.d; ++d)  // last token's key = 2 x head 0's query
    k[std::uint64_t{s.ctx - 1} * s.d + d] = f32_to_bf16(2.0f * bf16_to_f32(q[d]));
  const Selection sel = select_dense(s, 16);
  AttnWorkspace ws;
  plan_cpu(s, sel, ws);
  std::vector<float> out(s.q_elems()), ref(s.q_elems());
  attention_cpu(s, q.data(), k.data(), v.data(), sel, ws, out.data());
  attention_ref(s, q.data(), k.data(), v.data(), sel, ref.data());
  EXPECT_LT(attention_rel_error(out.data(), ref.data(), out.size()), 1e-5);
  // head 0 attends mostly to the last token: its output is close to that token's value row
  double dist = 0;
  for (std::uint32_t d = 0; d < s.d; ++d)
    dist = std::max(dist, std::abs(double(out[d]) - bf16_to_f32(v[std::uint64_t{s.ctx - 1} * s.d + d])));
  EXPECT_LT(dist, 0.05);
}

// Paged placement: the kernel walks the physical lists with a cursor (entry, token within it) started
// once per split and prefetches chunks ahead from a ring of positions. Pages of 1..64 tokens (entries of
// fewer, as many and more tokens than a 16-token chunk), logical entries of 1..256 tokens, contexts whose
// splits start inside an entry and end in a short chunk, against the reference.
TEST(AttnSpeedPaths, PagedPlacementMatchesReference) {
  for (DType dt : {DType::bf16, DType::fp16}) {
    for (std::uint32_t page : {1u, 4u, 16u, 64u}) {
      for (std::uint32_t span : {1u, 16u, 256u}) {
        for (std::uint32_t ctx : {256u, 1280u, 4352u}) {
          if (ctx % page || ctx % span) continue;
          AttnShape s;
          s.batch = 2; s.hq = 8; s.hkv = 2; s.d = 128; s.ctx = ctx; s.dtype = dt; s.layout = Layout::HND;
          s.page = page;
          validate_shape(s);
          const PageMap pm = make_page_map(ctx, page, 77 + page);
          const Selection sel = place(s, pm, select_dense(s, span));
          const double e = twin_error(s, sel, 5 + ctx + page + span);
          EXPECT_LT(e, 1e-5) << "page " << page << " span " << span << " ctx " << ctx;
        }
      }
    }
  }
}

namespace {

struct PathRun {
  std::vector<float> out;
  std::string note;
};

PathRun run_path(const AttnShape& s, const Selection& sel, const std::vector<std::uint16_t>& q,
                 const std::vector<std::uint16_t>& k, const std::vector<std::uint16_t>& v, CpuChoice dot, CpuChoice far) {
  AttnWorkspace ws;
  plan_cpu(s, sel, ws);
  ws.bf16_dot = dot;
  ws.far_prefetch = far;
  PathRun r{std::vector<float>(s.q_elems(), -7.0f), {}};
  // What the study's FMA floor asks before the first call (the access study's fma_floor_basis).
  const bool qk_dot = attention_cpu_qk_dot(s, ws);
  attention_cpu(s, q.data(), k.data(), v.data(), sel, ws, r.out.data());
  r.note = ws.path_note;
  EXPECT_EQ(qk_dot, r.note.find("qk=vdpbf16ps") != std::string::npos) << r.note;
  return r;
}

}  // namespace

// The run-time choices on the same data: the vdpbf16ps QK (where cpuid has AVX512_BF16) and the
// fp32-FMA QK agree with the reference and with each other up to fp32 summation order; the far
// prefetch changes no bit of the output; every call says in path_note which path ran.
TEST(AttnSpeedPaths, Bf16DotAndFp32PathsAgreeOnTheSameData) {
  bool portable_only = false;
  for (std::uint32_t hq : {8u, 32u, 64u}) {
    AttnShape s;
    s.batch = 1; s.hq = hq; s.hkv = 8; s.d = 128; s.ctx = 2048; s.dtype = DType::bf16; s.page = 16;
    validate_shape(s);
    std::vector<std::uint16_t> q(s.q_elems()), k(s.kv_elems()), v(s.kv_elems());
    fill_qkv(s, q.data(), k.data(), v.data(), 41 + hq);
    const Selection sel = place(s, make_page_map(s.ctx, 16, 9), select_dense(s, 256));
    std::vector<float> ref(s.q_elems());
    attention_ref(s, q.data(), k.data(), v.data(), sel, ref.data());
    const PathRun fma = run_path(s, sel, q, k, v, CpuChoice::off, CpuChoice::off);
    EXPECT_LT(attention_rel_error(fma.out.data(), ref.data(), ref.size()), 1e-5) << "hq " << hq;
    const PathRun fma_far = run_path(s, sel, q, k, v, CpuChoice::off, CpuChoice::on);
    EXPECT_EQ(fma.out, fma_far.out) << "hq " << hq;  // prefetching changes no arithmetic
    AttnWorkspace probe;
    plan_cpu(s, sel, probe);
    const bool far_choice = attention_cpu_has_far_prefetch(s, probe);  // the AVX-512 and AVX2 loops
    const PathRun aut = run_path(s, sel, q, k, v, CpuChoice::automatic, CpuChoice::automatic);
    if (far_choice) {
      EXPECT_NE(fma_far.note.find("; far_prefetch=on (forced)"), std::string::npos) << fma_far.note;
      EXPECT_NE(fma.note.find("; far_prefetch=off (forced)"), std::string::npos) << fma.note;
      EXPECT_NE(aut.note.find("; far_prefetch="), std::string::npos) << aut.note;
      EXPECT_NE(aut.note.find(" (calibrated back to back, best of 3: on "), std::string::npos) << aut.note;
    } else {
      EXPECT_EQ(aut.note.find("far_prefetch"), std::string::npos) << aut.note;
    }
    if (!kvf::cpu_avx512()) {
      // No AVX-512 here: one path (AVX2 where the baseline has it, else portable), no QK choice.
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
      EXPECT_EQ(fma.note.rfind("cpu_attn=avx2", 0), 0u) << fma.note;
      EXPECT_TRUE(far_choice);
#else
      EXPECT_EQ(fma.note.rfind("cpu_attn=portable", 0), 0u) << fma.note;
      EXPECT_FALSE(far_choice);
#endif
      EXPECT_THROW(run_path(s, sel, q, k, v, CpuChoice::on, CpuChoice::off), std::invalid_argument);
      portable_only = true;
      continue;
    }
    if (!bf16_dot_available()) {
      EXPECT_NE(fma.note.find("qk=fp32 fma"), std::string::npos) << fma.note;
      EXPECT_THROW(run_path(s, sel, q, k, v, CpuChoice::on, CpuChoice::off), std::invalid_argument);
      EXPECT_EQ(aut.out, fma.out);
      continue;
    }
    const PathRun dot = run_path(s, sel, q, k, v, CpuChoice::on, CpuChoice::off);
    EXPECT_NE(dot.note.find("qk=vdpbf16ps"), std::string::npos) << dot.note;
    EXPECT_LT(attention_rel_error(dot.out.data(), ref.data(), ref.size()), 1e-5) << "hq " << hq;
    EXPECT_LT(attention_rel_error(dot.out.data(), fma.out.data(), ref.size()), 1e-5) << "hq " << hq;
    EXPECT_EQ(aut.out, dot.out);
  }
  if (portable_only)
    GTEST_SKIP() << "this CPU has no AVX-512: its one non-AVX-512 loop ran (checked against the reference, and its far "
                    "prefetch choice where it has one); the QK choice was not tried";
}

// A far prefetch a caller timed itself (the access study, per mode): on only when more than 3% faster, the times
// and how they were taken in the note, which the next call composes again.
TEST(AttnSpeedPaths, FarPrefetchTakenFromTheCallersTimes) {
  AttnShape s;
  s.batch = 1; s.hq = 32; s.hkv = 8; s.d = 128; s.ctx = 512; s.page = 16;
  validate_shape(s);
  std::vector<std::uint16_t> q(s.q_elems()), k(s.kv_elems()), v(s.kv_elems());
  fill_qkv(s, q.data(), k.data(), v.data(), 3);
  const Selection sel = select_dense(s, 256);
  AttnWorkspace ws;
  plan_cpu(s, sel, ws);
  if (!attention_cpu_has_far_prefetch(s, ws)) GTEST_SKIP() << "the portable loop here: no far prefetch to choose";
  std::vector<float> out(s.q_elems());
  take_far_prefetch(ws, 0.96e-3, 1e-3, "cold, test");
  EXPECT_TRUE(ws.use_far_prefetch);
  attention_cpu(s, q.data(), k.data(), v.data(), sel, ws, out.data());
  EXPECT_NE(ws.path_note.find("; far_prefetch=on (calibrated cold, test: on 0.96 ms, off 1 ms, on only when 3% faster)"),
            std::string::npos)
      << ws.path_note;
  take_far_prefetch(ws, 0.98e-3, 1e-3, "hot, test");  // within 3%: the fewer instructions
  EXPECT_FALSE(ws.use_far_prefetch);
  attention_cpu(s, q.data(), k.data(), v.data(), sel, ws, out.data());
  EXPECT_NE(ws.path_note.find("; far_prefetch=off (calibrated hot, test: on 0.98 ms, off 1 ms, on only when 3% faster)"),
            std::string::npos)
      << ws.path_note;
}

// attention_cpu_qk_dot says no wherever the kernel cannot take the vdpbf16ps QK (another dtype, the choice off, a
// CPU without AVX512_BF16) and yes elsewhere, for groups of 2 and 4; run_path checks it against the kernel's note.
TEST(AttnSpeedPaths, QkDotOnlyWhereTheKernelRunsIt) {
  for (const DType dt : {DType::bf16, DType::fp16})
    for (const std::uint32_t hq : {16u, 32u}) {
      AttnShape s;
      s.batch = 1; s.hq = hq; s.hkv = 8; s.d = 128; s.ctx = 512; s.dtype = dt; s.page = 16;
      validate_shape(s);
      std::vector<std::uint16_t> q(s.q_elems()), k(s.kv_elems()), v(s.kv_elems());
      fill_qkv(s, q.data(), k.data(), v.data(), 5);
      const Selection sel = select_dense(s, 256);
      AttnWorkspace ws;
      plan_cpu(s, sel, ws);
      const bool expect = dt == DType::bf16 && bf16_dot_available() && kvf::cpu_avx512();
      EXPECT_EQ(attention_cpu_qk_dot(s, ws), expect) << to_string(dt) << " hq " << hq;
      ws.bf16_dot = CpuChoice::off;
      EXPECT_FALSE(attention_cpu_qk_dot(s, ws));
      run_path(s, sel, q, k, v, CpuChoice::automatic, CpuChoice::off);
    }
}

// fp16 K/V have no dot path: forcing it is an error, automatic runs the fp32 path.
TEST(AttnSpeedPaths, Bf16DotOnRejectsOtherDtypes) {
  AttnShape s;
  s.batch = 1; s.hq = 8; s.hkv = 2; s.d = 64; s.ctx = 512; s.dtype = DType::fp16;
  std::vector<std::uint16_t> q(s.q_elems()), k(s.kv_elems()), v(s.kv_elems());
  fill_qkv(s, q.data(), k.data(), v.data(), 3);
  const Selection sel = select_dense(s, 256);
  EXPECT_THROW(run_path(s, sel, q, k, v, CpuChoice::on, CpuChoice::automatic), std::invalid_argument);
  EXPECT_EQ(run_path(s, sel, q, k, v, CpuChoice::automatic, CpuChoice::off).note.find("vdpbf16ps"), std::string::npos);
}
