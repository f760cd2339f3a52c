// CPU twin of the decode step and prefill chunk, the reference, counts and idleness math.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "decode.hpp"
#include "recompute.hpp"
#include <omp.h>

namespace kvf::decode {

namespace fr = kvf::frontier;
namespace ka = kvf::access;

// ---------------------------------------------------------------- ranges and counts
void validate_batch(int b) {
  if (b < kMinBatch || b > kMaxBatch)
    throw std::invalid_argument("batch " + std::to_string(b) + ": allowed " + std::to_string(kMinBatch) + ".." +
                                std::to_string(kMaxBatch));
}
void validate_context(int c) {
  if (c < kMinContext || c > kMaxContext || c % 1024 != 0)
    throw std::invalid_argument("context " + std::to_string(c) + ": must be a multiple of 1024 in " +
                                std::to_string(kMinContext) + ".." + std::to_string(kMaxContext));
}

std::string unsupported_reason(const md::ModelShape& m) {
  if (m.is_mla) return "MLA attention (latent KV) is not modelled by the decode step";
  if (m.is_moe) return "MoE layers are not modelled by the decode step";
  if (m.head_dim != 64 && m.head_dim != 128) return "head dim " + std::to_string(m.head_dim) + " (kernels: 64, 128)";
  if (m.n_kv_heads < 1 || m.n_heads < 1) return "no heads (" + std::to_string(m.n_heads) + "/" +
                                                  std::to_string(m.n_kv_heads) + ")";
  const int g = m.n_heads / m.n_kv_heads;
  if (m.n_heads % m.n_kv_heads || g > 16 || (g & (g - 1)))
    return "GQA group " + std::to_string(m.n_heads) + "/" + std::to_string(m.n_kv_heads) +
           " (attention kernels: power of two, at most 16)";
  return {};
}

double layer_params(const md::ModelShape& m) {
  const double H = m.hidden, qd = m.q_dim(), kvd = m.kv_dim(), I = m.intermediate;
  return H * (qd + 2 * kvd) + qd * H + 2 * I * H + I * H;
}
double decode_flops(const md::ModelShape& m, int B, int C, int L) {
  return double(L) * (2.0 * B * layer_params(m) + 4.0 * B * m.n_heads * m.head_dim * double(C));
}
double kv_layer_bytes(const md::ModelShape& m, int B, int C) { return double(B) * C * 2.0 * m.kv_dim() * 2.0; }
double decode_bytes(const md::ModelShape& m, int B, int C, int L, double weight_bytes) {
  return double(L) * (layer_params(m) * weight_bytes + kv_layer_bytes(m, B, C));
}
double prefill_flops(const md::ModelShape& m, int T, int N, int L) {
  return double(L) * (2.0 * T * layer_params(m) + 4.0 * T * m.n_heads * m.head_dim * (N + (T + 1) / 2.0));
}
double prefill_bytes(const md::ModelShape& m, int T, int N, int L, double weight_bytes) {
  return double(L) * (layer_params(m) * weight_bytes + kv_layer_bytes(m, 1, N + T));
}
OverlapRate overlap_rate(const std::vector<double>& t_ms, int stride, int total, double t0_ms, double t1_ms) {
  OverlapRate r;
  int first = -1, last = -1;
  for (std::size_t k = 0; k < t_ms.size(); ++k)
    if (t_ms[k] >= t0_ms && t_ms[k] <= t1_ms) {
      if (first < 0) first = static_cast<int>(k);
      last = static_cast<int>(k);
    }
  if (first < 0 || last <= first || stride <= 0) return r;
  auto done = [&](int k) { return std::min<long>(long(k + 1) * stride, total); };
  r.pages = done(last) - done(first);
  r.ms = t_ms[std::size_t(last)] - t_ms[std::size_t(first)];
  if (!(r.ms > 0)) r = OverlapRate{};
  return r;
}

double ridge_flop_per_byte(double f, double b) { return b > 0 ? f / b : std::numeric_limits<double>::quiet_NaN(); }
double bound_batch(double f, double b, double wb) { return ridge_flop_per_byte(f, b) * wb / 2.0; }

CpuIdleness cpu_idleness(double flops, double bytes, double seconds, double gemm_ceiling, double read_ceiling) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CpuIdleness x;
  x.step_s = seconds;
  x.achieved_gflops = seconds > 0 ? flops / seconds / 1e9 : nan;
  x.achieved_gbps = seconds > 0 ? bytes / seconds / 1e9 : nan;
  x.ceiling_gflops = gemm_ceiling > 0 ? gemm_ceiling / 1e9 : nan;
  x.read_ceiling_gbps = read_ceiling > 0 ? read_ceiling / 1e9 : nan;
  x.idle_compute_pct = gemm_ceiling > 0 ? 100.0 * (1.0 - x.achieved_gflops / x.ceiling_gflops) : nan;
  x.mem_use_pct = read_ceiling > 0 ? 100.0 * x.achieved_gbps / x.read_ceiling_gbps : nan;
  return x;
}

