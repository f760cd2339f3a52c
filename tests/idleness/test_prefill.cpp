// The prefill chunk: the CPU twin against the reference (kernels/decode/decode.hpp: check_prefill_rows, the decode
// tolerance), the check's teeth, and the GPU causal attention's index/mask/softmax math (decode_math.hpp pf_*) run
// on the CPU: a tile-by-tile emulation of prefill_attn_gpu.cu against a direct causal attention, split coverage,
// and launch limits for T up to 4096 and N up to 128K.
#include "kvf/model_shapes.hpp"
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "decode.hpp"
#include "test_shapes.hpp"
#include "decode_math.hpp"
#include "layers.hpp"
#include "recompute.hpp"

namespace dc = kvf::decode;
namespace el = kvf::decode::elems;
namespace fr = kvf::frontier;
namespace md = kvf::models;

namespace {
md::ModelShape shape(int hidden, int heads, int kv, int d, int inter, bool bias) {
  return kvf::test::tiny_shape(hidden, heads, kv, d, inter, bias);
}
md::ModelShape tiny_gqa() {
  const auto all = md::load_models(std::string(KVF_IDLENESS_TEST_DIR) + "/tiny_models.json");
  return md::find_model(all, "Tiny-GQA");
}
}  // namespace

// The twin's layer against the reference, rows across the chunk, several shapes (GQA groups 4, 1, 8; head dims 64,
// 128; biases), prefixes 0 and > 0.
TEST(PrefillCpu, LayerMatchesReference) {
  struct Sh { md::ModelShape m; int T, N; };
  const std::vector<Sh> shapes = {{tiny_gqa(), 40, 1024},
                                  {shape(1024, 8, 2, 128, 3584, false), 33, 2048},
                                  {shape(512, 4, 4, 128, 1024, false), 20, 0},
                                  {shape(512, 8, 1, 64, 1024, true), 64, 1500}};
  for (const auto& sh : shapes)
    for (std::uint64_t seed : {1u, 2u}) {
      const auto w = fr::make_layer_weights(sh.m, seed);
      auto s = dc::make_prefill_state(sh.m, sh.T, sh.N, seed);
      const auto r = dc::verify_prefill_cpu(w, sh.m, s, dc::prefill_check_rows(sh.T));
      EXPECT_TRUE(r.ok()) << "hidden " << sh.m.hidden << " T " << sh.T << " N " << sh.N << " seed " << seed << ": "
                          << r.text();
      EXPECT_EQ(r.h.rows, int(dc::prefill_check_rows(sh.T).size()));
    }
}

// Attention + O projection + residual alone (MLP zeroed): no bf16 cascade, so the twin is tight; and the check has
// teeth: a corrupted appended V row, a prefix V that is not what the layer attended to, h of two layers instead of
// one: each fails. (The causal mask's teeth: PrefillMath.KernelEmulationMatchesCausalAttention.)
TEST(PrefillCpu, VerifyTightAndHasTeeth) {
  const auto m = shape(1024, 8, 2, 128, 3584, false);
  auto w = fr::make_layer_weights(m, 5);
  const int T = 48, N = 1024, cap = N + T;
  std::fill(w.wd.begin(), w.wd.end(), 0.0f);
  {
    auto s = dc::make_prefill_state(m, T, N, 5);
    const auto r = dc::verify_prefill_cpu(w, m, s, {0, 17, T - 1});
    EXPECT_LE(r.h.max_err_rel, dc::kVerifyPathTol) << r.text();
    EXPECT_TRUE(r.kv.ok()) << r.text();
  }
  const auto w2 = fr::make_layer_weights(m, 6);
  auto s = dc::make_prefill_state(m, T, N, 6);
  ASSERT_TRUE(dc::verify_prefill_cpu(w2, m, s, {T - 1}).ok());
  std::vector<std::uint16_t> kc(s.pc.k.size()), vc(s.pc.v.size());
  fr::f32_to_bf16(s.pc.k.data(), kc.data(), kc.size());
  fr::f32_to_bf16(s.pc.v.data(), vc.data(), vc.size());
  EXPECT_TRUE(dc::check_prefill_rows(w2, m, T, N, s.h0.data(), s.h, kc.data(), vc.data(), {T - 1}).ok());
  {
    auto bad = vc;  // token T-1's appended V zeroed
    for (int h = 0; h < m.n_kv_heads; ++h)
      std::fill_n(bad.begin() + (std::size_t(h) * cap + N + T - 1) * m.head_dim, m.head_dim, std::uint16_t(0));
    EXPECT_FALSE(dc::check_prefill_rows(w2, m, T, N, s.h0.data(), s.h, kc.data(), bad.data(), {T - 1}).kv.ok());
  }
  {
    auto bad = vc;  // the prefix's V zeroed: the reference's attention collapses, the twin's did not
    std::fill_n(bad.begin(), std::size_t(N) * m.head_dim, std::uint16_t(0));
    for (int h = 1; h < m.n_kv_heads; ++h)
      std::fill_n(bad.begin() + std::size_t(h) * cap * m.head_dim, std::size_t(N) * m.head_dim, std::uint16_t(0));
    EXPECT_FALSE(dc::check_prefill_rows(w2, m, T, N, s.h0.data(), s.h, kc.data(), bad.data(), {0, T - 1}).h.ok());
  }
  {
    auto s2 = dc::make_prefill_state(m, T, N, 6);
    dc::prefill_step_cpu(w2, s2, 2);  // two layers: h is not the one-layer output
    EXPECT_FALSE(dc::check_prefill_rows(w2, m, T, N, s2.h0.data(), s2.h, kc.data(), vc.data(), {T - 1}).h.ok());
  }
}

