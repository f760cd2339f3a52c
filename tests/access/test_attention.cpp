// CPU twin of sparse decode attention against the fp32 reference, for every arm, layout, dtype, head
// dim, selection mode and group size; selection invariants (budget, sink, latest, no duplicates).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <stdexcept>
#include <vector>

#include "access.hpp"
#include "kvf/cpu_isa.hpp"

using namespace kvf::access;

namespace {

struct Data {
  AttnShape s;
  std::vector<std::uint16_t> q, k, v;
  explicit Data(const AttnShape& sh) : s(sh), q(sh.q_elems()), k(sh.kv_elems()), v(sh.kv_elems()) {
    fill_qkv(s, q.data(), k.data(), v.data(), 11);
  }
};

double run_and_compare(const Data& d, const Selection& sel) {
  AttnWorkspace ws;
  plan_cpu(d.s, sel, ws);
  std::vector<float> out(d.s.q_elems(), -7.0f), ref(d.s.q_elems());
  attention_cpu(d.s, d.q.data(), d.k.data(), d.v.data(), sel, ws, out.data());
  attention_ref(d.s, d.q.data(), d.k.data(), d.v.data(), sel, ref.data());
  return attention_rel_error(out.data(), ref.data(), out.size());
}

void check_selection(const AttnShape& s, const Selection& sel, std::uint32_t block, std::uint32_t budget) {
  ASSERT_EQ(sel.geom.n_tokens(), budget);
  for (std::uint32_t l = 0; l < sel.n_lists; ++l) {
    std::vector<std::uint64_t> toks;
    const std::uint32_t* list = sel.idx.data() + std::uint64_t{l} * sel.geom.n_entries;
    for (std::uint64_t t = 0; t < sel.geom.n_tokens(); ++t) toks.push_back(sel.geom.token(list, t));
    ASSERT_TRUE(std::is_sorted(toks.begin(), toks.end()));
    ASSERT_EQ(std::adjacent_find(toks.begin(), toks.end()), toks.end()) << "duplicate token";
    ASSERT_LT(toks.back(), s.ctx);
    for (std::uint32_t t = 0; t < block; ++t) {
      ASSERT_EQ(toks[t], t) << "sink block missing";
      ASSERT_EQ(toks[toks.size() - block + t], s.ctx - block + t) << "latest block missing";
    }
  }
}

}  // namespace

struct AttnCase {
  std::uint32_t hq, hkv, d;
  DType dt;
  Layout lay;
};

class AttnTwin : public ::testing::TestWithParam<AttnCase> {
 protected:
  void SetUp() override {
#if defined(KVF_TESTS_PORTABLE_BUILD)
    // test_access_portable (x86-64-v3, capped at AVX2) checks the fallback paths a portable build takes on an
    // AVX-512 CPU. On a CPU without AVX-512, test_access runs these same paths from the same source (its native
    // build has no AVX-512 path to take), so here the twins would only repeat it: half a minute of CI.
    if (!kvf::cpu_avx512()) GTEST_SKIP() << "no AVX-512: test_access's Access/AttnTwin.* ran these AVX2 paths";
#endif
  }
};

