#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "kvf/pattern.hpp"
#include "recompute.hpp"

namespace kvf::frontier {

std::vector<double> rope_inv_freq(const models::ModelShape& m, int rot_dim) {
  const int half = rot_dim / 2;
  std::vector<double> f(half);
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) f[i] = 1.0 / std::pow(m.rope_theta, 2.0 * i / rot_dim);
  const auto& rs = m.rope_scaling;
  if (rs.type == "llama3") {
    const double orig = rs.original_max_position;
    const double low_wl = orig / rs.low_freq_factor, high_wl = orig / rs.high_freq_factor;
    for (auto& v : f) {
      const double wl = 2 * pi / v;
      if (wl < high_wl) continue;
      if (wl > low_wl) { v /= rs.factor; continue; }
      const double smooth = (orig / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      v = (1 - smooth) * v / rs.factor + smooth * v;
    }
  } else if (rs.type == "yarn") {
    auto corr = [&](double n_rot) {
      return rot_dim * std::log(rs.original_max_position / (n_rot * 2 * pi)) / (2 * std::log(m.rope_theta));
    };
    double low = std::max(0.0, std::floor(corr(rs.beta_fast)));
    double high = std::min(double(rot_dim - 1), std::ceil(corr(rs.beta_slow)));
    if (high == low) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double mask = 1 - ramp;  // 1: keep the original (extrapolated) frequency
      f[i] = f[i] / rs.factor * (1 - mask) + f[i] * mask;
    }
  }
  return f;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }
double rope_amplitude(const models::RopeScaling& rs) {
  if (rs.type != "yarn") return 1.0;
  return yarn_mscale(rs.factor, rs.mscale) / yarn_mscale(rs.factor, rs.mscale_all_dim);
}

std::vector<float> rope_table(const std::vector<double>& inv_freq, int n_pos, double amplitude) {
  const int half = int(inv_freq.size());
  std::vector<float> t(std::size_t(n_pos) * 2 * half);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < n_pos; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * inv_freq[i];
      t[std::size_t(p) * 2 * half + i] = float(amplitude * std::cos(a));
      t[std::size_t(p) * 2 * half + half + i] = float(amplitude * std::sin(a));
    }
  return t;
}

namespace {
inline float unit_uniform(std::uint64_t seed, std::uint64_t i) {
  // 24 random bits -> [-1, 1)
  return float(std::int64_t(pattern_word(seed, i) >> 40) - (1ll << 23)) * (1.0f / float(1 << 23));
}
}  // namespace

void fill_bf16_uniform(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(unit_uniform(seed, i) * scale);
}
void fill_f32_uniform(float* p, std::size_t n, std::uint64_t seed, float scale) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) p[i] = unit_uniform(seed, i) * scale;
}
void bf16_to_f32(const std::uint16_t* in, float* out, std::size_t n) {
#pragma omp parallel for schedule(static) if (n > (std::size_t(1) << 23))
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}
void f32_to_bf16(const float* in, std::uint16_t* out, std::size_t n) {
#pragma omp parallel for schedule(static) if (n > (std::size_t(1) << 23))
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

std::vector<std::int64_t> scattered_slots(int rows, std::int64_t n_blocks, std::uint64_t seed) {
  const std::int64_t need = (rows + kBlockTokens - 1) / kBlockTokens;
  if (need > n_blocks) throw std::invalid_argument("scattered_slots: not enough blocks");
  std::vector<std::int64_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::int64_t> slot(rows);
  for (int r = 0; r < rows; ++r) slot[r] = perm[r / kBlockTokens] * kBlockTokens + r % kBlockTokens;
  return slot;
}

// One threading runtime in the process: see recompute.hpp ("BLAS threading").
namespace {
int blas_own_threads() {  // OpenBLAS's thread count as the process started (before blas_on_openmp)
  static const int n = openblas_get_num_threads();
  return n;
}
}  // namespace
void blas_on_openmp() {
  (void)blas_own_threads();
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}
void gemm_xwT_blas_threads(const float* X, const float* W, float* Y, int M, int N, int K) {
  openblas_set_num_threads(blas_own_threads());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X, K, W, K, 0.0f, Y, N);
  openblas_set_num_threads(1);
}