// prefill_qkv_post (the GPU's body) over every index: q rotated at position N+t, K/V appended at N+t of head hk.
TEST(PrefillMath, QkvPostIndexing) {
  const int T = 5, N = 37, Hq = 4, Hkv = 2, D = 64, half = D / 2, cap = N + T, qo = (Hq + 2 * Hkv) * D;
  const auto m = shape(256, Hq, Hkv, D, 512, true);
  const auto cs = fr::rope_table(fr::rope_inv_freq(m, D), cap);
  std::vector<float> qkv(std::size_t(T) * qo), bias(qo);
  fr::fill_f32_uniform(qkv.data(), qkv.size(), 3, 1.0f);
  fr::fill_f32_uniform(bias.data(), bias.size(), 4, 0.1f);
  std::vector<std::uint16_t> q(std::size_t(T) * Hq * D, 0), k(std::size_t(Hkv) * cap * D, 0), v(k.size(), 0);
  for (std::int64_t i = 0; i < std::int64_t(T) * (Hq + 2 * Hkv) * half; ++i)
    el::prefill_qkv_post(i, qkv.data(), bias.data(), Hq, Hkv, D, N, cap, cs.data(), q.data(), k.data(), v.data());
  for (int t = 0; t < T; ++t)
    for (int hh = 0; hh < Hq + 2 * Hkv; ++hh)
      for (int i = 0; i < half; ++i) {
        const float* x = qkv.data() + std::size_t(t) * qo + hh * D;
        const float lo = x[i] + bias[hh * D + i], hi = x[i + half] + bias[hh * D + i + half];
        const float* c = cs.data() + std::size_t(N + t) * D;
        const auto o = fr::rope_rotate(lo, hi, c[i], c[half + i]);
        if (hh < Hq) {
          ASSERT_EQ(q[(std::size_t(t) * Hq + hh) * D + i], fr::f32_to_bf16(o.lo));
          ASSERT_EQ(q[(std::size_t(t) * Hq + hh) * D + i + half], fr::f32_to_bf16(o.hi));
        } else if (hh < Hq + Hkv) {
          ASSERT_EQ(k[(std::size_t(hh - Hq) * cap + N + t) * D + i], fr::f32_to_bf16(o.lo));
          ASSERT_EQ(k[(std::size_t(hh - Hq) * cap + N + t) * D + i + half], fr::f32_to_bf16(o.hi));
        } else {
          ASSERT_EQ(v[(std::size_t(hh - Hq - Hkv) * cap + N + t) * D + i], fr::f32_to_bf16(lo));
          ASSERT_EQ(v[(std::size_t(hh - Hq - Hkv) * cap + N + t) * D + i + half], fr::f32_to_bf16(hi));
        }
      }
  for (std::size_t i = 0; i < std::size_t(N) * D; ++i) ASSERT_EQ(k[i], 0) << "prefix untouched";
  // K/V-only rows (PrefillGpu::step_kv's last layer): no query heads, rows [K | V], bias from the K/V part.
  const int kvo = 2 * Hkv * D;
  std::vector<float> kvrows(std::size_t(T) * kvo);
  for (int t = 0; t < T; ++t)
    std::copy_n(qkv.data() + std::size_t(t) * qo + Hq * D, kvo, kvrows.data() + std::size_t(t) * kvo);
  std::vector<std::uint16_t> k2(k.size(), 0), v2(v.size(), 0);
  for (std::int64_t i = 0; i < std::int64_t(T) * 2 * Hkv * half; ++i)
    el::prefill_qkv_post(i, kvrows.data(), bias.data() + Hq * D, 0, Hkv, D, N, cap, cs.data(), nullptr, k2.data(),
                         v2.data());
  EXPECT_EQ(k2, k);
  EXPECT_EQ(v2, v);
}

// Splits partition [0, kend) into contiguous, disjoint ranges starting on key-tile boundaries; split 0 holds key 0.
TEST(PrefillMath, SplitRangesPartitionKeys) {
  for (int kend : {1, 31, 32, 33, 257, 1024, 4097, 135168})
    for (int splits : {1, 2, 3, 7, 64, 128}) {
      int next = 0;
      for (int s = 0; s < splits; ++s) {
        const auto r = el::pf_split_range(kend, splits, s);
        ASSERT_EQ(r.k0, next) << kend << " " << splits << " " << s;
        ASSERT_LE(r.k0, r.k1);
        ASSERT_LE(r.k1, kend);
        if (r.k1 > r.k0) {
          ASSERT_EQ(r.k0 % el::kPfKeys, 0);
        }
        next = r.k1;
      }
      ASSERT_EQ(next, kend);
      ASSERT_GT(el::pf_split_range(kend, splits, 0).k1, 0);
    }
}

// Rows, key ends and visibility: every (token, head) of the chunk is in exactly one (tile, kv head, row), and a
// tile's key end covers each of its tokens' visible keys.
TEST(PrefillMath, RowsCoverChunk) {
  for (const el::PfKernel kernel : {el::PfKernel::cuda_core, el::PfKernel::mma})
    for (int G : {1, 2, 4, 8, 16})
      for (int T : {1, 7, 32, 100}) {
        const int Hkv = 3, Hq = Hkv * G, N = 50;
        const auto p = el::pf_plan(T, N, Hkv, G, 132, kernel);
        ASSERT_EQ(p.kernel, kernel);
        std::vector<int> seen(std::size_t(T) * Hq, 0);
        for (int tile = 0; tile < p.tiles; ++tile)
          for (int hk = 0; hk < Hkv; ++hk)
            for (int r = 0; r < el::pf_rows_per_tile(kernel); ++r) {
              const auto row = el::pf_row_of(kernel, tile, r, hk, G);
              if (kernel == el::PfKernel::cuda_core) {
                ASSERT_EQ(row.t, el::pf_row(tile, r, hk, G).t);
              }
              ASSERT_EQ(row.hq / G, hk);
              if (row.t >= T) continue;
              ++seen[std::size_t(row.t) * Hq + row.hq];
              ASSERT_GE(el::pf_tile_key_end(tile, G, T, N, kernel), N + row.t + 1);
              ASSERT_TRUE(el::pf_visible(N + row.t, N, row.t));
              ASSERT_FALSE(el::pf_visible(N + row.t + 1, N, row.t));
            }
        for (int c : seen) ASSERT_EQ(c, 1) << "G " << G << " T " << T;
      }
}