// ---------------------------------------------------------------- helpers
namespace {
inline float r16(float x) { return fr::bf16_to_f32(fr::f32_to_bf16(x)); }
inline double r16d(double x) { return fr::bf16_to_f32(fr::f32_to_bf16(float(x))); }

// y[r] = bf16(x[r] / rms(x[r]) * g)
void rmsnorm_bf16(const float* x, const float* g, float eps, int rows, int n, float* y) {
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::size_t(r) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float inv = float(1.0 / std::sqrt(ss / n + eps));
    float* yr = y + std::size_t(r) * n;
    for (int i = 0; i < n; ++i) yr[i] = r16(xr[i] * inv * g[i]);
  }
}
void add_inplace(float* h, const float* d, std::size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) h[i] += d[i];
}
void swiglu_bf16(const float* gu, int rows, int I, float* act) {
#pragma omp parallel for schedule(static)
  for (std::int64_t e = 0; e < std::int64_t(rows) * I; ++e) {
    const std::int64_t t = e / I, i = e % I;
    const float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
    act[e] = r16(g / (1.0f + std::exp(-g)) * u);
  }
}
}  // namespace


namespace {
// All BLAS parallelism through OpenMP (kvf::frontier::gemm_xwT: why, and what was measured, in recompute.hpp).
void gemm(const float* X, const float* W, float* Y, int M, int N, int K) { kvf::frontier::gemm_xwT(X, W, Y, M, N, K); }
double dot8(const float* a, const float* b, int n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += double(a[i + j]) * double(b[i + j]);
  double s = 0;
  for (; i < n; ++i) s += double(a[i]) * b[i];
  for (double v : acc) s += v;
  return s;
}
double dot8d(const double* a, const float* b, int n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * double(b[i + j]);
  double s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (double v : acc) s += v;
  return s;
}
}  // namespace

RopeRow rope_row(const md::ModelShape& m, int pos) { return rope_row(fr::rope_inv_freq(m, m.head_dim), pos); }

RopeRow rope_row(const std::vector<double>& inv_freq, int pos) {
  const int half = int(inv_freq.size());
  RopeRow r;
  r.cs.resize(2 * half);
  r.ang.resize(half);
  for (int i = 0; i < half; ++i) {
    r.ang[i] = double(pos) * inv_freq[i];
    r.cs[i] = float(std::cos(r.ang[i]));
    r.cs[half + i] = float(std::sin(r.ang[i]));
  }
  return r;
}

// ---------------------------------------------------------------- decode state
std::size_t decode_state_bytes(const md::ModelShape& m, int B, int C, int kv_copies) {
  return std::size_t(kv_copies) * std::size_t(kv_layer_bytes(m, B, C)) +
         std::size_t(B) * (4 * m.hidden * 4 + 2 * m.intermediate * 4 * 2 + (m.q_dim() + 2 * m.kv_dim()) * 4);
}