namespace {
// Below this many FLOPs a GEMM stays on the calling thread (a fork/join costs more than ~40 us of
// one core's work, and on a loaded machine can wait a whole scheduler quantum).
constexpr double kGemmTeamMinFlops = double(1 << 22);

// Runs slice(n0, n1) over [0, N) on the calling thread's OpenMP team, whole 16-column blocks per
// thread (64-byte pieces of each output row: no false sharing of Y's cache lines).
template <class Slice>
void split_columns(int M, int N, int K, Slice&& slice) {
  blas_on_openmp();
  const bool team = !omp_in_parallel() && omp_get_max_threads() > 1 && N >= 32 &&
                    2.0 * double(M) * N * K >= kGemmTeamMinFlops;
  if (!team) {
    slice(0, N);
    return;
  }
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int blocks = (N + 15) / 16;
    const int n0 = std::min(N, int(std::int64_t(blocks) * t / nt) * 16);
    const int n1 = std::min(N, int(std::int64_t(blocks) * (t + 1) / nt) * 16);
    if (n1 > n0) slice(n0, n1);
  }
}
}  // namespace

void gemm_xwT(const float* X, const float* W, float* Y, int M, int N, int K) {
  split_columns(M, N, K, [=](int n0, int n1) {
    // A one-row sgemm is not forwarded to sgemv by OpenBLAS 0.3.21 (it would pack all of W).
    if (M == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n1 - n0, K, 1.0f, W + std::size_t(n0) * K, K, X, 1, 0.0f, Y + n0, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, X, K, W + std::size_t(n0) * K, K,
                  0.0f, Y + n0, N);
  });
}

namespace {
using sbgemm_fn = void (*)(int, int, int, int, int, int, float, const void*, int, const void*, int, float,
                           float*, int);
sbgemm_fn find_sbgemm() {
  static sbgemm_fn fn = reinterpret_cast<sbgemm_fn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  return fn;
}
}  // namespace
bool sbgemm_available() { return find_sbgemm() != nullptr; }
void gemm_xwT_sbgemm(const std::uint16_t* X, const std::uint16_t* W, float* Y, int M, int N, int K) {
  auto fn = find_sbgemm();
  if (!fn) throw std::runtime_error("cblas_sbgemm is not exported by this OpenBLAS build");
  split_columns(M, N, K, [=](int n0, int n1) {
    fn(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, X, K, W + std::size_t(n0) * K, K, 0.0f, Y + n0, N);
  });
}

namespace {
// One row: RoPE on its K heads, bias on K and V where kBias, bf16 into the row's K and V slots (each
// n_kv_heads * D contiguous: cache_index). The row pointers are taken once and marked restrict so the
// loops vectorize with no aliasing checks: with the addressing inside them, the epilogue of a 128-row
// Llama-3.1-8B page took 0.72 ms on a Zen 5 core against 0.03 ms like this, 20% of the arm beside a
// 2.8 ms GEMM.
template <bool kBias>
void rope_write_row(const float* __restrict y, const float* __restrict bias, KvGeom g, const float* __restrict cs,
                    std::uint16_t* __restrict kd, std::uint16_t* __restrict vd) {
  const int D = g.head_dim, half = D / 2, kvd = g.kv_dim();
  for (int h = 0; h < g.n_kv_heads; ++h) {
    const float* __restrict yk = y + h * D;
    const float* __restrict bk = kBias ? bias + h * D : nullptr;
    std::uint16_t* __restrict k = kd + h * D;
    for (int i = 0; i < half; ++i) {
      const float lo = yk[i] + (kBias ? bk[i] : 0.f), hi = yk[i + half] + (kBias ? bk[i + half] : 0.f);
      const RopePair o = rope_rotate(lo, hi, cs[i], cs[half + i]);
      k[i] = f32_to_bf16(o.lo);
      k[i + half] = f32_to_bf16(o.hi);
    }
  }
  const float* __restrict yv = y + kvd;
  const float* __restrict bv = kBias ? bias + kvd : nullptr;
  for (int i = 0; i < kvd; ++i) vd[i] = f32_to_bf16(yv[i] + (kBias ? bv[i] : 0.f));
}
}  // namespace

