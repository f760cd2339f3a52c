// The fragment maps of the fp8 e4m3 tensor-core attention (attn_mma_fp8_kernel; attn_fp8.hpp) on the host: the
// tile swizzle (a bijection that keeps cp.async's 16-byte chunks whole; the fragment reads free of shared-memory
// bank conflicts at d 128), the query's power-of-two scale (exact in f16), and one warp's tile run through the
// kernel's own fragment builders with mma.m16n8k16 emulated from the PTX ISA's fragment layouts: S = Q K^T and
// O = P V must equal the direct sums, every output dim written once; and one CTA's numerics (f16 operands, P scaled
// and rounded to f16, fp32 sums, the online softmax and the warps' combine) against the fp64 reference within the
// verify step's tolerance, flat, sharp and tiny-query softmaxes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "access.hpp"
#include "attn_fp8.hpp"
#include "fp8_attn_reference.hpp"

using namespace kvf::access;

namespace {

double f16_bits_to_double(std::uint32_t bits) {
  return static_cast<double>(__half2float(__ushort_as_half(static_cast<std::uint16_t>(bits & 0xFFFFu))));
}
std::uint32_t f16_pair(double lo, double hi) {
  return static_cast<std::uint32_t>(__half_as_ushort(__double2half(lo))) |
         (static_cast<std::uint32_t>(__half_as_ushort(__double2half(hi))) << 16);
}

// mma.sync.m16n8k16.row.col.f32.f16.f16.f32 with the kernel's operands (A regs 1 and 3, rows g + 8, are zero):
// a[lane] = {(row g, k 2t..2t+1), (row g, k 2t+8..2t+9)}, b[lane] = {(k 2t..2t+1, n g), (k 2t+8..2t+9, n g)};
// returns C[16][8] (rows 8..15 zero), sums in double (the products of f16 values are exact).
std::vector<std::vector<double>> mma_emulated(const std::uint32_t (&a)[32][2], const std::uint32_t (&b)[32][2]) {
  double A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = f16_bits_to_double(a[lane][0] >> (16 * e));
      A[g][2 * t + 8 + e] = f16_bits_to_double(a[lane][1] >> (16 * e));
      B[2 * t + e][g] = f16_bits_to_double(b[lane][0] >> (16 * e));
      B[2 * t + 8 + e][g] = f16_bits_to_double(b[lane][1] >> (16 * e));
    }
  }
  std::vector<std::vector<double>> C(16, std::vector<double>(8, 0.0));
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) C[r][n] += A[r][k] * B[k][n];
  return C;
}


// A tile as attn_mma_fp8_kernel's issue_tile writes it: 16-byte chunk c of row r at fp8_tile_offset(r, 16 c).
template <int D>
std::vector<unsigned char> swizzled_tile(const std::vector<std::uint8_t>& rows) {
  std::vector<unsigned char> tile(kFp8MmaTileRows * D + 16, 0);
  for (int r = 0; r < kFp8MmaTileRows; ++r)
    for (int c = 0; c < D / 16; ++c)
      std::memcpy(tile.data() + fp8_tile_offset<D>(r, 16 * c), rows.data() + r * D + 16 * c, 16);
  return tile;
}

template <int D>
void check_swizzle() {
  for (int r = 0; r < kFp8MmaTileRows; ++r) {
    std::set<int> seen;
    for (int byte = 0; byte < D; ++byte) {
      const int o = fp8_tile_offset<D>(r, byte);
      EXPECT_GE(o, r * D);
      EXPECT_LT(o, (r + 1) * D);
      seen.insert(o);
      if (byte % 16) EXPECT_EQ(o, fp8_tile_offset<D>(r, byte - 1) + 1) << "chunk split, row " << r << " byte " << byte;
      else EXPECT_EQ(o % 16, 0) << "chunk not 16-byte aligned, row " << r << " byte " << byte;
    }
    EXPECT_EQ(static_cast<int>(seen.size()), D) << "row " << r;
  }
}

// The most distinct 4-byte words one bank serves in one phase of a warp's shared-memory read: `bytes` per lane
// (8: two phases of 16 lanes; 16: four phases of 8 lanes), addr[lane] the lane's first byte.
int worst_bank_conflict(const int (&addr)[32], int bytes) {
  const int lanes_per_phase = 128 / bytes;
  int worst = 0;
  for (int p0 = 0; p0 < 32; p0 += lanes_per_phase) {
    std::map<int, std::set<int>> words_of_bank;
    for (int lane = p0; lane < p0 + lanes_per_phase; ++lane)
      for (int w = 0; w < bytes / 4; ++w) {
        const int word = addr[lane] / 4 + w;
        words_of_bank[word % 32].insert(word);
      }
    for (const auto& [bank, words] : words_of_bank) worst = std::max(worst, static_cast<int>(words.size()));
  }
  return worst;
}