DecodeState make_decode_state(const md::ModelShape& m, int B, int C, int kv_copies, std::uint64_t seed) {
  DecodeState s;
  s.B = B;
  s.C = C;
  s.H = m.hidden;
  s.Hq = m.n_heads;
  s.Hkv = m.n_kv_heads;
  s.D = m.head_dim;
  s.I = m.intermediate;
  s.eps = float(m.rms_eps);
  s.shape.batch = B;
  s.shape.hq = m.n_heads;
  s.shape.hkv = m.n_kv_heads;
  s.shape.d = m.head_dim;
  s.shape.ctx = C;
  s.shape.dtype = ka::DType::bf16;
  s.shape.layout = ka::Layout::HND;
  ka::validate_shape(s.shape);
  s.sel = ka::select_dense(s.shape, 16);
  ka::plan_cpu(s.shape, s.sel, s.ws);
  const std::size_t kvn = std::size_t(B) * s.Hkv * std::size_t(C) * s.D;
  s.k.resize(kv_copies);
  s.v.resize(kv_copies);
  for (int c = 0; c < kv_copies; ++c) {
    s.k[c].resize(kvn);
    s.v[c].resize(kvn);
    // K scaled so that q.k/sqrt(D) spreads a few units: softmax is not flat.
    fr::fill_bf16_uniform(s.k[c].data(), kvn, seed + 10 + 2 * c, 1.0f);
    fr::fill_bf16_uniform(s.v[c].data(), kvn, seed + 11 + 2 * c, 1.0f);
  }
  s.rope = rope_row(m, C - 1);
  s.h0.resize(std::size_t(B) * s.H);
  fr::fill_f32_uniform(s.h0.data(), s.h0.size(), seed + 1, 1.0f);
  s.h = s.h0;
  s.xn.resize(std::size_t(B) * s.H);
  s.qkv.resize(std::size_t(B) * (m.q_dim() + 2 * m.kv_dim()));
  s.qb.resize(std::size_t(B) * m.q_dim());
  s.attn.resize(std::size_t(B) * m.q_dim());
  s.tmp.resize(std::size_t(B) * std::max(s.H, m.q_dim()));
  s.gu.resize(std::size_t(B) * 2 * s.I);
  s.act.resize(std::size_t(B) * s.I);
  return s;
}

void decode_layer_cpu(const fr::LayerWeights& w, DecodeState& s, int copy) {
  const int B = s.B, H = s.H, D = s.D, Hq = s.Hq, Hkv = s.Hkv, C = s.C, I = s.I, half = D / 2;
  const int qd = Hq * D, kvd = Hkv * D, qo = qd + 2 * kvd;
  using clk = std::chrono::steady_clock;
  auto t = clk::now();
  auto lap = [&](double& acc) {
    if (!s.instrument) return;
    const auto n = clk::now();
    acc += std::chrono::duration<double>(n - t).count();
    t = n;
  };
  rmsnorm_bf16(s.h.data(), w.g_attn.data(), s.eps, B, H, s.xn.data());
  lap(s.t_other);
  gemm(s.xn.data(), w.wqkv.data(), s.qkv.data(), B, qo, H);
  lap(s.t_gemm);
  std::uint16_t* K = s.k[copy].data();
  std::uint16_t* V = s.v[copy].data();
  const float* cs = s.rope.cs.data();
  const float* bias = w.bqkv.empty() ? nullptr : w.bqkv.data();
  // Bias + RoPE on q (-> bf16) and k, k/v -> bf16 at position C-1 of each sequence.
#pragma omp parallel for schedule(static) if (B > 1)
  for (int b = 0; b < B; ++b) {
    const float* row = s.qkv.data() + std::size_t(b) * qo;
    for (int hh = 0; hh < Hq + 2 * Hkv; ++hh) {
      const float* x = row + hh * D;
      const float* bb = bias ? bias + hh * D : nullptr;
      if (hh < Hq + Hkv) {
        std::uint16_t* dst = hh < Hq ? s.qb.data() + (std::size_t(b) * Hq + hh) * D
                                     : K + ((std::size_t(b) * Hkv + (hh - Hq)) * C + (C - 1)) * D;
        for (int i = 0; i < half; ++i) {
          const auto o = fr::rope_rotate(x[i] + (bb ? bb[i] : 0.f), x[i + half] + (bb ? bb[i + half] : 0.f), cs[i],
                                         cs[half + i]);
          dst[i] = fr::f32_to_bf16(o.lo);
          dst[i + half] = fr::f32_to_bf16(o.hi);
        }
      } else {
        std::uint16_t* dst = V + ((std::size_t(b) * Hkv + (hh - Hq - Hkv)) * C + (C - 1)) * D;
        for (int i = 0; i < D; ++i) dst[i] = fr::f32_to_bf16(x[i] + (bb ? bb[i] : 0.f));
      }
    }
  }
  lap(s.t_other);
  ka::attention_cpu(s.shape, s.qb.data(), K, V, s.sel, s.ws, s.attn.data());
  lap(s.t_attn);
  for (auto& a : s.attn) a = r16(a);
  lap(s.t_other);
  gemm(s.attn.data(), w.wo.data(), s.tmp.data(), B, H, qd);
  lap(s.t_gemm);
  add_inplace(s.h.data(), s.tmp.data(), std::size_t(B) * H);
  rmsnorm_bf16(s.h.data(), w.g_mlp.data(), s.eps, B, H, s.xn.data());
  lap(s.t_other);
  gemm(s.xn.data(), w.wgu.data(), s.gu.data(), B, 2 * I, H);
  lap(s.t_gemm);
  swiglu_bf16(s.gu.data(), B, I, s.act.data());
  lap(s.t_other);
  gemm(s.act.data(), w.wd.data(), s.tmp.data(), B, H, I);
  lap(s.t_gemm);
  add_inplace(s.h.data(), s.tmp.data(), std::size_t(B) * H);
  lap(s.t_other);
}