void rope_write_cpu(const float* Y, const float* bias, int rows, KvGeom g, const float* cos_sin,
                    const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache) {
  const int D = g.head_dim, kvd = g.kv_dim();
  // Small pages stay on the calling thread: an OpenMP fork/join beside OpenBLAS's own spinning
  // threads costs more than the work on a 2-core machine.
#pragma omp parallel for schedule(static) if (std::int64_t(rows) * kvd > (std::int64_t(1) << 21))
  for (int r = 0; r < rows; ++r) {
    const float* y = Y + std::size_t(r) * 2 * kvd;
    const float* cs = cos_sin + std::size_t(pos[r]) * D;
    std::uint16_t* kd = cache + cache_index(slot[r], 0, 0, 0, g.n_kv_heads, D);
    std::uint16_t* vd = cache + cache_index(slot[r], 1, 0, 0, g.n_kv_heads, D);
    if (bias) rope_write_row<true>(y, bias, g, cs, kd, vd);
    else rope_write_row<false>(y, nullptr, g, cs, kd, vd);
  }
}

void quantize_x(const std::uint16_t* x, int rows, int hidden, int bits, std::uint8_t* q, float* scales) {
  const int groups = (hidden + kQuantGroup - 1) / kQuantGroup;
  const int qmax = bits == 8 ? 127 : 7;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    for (int gi = 0; gi < groups; ++gi) {
      const int c0 = gi * kQuantGroup, c1 = std::min(hidden, c0 + kQuantGroup);
      float amax = 0;
      for (int c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(bf16_to_f32(x[std::size_t(r) * hidden + c])));
      const float scale = amax > 0 ? amax / float(qmax) : 1.0f;
      scales[std::size_t(r) * groups + gi] = scale;
      const float inv = 1.0f / scale;
      for (int c = c0; c < c1; ++c) {
        const int v = quant_round(bf16_to_f32(x[std::size_t(r) * hidden + c]), inv, qmax);
        if (bits == 8) {
          q[std::size_t(r) * hidden + c] = std::uint8_t(std::int8_t(v));
        } else {
          std::uint8_t& b = q[(std::size_t(r) * hidden + c) / 2];
          if (c % 2 == 0) b = int4_pack(v, int4_hi(b));
          else b = int4_pack(int4_lo(b), v);
        }
      }
    }
  }
}

namespace {
template <class Out, class Conv>
void dequant_impl(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits, Out* x, Conv conv) {
  const int groups = (hidden + kQuantGroup - 1) / kQuantGroup;
  // One scale per group, loops over a group's bytes: the compiler vectorizes these (a scale looked up and an
  // int4 pair split per element kept the int4 arm ~0.9 ms behind bf16 X at 128 rows of Llama-3.1-8B).
  // kQuantGroup is even, so an int4 byte's two values share their group.
#pragma omp parallel for schedule(static) if (std::int64_t(rows) * hidden > (std::int64_t(1) << 22))
  for (int r = 0; r < rows; ++r) {
    const float* sc = scales + std::size_t(r) * groups;
    Out* __restrict xr = x + std::size_t(r) * hidden;
    for (int gi = 0; gi < groups; ++gi) {
      const int c0 = gi * kQuantGroup, c1 = std::min(hidden, c0 + kQuantGroup);
      const float s = sc[gi];
      if (bits == 8) {
        const std::int8_t* __restrict qr = reinterpret_cast<const std::int8_t*>(q) + std::size_t(r) * hidden;
        for (int c = c0; c < c1; ++c) xr[c] = conv(f32_to_bf16(dequant(qr[c], s)));
      } else {
        const std::uint8_t* __restrict qr = q + std::size_t(r) * hidden / 2;
        for (int j = c0 / 2; j < c1 / 2; ++j) {
          const std::uint8_t b = qr[j];
          xr[2 * j] = conv(f32_to_bf16(dequant(int4_lo(b), s)));
          xr[2 * j + 1] = conv(f32_to_bf16(dequant(int4_hi(b), s)));
        }
      }
    }
  }
}
}  // namespace