// The tensor-core kernel's shared-memory tiles: the swizzle is a bijection of each row's chunks, each ldmatrix
// matrix (8 lanes' rows) hits 8 different 16-byte bank groups (no bank conflicts), and the kernel's split lane +
// constant offsets are exactly pf_mma_chunk of the rows and chunks pf_mma_k_ldsm / pf_mma_v_ldsm name.
TEST(PrefillMath, MmaTileOffsetsAreSwizzledChunksWithoutBankConflicts) {
  for (int D : {64, 128}) {
    const int CH = D / 8;
    for (int r = 0; r < el::kPfMmaKeys; ++r) {
      std::vector<int> used(CH, 0);
      for (int c = 0; c < CH; ++c) {
        const int off = el::pf_mma_chunk(D, r, c);
        ASSERT_EQ(off / (D * 2), r);
        ++used[(off % (D * 2)) / 16];
      }
      for (int u : used) ASSERT_EQ(u, 1) << "D " << D << " row " << r;
    }
    auto conflict_free = [&](auto&& at) {  // at(lane) -> byte offset; the 4 matrices of an x4 are 4 phases
      for (int m = 0; m < 4; ++m) {
        std::vector<int> groups(8, 0);
        for (int l = 8 * m; l < 8 * m + 8; ++l) ++groups[(at(l) / 16) % 8];
        for (int x : groups)
          if (x != 1) return false;
      }
      return true;
    };
    for (int jn = 0; jn < el::kPfMmaKeys / 8; ++jn)
      for (int kp = 0; kp < D / 32; ++kp) {
        auto k_at = [&](int lane) {
          const auto a = el::pf_mma_k_ldsm(lane, jn, kp);
          return el::pf_mma_chunk(D, a.row, a.chunk);
        };
        for (int lane = 0; lane < 32; ++lane) {
          ASSERT_EQ(el::pf_mma_k_lane(D, lane, kp & 1) + el::pf_mma_k_const(D, jn, kp), k_at(lane))
              << "D " << D << " jn " << jn << " kp " << kp << " lane " << lane;
          ASSERT_EQ(el::pf_mma_k_ldsm(lane, jn, kp).row / 8, jn);
        }
        EXPECT_TRUE(conflict_free(k_at)) << "K D " << D << " jn " << jn << " kp " << kp;
      }
    for (int kk = 0; kk < el::kPfMmaKeys / 16; ++kk)
      for (int np = 0; np < D / 16; ++np) {
        auto v_at = [&](int lane) {
          const auto a = el::pf_mma_v_ldsm(lane, kk, np);
          return el::pf_mma_chunk(D, a.row, a.chunk);
        };
        for (int lane = 0; lane < 32; ++lane)
          ASSERT_EQ(el::pf_mma_v_lane(D, lane, np & 3) + el::pf_mma_v_const(D, kk, np), v_at(lane))
              << "D " << D << " kk " << kk << " np " << np << " lane " << lane;
        EXPECT_TRUE(conflict_free(v_at)) << "V D " << D << " kk " << kk << " np " << np;
      }
  }
}

// Launch limits for the supported range: grid x, y, z within CUDA's limits, splits bounded, the workspace small.
TEST(PrefillMath, PlanWithinLimits) {
  for (int T : {1, 16, 512, 4096})
    for (int N : {0, 1024, 131072})
      for (int G : {1, 2, 4, 8, 16})
        for (int Hkv : {1, 8, 64})
          for (int sms : {1, 132, 1024})
            for (const el::PfKernel kernel : {el::PfKernel::cuda_core, el::PfKernel::mma}) {
              const auto p = el::pf_plan(T, N, Hkv, G, sms, kernel);
              ASSERT_GE(std::int64_t(p.tiles) * p.tile_tokens, T);
              ASSERT_LT(std::int64_t(p.tiles - 1) * p.tile_tokens, T);
              ASSERT_GE(p.splits, 1);
              ASSERT_LE(p.splits, el::kPfMaxSplits);
              ASSERT_LE(p.splits, std::max(1, (N + T) / el::kPfMinSplitKeys));
              if (p.splits > 1) {
                ASSERT_LT(std::int64_t(p.tiles) * Hkv, 2 * sms);
              }
              ASSERT_LE(el::pf_workspace_floats(p, T, Hkv * G, 128), std::int64_t(1) << 28);
            }
}