void decode_step_cpu(const fr::LayerWeights& w, DecodeState& s, int L) {
  std::copy(s.h0.begin(), s.h0.end(), s.h.begin());
  for (int l = 0; l < L; ++l) decode_layer_cpu(w, s, l % s.copies());
}

// ---------------------------------------------------------------- reference
void reference_layer_row(const fr::LayerWeights& w, const DecodeState& s, int b, std::vector<double>& out) {
  const std::size_t kvs = std::size_t(s.Hkv) * s.C * s.D;
  reference_layer(w, s.h0.data() + std::size_t(b) * s.H, s.k[0].data() + b * kvs, s.v[0].data() + b * kvs, s.C,
                  s.rope, out);
}

namespace {
std::vector<float> ref_norm(const std::vector<double>& x, const std::vector<float>& g, float eps) {
  const int H = int(x.size());
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / H + double(eps));
  std::vector<float> y(H);
  for (int i = 0; i < H; ++i) y[i] = float(r16d(x[i] * inv * g[i]));
  return y;
}
}  // namespace

void reference_qkv(const fr::LayerWeights& w, const float* h0, const RopeRow& rope, std::vector<float>& q,
                   std::vector<float>& knew, std::vector<float>& vnew) {
  const int H = w.hidden, D = w.head_dim, Hq = w.n_heads, Hkv = w.n_kv_heads, half = D / 2;
  const int qd = Hq * D, kvd = Hkv * D, qo = qd + 2 * kvd;
  std::vector<double> h(h0, h0 + H);
  const std::vector<float> xn = ref_norm(h, w.g_attn, w.eps);
  std::vector<double> qkv(qo);
  for (int o = 0; o < qo; ++o)
    qkv[o] = dot8(xn.data(), w.wqkv.data() + std::size_t(o) * H, H) + (w.bqkv.empty() ? 0.0 : w.bqkv[o]);
  // RoPE in double with the angle of the row's position; bf16 q, k, v.
  q.assign(qd, 0.f);
  knew.assign(kvd, 0.f);
  vnew.assign(kvd, 0.f);
  auto rot = [&](const double* x, float* y, int heads) {
    for (int hh = 0; hh < heads; ++hh)
      for (int i = 0; i < half; ++i) {
        const double c = std::cos(rope.ang[i]), sn = std::sin(rope.ang[i]);
        const double lo = x[hh * D + i], hi = x[hh * D + i + half];
        y[hh * D + i] = float(r16d(lo * c - hi * sn));
        y[hh * D + i + half] = float(r16d(hi * c + lo * sn));
      }
  };
  rot(qkv.data(), q.data(), Hq);
  rot(qkv.data() + qd, knew.data(), Hkv);
  for (int i = 0; i < kvd; ++i) vnew[i] = float(r16d(qkv[qd + kvd + i]));
}