TEST_P(AttnTwin, EveryArmMatchesReference) {
  const AttnCase c = GetParam();
  AttnShape s;
  s.batch = 2; s.hq = c.hq; s.hkv = c.hkv; s.d = c.d; s.ctx = 2048; s.dtype = c.dt; s.layout = c.lay;
  validate_shape(s);
  Data data(s);
  const std::uint32_t block = 32, kb = sparse_blocks(s.ctx, block, 1.0 / 8);
  // dense
  EXPECT_LT(run_and_compare(data, select_dense(s, 256)), kAttnTolerance);
  for (bool shared : {false, true}) {
    // block arm, routed by centroids
    std::vector<float> cent, scores;
    build_centroids(s, data.k.data(), block, cent);
    score_blocks(s, data.q.data(), cent, block, shared, scores);
    const Selection sb = select_blocks_by_score(s, block, kb, shared, scores);
    check_selection(s, sb, block, kb * block);
    EXPECT_LT(run_and_compare(data, sb), kAttnTolerance) << "block shared=" << shared;
    // token arm: uniform, clustered, routed by keys
    for (Scatter sc : {Scatter::uniform, Scatter::clustered}) {
      const Selection st = select_tokens_random(s, block, kb, shared, sc, 8, 5);
      check_selection(s, st, block, kb * block);
      EXPECT_LT(run_and_compare(data, st), kAttnTolerance) << "token " << to_string(sc) << " shared=" << shared;
    }
    score_tokens(s, data.q.data(), data.k.data(), shared, scores);
    const Selection sr = select_tokens_by_score(s, block, kb, shared, scores);
    check_selection(s, sr, block, kb * block);
    EXPECT_LT(run_and_compare(data, sr), kAttnTolerance) << "token routed shared=" << shared;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Access, AttnTwin,
    ::testing::Values(AttnCase{32, 8, 128, DType::bf16, Layout::HND}, AttnCase{32, 8, 128, DType::bf16, Layout::NHD},
                      AttnCase{32, 8, 128, DType::fp16, Layout::HND}, AttnCase{32, 8, 128, DType::fp16, Layout::NHD},
                      AttnCase{32, 8, 64, DType::bf16, Layout::HND}, AttnCase{32, 8, 64, DType::fp16, Layout::NHD},
                      AttnCase{8, 8, 128, DType::bf16, Layout::NHD}, AttnCase{16, 8, 64, DType::bf16, Layout::HND},
                      AttnCase{64, 8, 128, DType::bf16, Layout::HND}, AttnCase{32, 2, 128, DType::fp16, Layout::NHD},
                      AttnCase{16, 1, 64, DType::bf16, Layout::HND}, AttnCase{32, 8, 128, DType::fp8_e4m3, Layout::HND},
                      AttnCase{32, 8, 128, DType::fp8_e4m3, Layout::NHD}, AttnCase{32, 8, 64, DType::fp8_e4m3, Layout::HND},
                      AttnCase{16, 1, 64, DType::fp8_e4m3, Layout::NHD}, AttnCase{64, 4, 128, DType::fp8_e4m3, Layout::HND}));

// Shuffled (paged) placement: every arm, placed through the page table, still matches the fp32
// reference, for pages smaller than, equal to and larger than the block.
TEST_P(AttnTwin, EveryArmMatchesReferenceShuffled) {
  const AttnCase c = GetParam();
  AttnShape s;
  s.batch = 2; s.hq = c.hq; s.hkv = c.hkv; s.d = c.d; s.ctx = 2048; s.dtype = c.dt; s.layout = c.lay;
  Data data(s);
  const std::uint32_t block = 32, kb = sparse_blocks(s.ctx, block, 1.0 / 8);
  for (std::uint32_t page : {16u, 128u}) {  // pages below and above the block
    s.page = data.s.page = page;             // the paged layout (paged HND: heads of a page side by side)
    const PageMap pm = make_page_map(s.ctx, page, 77);
    EXPECT_LT(run_and_compare(data, place(s, pm, select_dense(s, 256))), kAttnTolerance) << "dense page " << page;
    for (bool shared : {false, true}) {
      std::vector<float> cent, scores;
      build_centroids(s, data.k.data(), block, cent, pm);
      score_blocks(s, data.q.data(), cent, block, shared, scores);
      const Selection sb = place(s, pm, select_blocks_by_score(s, block, kb, shared, scores));
      EXPECT_EQ(sb.geom.span, std::min(block, page));
      EXPECT_EQ(sb.geom.n_tokens(), kb * block);
      EXPECT_LT(run_and_compare(data, sb), kAttnTolerance) << "block page " << page << " shared=" << shared;
      const Selection st = place(s, pm, select_tokens_random(s, block, kb, shared, Scatter::clustered, 8, 5));
      EXPECT_LT(run_and_compare(data, st), kAttnTolerance) << "token page " << page << " shared=" << shared;
      score_tokens(s, data.q.data(), data.k.data(), shared, scores, pm);
      const Selection sr = place(s, pm, select_tokens_by_score(s, block, kb, shared, scores));
      EXPECT_LT(run_and_compare(data, sr), kAttnTolerance) << "token routed page " << page << " shared=" << shared;
    }
  }
}

namespace {
// The same logical KV stored with the shuffled placement: physical row phys_token(b, t) of every region
// holds logical row t.
Data shuffle_rows(const Data& logical, const PageMap& pm) {
  Data p = logical;
  const AttnShape& s = logical.s;
  const std::uint64_t rb = std::uint64_t{s.d} * dtype_bytes(s.dtype);
  auto* kd = reinterpret_cast<unsigned char*>(p.k.data());
  auto* vd = reinterpret_cast<unsigned char*>(p.v.data());
  const auto* ks = reinterpret_cast<const unsigned char*>(logical.k.data());
  const auto* vs = reinterpret_cast<const unsigned char*>(logical.v.data());
  for (std::uint32_t b = 0; b < s.batch; ++b)
    for (std::uint32_t h = 0; h < s.hkv; ++h)
      for (std::uint32_t t = 0; t < s.ctx; ++t) {
        const std::uint64_t src = kv_row(s.layout, b, t, h, s.ctx, s.hkv, s.d, s.page) * dtype_bytes(s.dtype);
        const std::uint64_t dst = kv_row(s.layout, b, pm.phys_token(b, t), h, s.ctx, s.hkv, s.d, s.page) * dtype_bytes(s.dtype);
        std::copy(ks + src, ks + src + rb, kd + dst);
        std::copy(vs + src, vs + src + rb, vd + dst);
      }
  return p;
}
std::vector<float> attend_cpu(const Data& d, const Selection& sel) {
  AttnWorkspace ws;
  plan_cpu(d.s, sel, ws);
  std::vector<float> out(d.s.q_elems());
  attention_cpu(d.s, d.q.data(), d.k.data(), d.v.data(), sel, ws, out.data());
  return out;
}
std::vector<float> attend_ref(const Data& d, const Selection& sel) {
  std::vector<float> out(d.s.q_elems());
  attention_ref(d.s, d.q.data(), d.k.data(), d.v.data(), sel, out.data());
  return out;
}
}  // namespace

// Placement semantics: logical token t lives at phys_token(b, t). The same logical KV, stored shuffled
// and read through the placed lists, gives bit-identical routing scores, selections and outputs (same
// rows, same order) as the same paged layout with its pages in logical order; unplace() inverts place()
// and rejects other lists.
TEST(Placement, ShuffledStorageIsTheSameLogicalProblem) {
  for (Layout lay : {Layout::HND, Layout::NHD}) {
    AttnShape s;
    s.batch = 2; s.hq = 16; s.hkv = 4; s.d = 64; s.ctx = 1024; s.layout = lay;
    for (std::uint32_t page : {16u, 64u}) {
      s.page = page;
      const Data logical(s);
      const PageMap pm = make_page_map(s.ctx, page, 3);
      const Data phys = shuffle_rows(logical, pm);
      for (std::uint32_t block : {16u, 128u})
        for (bool shared : {false, true}) {
          const std::uint32_t kb = sparse_blocks(s.ctx, block, 1.0 / 4);
          std::vector<float> c0, c1, s0, s1;
          build_centroids(s, logical.k.data(), block, c0);
          build_centroids(s, phys.k.data(), block, c1, pm);
          ASSERT_EQ(c0, c1);
          score_blocks(s, logical.q.data(), c0, block, shared, s0);
          const Selection lb = select_blocks_by_score(s, block, kb, shared, s0);
          const Selection pb = place(s, pm, lb);
          EXPECT_EQ(attend_ref(logical, lb), attend_ref(phys, pb)) << "block " << block << " page " << page;
          EXPECT_EQ(attend_cpu(logical, lb), attend_cpu(phys, pb)) << "block " << block << " page " << page;
          EXPECT_NE(pb.idx, lb.idx);
          Selection back;
          ASSERT_TRUE(unplace(s, pm, pb, block, back));
          EXPECT_EQ(back.idx, lb.idx);
          EXPECT_EQ(back.geom.span, block);
          score_tokens(s, logical.q.data(), logical.k.data(), shared, s0);
          score_tokens(s, phys.q.data(), phys.k.data(), shared, s1, pm);
          ASSERT_EQ(s0, s1);
          const Selection lt = select_tokens_by_score(s, block, kb, shared, s0);
          const Selection pt = place(s, pm, lt);
          EXPECT_EQ(attend_ref(logical, lt), attend_ref(phys, pt));
          EXPECT_EQ(attend_cpu(logical, lt), attend_cpu(phys, pt));
          ASSERT_TRUE(unplace(s, pm, pt, 1, back));
          EXPECT_EQ(back.idx, lt.idx);
          if (block > page) {
            // The pages of one block swapped: not a placement of any block list.
            Selection bad = pb;
            std::swap(bad.idx[0], bad.idx[1]);
            EXPECT_FALSE(unplace(s, pm, bad, block, back));
          }
          Selection bad = pt;
          bad.idx[0] = s.ctx;  // out of range
          EXPECT_FALSE(unplace(s, pm, bad, 1, back));
        }
      const Selection ld = select_dense(s, 256), pd = place(s, pm, ld);
      EXPECT_EQ(pd.geom.span, page);
      EXPECT_EQ(attend_cpu(logical, ld), attend_cpu(phys, pd));
    }
  }
}

// Low-rank key proxy: an orthonormal basis; exact scores when the keys lie in an r-dim subspace; the
// same proxy from shuffled storage; bad ranks rejected.
TEST(LowRank, ExactForKeysOfRankRAndPlacementInvariant) {
  AttnShape s;
  s.batch = 2; s.hq = 8; s.hkv = 2; s.d = 64; s.ctx = 1024;
  Data data(s);
  const std::uint32_t r = 16;
  // Keys spanned by r directions: element i of every key row is 0 for i >= r.
  for (std::uint64_t e = 0; e < s.kv_elems(); ++e)
    if (e % s.d >= r) data.k[e] = 0;
  LowRank lr;
  build_lowrank(s, data.k.data(), r, lr);
  ASSERT_EQ(lr.basis.size(), std::size_t{s.batch} * s.hkv * s.d * r);
  for (std::uint32_t bh = 0; bh < s.batch * s.hkv; ++bh) {
    const float* P = lr.basis.data() + std::size_t{bh} * s.d * r;
    for (std::uint32_t a = 0; a < r; ++a)
      for (std::uint32_t c = 0; c < r; ++c) {
        double dot = 0;
        for (std::uint32_t i = 0; i < s.d; ++i) dot += double(P[i * r + a]) * P[i * r + c];
        ASSERT_NEAR(dot, a == c ? 1.0 : 0.0, 1e-5) << a << "," << c;
      }
  }
  for (bool shared : {false, true}) {
    std::vector<float> exact, proxy;
    score_tokens(s, data.q.data(), data.k.data(), shared, exact);
    score_tokens_lowrank(s, data.q.data(), lr, shared, proxy);
    float amax = 0, emax = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      amax = std::max(amax, std::fabs(exact[i]));
      emax = std::max(emax, std::fabs(exact[i] - proxy[i]));
    }
    EXPECT_LT(emax, 1e-4f * amax) << "shared=" << shared;
  }
  // General keys: the proxy differs from the exact scores (it is an approximation, not a copy). Paged
  // layout (pages of 16 tokens in logical order here, shuffled below).
  s.page = 16;
  Data full(s);
  LowRank lf;
  build_lowrank(s, full.k.data(), r, lf);
  std::vector<float> exact, proxy;
  score_tokens(s, full.q.data(), full.k.data(), false, exact);
  score_tokens_lowrank(s, full.q.data(), lf, false, proxy);
  EXPECT_NE(exact, proxy);
  // Shuffled storage of the same logical keys gives the same proxy.
  const PageMap pm = make_page_map(s.ctx, 16, 8);
  const Data phys = shuffle_rows(full, pm);
  LowRank lp;
  build_lowrank(s, phys.k.data(), r, lp, pm);
  EXPECT_EQ(lp.basis, lf.basis);
  EXPECT_EQ(lp.keys, lf.keys);
  EXPECT_THROW(build_lowrank(s, full.k.data(), 12, lp), std::invalid_argument);
  EXPECT_THROW(build_lowrank(s, full.k.data(), 64, lp), std::invalid_argument);  // not below d = 64
  EXPECT_TRUE(valid_proxy_rank(32, 64));
  EXPECT_FALSE(valid_proxy_rank(64, 64));
}