namespace {
// The inputs of one causal-attention case: q [T][Hq][D], k and v [Hkv][N+T][D] in bf16 (seeds seed, seed + 1,
// seed + 2), and the kernels' score scale in the base-2 domain.
struct CausalInputs {
  int Hq = 0, cap = 0;
  float scale_log2 = 0;
  std::vector<std::uint16_t> q, k, v;
};
CausalInputs causal_inputs(int T, int N, int G, int Hkv, int D, std::uint64_t seed) {
  CausalInputs in;
  in.Hq = Hkv * G;
  in.cap = N + T;
  in.scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
  in.q.resize(std::size_t(T) * in.Hq * D);
  in.k.resize(std::size_t(Hkv) * in.cap * D);
  in.v.resize(in.k.size());
  fr::fill_bf16_uniform(in.q.data(), in.q.size(), seed, 2.0f);
  fr::fill_bf16_uniform(in.k.data(), in.k.size(), seed + 1, 2.0f);
  fr::fill_bf16_uniform(in.v.data(), in.v.size(), seed + 2, 1.0f);
  return in;
}

// Causal attention in double (row t, head h over keys 0..N+t, GQA group G) against a kernel's output out
// [T][Hq][D]: the largest and the rms error, and the rms of the reference. q [T][Hq][D], k and v [Hkv][N+T][D], bf16.
struct CausalErrors {
  double max_err = 0, rms = 0, rms_err = 0;
};
CausalErrors against_causal_attention(const std::vector<std::uint16_t>& q, const std::vector<std::uint16_t>& k,
                                      const std::vector<std::uint16_t>& v, int T, int N, int G, int Hkv, int D,
                                      const std::vector<float>& out) {
  const int Hq = Hkv * G, cap = N + T;
  auto Q = [&](int t, int h, int d) { return double(fr::bf16_to_f32(q[(std::size_t(t) * Hq + h) * D + d])); };
  auto K = [&](int h, int j, int d) { return double(fr::bf16_to_f32(k[(std::size_t(h) * cap + j) * D + d])); };
  auto V = [&](int h, int j, int d) { return double(fr::bf16_to_f32(v[(std::size_t(h) * cap + j) * D + d])); };
  double ss = 0, se = 0;
  CausalErrors r;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / G, keys = N + t + 1;
      std::vector<double> sc(static_cast<std::size_t>(keys));
      double mm = -1e300, sum = 0;
      for (int j = 0; j < keys; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += Q(t, h, e) * K(hk, j, e);
        sc[std::size_t(j)] = d / std::sqrt(double(D));
        mm = std::max(mm, sc[std::size_t(j)]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mm));
      for (int e = 0; e < D; ++e) {
        double a = 0;
        for (int j = 0; j < keys; ++j) a += sc[std::size_t(j)] * V(hk, j, e);
        a /= sum;
        const double got = out[(std::size_t(t) * Hq + h) * D + e];
        if (!std::isfinite(got)) return {INFINITY, 0, INFINITY};
        r.max_err = std::max(r.max_err, std::fabs(got - a));
        ss += a * a;
        se += (got - a) * (got - a);
      }
    }
  const double n = double(T) * Hq * D;
  r.rms = std::sqrt(ss / n);
  r.rms_err = std::sqrt(se / n);
  return r;
}
}  // namespace