void reference_layer(const fr::LayerWeights& w, const float* h0, const std::uint16_t* kseq, const std::uint16_t* vseq,
                     int C, const RopeRow& rope, std::vector<double>& out) {
  const int H = w.hidden, D = w.head_dim, Hq = w.n_heads, Hkv = w.n_kv_heads, I = w.intermediate;
  const int G = Hq / Hkv, qd = Hq * D;
  std::vector<double> h(h0, h0 + H);
  std::vector<float> q, knew, vnew;
  reference_qkv(w, h0, rope, q, knew, vnew);
  // Attention over C tokens: cache positions < C-1 and the new token at C-1.
  std::vector<float> a(qd);
  std::vector<double> sc(C), acc(D);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int hq = 0; hq < Hq; ++hq) {
    const int hk = hq / G;
    const std::uint16_t* Kh = kseq + std::size_t(hk) * C * D;
    const std::uint16_t* Vh = vseq + std::size_t(hk) * C * D;
    double mx = -1e300;
    for (int n = 0; n < C; ++n) {
      double d = 0;
      for (int i = 0; i < D; ++i)
        d += double(q[hq * D + i]) * (n == C - 1 ? knew[hk * D + i] : fr::bf16_to_f32(Kh[std::size_t(n) * D + i]));
      sc[n] = d * scale;
      mx = std::max(mx, sc[n]);
    }
    double sum = 0;
    for (auto& x : sc) { x = std::exp(x - mx); sum += x; }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int n = 0; n < C; ++n)
      for (int i = 0; i < D; ++i)
        acc[i] += sc[n] * (n == C - 1 ? vnew[hk * D + i] : fr::bf16_to_f32(Vh[std::size_t(n) * D + i]));
    for (int i = 0; i < D; ++i) a[hq * D + i] = float(r16d(acc[i] / sum));
  }
  for (int o = 0; o < H; ++o) h[o] += dot8(a.data(), w.wo.data() + std::size_t(o) * qd, qd);
  const std::vector<float> xn2 = ref_norm(h, w.g_mlp, w.eps);
  std::vector<float> act(I);
  for (int i = 0; i < I; ++i) {
    const double g = dot8(xn2.data(), w.wgu.data() + std::size_t(i) * H, H);
    const double u = dot8(xn2.data(), w.wgu.data() + std::size_t(I + i) * H, H);
    act[i] = float(r16d(g / (1.0 + std::exp(-g)) * u));
  }
  out.assign(H, 0.0);
  for (int o = 0; o < H; ++o) out[o] = h[o] + dot8(act.data(), w.wd.data() + std::size_t(o) * I, I);
  (void)dot8d;
}

std::string VerifyResult::text() const {
  std::ostringstream o;
  o << "max|err|/rms(ref) " << max_err_rel << " (tol " << kVerifyMaxTol << "), rms(err)/rms(ref) " << rms_err_rel
    << " (tol " << kVerifyRmsTol << ") over " << rows << " rows";
  return o.str();
}

VerifyResult compare_rows(const std::vector<float>& h, int H, const std::vector<int>& rows,
                          const std::vector<std::vector<double>>& refs) {
  VerifyResult r;
  double ss_ref = 0, ss_err = 0, mx = 0;
  std::size_t n = 0;
  for (std::size_t k = 0; k < rows.size(); ++k)
    for (int i = 0; i < H; ++i) {
      const double ref = refs[k][i], got = h[std::size_t(rows[k]) * H + i];
      const double e = std::isfinite(got) ? std::fabs(got - ref) : std::numeric_limits<double>::infinity();
      ss_ref += ref * ref;
      ss_err += e * e;
      mx = std::max(mx, e);
      ++n;
    }
  r.rows = int(rows.size());
  r.rms_ref = std::sqrt(ss_ref / std::max<std::size_t>(n, 1));
  r.max_err_rel = mx / r.rms_ref;
  r.rms_err_rel = std::sqrt(ss_err / std::max<std::size_t>(n, 1)) / r.rms_ref;
  if (!std::isfinite(r.max_err_rel)) r.max_err_rel = r.rms_err_rel = std::numeric_limits<double>::infinity();
  return r;
}