TEST(Placement, PageTokensRule) {
  EXPECT_NO_THROW(validate_page_tokens(0, 4096));  // contiguous
  EXPECT_NO_THROW(validate_page_tokens(16, 4096));
  EXPECT_NO_THROW(validate_page_tokens(1, 4096));
  EXPECT_NO_THROW(validate_page_tokens(4096, 4096));
  EXPECT_NO_THROW(validate_page_tokens(32, 3072));
  EXPECT_THROW(validate_page_tokens(24, 4096), std::invalid_argument);    // not a power of two
  EXPECT_THROW(validate_page_tokens(8192, 4096), std::invalid_argument);  // larger than the context
  EXPECT_THROW(validate_page_tokens(64, 4000), std::invalid_argument);    // does not divide it
}

TEST(AttnTwin, LongContextManySplits) {
  AttnShape s;
  s.batch = 1; s.hq = 8; s.hkv = 2; s.d = 128; s.ctx = 65536;
  Data data(s);
  const Selection sel = select_dense(s, 256);
  AttnWorkspace ws;
  plan_cpu(s, sel, ws);
  EXPECT_GE(ws.split.n_splits, 2u);
  EXPECT_LT(run_and_compare(data, sel), kAttnTolerance);
}

// The path that ran follows the run-time dispatch (kvf/cpu_isa.hpp), whatever -march built the kernel: AVX-512
// where the CPU has it and KVF_CPU_ISA does not cap it, else the AVX2 loop where the baseline has AVX2, FMA and
// F16C (the kernels are built with the same -march as this test), the portable loop otherwise; path_note says which.
TEST(AttnTwin, PathFollowsRunTimeDispatch) {
  AttnShape s;
  s.batch = 1; s.hq = 8; s.hkv = 2; s.d = 128; s.ctx = 1024;
  Data data(s);
  const Selection sel = select_dense(s, 256);
  AttnWorkspace ws;
  plan_cpu(s, sel, ws);
  std::vector<float> out(s.q_elems());
  attention_cpu(s, data.q.data(), data.k.data(), data.v.data(), sel, ws, out.data());
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  const std::string fallback = "cpu_attn=avx2";
#else
  const std::string fallback = "cpu_attn=portable";
#endif
  const std::string want = kvf::cpu_avx512() ? "cpu_attn=avx512" : fallback;
  EXPECT_EQ(ws.path_note.rfind(want, 0), 0u) << ws.path_note;
  if (!kvf::cpu_avx512()) {
    EXPECT_FALSE(bf16_dot_available());
  }
}