// Each kernel's algorithm, tile by tile on the CPU (its row mapping and tiles, key tiles, mask, base-2 online
// softmax, splits and merge, fp32; the tensor-core kernel's P rounded to bf16 for P V as its A operand, the sums
// of P unrounded), against a direct causal attention in double: T not a multiple of the tile's tokens, G 1..16,
// with and without splits, prefix 0 and > 0.
TEST(PrefillMath, KernelEmulationMatchesCausalAttention) {
  struct C { int T, N, G, Hkv, D, splits; };
  for (const el::PfKernel kernel : {el::PfKernel::cuda_core, el::PfKernel::mma})
  for (const C c : {C{5, 0, 4, 2, 64, 1}, C{37, 300, 4, 2, 128, 1}, C{37, 300, 4, 2, 128, 5}, C{70, 64, 1, 1, 64, 3},
                    C{9, 700, 16, 1, 64, 4}, C{40, 33, 8, 2, 128, 2}}) {
    const CausalInputs in = causal_inputs(c.T, c.N, c.G, c.Hkv, c.D, 1);
    const int Hq = in.Hq, cap = in.cap, D = c.D;
    const auto &q = in.q, &k = in.k, &v = in.v;
    auto Q = [&](int t, int h, int d) { return fr::bf16_to_f32(q[(std::size_t(t) * Hq + h) * D + d]); };
    auto K = [&](int h, int p, int d) { return fr::bf16_to_f32(k[(std::size_t(h) * cap + p) * D + d]); };
    auto V = [&](int h, int p, int d) { return fr::bf16_to_f32(v[(std::size_t(h) * cap + p) * D + d]); };
    const float scale_log2 = in.scale_log2;
    el::PfPlan p = el::pf_plan(c.T, c.N, c.Hkv, c.G, 132, kernel);
    p.splits = c.splits;
    const bool mma = kernel == el::PfKernel::mma;
    const int KT = mma ? el::kPfMmaKeys : el::kPfKeys;
    const std::int64_t rows = std::int64_t(c.T) * Hq;
    std::vector<float> po(std::size_t(p.splits) * rows * D, 0.f), pml(std::size_t(p.splits) * rows * 2, 0.f);
    std::vector<float> out(std::size_t(rows) * D, NAN);
    for (int tile = 0; tile < p.tiles; ++tile)
      for (int hk = 0; hk < c.Hkv; ++hk)
        for (int sp = 0; sp < p.splits; ++sp) {
          const auto kr = el::pf_split_range(el::pf_tile_key_end(tile, c.G, c.T, c.N, kernel), p.splits, sp, KT);
          for (int r = 0; r < el::pf_rows_per_tile(kernel); ++r) {
            const auto row = el::pf_row_of(kernel, tile, r, hk, c.G);
            float m = -INFINITY, l = 0;
            std::vector<float> acc(D, 0.f);
            for (int kb = kr.k0; kb < kr.k1; kb += KT) {
              float s[el::kPfMmaKeys], mx = -INFINITY;
              for (int j = 0; j < KT; ++j) {
                const int key = kb + j;
                float dot = 0;
                if (key < kr.k1)
                  for (int d = 0; d < D; ++d)
                    dot = std::fma(row.t < c.T ? Q(row.t, row.hq, d) : 0.f, K(hk, key, d), dot);
                s[j] = (key < kr.k1 && row.t < c.T && el::pf_visible(key, c.N, row.t)) ? dot * scale_log2 : -INFINITY;
                mx = std::max(mx, s[j]);
              }
              const auto o = el::pf_online(m, mx);
              float sum = 0;
              for (int j = 0; j < KT; ++j) sum += (s[j] = exp2f(s[j] - o.m_use));
              l = l * o.alpha + sum;
              m = o.m_new;
              if (mma)
                for (int j = 0; j < KT; ++j) s[j] = fr::bf16_to_f32(fr::f32_to_bf16(s[j]));
              for (int d = 0; d < D; ++d) {
                acc[d] *= o.alpha;
                for (int j = 0; j < KT; ++j)
                  if (kb + j < kr.k1) acc[d] = std::fma(s[j], V(hk, kb + j, d), acc[d]);
              }
            }
            if (row.t >= c.T) continue;
            const std::int64_t orow = std::int64_t(row.t) * Hq + row.hq;
            if (p.splits == 1) {
              for (int d = 0; d < D; ++d) out[orow * D + d] = acc[d] / l;
            } else {
              for (int d = 0; d < D; ++d) po[(sp * rows + orow) * D + d] = acc[d];
              pml[(sp * rows + orow) * 2] = m;
              pml[(sp * rows + orow) * 2 + 1] = l;
            }
          }
        }
    if (p.splits > 1)
      for (std::int64_t i = 0; i < rows * D; ++i)
        out[i] = el::pf_merge(po.data(), pml.data(), p.splits, rows, i / D, D, int(i % D));
    const CausalErrors er = against_causal_attention(q, k, v, c.T, c.N, c.G, c.Hkv, D, out);
    const double rms = er.rms, mx_err = er.max_err, rms_err = er.rms_err;
    // bf16 P (the tensor-core kernel): up to 2^-9 of each probability, as large against these random V rows' output
    // as the output's own bf16 rounding: measured max 0.6%, rms 0.1% of the rms; within the verify tolerances of the
    // layer (kVerifyMaxTol 2e-2, kVerifyRmsTol 4e-3). The CUDA-core kernel is fp32 throughout.
    const double tol = mma ? 1e-2 : 1e-5;
    EXPECT_LE(mx_err, tol * std::max(rms, 1e-2)) << (mma ? "mma" : "cuda_core") << " T " << c.T << " N " << c.N
                                                 << " G " << c.G << " splits " << c.splits << " rms " << rms
                                                 << " max err " << mx_err;
    EXPECT_LE(rms_err, (mma ? 2e-3 : 1e-6) * std::max(rms, 1e-2)) << (mma ? "mma" : "cuda_core") << " T " << c.T
                                                                   << " rms err " << rms_err;
  }
}

namespace {
// The PTX ISA's fragment layouts, emulated on the CPU: ldmatrix.sync.m8n8.x4(.trans).b16 and
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 (lane = 4 g + t).
using Regs4 = std::array<std::uint32_t, 4>;
std::uint32_t ld16(const std::vector<std::uint8_t>& smem, int byte) {
  return std::uint32_t(smem[std::size_t(byte)]) | (std::uint32_t(smem[std::size_t(byte) + 1]) << 8);
}
// Lane L gives the address of row L % 8 of matrix L / 8. Not transposed: register m of lane 4 g + t holds row g,
// elements 2t, 2t+1 of matrix m; transposed: elements (row 2t, column g) and (row 2t+1, column g).
std::array<Regs4, 32> ldsm_x4(const std::vector<std::uint8_t>& smem, const std::array<int, 32>& addr, bool trans) {
  std::array<Regs4, 32> out{};
  for (int m = 0; m < 4; ++m)
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      const std::uint32_t lo = trans ? ld16(smem, addr[8 * m + 2 * t] + 2 * g) : ld16(smem, addr[8 * m + g] + 4 * t);
      const std::uint32_t hi =
          trans ? ld16(smem, addr[8 * m + 2 * t + 1] + 2 * g) : ld16(smem, addr[8 * m + g] + 4 * t + 2);
      out[lane][m] = lo | (hi << 16);
    }
  return out;
}
float lo_f(std::uint32_t w) { return fr::bf16_to_f32(std::uint16_t(w & 0xffffu)); }
float hi_f(std::uint32_t w) { return fr::bf16_to_f32(std::uint16_t(w >> 16)); }
// c[lane] += A B: A (16 x 16) from a[lane] = (row g, k 2t..), (row g+8, k 2t..), (row g, k 2t+8..),
// (row g+8, k 2t+8..); B (16 x 8) from b[lane] = (k 2t, 2t+1; n g), (k 2t+8, 2t+9; n g); c[lane] = (g, 2t),
// (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
void mma(std::array<std::array<float, 4>, 32>& c, const std::array<Regs4, 32>& a,
         const std::array<std::array<std::uint32_t, 2>, 32>& b) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i & 1), k = 2 * t + 8 * (i >> 1);
      A[r][k] = lo_f(a[lane][i]);
      A[r][k + 1] = hi_f(a[lane][i]);
    }
    for (int i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = lo_f(b[lane][i]);
      B[2 * t + 8 * i + 1][g] = hi_f(b[lane][i]);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e >> 1), n = 2 * t + (e & 1);
      double s = 0;
      for (int k = 0; k < 16; ++k) s += A[r][k] * B[k][n];
      c[lane][e] += float(s);
    }
  }
}