template <int D>
void check_banks(int worst_k_allowed, int worst_v_allowed) {
  int worst_k = 0;
  for (int jn = 0; jn < 2; ++jn)
    for (int kp = 0; kp < D / 32; ++kp) {
      int addr[32];
      for (int lane = 0; lane < 32; ++lane)
        addr[lane] = fp8_tile_offset<D>(8 * jn + lane / 4, 32 * kp + 8 * (lane % 4));
      worst_k = std::max(worst_k, worst_bank_conflict(addr, 8));
    }
  int worst_v = 0;
  for (int x = 0; x < 4; ++x) {
    int addr[32];
    for (int lane = 0; lane < 32; ++lane)
      addr[lane] = fp8_tile_offset<D>(2 * (lane % 4) + (x & 1) + 8 * (x >> 1), (D / 8) * (lane / 4));
    worst_v = std::max(worst_v, worst_bank_conflict(addr, D / 8));
  }
  EXPECT_LE(worst_k, worst_k_allowed) << "K reads, d " << D;
  EXPECT_LE(worst_v, worst_v_allowed) << "V reads, d " << D;
}

// One warp, one tile: the kernel's fragment builders, the emulated mma, the direct sums.
template <int D>
void check_warp_tile(std::uint64_t seed, int gb, double q_magnitude) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  std::vector<std::uint8_t> krows(kFp8MmaTileRows * D), vrows_raw(kFp8MmaTileRows * D);
  for (auto& x : krows) x = fp8_test::e4m3_random(rng);
  for (auto& x : vrows_raw) x = fp8_test::e4m3_random(rng);
  const std::vector<unsigned char> kt = swizzled_tile<D>(krows), vt = swizzled_tile<D>(vrows_raw);
  // bf16 query rows (as the kernel reads them), heads gb..7 absent
  std::vector<std::vector<double>> q(8, std::vector<double>(D, 0.0));
  for (int g = 0; g < gb; ++g)
    for (int d = 0; d < D; ++d) {
      const float x = static_cast<float>(uni(rng) * q_magnitude * std::pow(2.0, static_cast<int>(rng() % 9) - 4));
      q[g][d] = static_cast<double>(bf16_to_f32(f32_to_bf16(x)));
    }
  int qe[8] = {};
  for (int g = 0; g < gb; ++g) {
    float amax = 0;
    for (double x : q[g]) amax = std::max(amax, static_cast<float>(std::fabs(x)));
    qe[g] = fp8_q_exponent(amax);
  }

  // S = Q K^T, n-tile jn = tokens 8 jn .. 8 jn + 7
  for (int jn = 0; jn < 2; ++jn) {
    std::vector<std::vector<double>> S(16, std::vector<double>(8, 0.0));
    for (int kp = 0; kp < D / 32; ++kp)
      for (int hs = 0; hs < 2; ++hs) {
        std::uint32_t a[32][2], b[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          for (int reg = 0; reg < 2; ++reg) {
            const double s = std::ldexp(1.0, qe[g]);
            a[lane][reg] = g < gb ? f16_pair(q[g][fp8_q_dim(kp, hs, reg, t, 0)] * s, q[g][fp8_q_dim(kp, hs, reg, t, 1)] * s)
                                  : 0u;
          }
          std::uint32_t bk[2][2];
          fp8_k_frags<D>(kt.data(), jn, kp, lane, bk);
          b[lane][0] = bk[hs][0];
          b[lane][1] = bk[hs][1];
        }
        const auto C = mma_emulated(a, b);
        for (int r = 0; r < 16; ++r)
          for (int n = 0; n < 8; ++n) S[r][n] += C[r][n];
      }
    for (int g = 0; g < 8; ++g)
      for (int n = 0; n < 8; ++n) {
        double want = 0;
        for (int d = 0; d < D; ++d) want += q[g][d] * e4m3_to_f32(krows[(8 * jn + n) * D + d]);
        const double got = std::ldexp(S[g][n], -qe[g]);
        ASSERT_NEAR(got, want, 1e-12 * (1.0 + std::fabs(want))) << "S row " << g << " token " << 8 * jn + n << " d " << D;
      }
    for (int r = 8; r < 16; ++r)
      for (int n = 0; n < 8; ++n) ASSERT_EQ(S[r][n], 0.0);
  }

  // O = P V: P per (head, token) as the kernel packs it (tokens 2t, 2t+1 and 8 + 2t, 9 + 2t of row g).
  std::vector<std::vector<double>> P(8, std::vector<double>(16, 0.0));
  for (int g = 0; g < gb; ++g)
    for (int tok = 0; tok < 16; ++tok) P[g][tok] = f16_bits_to_double(f16_pair(16.0 * std::fabs(uni(rng)), 0.0));
  std::vector<std::vector<int>> written(8, std::vector<int>(D, 0));
  std::vector<std::vector<double>> O(8, std::vector<double>(D, 0.0));
  for (int nt = 0; nt < D / 8; ++nt) {
    std::uint32_t a[32][2], b[32][2];
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      a[lane][0] = f16_pair(P[g][2 * t], P[g][2 * t + 1]);
      a[lane][1] = f16_pair(P[g][2 * t + 8], P[g][2 * t + 9]);
      std::uint32_t vr[4][D / 32];
      fp8_v_rows<D>(vt.data(), lane, vr);
      b[lane][0] = fp8_v_frag<D>(vr, nt, 0);
      b[lane][1] = fp8_v_frag<D>(vr, nt, 1);
    }
    const auto C = mma_emulated(a, b);
    // the accumulator registers of lane (g, t): (row g, n 2t, 2t + 1) -> dims fp8_v_dim(nt, 2t), (nt, 2t + 1)
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      for (int e = 0; e < 2; ++e) {
        const int dim = fp8_v_dim<D>(nt, 2 * t + e);
        ASSERT_GE(dim, 0);
        ASSERT_LT(dim, D);
        O[g][dim] = C[g][2 * t + e];
        ++written[g][dim];
      }
    }
  }
  for (int g = 0; g < 8; ++g)
    for (int d = 0; d < D; ++d) {
      ASSERT_EQ(written[g][d], 1) << "dim " << d << " of row " << g << " written " << written[g][d] << " times";
      double want = 0;
      for (int tok = 0; tok < 16; ++tok) want += P[g][tok] * e4m3_to_f32(vrows_raw[tok * D + d]);
      ASSERT_NEAR(O[g][d], want, 1e-12 * (1.0 + std::fabs(want))) << "O row " << g << " dim " << d << " d " << D;
    }
}