void dequant_x_f32(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits, float* x) {
  dequant_impl(q, scales, rows, hidden, bits, x, [](std::uint16_t h) { return bf16_to_f32(h); });
}
void dequant_x_bf16(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits,
                    std::uint16_t* x) {
  dequant_impl(q, scales, rows, hidden, bits, x, [](std::uint16_t h) { return h; });
}

void kv_reference_row(const float* x, const std::uint16_t* w, const float* bias, int hidden, KvGeom g,
                      const std::vector<double>& inv_freq, int pos, double* out) {
  const int kvd = g.kv_dim(), D = g.head_dim, half = D / 2;
  std::vector<double> y(2 * kvd);
  for (int o = 0; o < 2 * kvd; ++o) {
    double s = 0;
    const std::uint16_t* wr = w + std::size_t(o) * hidden;
    for (int k = 0; k < hidden; ++k) s += double(x[k]) * double(bf16_to_f32(wr[k]));
    y[o] = s + (bias ? double(bias[o]) : 0.0);
  }
  for (int h = 0; h < g.n_kv_heads; ++h)
    for (int i = 0; i < half; ++i) {
      const double a = double(pos) * inv_freq[i], c = std::cos(a), s = std::sin(a);
      const double lo = y[h * D + i], hi = y[h * D + i + half];
      out[h * D + i] = lo * c - hi * s;
      out[h * D + i + half] = hi * c + lo * s;
    }
  for (int i = 0; i < kvd; ++i) out[kvd + i] = y[kvd + i];
}

std::vector<int> sample_rows(int rows, int n) {
  std::vector<int> r;
  if (rows <= n) {
    for (int i = 0; i < rows; ++i) r.push_back(i);
    return r;
  }
  for (int i = 0; i < n; ++i) r.push_back(int((std::int64_t(rows - 1) * i) / (n - 1)));
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

VerifyStats verify_rows(const std::vector<int>& rows, const std::vector<std::vector<float>>& x_rows,
                        const std::uint16_t* w, const float* bias, int hidden, KvGeom g,
                        const std::vector<double>& inv_freq, const std::int32_t* pos,
                        const std::int64_t* slot, const std::uint16_t* cache) {
  const int kvd = g.kv_dim(), D = g.head_dim;
  std::vector<std::vector<double>> ref(rows.size(), std::vector<double>(2 * kvd));
#pragma omp parallel for schedule(dynamic)
  for (std::size_t i = 0; i < rows.size(); ++i)
    kv_reference_row(x_rows[i].data(), w, bias, hidden, g, inv_freq, pos[rows[i]], ref[i].data());
  VerifyStats st;
  double ss = 0;
  std::int64_t n = 0;
  for (auto& v : ref)
    for (double d : v) { ss += d * d; ++n; }
  st.rms_ref = n ? std::sqrt(ss / double(n)) : 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const int r = rows[i];
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < g.n_kv_heads; ++h)
        for (int d = 0; d < D; ++d) {
          const double got = bf16_to_f32(cache[cache_index(slot[r], kv, h, d, g.n_kv_heads, D)]);
          const double want = ref[i][kv * kvd + h * D + d];
          const double err = std::fabs(got - want);
          ++st.checked;
          st.rms_err += err * err;
          st.max_abs_err = std::max(st.max_abs_err, err);
          if (st.rms_ref > 0) st.max_rel_to_rms = std::max(st.max_rel_to_rms, err / st.rms_ref);
          if (!(err <= kRelTol * std::fabs(want) + kAbsTol * st.rms_ref)) {
            if (st.bad == 0)
              st.first_bad = "row " + std::to_string(r) + " kv " + std::to_string(kv) + " head " +
                             std::to_string(h) + " dim " + std::to_string(d) + ": got " + std::to_string(got) +
                             " ref " + std::to_string(want);
            ++st.bad;
          }
        }
  }
  st.rms_err = st.checked ? std::sqrt(st.rms_err / double(st.checked)) : 0;
  return st;
}

}  // namespace kvf::frontier