VerifyResult verify_cpu(const fr::LayerWeights& w, DecodeState& s, const std::vector<int>& rows) {
  std::vector<std::vector<double>> refs(rows.size());
  for (std::size_t k = 0; k < rows.size(); ++k) reference_layer_row(w, s, rows[k], refs[k]);
  std::copy(s.h0.begin(), s.h0.end(), s.h.begin());
  decode_layer_cpu(w, s, 0);
  auto r = compare_rows(s.h, s.H, rows, refs);
  std::copy(s.h0.begin(), s.h0.end(), s.h.begin());
  return r;
}

// ---------------------------------------------------------------- prefill chunk
PrefillState make_prefill_state(const md::ModelShape& m, int T, int N, std::uint64_t seed) {
  PrefillState s;
  s.T = T;
  s.N = N;
  s.pc = fr::make_prefix(m, 1, N, T, seed + 20);
  for (auto& x : s.pc.k) x = r16(x);  // the cache holds bf16 values (the GPU's copy is bf16)
  for (auto& x : s.pc.v) x = r16(x);
  s.cos_sin = fr::rope_table(fr::rope_inv_freq(m, m.head_dim), N + T);
  const int H = m.hidden, qd = m.q_dim(), kvd = m.kv_dim(), I = m.intermediate;
  s.h0.resize(std::size_t(T) * H);
  fr::fill_f32_uniform(s.h0.data(), s.h0.size(), seed + 21, 1.0f);
  s.h = s.h0;
  s.xn.resize(std::size_t(T) * H);
  s.qkv.resize(std::size_t(T) * (qd + 2 * kvd));
  s.attn.resize(std::size_t(T) * qd);
  s.tmp.resize(std::size_t(T) * std::max(H, qd));
  s.gu.resize(std::size_t(T) * 2 * I);
  s.act.resize(std::size_t(T) * I);
  s.s.resize(std::size_t(std::min(T, 256)) * (N + T) * omp_get_max_threads());
  return s;
}

void prefill_step_cpu(const fr::LayerWeights& w, PrefillState& s, int L) {
  const int T = s.T, N = s.N, H = w.hidden, D = w.head_dim, nh = w.n_heads, nkv = w.n_kv_heads, I = w.intermediate;
  const int qd = nh * D, kvd = nkv * D, qo = qd + 2 * kvd, half = D / 2, G = nh / nkv, qchunk = 256;
  const float scale = 1.0f / std::sqrt(float(D));
  std::copy(s.h0.begin(), s.h0.end(), s.h.begin());
  for (int l = 0; l < L; ++l) {
    rmsnorm_bf16(s.h.data(), w.g_attn.data(), w.eps, T, H, s.xn.data());
    gemm(s.xn.data(), w.wqkv.data(), s.qkv.data(), T, qo, H);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      float* row = s.qkv.data() + std::size_t(t) * qo;
      const float* cs = s.cos_sin.data() + std::size_t(N + t) * D;
      for (int hh = 0; hh < nh + 2 * nkv; ++hh) {
        float* x = row + hh * D;
        const float* bb = w.bqkv.empty() ? nullptr : w.bqkv.data() + hh * D;
        if (hh < nh + nkv) {
          for (int i = 0; i < half; ++i) {
            const auto o = fr::rope_rotate(x[i] + (bb ? bb[i] : 0.f), x[i + half] + (bb ? bb[i + half] : 0.f), cs[i],
                                           cs[half + i]);
            x[i] = r16(o.lo);
            x[i + half] = r16(o.hi);
          }
        } else {
          for (int i = 0; i < D; ++i) x[i] = r16(x[i] + (bb ? bb[i] : 0.f));
        }
        if (hh >= nh) {  // append K / V of the chunk to the resident cache
          const bool isk = hh < nh + nkv;
          const int kh = isk ? hh - nh : hh - nh - nkv;
          float* dst = (isk ? s.pc.k_at(0, kh) : s.pc.v_at(0, kh)) + std::size_t(N + t) * D;
          std::copy_n(x, D, dst);
        }
      }
    }
    // Causal attention per query head (heads across threads; single-threaded sgemm inside): S = q K^T, softmax,
    // O = P V, queries in chunks of 256.
    const std::size_t per_thread = std::size_t(std::min(T, qchunk)) * (N + T);
#pragma omp parallel
    {
      float* S = s.s.data() + per_thread * omp_get_thread_num();
#pragma omp for schedule(dynamic)
      for (int hq = 0; hq < nh; ++hq) {
        const int hk = hq / G;
        for (int t0 = 0; t0 < T; t0 += qchunk) {
          const int nt = std::min(qchunk, T - t0), keys = N + t0 + nt;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, keys, D, scale,
                      s.qkv.data() + std::size_t(t0) * qo + hq * D, qo, s.pc.k_at(0, hk), D, 0.0f, S, keys);
          for (int i = 0; i < nt; ++i) {
            kvf::frontier::causal_softmax_row(S + std::size_t(i) * keys, N + t0 + i + 1, keys);
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, D, keys, 1.0f, S, keys, s.pc.v_at(0, hk), D, 0.0f,
                      s.attn.data() + std::size_t(t0) * qd + hq * D, qd);
        }
      }
    }
    for (auto& a : s.attn) a = r16(a);
    gemm(s.attn.data(), w.wo.data(), s.tmp.data(), T, H, qd);
    add_inplace(s.h.data(), s.tmp.data(), std::size_t(T) * H);
    rmsnorm_bf16(s.h.data(), w.g_mlp.data(), w.eps, T, H, s.xn.data());
    gemm(s.xn.data(), w.wgu.data(), s.gu.data(), T, 2 * I, H);
    swiglu_bf16(s.gu.data(), T, I, s.act.data());
    gemm(s.act.data(), w.wd.data(), s.tmp.data(), T, H, I);
    add_inplace(s.h.data(), s.tmp.data(), std::size_t(T) * H);
  }
}