// One CTA of attn_mma_fp8_kernel over all n tokens, numerically: 4 warps take the 16-token tiles round-robin; per
// tile S = (q 2^qe in f16) K^T as fp32 sums of exact products, scaled by qscale 2^-qe, the online softmax with p
// scaled by 2^4, P rounded to f16 for PV into fp32 accumulators; the warps combined as cta_combine does.
std::vector<std::vector<float>> emulated_mma_cta(const fp8_test::Inputs& in) {
  constexpr int kWarps = 4, kTile = 16;
  const int GB = in.heads, D = in.d, n = in.n;
  const float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  std::vector<float> qh(in.q.size()), sscale(GB);
  for (int g = 0; g < GB; ++g) {
    float amax = 0.0f;
    for (int j = 0; j < D; ++j) amax = std::max(amax, std::fabs(in.q[g * D + j]));
    const int qe = fp8_q_exponent(amax);
    for (int j = 0; j < D; ++j) qh[g * D + j] = __half2float(__float2half_rn(std::ldexp(in.q[g * D + j], qe)));
    sscale[g] = qscale * std::ldexp(1.0f, -qe);
  }
  std::vector<float> k(in.k.size()), v(in.v.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = e4m3_to_f32(in.k[i]), v[i] = e4m3_to_f32(in.v[i]);
  std::vector<std::vector<float>> m(kWarps, std::vector<float>(GB, kAttnEmptyM)), l(kWarps, std::vector<float>(GB, 0.0f));
  std::vector<std::vector<float>> acc(kWarps, std::vector<float>(static_cast<std::size_t>(GB) * D, 0.0f));
  for (int tile = 0; tile * kTile < n; ++tile) {
    const int w = tile % kWarps, base = tile * kTile;
    for (int g = 0; g < GB; ++g) {
      float s[kTile], p[kTile];
      float mx = m[w][g];
      for (int u = 0; u < kTile; ++u) {
        const int t = base + u;
        if (t >= n) {
          s[u] = kAttnEmptyM;
          continue;
        }
        float x = 0.0f;
        for (int j = 0; j < D; ++j) x = std::fma(qh[g * D + j], k[static_cast<std::size_t>(t) * D + j], x);
        s[u] = x * sscale[g];
        mx = std::max(mx, s[u]);
      }
      const float alpha = std::exp2(m[w][g] - mx);
      m[w][g] = mx;
      float psum = 0.0f;
      for (int u = 0; u < kTile; ++u) {
        p[u] = s[u] == kAttnEmptyM ? 0.0f : std::exp2(s[u] - mx + 4.0f);
        psum += p[u];
      }
      l[w][g] = l[w][g] * alpha + psum;
      for (int j = 0; j < D; ++j) {
        float a = acc[w][g * D + j] * alpha;
        for (int u = 0; u < kTile && base + u < n; ++u)
          a = std::fma(__half2float(__float2half_rn(p[u])), v[static_cast<std::size_t>(base + u) * D + j], a);
        acc[w][g * D + j] = a;
      }
    }
  }
  std::vector<std::vector<float>> out(GB, std::vector<float>(D));
  for (int g = 0; g < GB; ++g) {
    const float M = attn_merge_max(kWarps, [&](std::uint32_t i) { return m[i][g]; });
    for (int j = 0; j < D; ++j) {
      float L = 0.0f, A = 0.0f;
      for (int i = 0; i < kWarps; ++i) {
        const float wt = attn_merge_weight(m[i][g], M);
        L = std::fma(wt, l[i][g], L);
        A = std::fma(wt, acc[i][g * D + j], A);
      }
      out[g][j] = attn_finish(A, L);
    }
  }
  return out;
}

}  // namespace

