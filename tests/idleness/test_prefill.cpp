// The prefill chunk: the CPU twin against the reference (kernels/decode/decode.hpp: check_prefill_rows, the decode
// tolerance), the check's teeth, and the GPU causal attention's index/mask/softmax math (decode_math.hpp pf_*) run
// on the CPU: a tile-by-tile emulation of prefill_attn_gpu.cu against a direct causal attention, split coverage,
// and launch limits for T up to 4096 and N up to 128K.
#include "kvf/model_shapes.hpp"
#include <gtest/gtest.h>

#include <cmath>
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
  for (int G : {1, 2, 4, 8, 16})
    for (int T : {1, 7, 32, 100}) {
      const int Hkv = 3, Hq = Hkv * G, N = 50;
      const auto p = el::pf_plan(T, N, Hkv, G, 132);
      std::vector<int> seen(std::size_t(T) * Hq, 0);
      for (int tile = 0; tile < p.tiles; ++tile)
        for (int hk = 0; hk < Hkv; ++hk)
          for (int r = 0; r < el::kPfRows; ++r) {
            const auto row = el::pf_row(tile, r, hk, G);
            ASSERT_EQ(row.hq / G, hk);
            if (row.t >= T) continue;
            ++seen[std::size_t(row.t) * Hq + row.hq];
            ASSERT_GE(el::pf_tile_key_end(tile, G, T, N), N + row.t + 1);
            ASSERT_TRUE(el::pf_visible(N + row.t, N, row.t));
            ASSERT_FALSE(el::pf_visible(N + row.t + 1, N, row.t));
          }
      for (int c : seen) ASSERT_EQ(c, 1) << "G " << G << " T " << T;
    }
}

// Launch limits for the supported range: grid x, y, z within CUDA's limits, splits bounded, the workspace small.
TEST(PrefillMath, PlanWithinLimits) {
  for (int T : {1, 16, 512, 4096})
    for (int N : {0, 1024, 131072})
      for (int G : {1, 2, 4, 8, 16})
        for (int Hkv : {1, 8, 64})
          for (int sms : {1, 132, 1024}) {
            const auto p = el::pf_plan(T, N, Hkv, G, sms);
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

// The kernel's algorithm, tile by tile on the CPU (same row mapping, key tiles, mask, base-2 online softmax, splits
// and merge, fp32), against a direct causal attention in double: T not a multiple of the tile's tokens, G 1..16,
// with and without splits, prefix 0 and > 0.
TEST(PrefillMath, KernelEmulationMatchesCausalAttention) {
  struct C { int T, N, G, Hkv, D, splits; };
  for (const C c : {C{5, 0, 4, 2, 64, 1}, C{37, 300, 4, 2, 128, 1}, C{37, 300, 4, 2, 128, 5}, C{70, 64, 1, 1, 64, 3},
                    C{9, 700, 16, 1, 64, 4}, C{40, 33, 8, 2, 128, 2}}) {
    const int Hq = c.Hkv * c.G, cap = c.N + c.T, D = c.D;
    std::vector<std::uint16_t> q(std::size_t(c.T) * Hq * D), k(std::size_t(c.Hkv) * cap * D), v(k.size());
    fr::fill_bf16_uniform(q.data(), q.size(), 1, 2.0f);
    fr::fill_bf16_uniform(k.data(), k.size(), 2, 2.0f);
    fr::fill_bf16_uniform(v.data(), v.size(), 3, 1.0f);
    auto Q = [&](int t, int h, int d) { return fr::bf16_to_f32(q[(std::size_t(t) * Hq + h) * D + d]); };
    auto K = [&](int h, int p, int d) { return fr::bf16_to_f32(k[(std::size_t(h) * cap + p) * D + d]); };
    auto V = [&](int h, int p, int d) { return fr::bf16_to_f32(v[(std::size_t(h) * cap + p) * D + d]); };
    const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
    el::PfPlan p = el::pf_plan(c.T, c.N, c.Hkv, c.G, 132);
    p.splits = c.splits;
    const std::int64_t rows = std::int64_t(c.T) * Hq;
    std::vector<float> po(std::size_t(p.splits) * rows * D, 0.f), pml(std::size_t(p.splits) * rows * 2, 0.f);
    std::vector<float> out(std::size_t(rows) * D, NAN);
    for (int tile = 0; tile < p.tiles; ++tile)
      for (int hk = 0; hk < c.Hkv; ++hk)
        for (int sp = 0; sp < p.splits; ++sp) {
          const auto kr = el::pf_split_range(el::pf_tile_key_end(tile, c.G, c.T, c.N), p.splits, sp);
          for (int r = 0; r < el::kPfRows; ++r) {
            const auto row = el::pf_row(tile, r, hk, c.G);
            float m = -INFINITY, l = 0;
            std::vector<float> acc(D, 0.f);
            for (int kb = kr.k0; kb < kr.k1; kb += el::kPfKeys) {
              float s[el::kPfKeys], mx = -INFINITY;
              for (int j = 0; j < el::kPfKeys; ++j) {
                const int key = kb + j;
                float dot = 0;
                if (key < kr.k1)
                  for (int d = 0; d < D; ++d) dot = std::fma(row.t < c.T ? Q(row.t, row.hq, d) : 0.f, K(hk, key, d), dot);
                s[j] = (key < kr.k1 && row.t < c.T && el::pf_visible(key, c.N, row.t)) ? dot * scale_log2 : -INFINITY;
                mx = std::max(mx, s[j]);
              }
              const auto o = el::pf_online(m, mx);
              float sum = 0;
              for (int j = 0; j < el::kPfKeys; ++j) sum += (s[j] = exp2f(s[j] - o.m_use));
              l = l * o.alpha + sum;
              m = o.m_new;
              for (int d = 0; d < D; ++d) {
                acc[d] *= o.alpha;
                for (int j = 0; j < el::kPfKeys; ++j)
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
    // Direct: row t, head h over keys 0..N+t, in double.
    double mx_err = 0, ss = 0;
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < Hq; ++h) {
        const int hk = h / c.G, keys = c.N + t + 1;
        std::vector<double> sc(keys);
        double mm = -1e300, sum = 0;
        for (int j = 0; j < keys; ++j) {
          double d = 0;
          for (int e = 0; e < D; ++e) d += double(Q(t, h, e)) * K(hk, j, e);
          sc[j] = d / std::sqrt(double(D));
          mm = std::max(mm, sc[j]);
        }
        for (auto& x : sc) sum += (x = std::exp(x - mm));
        for (int e = 0; e < D; ++e) {
          double a = 0;
          for (int j = 0; j < keys; ++j) a += sc[j] * V(hk, j, e);
          a /= sum;
          const double got = out[(std::size_t(t) * Hq + h) * D + e];
          ASSERT_TRUE(std::isfinite(got)) << t << " " << h << " " << e;
          mx_err = std::max(mx_err, std::fabs(got - a));
          ss += a * a;
        }
      }
    const double rms = std::sqrt(ss / (double(c.T) * Hq * D));
    EXPECT_LE(mx_err, 1e-5 * std::max(rms, 1e-2)) << "T " << c.T << " N " << c.N << " G " << c.G << " splits "
                                                   << c.splits << " rms " << rms;
  }
}