TEST(AttnTwin, ErrorIsSmallInPractice) {
  // The documented tolerance is loose for GPU reductions; the twin itself is far tighter.
  AttnShape s;
  s.batch = 1; s.hq = 32; s.hkv = 8; s.d = 128; s.ctx = 4096;
  Data data(s);
  EXPECT_LT(run_and_compare(data, select_dense(s, 256)), 1e-5);
}

TEST(AttnBadInput, Budget) {
  EXPECT_THROW(sparse_blocks(4096, 48, 0.125), std::invalid_argument);   // block does not divide ctx
  EXPECT_THROW(sparse_blocks(4096, 64, 0.0), std::invalid_argument);     // keep outside (0, 1]
  EXPECT_THROW(sparse_blocks(4096, 64, 1.5), std::invalid_argument);
  EXPECT_THROW(sparse_blocks(4096, 1024, 1.0 / 32), std::invalid_argument);  // 0 blocks < sink + latest
  EXPECT_EQ(sparse_blocks(4096, 64, 0.125), 8u);
  EXPECT_EQ(sparse_blocks(4096, 64, 1.0), 64u);
}

TEST(AttnBadInput, Shape) {
  AttnShape s;
  s.d = 96;
  EXPECT_THROW(validate_shape(s), std::invalid_argument);
  s.d = 128; s.hq = 12; s.hkv = 8;
  EXPECT_THROW(validate_shape(s), std::invalid_argument);
  s.hq = 24; s.hkv = 8;  // group 3
  EXPECT_THROW(validate_shape(s), std::invalid_argument);
  s.hq = 32; s.dtype = DType::fp8_e4m3;
  EXPECT_NO_THROW(validate_shape(s));  // the twin has fp8; the bench rejects it where the device lacks it
  s.batch = 0;
  EXPECT_THROW(validate_shape(s), std::invalid_argument);
  s.batch = 1; s.page = 24;
  EXPECT_THROW(validate_shape(s), std::invalid_argument);  // the page rule holds for the layout's page too
}