std::string PrefillVerifyResult::text() const { return "h: " + h.text() + "; appended K/V: " + kv.text(); }

std::vector<int> prefill_check_rows(int T) {
  std::vector<int> r = {0, std::min(1, T - 1), std::max(0, T / 2 - 1), T / 2 < T ? T / 2 : T - 1, T - 1};
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

VerifyResult check_appended_kv(const fr::LayerWeights& w, const md::ModelShape& m, int T, int N, const float* h0,
                               const std::uint16_t* kc, const std::uint16_t* vc, const std::vector<int>& rows) {
  const int D = w.head_dim, Hkv = w.n_kv_heads, kvd = Hkv * D, cap = N + T;
  for (int t : rows)
    if (t < 0 || t >= T) throw std::invalid_argument("check_appended_kv: row " + std::to_string(t) + " outside the chunk");
  std::vector<std::vector<double>> kv_refs(rows.size());
  std::vector<float> kv_got(rows.size() * 2 * std::size_t(kvd));
  std::vector<int> kv_rows(rows.size());
#pragma omp parallel for schedule(dynamic)
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const int t = rows[k];
    std::vector<float> q, kn, vn;
    reference_qkv(w, h0 + std::size_t(t) * w.hidden, rope_row(m, N + t), q, kn, vn);
    kv_refs[k].resize(2 * std::size_t(kvd));
    for (int i = 0; i < kvd; ++i) {
      kv_refs[k][i] = kn[i];
      kv_refs[k][kvd + i] = vn[i];
    }
    for (int hk = 0; hk < Hkv; ++hk)
      for (int d = 0; d < D; ++d) {
        const std::size_t at = (std::size_t(hk) * cap + N + t) * D + d;
        kv_got[k * 2 * kvd + hk * D + d] = fr::bf16_to_f32(kc[at]);
        kv_got[k * 2 * kvd + kvd + hk * D + d] = fr::bf16_to_f32(vc[at]);
      }
    kv_rows[k] = int(k);
  }
  return compare_rows(kv_got, 2 * kvd, kv_rows, kv_refs);
}