using Frag = std::array<std::array<float, 4>, 32>;  // one n-tile's C fragment, per lane
using BRegs = std::array<std::array<std::uint32_t, 2>, 32>;

// A key tile in shared memory as the kernel's cp.async leaves it: row r < valid from rows + r D at pf_mma_chunk,
// zeros past (the zero-filled copies).
std::vector<std::uint8_t> smem_tile(const std::uint16_t* rows, int D, int valid) {
  std::vector<std::uint8_t> tile(std::size_t(el::kPfMmaKeys) * D * 2, 0);
  for (int r = 0; r < std::min(valid, el::kPfMmaKeys); ++r)
    for (int c = 0; c < D / 8; ++c)
      std::memcpy(&tile[std::size_t(el::pf_mma_chunk(D, r, c))], rows + std::size_t(r) * D + 8 * c, 16);
  return tile;
}
// The kernel's Q registers of one warp: word(lane, i, w) is word w (dims 2w, 2w+1) of the lane's row i (0: g,
// 1: g + 8), as its __ldg reads them.
std::vector<std::array<Regs4, 32>> q_frags(int D, const std::function<std::uint32_t(int, int, int)>& word) {
  std::vector<std::array<Regs4, 32>> qa(std::size_t(D / 16));
  for (int ks = 0; ks < D / 16; ++ks)
    for (int lane = 0; lane < 32; ++lane) {
      const int t = lane % 4;
      qa[std::size_t(ks)][lane] = {word(lane, 0, ks * 8 + t), word(lane, 1, ks * 8 + t), word(lane, 0, ks * 8 + 4 + t),
                                   word(lane, 1, ks * 8 + 4 + t)};
    }
  return qa;
}
// An x4 load's four registers per lane as the B operands of two mma: (regs 0, 1) and (regs 2, 3).
std::array<BRegs, 2> b_pairs(const std::array<Regs4, 32>& bm) {
  std::array<BRegs, 2> b{};
  for (int lane = 0; lane < 32; ++lane) {
    b[0][lane] = {bm[lane][0], bm[lane][1]};
    b[1][lane] = {bm[lane][2], bm[lane][3]};
  }
  return b;
}
// The kernel's S = Q K^T of one warp over a key tile: 8 n-tiles x D/16 k-steps, K by ldmatrix at
// pf_mma_k_lane + pf_mma_k_const.
void emulate_qk(const std::vector<std::uint8_t>& kt, const std::vector<std::array<Regs4, 32>>& qa, int D,
                std::vector<Frag>& s) {
  for (int jn = 0; jn < 8; ++jn)
    for (int kp = 0; kp < D / 32; ++kp) {
      std::array<int, 32> addr{};
      for (int lane = 0; lane < 32; ++lane)
        addr[lane] = el::pf_mma_k_lane(D, lane, kp & 1) + el::pf_mma_k_const(D, jn, kp);
      const auto b = b_pairs(ldsm_x4(kt, addr, false));
      mma(s[std::size_t(jn)], qa[std::size_t(2 * kp)], b[0]);
      mma(s[std::size_t(jn)], qa[std::size_t(2 * kp + 1)], b[1]);
    }
}
// The kernel's O += P V: P's A registers from the S registers (n-tiles 2 kk, 2 kk + 1 for k-step kk, packed to
// bf16 as the kernel packs them), V by ldmatrix.trans at pf_mma_v_lane + pf_mma_v_const.
void emulate_pv(const std::vector<std::uint8_t>& vt, const std::vector<Frag>& p, int D, std::vector<Frag>& acc) {
  auto pack = [](float lo, float hi) {
    return std::uint32_t(fr::f32_to_bf16(lo)) | (std::uint32_t(fr::f32_to_bf16(hi)) << 16);
  };
  for (int kk = 0; kk < el::kPfMmaKeys / 16; ++kk) {
    std::array<Regs4, 32> pa{};
    for (int lane = 0; lane < 32; ++lane) {
      const auto& p0 = p[std::size_t(2 * kk)][lane];
      const auto& p1 = p[std::size_t(2 * kk + 1)][lane];
      pa[lane] = {pack(p0[0], p0[1]), pack(p0[2], p0[3]), pack(p1[0], p1[1]), pack(p1[2], p1[3])};
    }
    for (int np = 0; np < D / 16; ++np) {
      std::array<int, 32> addr{};
      for (int lane = 0; lane < 32; ++lane)
        addr[lane] = el::pf_mma_v_lane(D, lane, np & 3) + el::pf_mma_v_const(D, kk, np);
      const auto b = b_pairs(ldsm_x4(vt, addr, true));
      mma(acc[std::size_t(2 * np)], pa, b[0]);
      mma(acc[std::size_t(2 * np + 1)], pa, b[1]);
    }
  }
}
}  // namespace