// The GPU top-k (routing_gpu.cu) run serially: bitwise search for the k-th largest order key, then
// keys above it and the first (k - count above) equal keys in index order. It must pick exactly what
// the CPU twin's nth_element selection picks, ties included.
namespace {
std::vector<std::uint32_t> threshold_topk(const float* s, std::uint32_t n, std::uint32_t lo, std::uint32_t hi,
                                          std::uint32_t kp) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < lo; ++i) out.push_back(i);
  if (kp) {
    std::uint32_t T = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const std::uint32_t cand = T | (1u << bit);
      std::uint32_t c = 0;
      for (std::uint32_t i = lo; i < hi; ++i) c += order_key(s[i]) >= cand;
      if (c >= kp) T = cand;
    }
    std::uint32_t gt = 0;
    for (std::uint32_t i = lo; i < hi; ++i) gt += order_key(s[i]) > T;
    std::uint32_t eq = 0;
    for (std::uint32_t i = lo; i < hi; ++i) {
      const std::uint32_t key = order_key(s[i]);
      if (key > T || (key == T && eq++ < kp - gt)) out.push_back(i);
    }
  }
  for (std::uint32_t i = hi; i < n; ++i) out.push_back(i);
  return out;
}
}  // namespace

// The CPU selection's order is the float compare's: -0 and +0 tie (and go to the lower index), unlike the
// GPU's order_key (-0 below +0), whose tests keep such pairs out.
TEST(Routing, CpuSelectionTiesMinusZeroWithZeroToTheLowerIndex) {
  AttnShape s;
  s.batch = 1; s.hq = 1; s.hkv = 1; s.d = 64; s.ctx = 128;
  const std::uint32_t block = 16, kb = sparse_blocks(s.ctx, block, 3.0 / 8);
  ASSERT_EQ(kb, 3u);
  const std::vector<float> bs = {5.0f, -1.0f, -0.0f, 0.0f, -0.0f, -1.0f, -2.0f, 7.0f};
  const Selection sb = select_blocks_by_score(s, block, kb, false, bs);
  EXPECT_EQ(sb.idx, (std::vector<std::uint32_t>{0, 2, 7}));
  std::vector<float> ts(s.ctx, -1.0f);
  ts[40] = -0.0f;
  ts[41] = 0.0f;
  ts[60] = 3.0f;
  const Selection st = select_tokens_by_score(s, block, kb, false, ts);  // 16 of the middle: 60, then 40, 41, ...
  std::vector<std::uint32_t> want;
  for (std::uint32_t t = 0; t < block; ++t) want.push_back(t);
  for (std::uint32_t t : {16u, 17u, 18u, 19u, 20u, 21u, 22u, 23u, 24u, 25u, 26u, 27u, 28u, 40u, 41u, 60u}) want.push_back(t);
  for (std::uint32_t t = s.ctx - block; t < s.ctx; ++t) want.push_back(t);
  EXPECT_EQ(st.idx, want);
}

