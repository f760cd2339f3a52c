// The packed f16 PV of the GPU attention's fp8 e4m3 K/V path (attn_fp8.hpp) run on the host with the
// kernel's own functions: the f16 FMA emulation against an independent oracle, the PV step on adversarial
// inputs (e4m3 at +-448, exact cancellation, p down to the f16 subnormals, a running rescale) against the
// error bound stated in attn_fp8.hpp / kernels/access/README.md, and the whole fp8 token loop of one CTA
// emulated step by step (fp32 QK lane partials, butterfly sums, online softmax, f16 PV, lane-group merge)
// against the fp64 reference within kAttnTolerance, the GPU verify step's tolerance, flat and sharp
// softmaxes, contexts up to 256K.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "access.hpp"
#include "attn_fp8.hpp"
#include "fp8_attn_reference.hpp"

using namespace kvf::access;

namespace {

constexpr double kU = 1.0 / 2048.0;  // f16 unit roundoff 2^-11
double gamma_n(int n) { return n * kU / (1.0 - n * kU); }

__half h_of(std::uint16_t bits) { return __ushort_as_half(bits); }
double d_of(__half h) { return static_cast<double>(__half2float(h)); }

// f16 neighbours of a double (the two adjacent finite f16 values around x, equal when x is one).
bool is_f16_midpoint(double x) {
  const __half r = __double2half(x);
  const double rd = d_of(r);
  if (rd == x || std::isinf(rd)) return false;
  const std::uint16_t b = __half_as_ushort(r);
  const bool up = (x > rd) == (rd >= 0.0);  // the other neighbour lies away from zero
  const std::uint16_t nb = static_cast<std::uint16_t>(up ? b + 1 : b - 1);
  if ((b & 0x7FFFu) == 0 && !up) return false;
  return 2.0 * x == rd + d_of(h_of(nb));
}

std::uint16_t random_finite_f16(std::mt19937_64& rng) {
  for (;;) {
    const auto b = static_cast<std::uint16_t>(rng());
    if ((b & 0x7C00u) != 0x7C00u) return b;
  }
}

// HFMA emulation: one rounding of the exact a*b + c. Oracle: std::fma in double is the exact result
// rounded once to 53 bits; rounding that to f16 is the exact result's f16 rounding unless it lands on an
// f16 midpoint (double rounding), which the oracle skips.
TEST(AttnFp8Packed, HfmaEmulationMatchesOracle) {
  std::mt19937_64 rng(14);
  int checked = 0, skipped = 0, int128_path = 0;
  for (int i = 0; i < 400000; ++i) {
    __half a = h_of(random_finite_f16(rng)), b = h_of(random_finite_f16(rng)), c = h_of(random_finite_f16(rng));
    if (i % 4 == 1) b = h_of(static_cast<std::uint16_t>(rng() & 0x83FFu));  // subnormal products
    const double exact = std::fma(d_of(a), d_of(b), d_of(c));
    const double p = d_of(a) * d_of(b);
    if (p + d_of(c) - p != d_of(c) || p + d_of(c) - d_of(c) != p) ++int128_path;
    if (is_f16_midpoint(exact)) {
      ++skipped;
      continue;
    }
    const __half want = __double2half(exact);
    const __half got = hfma2_rn(__halves2half2(a, a), __halves2half2(b, b), __halves2half2(c, c)).x;
    if (std::isnan(d_of(want))) continue;
    ASSERT_EQ(d_of(got), d_of(want)) << d_of(a) << " * " << d_of(b) << " + " << d_of(c);
    ++checked;
  }
  EXPECT_GT(checked, 390000);
  EXPECT_GT(int128_path, 1000);  // inexact double sums (tiny product beside a large c) were exercised
  // Hand-made: (1.5 * 683/1024) = 1 + 2^-11 is an f16 midpoint; the tiny addend decides the direction.
  const __half a = __float2half(1.5f), b = __float2half(683.0f / 1024.0f);
  const __half tiny = h_of(0x0001u), ntiny = h_of(0x8001u), zero = __float2half(0.0f);
  auto f = [](__half x, __half y, __half z) { return d_of(hfma2_rn(__halves2half2(x, x), __halves2half2(y, y), __halves2half2(z, z)).x); };
  EXPECT_EQ(f(a, b, zero), 1.0);                      // tie to even
  EXPECT_EQ(f(a, b, tiny), 1.0 + 1.0 / 1024.0);      // just above the midpoint
  EXPECT_EQ(f(a, b, ntiny), 1.0);                     // just below
  EXPECT_EQ(f(__float2half(256.0f), __float2half(256.0f), zero), INFINITY);  // 65536 overflows
  EXPECT_EQ(f(tiny, tiny, __float2half(1.0f)), 1.0);  // 2^-48 beside 1: the emulation's wide path
}

using fp8_test::e4m3_random;

// ---- PV: one step of U tokens, GB heads, 16 elements of one lane ---------------------------------------
TEST(AttnFp8Packed, PvStepAdversarialWithinBound) {
  constexpr int U = 4, GB = 4;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  double worst = 0.0;
  for (int it = 0; it < 20000; ++it) {
    const int kind = it % 5;
    std::uint32_t vw[U][4] = {};
    std::uint8_t vb[U][16];
    float p[U][GB], alpha[GB], acc[GB][16], acc0[GB][16];
    __half2 ph[U][GB];
    for (int u = 0; u < U; ++u) {
      for (int j = 0; j < 16; ++j) {
        vb[u][j] = kind == 0 ? 0x7E : kind == 1 ? static_cast<std::uint8_t>(u % 2 ? 0xFE : 0x7E) : e4m3_random(rng);
        vw[u][j / 4] |= std::uint32_t{vb[u][j]} << (8 * (j % 4));
      }
      for (int g = 0; g < GB; ++g) {
        float x = kind == 0 ? 1.0f : kind == 3 ? std::ldexp(uni(rng), -static_cast<int>(rng() % 40)) : uni(rng);
        if (kind == 1) x = 1.0f;  // equal weights on +448 / -448 rows: the step cancels exactly
        p[u][g] = x * kFp8PScale;  // as the kernel: p = 2^(s - m) <= 1, scaled
        ph[u][g] = __float2half2_rn(p[u][g]);
      }
    }
    for (int g = 0; g < GB; ++g) {
      alpha[g] = kind == 4 ? uni(rng) : 1.0f;
      for (int j = 0; j < 16; ++j) acc[g][j] = acc0[g][j] = kind == 4 ? 1000.0f * (uni(rng) - 0.5f) : 0.0f;
    }
    fp8_pv_step<U, GB>(vw, ph, alpha, acc);
    for (int g = 0; g < GB; ++g)
      for (int j = 0; j < 16; ++j) {
        double h = 0.0, hp = 0.0, v1 = 0.0;
        for (int u = 0; u < U; ++u) {
          const double v = e4m3_to_f32(vb[u][j]);
          h += static_cast<double>(p[u][g]) * v;
          hp += std::fabs(static_cast<double>(p[u][g]) * v);
          v1 += std::fabs(v) + 1.0;
        }
        const double ref = static_cast<double>(acc0[g][j]) * alpha[g] + h;
        // f16 step bound, then the fp32 fold (one FMA rounding of a value below |acc alpha| + hp (1 + ...)).
        const double step = (kU + gamma_n(U) + std::ldexp(1.0, -20)) * hp + std::ldexp(1.0, -25) * v1;
        const double bound = step + std::ldexp(1.0, -24) * (std::fabs(acc0[g][j] * alpha[g]) + hp + step);
        ASSERT_TRUE(std::isfinite(acc[g][j])) << "kind " << kind;
        const double err = std::fabs(acc[g][j] - ref);
        ASSERT_LE(err, bound) << "kind " << kind << " g " << g << " j " << j << " got " << acc[g][j] << " ref " << ref;
        if (bound > 0) worst = std::fmax(worst, err / bound);
      }
  }
  std::printf("[ fp8 PV ] worst error / bound %.3g\n", worst);
}

// ---- The fp8 token loop of one CTA (D = 128: 16 lane groups of 8 lanes, U = 4, GB = 4 heads) ------------
struct Head {
  float m = kAttnEmptyM, l = 0.0f;
  std::vector<float> acc;
};

// Tokens t = base + u*16 + grp of lane group grp, step by step as attn_split_kernel does for fp8.
void lane_group(int grp, int n, int D, const std::vector<float>& q, const std::vector<std::uint8_t>& k,
                const std::vector<std::uint8_t>& v, float qscale, std::vector<Head>& out) {
  constexpr int U = 4, GB = 4, TPC = 16;
  const int LT = D / 16;
  std::vector<float> qf(static_cast<std::size_t>(GB) * D);  // q * qscale, as the kernel's registers
  for (std::size_t i = 0; i < qf.size(); ++i) qf[i] = q[i] * qscale;
  out.assign(GB, Head{});
  std::vector<float> acc(static_cast<std::size_t>(LT) * GB * 16, 0.0f);  // [lane][g][16]
  auto words = [&](const std::vector<std::uint8_t>& x, int t, int l, std::uint32_t (&w)[4]) {
    for (int i = 0; i < 4; ++i) {
      w[i] = 0;
      if (t < n)
        for (int by = 0; by < 4; ++by) w[i] |= std::uint32_t{x[static_cast<std::size_t>(t) * D + 16 * l + 4 * i + by]} << (8 * by);
    }
  };
  for (int base = 0; base < n; base += TPC * U) {
    float s[U][GB];
    bool ok[U];
    for (int u = 0; u < U; ++u) {
      const int t = base + u * TPC + grp;
      ok[u] = t < n;
      std::vector<float> part(static_cast<std::size_t>(LT) * GB);
      for (int l = 0; l < LT; ++l) {
        for (int g = 0; g < GB; ++g) {
          float x = 0.0f;
          for (int j = 0; j < 16; ++j)
            x = std::fma(qf[g * D + 16 * l + j], t < n ? e4m3_to_f32(k[static_cast<std::size_t>(t) * D + 16 * l + j]) : 0.0f, x);
          part[l * GB + g] = x;
        }
      }
      for (int o = LT / 2; o > 0; o >>= 1) {
        std::vector<float> nx(part);
        for (int l = 0; l < LT; ++l)
          for (int g = 0; g < GB; ++g) nx[l * GB + g] = part[l * GB + g] + part[(l ^ o) * GB + g];
        part = nx;
      }
      for (int g = 0; g < GB; ++g) s[u][g] = part[g];
    }
    float alpha[GB];
    __half2 ph[U][GB];
    for (int g = 0; g < GB; ++g) {
      float mx = out[g].m;
      for (int u = 0; u < U; ++u) mx = ok[u] ? std::fmax(mx, s[u][g]) : mx;
      alpha[g] = std::exp2(out[g].m - mx);
      out[g].m = mx;
      out[g].l *= alpha[g];
      for (int u = 0; u < U; ++u) {
        const float p = ok[u] ? std::exp2(s[u][g] - mx) : 0.0f;
        s[u][g] = p * kFp8PScale;
        out[g].l += s[u][g];
        ph[u][g] = __float2half2_rn(s[u][g]);
      }
    }
    for (int l = 0; l < LT; ++l) {
      std::uint32_t vw[U][4];
      for (int u = 0; u < U; ++u) words(v, base + u * TPC + grp, l, vw[u]);
      float a[GB][16];
      for (int g = 0; g < GB; ++g)
        for (int j = 0; j < 16; ++j) a[g][j] = acc[(l * GB + g) * 16 + j];
      fp8_pv_step<U, GB>(vw, ph, alpha, a);
      for (int g = 0; g < GB; ++g)
        for (int j = 0; j < 16; ++j) acc[(l * GB + g) * 16 + j] = a[g][j];
    }
  }
  for (int g = 0; g < GB; ++g) {
    out[g].acc.assign(D, 0.0f);
    for (int l = 0; l < LT; ++l)
      for (int j = 0; j < 16; ++j) out[g].acc[16 * l + j] = acc[(l * GB + g) * 16 + j];
  }
}

// max |out - ref| / max |ref| of the emulated CTA (lane groups merged as cta_epilogue merges them).
double emulated_error(int n, int D, float q_mul, float kv_mul, std::uint64_t seed) {
  constexpr int GB = 4, TPC = 16;
  const fp8_test::Inputs in = fp8_test::make_inputs(GB, D, n, q_mul, kv_mul, seed);
  const float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  std::vector<std::vector<Head>> groups(TPC);
  for (int grp = 0; grp < TPC; ++grp) lane_group(grp, n, D, in.q, in.k, in.v, qscale, groups[grp]);
  std::vector<std::vector<float>> out(GB, std::vector<float>(D));
  for (int g = 0; g < GB; ++g) {
    const float M = attn_merge_max(TPC, [&](std::uint32_t i) { return groups[i][g].m; });
    for (int j = 0; j < D; ++j) {
      float L = 0.0f, A = 0.0f;
      for (int i = 0; i < TPC; ++i) {
        const float w = attn_merge_weight(groups[i][g].m, M);
        L = std::fma(w, groups[i][g].l, L);
        A = std::fma(w, groups[i][g].acc[j], A);
      }
      out[g][j] = attn_finish(A, L);
    }
  }
  return fp8_test::rel_error(out, fp8_test::reference(in));
}

TEST(AttnFp8Packed, EmulatedKernelWithinTolerance) {
  struct Case {
    int n, D;
    float q_mul, kv_mul;
  };
  // The study's fill (q +-4, K/V +-1) at 16K and 64K (256K measured 4.6e-4, too slow for a unit test), then K/V at e4m3's top (+-448) with the query scaled down
  // so the logits keep the same spread, sharper softmaxes (q +-16, +-64: an f16 QK failed the tolerance
  // there, 8e-3), D = 64, and a context not a multiple of a step.
  for (const Case c : {Case{16384, 128, 4.0f, 1.0f}, Case{65536, 128, 4.0f, 1.0f},
                       Case{16384, 128, 4.0f / 448.0f, 448.0f}, Case{16384, 128, 16.0f, 1.0f},
                       Case{16384, 128, 64.0f, 1.0f}, Case{8192, 64, 4.0f, 1.0f}, Case{1000, 128, 4.0f, 1.0f}}) {
    const double err = emulated_error(c.n, c.D, c.q_mul, c.kv_mul, 5);
    std::printf("[ fp8 attention ] ctx %d d %d q*%g kv*%g: max|out-ref|/max|ref| = %.3g\n", c.n, c.D, c.q_mul,
                c.kv_mul, err);
    EXPECT_LT(err, kAttnTolerance) << "ctx " << c.n << " d " << c.D;
  }
}

}  // namespace