// One warp of the tensor-core kernel on one 64-key tile, through its register maps as prefill_attn_gpu.cu builds them
// (Q words of rows g and g + 8, the S accumulators as P's A operand) and its shared-memory offsets (the K and V tiles
// laid out by pf_mma_chunk, ldmatrix at pf_mma_k_lane + pf_mma_k_const and pf_mma_v_lane + pf_mma_v_const), with
// ldmatrix and mma emulated from the PTX fragment layouts: S = Q K^T and O = P V against direct sums.
TEST(PrefillMath, MmaWarpTileThroughTheFragmentLayouts) {
  for (const int D : {64, 128}) {
    const int KT = el::kPfMmaKeys, NT = D / 8;
    std::vector<std::uint16_t> q(16 * std::size_t(D)), k(std::size_t(KT) * D), v(k.size());
    fr::fill_bf16_uniform(q.data(), q.size(), 11, 2.0f);
    fr::fill_bf16_uniform(k.data(), k.size(), 12, 2.0f);
    fr::fill_bf16_uniform(v.data(), v.size(), 13, 1.0f);
    const auto kt = smem_tile(k.data(), D, KT), vt = smem_tile(v.data(), D, KT);
    const auto qa = q_frags(D, [&](int lane, int i, int w) {  // rows g and g + 8 of the warp's 16
      const std::size_t at = std::size_t(lane / 4 + 8 * i) * D + 2 * std::size_t(w);
      return std::uint32_t(q[at]) | (std::uint32_t(q[at + 1]) << 16);
    });
    std::vector<Frag> s(8, Frag{}), acc(std::size_t(NT), Frag{});
    emulate_qk(kt, qa, D, s);
    auto Qf = [&](int r, int d) { return double(fr::bf16_to_f32(q[std::size_t(r) * D + d])); };
    auto Kf = [&](int key, int d) { return double(fr::bf16_to_f32(k[std::size_t(key) * D + d])); };
    auto Vf = [&](int key, int d) { return double(fr::bf16_to_f32(v[std::size_t(key) * D + d])); };
    double p_ref[16][64];
    for (int jn = 0; jn < 8; ++jn)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int r = lane / 4 + 8 * (e >> 1), key = 8 * jn + 2 * (lane % 4) + (e & 1);
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += Qf(r, d) * Kf(key, d);
          ASSERT_NEAR(s[jn][lane][e], dot, 1e-4 * (1 + std::fabs(dot))) << "D " << D << " row " << r << " key " << key;
          // Some probability-like P from S (the kernel's exp2 of the scaled, masked S), rounded as the kernel packs it.
          s[jn][lane][e] = std::exp2(float(dot) * 0.05f);
          p_ref[r][key] = fr::bf16_to_f32(fr::f32_to_bf16(s[jn][lane][e]));
        }
    emulate_pv(vt, s, D, acc);
    for (int nt = 0; nt < NT; ++nt)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int r = lane / 4 + 8 * (e >> 1), d = 8 * nt + 2 * (lane % 4) + (e & 1);
          double o = 0, mag = 0;
          for (int key = 0; key < KT; ++key) {
            o += p_ref[r][key] * Vf(key, d);
            mag += std::fabs(p_ref[r][key] * Vf(key, d));
          }
          ASSERT_NEAR(acc[nt][lane][e], o, 1e-5 * (1 + mag)) << "D " << D << " row " << r << " dim " << d;
        }
  }
}

namespace {
// One CTA of prefill_attn_mma_kernel<D>, lane by lane: its smem image per key tile (zero rows past the split's end),
// its Q, S and P registers, the online-softmax step of decode_math.hpp (pf_mma_mask_scale, the max over the row's
// 4 lanes, pf_mma_softmax) and its epilogue, with ldmatrix and mma emulated. Writes out (bf16 widened) or the
// split's part_o / part_ml as the kernel does.
template <int D>
void emulate_mma_cta(const std::vector<std::uint16_t>& q, const std::vector<std::uint16_t>& k,
                     const std::vector<std::uint16_t>& v, int T, int N, int cap, int Hq, int G, float scale_log2,
                     int splits, int tile, int hk, int split, std::vector<float>& part_o, std::vector<float>& part_ml,
                     std::vector<float>& out) {
  constexpr int KT = el::kPfMmaKeys, NT = D / 8;
  const el::PfKernel kK = el::PfKernel::mma;
  const auto kr = el::pf_split_range(el::pf_tile_key_end(tile, G, T, N, kK), splits, split, KT);
  const std::uint16_t* kh = k.data() + std::size_t(hk) * cap * D;
  const std::uint16_t* vh = v.data() + std::size_t(hk) * cap * D;
  const std::int64_t rows = std::int64_t(T) * Hq;
  for (int warp = 0; warp < el::kPfMmaWarps; ++warp) {
    el::PfRow row[32][2];
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 2; ++i) row[lane][i] = el::pf_row_of(kK, tile, 16 * warp + lane / 4 + 8 * i, hk, G);
    const auto qa = q_frags(D, [&](int lane, int i, int w) -> std::uint32_t {
      const el::PfRow r = row[lane][i];
      if (r.t >= T) return 0u;
      const std::size_t at = (std::size_t(r.t) * Hq + r.hq) * D + 2 * std::size_t(w);
      return std::uint32_t(q[at]) | (std::uint32_t(q[at + 1]) << 16);
    });
    float m_run[32][2], l_run[32][2];
    for (auto& x : m_run) x[0] = x[1] = -INFINITY;
    for (auto& x : l_run) x[0] = x[1] = 0.f;
    std::vector<Frag> acc(std::size_t(NT), Frag{});
    for (int kb = kr.k0; kb < kr.k1; kb += KT) {
      const auto kt = smem_tile(kh + std::size_t(kb) * D, D, kr.k1 - kb);
      const auto vt = smem_tile(vh + std::size_t(kb) * D, D, kr.k1 - kb);
      std::vector<Frag> s(8, Frag{});
      emulate_qk(kt, qa, D, s);
      // The softmax step per lane, the row max over each quad between its halves (the kernel's two shuffles).
      float sl[32][8][4], al[32][NT][4];
      for (int lane = 0; lane < 32; ++lane) {
        for (int jn = 0; jn < 8; ++jn)
          for (int e = 0; e < 4; ++e) sl[lane][jn][e] = s[std::size_t(jn)][lane][e];
        for (int nt = 0; nt < NT; ++nt)
          for (int e = 0; e < 4; ++e) al[lane][nt][e] = acc[std::size_t(nt)][lane][e];
      }
      for (int i = 0; i < 2; ++i) {
        float mx[32];
        for (int lane = 0; lane < 32; ++lane)
          mx[lane] = el::pf_mma_mask_scale(sl[lane], i, kb, lane % 4, kr.k1, row[lane][i].t, T, N, scale_log2);
        for (int lane = 0; lane < 32; ++lane) {
          const int q0 = lane & ~3;
          const float quad = std::max(std::max(mx[q0], mx[q0 + 1]), std::max(mx[q0 + 2], mx[q0 + 3]));
          el::pf_mma_softmax(sl[lane], al[lane], i, quad, m_run[lane][i], l_run[lane][i]);
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        for (int jn = 0; jn < 8; ++jn)
          for (int e = 0; e < 4; ++e) s[std::size_t(jn)][lane][e] = sl[lane][jn][e];
        for (int nt = 0; nt < NT; ++nt)
          for (int e = 0; e < 4; ++e) acc[std::size_t(nt)][lane][e] = al[lane][nt][e];
      }
      emulate_pv(vt, s, D, acc);
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int t = lane % 4, q0 = lane & ~3;
      for (int i = 0; i < 2; ++i) {
        const float l = l_run[q0][i] + l_run[q0 + 1][i] + l_run[q0 + 2][i] + l_run[q0 + 3][i];
        const el::PfRow r = row[lane][i];
        if (r.t >= T) continue;
        const std::int64_t orow = std::int64_t(r.t) * Hq + r.hq;
        for (int nt = 0; nt < NT; ++nt)
          for (int e = 0; e < 2; ++e) {
            const int d = 8 * nt + 2 * t + e;
            const float a = acc[nt][lane][2 * i + e];
            if (splits == 1)
              out[std::size_t(orow) * D + d] = fr::bf16_to_f32(fr::f32_to_bf16(a * (1.0f / l)));
            else
              part_o[std::size_t(std::int64_t(split) * rows + orow) * D + d] = a;
          }
        if (splits > 1 && t == 0) {
          part_ml[std::size_t(std::int64_t(split) * rows + orow) * 2] = m_run[lane][i];
          part_ml[std::size_t(std::int64_t(split) * rows + orow) * 2 + 1] = l;
        }
      }
    }
  }
}
}  // namespace