TEST(Routing, GpuThresholdTopkMatchesCpuSelection) {
  AttnShape s;
  s.batch = 1; s.hq = 8; s.hkv = 2; s.d = 64; s.ctx = 4096;
  const std::uint32_t block = 16, kb = sparse_blocks(s.ctx, block, 1.0 / 8);
  const std::uint32_t nb = s.ctx / block;
  std::vector<float> bs(2 * nb), ts(2 * s.ctx);
  for (std::size_t i = 0; i < bs.size(); ++i) bs[i] = pattern_unit(1, i) * 3.0f;
  for (std::size_t i = 0; i < ts.size(); ++i) ts[i] = std::round(pattern_unit(2, i) * 20.0f) / 4.0f;  // many ties
  bs[5] = -0.0f; bs[6] = 0.0f; bs[7] = -2.0f;
  const Selection sb = select_blocks_by_score(s, block, kb, false, bs);
  const Selection st = select_tokens_by_score(s, block, kb, false, ts);
  for (std::uint32_t l = 0; l < 2; ++l) {
    const auto gb = threshold_topk(bs.data() + l * nb, nb, 1, nb - 1, kb - 2);
    EXPECT_EQ(gb, std::vector<std::uint32_t>(sb.idx.begin() + l * kb, sb.idx.begin() + (l + 1) * kb));
    const std::uint32_t budget = kb * block;
    const auto gt = threshold_topk(ts.data() + l * s.ctx, s.ctx, block, s.ctx - block, budget - 2 * block);
    EXPECT_EQ(gt, std::vector<std::uint32_t>(st.idx.begin() + l * budget, st.idx.begin() + (l + 1) * budget));
  }
  // The GPU's emission through the page table (routing_gpu.cu emit()): logical candidate i at list
  // position pos -> entries pm.phys_entry(b, i, unit, r) at pos * per + r. It must equal place() of the
  // CPU selection, for pages below, equal to and above the block.
  for (std::uint32_t page : {4u, 16u, 64u}) {
    s.page = page;
    const PageMap pm = make_page_map(s.ctx, page, 41);
    const Selection pb = place(s, pm, sb), pt = place(s, pm, st);
    for (std::uint32_t l = 0; l < 2; ++l) {
      const std::uint32_t b = l / s.hkv;  // per-head lists: list l belongs to batch l / hkv
      const auto gb = threshold_topk(bs.data() + l * nb, nb, 1, nb - 1, kb - 2);
      const std::uint32_t per = pm.entries_per(block);
      std::vector<std::uint32_t> eb(gb.size() * per);
      for (std::uint32_t pos = 0; pos < gb.size(); ++pos)
        for (std::uint32_t r = 0; r < per; ++r) eb[pos * per + r] = pm.phys_entry(b, gb[pos], block, r);
      const std::uint64_t ne = pb.geom.n_entries;
      EXPECT_EQ(eb, std::vector<std::uint32_t>(pb.idx.begin() + l * ne, pb.idx.begin() + (l + 1) * ne)) << page;
      const std::uint32_t budget = kb * block;
      const auto gt = threshold_topk(ts.data() + l * s.ctx, s.ctx, block, s.ctx - block, budget - 2 * block);
      std::vector<std::uint32_t> et;
      for (auto i : gt) et.push_back(pm.phys_entry(b, i, 1, 0));
      EXPECT_EQ(et, std::vector<std::uint32_t>(pt.idx.begin() + l * budget, pt.idx.begin() + (l + 1) * budget)) << page;
    }
  }
  EXPECT_LT(order_key(-1.0f), order_key(-0.5f));
  EXPECT_LT(order_key(-0.5f), order_key(0.0f));
  EXPECT_LT(order_key(0.0f), order_key(1e-30f));
  EXPECT_LT(order_key(1.0f), order_key(2.0f));
}

