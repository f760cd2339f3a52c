// Packed f16 PV of the fp8 e4m3 K/V path of the GPU attention (attention_gpu.cu), __host__ __device__ so
// that tests/access/test_attn_fp8_packed.cpp runs the kernel's own arithmetic on the host: on the device
// hfma2_rn / hmul2_rn are HFMA2 / HMUL2; on the host an exact emulation (the exact a*b + c rounded once to
// the nearest f16, ties to even), so host and device agree bit for bit.
//
// Why: the fp8 path unpacked 16 e4m3 bytes into 16 floats for K and for V (8 cvt e4m3x2 -> f16x2 + 16
// f16 -> f32 per load) and did one fp32 FMA per element and head in QK and in PV: about twice the
// instructions per byte of the bf16 path, so it was issue-bound (0.42 of the read ceiling on the H100,
// 1.13x bf16 for half the bytes). PV now costs one cvt per element pair (e4m3 -> f16 is exact) and one
// HFMA2 per pair and head, the f16 sums of the U <= 4 tokens of a step folded into the fp32 accumulator
// in the FMA that also applies the online softmax's rescale. QK stays fp32 (see README: an f16 QK missed
// the verify tolerance on sharp softmaxes).
//
// Range: p = 2^(s - m) <= 1 (m the running max) is scaled by kFp8PScale = 16 before it is rounded to f16,
// so p keeps f16's full precision down to 2^-18 and rounds to 0 only below 2^-29; a chain of U <= 8 tokens is then at
// most 8 x 16 x 448 = 57344 < 65504, the f16 maximum, so it cannot overflow. l accumulates the same
// scaled p, so acc / l is unchanged.
// Error of one step (u = 2^-11, gamma_n = n u / (1 - n u), p scaled, h = sum_u p_u v_u per element):
//   |h' - h| <= (u + gamma_U + 2^-20) sum_u p_u |v_u| + 2^-25 sum_u (|v_u| + 1)
// (u: p rounded to f16; gamma_U: the U fused roundings of the chain; 2^-25: f16 subnormal half-spacing per
// rounded p and per FMA). Over a softmax this is (u + gamma_4) sum_t p_t |v_t| / sum_t p_t plus the fp32
// path's own error, relative to the weighted mean of |v|, whatever the logits.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "access_math.hpp"

// Unrolled on the device; plain loops in host code (GCC warns on unknown pragmas).
#if defined(__CUDACC__)
#define KVF_FP8_UNROLL _Pragma("unroll")
#else
#define KVF_FP8_UNROLL
#endif

namespace kvf::access {

constexpr float kFp8PScale = 16.0f;   // p in (0, 16] before the f16 PV
constexpr int kFp8MaxPvTokens = 8;    // tokens per f16 PV chain (the unroll U) at most
constexpr float kE4m3Max = 448.0f;
constexpr float kF16Max = 65504.0f;
static_assert(kFp8MaxPvTokens * kFp8PScale * kE4m3Max < kF16Max, "a PV chain could overflow f16");

#if !defined(__CUDA_ARCH__)
namespace fp8_detail {
// Exact a*b + c rounded once to the nearest f16 (ties to even), as HFMA2 does. Finite inputs only (the
// kernel's operands are finite: e4m3 without NaN, a finite query, p in [0, 32]). Every finite f16 is k 2^-24
// with |k| < 2^40, so in units of 2^-48 the exact sum is an integer below 2^81.
inline __half hfma_exact(__half a, __half b, __half c) {
  const double p = static_cast<double>(__half2float(a)) * static_cast<double>(__half2float(b));  // exact: 22 bits
  const double cc = __half2float(c);
  const double s = p + cc;
  const double bb = s - p;
  if ((p - (s - bb)) + (cc - bb) == 0.0) return __double2half(s);  // s is the exact sum: one rounding
  auto units = [](__half h) {  // h = k 2^-24
    return static_cast<__int128>(static_cast<long long>(static_cast<double>(__half2float(h)) * 16777216.0));
  };
  const __int128 S = units(a) * units(b) + units(c) * (static_cast<__int128>(1) << 24);  // units of 2^-48
  const bool neg = S < 0;
  unsigned __int128 m = static_cast<unsigned __int128>(neg ? -S : S);
  int msb = 127;
  while (!((m >> msb) & 1u)) --msb;  // S != 0: an exact zero was caught above
  // f16 spacing at |S| in units of 2^-48: 2^(max(msb - 48, -14) - 10 + 48)
  const int sh = msb - 10 > 24 ? msb - 10 : 24;
  unsigned __int128 r = m >> sh;
  const unsigned __int128 rem = m & ((static_cast<unsigned __int128>(1) << sh) - 1u), half = static_cast<unsigned __int128>(1) << (sh - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  double v = static_cast<double>(static_cast<unsigned long long>(r));
  for (int i = 0; i < sh - 48; ++i) v *= 2.0;
  for (int i = 0; i < 48 - sh; ++i) v *= 0.5;  // exact: r < 2^12, power-of-two scaling
  return __double2half(neg ? -v : v);         // exact (or beyond 65504: infinity)
}
}  // namespace fp8_detail
#endif

// d = a * b + c per half, one rounding (HFMA2).
KVF_HD __half2 hfma2_rn(__half2 a, __half2 b, __half2 c) {
#if defined(__CUDA_ARCH__)
  return __hfma2(a, b, c);
#else
  return __halves2half2(fp8_detail::hfma_exact(__low2half(a), __low2half(b), __low2half(c)),
                        fp8_detail::hfma_exact(__high2half(a), __high2half(b), __high2half(c)));
#endif
}

// Two e4m3 bytes (low byte = lower element) -> f16 pair, exact (one cvt on sm_89+).
KVF_HD __half2 e4m3x2_to_h2(std::uint32_t two) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3));
}