// The tensor-core kernel lane by lane (every CTA of the grid through emulate_mma_cta, then the merge) against a
// direct causal attention in double: T not a multiple of the tile's tokens, G 1..16, splits (some empty for the
// first tiles), prefix 0 and > 0, head dims 64 and 128.
TEST(PrefillMath, MmaKernelLaneByLaneMatchesCausalAttention) {
  struct C { int T, N, G, Hkv, D, splits; };
  for (const C c : {C{37, 300, 4, 2, 128, 1}, C{40, 33, 8, 2, 128, 3}, C{9, 700, 16, 1, 64, 4}, C{70, 64, 1, 1, 64, 3},
                    C{5, 0, 4, 1, 128, 1}, C{100, 0, 2, 1, 64, 2}}) {
    const CausalInputs in = causal_inputs(c.T, c.N, c.G, c.Hkv, c.D, 21);
    const int Hq = in.Hq, cap = in.cap, D = c.D;
    const auto &q = in.q, &k = in.k, &v = in.v;
    const float scale_log2 = in.scale_log2;
    el::PfPlan p = el::pf_plan(c.T, c.N, c.Hkv, c.G, 132, el::PfKernel::mma);
    p.splits = c.splits;
    const std::int64_t rows = std::int64_t(c.T) * Hq;
    std::vector<float> po(std::size_t(p.splits) * rows * D, NAN), pml(std::size_t(p.splits) * rows * 2, NAN);
    std::vector<float> out(std::size_t(rows) * D, NAN);
    for (int tile = 0; tile < p.tiles; ++tile)
      for (int hk = 0; hk < c.Hkv; ++hk)
        for (int sp = 0; sp < p.splits; ++sp) {
          if (D == 128)
            emulate_mma_cta<128>(q, k, v, c.T, c.N, cap, Hq, c.G, scale_log2, p.splits, tile, hk, sp, po, pml, out);
          else
            emulate_mma_cta<64>(q, k, v, c.T, c.N, cap, Hq, c.G, scale_log2, p.splits, tile, hk, sp, po, pml, out);
        }
    if (p.splits > 1)
      for (std::int64_t i = 0; i < rows * D; ++i)
        out[std::size_t(i)] = fr::bf16_to_f32(
            fr::f32_to_bf16(el::pf_merge(po.data(), pml.data(), p.splits, rows, i / D, D, int(i % D))));
    const CausalErrors er = against_causal_attention(q, k, v, c.T, c.N, c.G, c.Hkv, D, out);
    const double rms = er.rms, mx_err = er.max_err, rms_err = er.rms_err;
    // bf16 P and the bf16 output (the CUDA-core kernel's rounding point too): measured max 1.2-1.5% and rms 0.1-0.2%
    // of the rms, against the layer's verify tolerances 2e-2 and 4e-3; a lane's wrong key, row or dim is O(1).
    EXPECT_LE(mx_err, 2e-2 * std::max(rms, 1e-2)) << "T " << c.T << " N " << c.N << " G " << c.G << " D " << D
                                                  << " splits " << c.splits << " rms " << rms << " max " << mx_err;
    EXPECT_LE(rms_err, 3e-3 * std::max(rms, 1e-2)) << "T " << c.T << " N " << c.N << " rms err " << rms_err;
  }
}