// Several budgets of one block size in one call (the budgets cut one order): each list equals the serial
// threshold top-k at its budget, whatever order the budgets come in, ties included.
TEST(Routing, TokenSelectionAtSeveralBudgetsEqualsEachBudgetAlone) {
  AttnShape s;
  s.batch = 1; s.hq = 8; s.hkv = 2; s.d = 64; s.ctx = 4096;
  const std::uint32_t block = 32;
  std::vector<float> ts(2 * s.ctx);
  // many ties; + 0 makes every zero +0 (the threshold reference orders -0 below +0, the CPU selection ties them)
  for (std::size_t i = 0; i < ts.size(); ++i) ts[i] = std::round(pattern_unit(3, i) * 12.0f) / 4.0f + 0.0f;
  const std::vector<std::uint32_t> k_blocks = {sparse_blocks(s.ctx, block, 1.0 / 8), sparse_blocks(s.ctx, block, 1.0 / 2),
                                               sparse_blocks(s.ctx, block, 1.0 / 32), sparse_blocks(s.ctx, block, 1.0 / 8)};
  const std::vector<Selection> sels = select_tokens_by_score(s, block, k_blocks, false, ts);
  ASSERT_EQ(sels.size(), k_blocks.size());
  for (std::size_t i = 0; i < k_blocks.size(); ++i) {
    const std::uint32_t budget = k_blocks[i] * block;
    ASSERT_EQ(sels[i].geom.n_entries, budget);
    for (std::uint32_t l = 0; l < 2; ++l) {
      const auto want = threshold_topk(ts.data() + l * s.ctx, s.ctx, block, s.ctx - block, budget - 2 * block);
      EXPECT_EQ(want, std::vector<std::uint32_t>(sels[i].idx.begin() + l * budget, sels[i].idx.begin() + (l + 1) * budget))
          << "budget " << budget << " list " << l;
    }
  }
}