PrefillVerifyResult check_prefill_rows(const fr::LayerWeights& w, const md::ModelShape& m, int T, int N,
                                       const float* h0, const std::vector<float>& h, const std::uint16_t* kc,
                                       const std::uint16_t* vc, const std::vector<int>& rows) {
  const int H = w.hidden, D = w.head_dim, Hkv = w.n_kv_heads, cap = N + T;
  for (int t : rows)
    if (t < 0 || t >= T) throw std::invalid_argument("check_prefill_rows: row " + std::to_string(t) + " outside the chunk");
  std::vector<std::vector<double>> refs(rows.size());
#pragma omp parallel for schedule(dynamic)
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const int t = rows[k], C = N + t + 1;
    const RopeRow rope = rope_row(m, N + t);
    std::vector<std::uint16_t> ks(std::size_t(Hkv) * C * D), vs(ks.size());
    for (int hk = 0; hk < Hkv; ++hk) {
      std::copy_n(kc + std::size_t(hk) * cap * D, std::size_t(C) * D, ks.data() + std::size_t(hk) * C * D);
      std::copy_n(vc + std::size_t(hk) * cap * D, std::size_t(C) * D, vs.data() + std::size_t(hk) * C * D);
    }
    reference_layer(w, h0 + std::size_t(t) * H, ks.data(), vs.data(), C, rope, refs[k]);
  }
  PrefillVerifyResult r;
  r.h = compare_rows(h, H, rows, refs);
  r.kv = check_appended_kv(w, m, T, N, h0, kc, vc, rows);
  return r;
}

PrefillVerifyResult verify_prefill_cpu(const fr::LayerWeights& w, const md::ModelShape& m, PrefillState& s,
                                       const std::vector<int>& rows) {
  prefill_step_cpu(w, s, 1);
  std::vector<std::uint16_t> kc(s.pc.k.size()), vc(s.pc.v.size());
  fr::f32_to_bf16(s.pc.k.data(), kc.data(), kc.size());  // exact: the cache holds bf16 values
  fr::f32_to_bf16(s.pc.v.data(), vc.data(), vc.size());
  return check_prefill_rows(w, m, s.T, s.N, s.h0.data(), s.h, kc.data(), vc.data(), rows);
}

// ---------------------------------------------------------------- recompute from X
RecomputeState make_recompute_state(const md::ModelShape& m, int T, int P, std::uint64_t seed) {
  RecomputeState s;
  s.rows = T * P;
  s.hidden = m.hidden;
  s.g = {m.n_kv_heads, m.head_dim};
  const int out = 2 * s.g.kv_dim();
  std::vector<std::uint16_t> w(std::size_t(out) * m.hidden);
  fr::fill_bf16_uniform(w.data(), w.size(), seed + 1, float(std::sqrt(3.0 / m.hidden)));
  s.wf.resize(w.size());
  fr::bf16_to_f32(w.data(), s.wf.data(), w.size());
  s.xb.resize(std::size_t(s.rows) * m.hidden);
  fr::fill_bf16_uniform(s.xb.data(), s.xb.size(), seed + 2, 1.0f);
  s.x.resize(s.xb.size());
  s.y.resize(std::size_t(s.rows) * out);
  const int pos0 = 4096;
  s.cos_sin = fr::rope_table(fr::rope_inv_freq(m, m.head_dim), pos0 + T);
  s.pos.resize(s.rows);
  for (int r = 0; r < s.rows; ++r) s.pos[r] = pos0 + r % T;
  const std::int64_t n_blocks = 2 * ((s.rows + fr::kBlockTokens - 1) / fr::kBlockTokens);
  s.slot = fr::scattered_slots(s.rows, n_blocks, seed + 4);
  s.cache.assign(std::size_t(n_blocks) * 2 * fr::kBlockTokens * s.g.kv_dim(), 0);
  return s;
}

void recompute_cpu(RecomputeState& s) {
  for (std::size_t i = 0; i < s.xb.size(); ++i) s.x[i] = fr::bf16_to_f32(s.xb[i]);
  gemm(s.x.data(), s.wf.data(), s.y.data(), s.rows, 2 * s.g.kv_dim(), s.hidden);
  fr::rope_write_cpu(s.y.data(), nullptr, s.rows, s.g, s.cos_sin.data(), s.pos.data(), s.slot.data(), s.cache.data());
}

}  // namespace kvf::decode