// The study's fill (q +-4, K/V +-1) at 16K and 64K, K/V at e4m3's top (+-448) with the query scaled down, sharp
// softmaxes (q x 16, x 64: where an f16-summed QK failed), a tiny query (q / 4096: its power of two brings it back
// into f16's range), d 64, and a context that ends inside a tile.
TEST(AttnFp8Mma, EmulatedCtaWithinTolerance) {
  struct Case {
    int n, d;
    float q_mul, kv_mul;
  };
  for (const Case c : {Case{16384, 128, 4.0f, 1.0f}, Case{65536, 128, 4.0f, 1.0f}, Case{16384, 128, 4.0f / 448.0f, 448.0f},
                       Case{16384, 128, 16.0f, 1.0f}, Case{16384, 128, 64.0f, 1.0f}, Case{16384, 128, 4.0f / 4096.0f, 1.0f},
                       Case{8192, 64, 4.0f, 1.0f}, Case{1000, 128, 4.0f, 1.0f}}) {
    const fp8_test::Inputs in = fp8_test::make_inputs(4, c.d, c.n, c.q_mul, c.kv_mul, 5);
    const double err = fp8_test::rel_error(emulated_mma_cta(in), fp8_test::reference(in));
    std::printf("[ fp8 mma attention ] ctx %d d %d q*%g kv*%g: max|out-ref|/max|ref| = %.3g\n", c.n, c.d, c.q_mul,
                c.kv_mul, err);
    EXPECT_LT(err, kAttnTolerance) << "ctx " << c.n << " d " << c.d << " q*" << c.q_mul;
  }
}

TEST(AttnFp8Mma, TileSwizzleIsABijectionKeepingChunksWhole) {
  check_swizzle<64>();
  check_swizzle<128>();
}

// d 128: every read conflict-free; d 64: K conflict-free, the 8-byte V reads pairwise (16 lanes, 8 slots).
TEST(AttnFp8Mma, FragmentReadsAreBankConflictFreeAtD128) {
  check_banks<128>(1, 1);
  check_banks<64>(1, 2);
  // The count itself: without the swizzle the d 128 K reads would put a quarter of the lanes on one bank.
  int addr[32];
  for (int lane = 0; lane < 32; ++lane) addr[lane] = (lane / 4) * 128 + 8 * (lane % 4);
  EXPECT_EQ(worst_bank_conflict(addr, 8), 4);
}

TEST(AttnFp8Mma, EmulatedWarpTileEqualsDirectSums) {
  for (int gb : {1, 2, 4, 8}) {
    check_warp_tile<128>(100 + gb, gb, 4.0);
    check_warp_tile<64>(200 + gb, gb, 4.0);
  }
  check_warp_tile<128>(7, 4, 3000.0);  // a query far above f16's precision range before its scale
  check_warp_tile<128>(8, 4, 1e-6);    // and far below it
}

// q 2^e is exact in f16 for every element down to max|q| 2^-28 and stays below 2^15.
TEST(AttnFp8Mma, QueryExponentKeepsF16Exact) {
  EXPECT_EQ(fp8_q_exponent(0.0f), 0);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) {
    const float amax = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 80) - 40);
    const float a = bf16_to_f32(f32_to_bf16(amax));
    const int e = fp8_q_exponent(a);
    const double top = std::ldexp(static_cast<double>(a), e);
    ASSERT_GE(top, 16384.0);
    ASSERT_LT(top, 32768.0);
    for (int k = 0; k <= 28; k += 4) {
      const float x = bf16_to_f32(f32_to_bf16(std::ldexp(a, -k) * 0.77f));
      const double scaled = std::ldexp(static_cast<double>(x), e);
      ASSERT_EQ(static_cast<double>(__half2float(__double2half(scaled))), scaled) << "amax " << a << " k " << k;
    }
  }
}