// d = a * b per half, one rounding (the first product of a chain: no zero accumulator to materialize).
KVF_HD __half2 hmul2_rn(__half2 a, __half2 b) {
#if defined(__CUDA_ARCH__)
  return __hmul2_rn(a, b);
#else
  return hfma2_rn(a, b, __half2(__half2_raw{0, 0}));  // a*b + 0: the same single rounding (sign of 0 aside)
#endif
}

// One step's PV of one lane for GB heads over U tokens: for element pair i, the f16 chain
// h = sum_u p[u][g] v[u][i] (p scaled to <= kFp8PScale, the same value in both halves), then
// acc = acc * alpha + h in fp32 (the online softmax's rescale folded into the same FMA).
template <int U, int GB>
KVF_HD void fp8_pv_step(const std::uint32_t (&vw)[U][4], const __half2 (&p)[U][GB], const float (&alpha)[GB],
                        float (&acc)[GB][16]) {
  static_assert(U >= 1 && U <= kFp8MaxPvTokens, "PV chain longer than the f16 range allows");
KVF_FP8_UNROLL
  for (int i = 0; i < 8; ++i) {
    __half2 v[U];
KVF_FP8_UNROLL
    for (int u = 0; u < U; ++u) v[u] = e4m3x2_to_h2(vw[u][i / 2] >> (16 * (i % 2)));
KVF_FP8_UNROLL
    for (int g = 0; g < GB; ++g) {
      __half2 h = hmul2_rn(p[0][g], v[0]);
KVF_FP8_UNROLL
      for (int u = 1; u < U; ++u) h = hfma2_rn(p[u][g], v[u], h);
      const float2 f = __half22float2(h);
      acc[g][2 * i] = fmaf(acc[g][2 * i], alpha[g], f.x);
      acc[g][2 * i + 1] = fmaf(acc[g][2 * i + 1], alpha[g], f.y);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// fp8 e4m3 K/V on tensor cores (attn_mma_fp8_kernel, AttnLoads::mma, sm_89+): mma.sync m16n8k16 in f16 with
// fp32 accumulation. e4m3 -> f16 is exact and the query is scaled per head by a power of two into f16's range
// (exact for a bf16 query), so QK keeps exact products and fp32 sums, as the fp32 path does (the f16 QK that
// missed the tolerance summed in f16). P is f16 (scaled by kFp8PScale, as the packed PV above).
// Neither operand goes through ldmatrix (it moves 16-bit elements): each lane reads the bytes of its own
// fragments from the warp's tile and converts them, with two free permutations that make those reads whole
// words: the k index of QK (the dims: Q is permuted the same way) and the n index of PV (the output dims,
// put back in order at the end). Fragment layouts (PTX ISA, m16n8k16, lane = 4 g + t): A regs (row g, k 2t..2t+1),
// (row g, k 2t+8..2t+9) (rows g + 8 zero); B regs (k 2t..2t+1, n g), (k 2t+8..2t+9, n g); C (row g, n 2t, 2t+1).
//   QK, k-steps 2 kp (hs = 0) and 2 kp + 1 (hs = 1): the lane reads 8 bytes of token row 8 jn + g, dims
//     32 kp + 8 t .. + 7; B reg `reg` of k-step hs holds dims 32 kp + 8 t + 4 hs + 2 reg (+ 1) (fp8_q_dim).
//   PV: n-tile nt column c is dim (D / 8) c + nt (fp8_v_dim); the lane reads the D / 8 bytes at dims
//     (D / 8) g .. of token rows 2t, 2t+1, 2t+8, 2t+9 and pairs their bytes (B reg 0: rows 2t, 2t+1).
// Tile: 16 token rows of D bytes; 8-byte slot s of row r lives at slot s ^ fp8_tile_swizzle(r), which keeps
// 16-byte chunks whole (cp.async) and makes both reads bank-conflict free at D = 128 (8-byte reads: each
// half-warp 16 distinct slots of 128 bytes; 16-byte reads: each quarter-warp 8 distinct chunks); at D = 64
// the 16-byte PV reads are 8 bytes and share banks pairwise (tests/access/test_attn_fp8_mma.cpp counts them).
constexpr int kFp8MmaTileRows = 16;

template <int D>
KVF_HD constexpr int fp8_tile_swizzle(int r) {
  static_assert(D == 64 || D == 128, "fp8 mma tile: d 64 or 128");
  return D == 128 ? 4 * ((r ^ (r >> 1)) & 3) : 4 * ((r >> 1) & 1);
}
// Byte `byte` of row r of a tile: its offset from the tile's start.
template <int D>
KVF_HD constexpr int fp8_tile_offset(int r, int byte) {
  return r * D + (((byte >> 3) ^ fp8_tile_swizzle<D>(r)) << 3) + (byte & 7);
}
// The dim that QK's k index maps to: k-step 2 kp + hs, B (and A) register reg, element e, lane column t.
KVF_HD constexpr int fp8_q_dim(int kp, int hs, int reg, int t, int e) { return 32 * kp + 8 * t + 4 * hs + 2 * reg + e; }
// The dim of PV n-tile nt, column c.
template <int D>
KVF_HD constexpr int fp8_v_dim(int nt, int c) { return (D / 8) * c + nt; }

// Two e4m3 bytes -> an f16 pair as the 32-bit register mma takes (low byte -> low half).
KVF_HD std::uint32_t e4m3x2_to_h2_bits(std::uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  return static_cast<std::uint32_t>(h.x) | (static_cast<std::uint32_t>(h.y) << 16);
}
// __byte_perm (PRMT): byte n of the result is byte (s >> 4 n) & 7 of y:x (x bytes 0-3); on the host the same.
KVF_HD std::uint32_t fp8_byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const std::uint64_t in = x | (static_cast<std::uint64_t>(y) << 32);
  std::uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<std::uint32_t>((in >> (8 * ((s >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
  return r;
#endif
}
// Bytes i of x and of y as one pair (x's byte low), i = 0..3: one PRMT serves i = 0, 1 and one i = 2, 3.
KVF_HD std::uint32_t fp8_byte_pair(std::uint32_t x, std::uint32_t y, int i) {
  return fp8_byte_perm(x, y, i < 2 ? 0x5140u : 0x7362u) >> (16 * (i & 1)) & 0xFFFFu;
}

// QK B registers of lane `lane` for n-tile jn and k-pair kp: b[hs][reg] (k-step 2 kp + hs).
template <int D>
KVF_HD void fp8_k_frags(const unsigned char* tile, int jn, int kp, int lane, std::uint32_t (&b)[2][2]) {
  const int r = 8 * jn + lane / 4;
  const uint2 w = *reinterpret_cast<const uint2*>(tile + fp8_tile_offset<D>(r, 32 * kp + 8 * (lane % 4)));
  b[0][0] = e4m3x2_to_h2_bits(w.x);
  b[0][1] = e4m3x2_to_h2_bits(w.x >> 16);
  b[1][0] = e4m3x2_to_h2_bits(w.y);
  b[1][1] = e4m3x2_to_h2_bits(w.y >> 16);
}
// The lane's bytes of PV's B operand: rows 2t, 2t+1, 2t+8, 2t+9 of the tile, dims (D / 8) g .. + D / 8 - 1.
template <int D>
KVF_HD void fp8_v_rows(const unsigned char* tile, int lane, std::uint32_t (&rows)[4][D / 32]) {
  const int g = lane / 4, t = lane % 4;
  KVF_FP8_UNROLL
  for (int x = 0; x < 4; ++x) {
    const int r = 2 * t + (x & 1) + 8 * (x >> 1);
    const unsigned char* p = tile + fp8_tile_offset<D>(r, (D / 8) * g);
    if constexpr (D == 128) {
      const uint4 w = *reinterpret_cast<const uint4*>(p);
      rows[x][0] = w.x, rows[x][1] = w.y, rows[x][2] = w.z, rows[x][3] = w.w;
    } else {
      const uint2 w = *reinterpret_cast<const uint2*>(p);
      rows[x][0] = w.x, rows[x][1] = w.y;
    }
  }
}
// PV B register reg (0: tokens 2t, 2t+1; 1: 2t+8, 2t+9) of n-tile nt.
template <int D>
KVF_HD std::uint32_t fp8_v_frag(const std::uint32_t (&rows)[4][D / 32], int nt, int reg) {
  return e4m3x2_to_h2_bits(fp8_byte_pair(rows[2 * reg][nt / 4], rows[2 * reg + 1][nt / 4], nt % 4));
}
// The power of two e with max|q| 2^e in [2^14, 2^15) (0 for a zero row): q 2^e is then exact in f16 down to
// max|q| 2^-28 and at most 2^15 < 65504.
KVF_HD int fp8_q_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  int ex = 0;
  (void)frexpf(amax, &ex);  // amax in [2^(ex-1), 2^ex)
  const int e = 15 - ex;
  return e < -120 ? -120 : e > 120 ? 120 : e;  // 2^e stays a normal float
}

}  // namespace kvf::access
