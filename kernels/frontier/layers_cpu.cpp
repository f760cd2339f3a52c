#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <omp.h>

#include "layers.hpp"

namespace kvf::frontier {

std::size_t LayerWeights::bytes() const {
  return 4 * (wqkv.size() + bqkv.size() + wo.size() + wgu.size() + wd.size() + g_attn.size() + g_mlp.size() +
              embed.size());
}

namespace {
std::vector<float> bf16_weights(std::size_t n, std::uint64_t seed, float scale,
                                std::vector<std::uint16_t>* keep = nullptr) {
  std::vector<std::uint16_t> b(n);
  fill_bf16_uniform(b.data(), n, seed, scale);
  std::vector<float> f(n);
  bf16_to_f32(b.data(), f.data(), n);
  if (keep) *keep = std::move(b);
  return f;
}
// OpenMP only where the work outweighs a fork/join: on a loaded 2-core machine one can stall for a scheduler
// quantum (~20 ms measured). The layer's GEMMs (oneDNN) fork the same libgomp team anyway, and at T = 128 the
// element-wise loops (SiLU: 1.8M expf per Llama-3.1-8B layer) cost milliseconds on one thread: with the bar at
// 2^22 elements they ran serially, and lowering it to 2^16 took the two-layer page from 110-117 ms to 106-110
// (best of 6, three alternated rounds, 2-core Zen 5 VM, 2026-11-27).
constexpr std::int64_t kOmpMin = std::int64_t(1) << 16;

void rmsnorm(const float* x, const float* g, float eps, int rows, int n, float* y) {
#pragma omp parallel for schedule(static) if (std::int64_t(rows) * n > kOmpMin)
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::size_t(r) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float inv = float(1.0 / std::sqrt(ss / n + eps));
    for (int i = 0; i < n; ++i) y[std::size_t(r) * n + i] = xr[i] * inv * (g ? g[i] : 1.f);
  }
}
}  // namespace

LayerWeights make_layer_weights(const models::ModelShape& m, std::uint64_t seed) {
  LayerWeights w;
  w.hidden = m.hidden;
  w.n_heads = m.n_heads;
  w.n_kv_heads = m.n_kv_heads;
  w.head_dim = m.head_dim;
  w.intermediate = m.intermediate;
  w.eps = float(m.rms_eps);
  w.embed_rows = std::min(m.vocab > 0 ? m.vocab : 4096, 4096);
  const float sh = float(std::sqrt(3.0 / m.hidden)), si = float(std::sqrt(3.0 / m.intermediate));
  const float sq = float(std::sqrt(3.0 / (m.n_heads * m.head_dim)));
  w.wqkv = bf16_weights(std::size_t(w.qkv_out()) * m.hidden, seed + 1, sh, &w.wqkv_bf16);
  if (m.qkv_bias) w.bqkv = bf16_weights(w.qkv_out(), seed + 2, 0.1f);
  w.wo = bf16_weights(std::size_t(m.hidden) * m.n_heads * m.head_dim, seed + 3, sq);
  w.wgu = bf16_weights(std::size_t(2) * m.intermediate * m.hidden, seed + 4, sh);
  w.wd = bf16_weights(std::size_t(m.hidden) * m.intermediate, seed + 5, si);
  w.g_attn = bf16_weights(m.hidden, seed + 6, 0.1f);
  w.g_mlp = bf16_weights(m.hidden, seed + 7, 0.1f);
  for (auto& g : w.g_attn) g += 1.0f;
  for (auto& g : w.g_mlp) g += 1.0f;
  w.embed = bf16_weights(std::size_t(w.embed_rows) * m.hidden, seed + 8, 1.0f);
  return w;
}

std::size_t prefix_bytes(const models::ModelShape& m, int layers, int prefix, int tokens) {
  return std::size_t(2) * layers * m.n_kv_heads * std::size_t(prefix + tokens) * m.head_dim * 4;
}

PrefixCache make_prefix(const models::ModelShape& m, int layers, int prefix, int tokens, std::uint64_t seed) {
  PrefixCache pc;
  pc.layers = layers;
  pc.n_kv_heads = m.n_kv_heads;
  pc.head_dim = m.head_dim;
  pc.capacity = prefix + tokens;
  const std::size_t n = std::size_t(layers) * m.n_kv_heads * pc.capacity * m.head_dim;
  pc.k.resize(n);
  pc.v.resize(n);
  fill_f32_uniform(pc.k.data(), n, seed, 1.0f);
  fill_f32_uniform(pc.v.data(), n, seed + 1, 1.0f);
  return pc;
}

std::vector<float> layer0_input(const LayerWeights& w, std::int32_t token) {
  std::vector<float> x(w.hidden);
  rmsnorm(w.embed.data() + std::size_t(token % w.embed_rows) * w.hidden, w.g_attn.data(), w.eps, 1, w.hidden,
          x.data());
  for (auto& v : x) v = bf16_to_f32(f32_to_bf16(v));  // the GEMM reads bf16
  return x;
}

namespace {
std::unique_ptr<Bf16Gemm> packed(const float* w, int T, int out, int in) {
  std::vector<std::uint16_t> b(std::size_t(out) * in);
  f32_to_bf16(w, b.data(), b.size());
  return std::make_unique<Bf16Gemm>(T, out, in, b.data());
}
// Y = bf16(X) . W^T through g (X fp32 [T][K], rounded into the scratch first).
void gemm_bf16(const Bf16Gemm& g, const float* X, float* Y, std::vector<std::uint16_t>& xb) {
  f32_to_bf16(X, xb.data(), std::size_t(g.M()) * g.K());
  g.run(xb.data(), Y);
}
}  // namespace

LayerGemms make_layer_gemms(const LayerWeights& w, int T, bool whole_layers) {
  const int H = w.hidden, qd = w.n_heads * w.head_dim, kvd = w.n_kv_heads * w.head_dim, I = w.intermediate;
  LayerGemms g;
  g.kv = packed(w.wqkv.data() + std::size_t(qd) * H, T, 2 * kvd, H);
  if (whole_layers) {
    g.qkv = packed(w.wqkv.data(), T, w.qkv_out(), H);
    g.o = packed(w.wo.data(), T, H, qd);
    g.gu = packed(w.wgu.data(), T, 2 * I, H);
    g.d = packed(w.wd.data(), T, H, I);
  }
  return g;
}

void through_layers_cpu(const LayerWeights& w, const LayerGemms& g, int L, int T, int N, const std::int32_t* tokens,
                        PrefixCache& pc, const float* cos_sin, const std::int64_t* slot,
                        std::vector<std::vector<std::uint16_t>>& page_cache, LayerScratch& s) {
  const int H = w.hidden, D = w.head_dim, nh = w.n_heads, nkv = w.n_kv_heads, qo = w.qkv_out();
  const int qd = nh * D, kvd = nkv * D, I = w.intermediate, half = D / 2, G = nh / nkv;
  const int qchunk = 256, keys_max = N + T;
  s.h.resize(std::size_t(T) * H);
  s.xn.resize(std::size_t(T) * H);
  s.qkv.resize(std::size_t(T) * qo);
  s.attn.resize(std::size_t(T) * qd);
  // Attention runs one query head per OpenMP thread (oneDNN runs single-threaded inside the region): one
  // score buffer per thread.
  const std::size_t s_per_thread = std::size_t(std::min(T, qchunk)) * keys_max;
  const bool attn_team = std::int64_t(T) * keys_max * D > kOmpMin;
  s.s.resize(s_per_thread * (attn_team ? omp_get_max_threads() : 1));
  s.gu.resize(std::size_t(T) * 2 * I);
  s.act.resize(std::size_t(T) * I);
  s.tmp.resize(std::size_t(T) * std::max(H, qd));
  s.xb.resize(std::size_t(T) * std::max({H, qd, I}));
  std::vector<std::int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = N + t;
#pragma omp parallel for schedule(static) if (std::int64_t(T) * H > kOmpMin)
  for (int t = 0; t < T; ++t)
    std::copy_n(w.embed.data() + std::size_t(tokens[t] % w.embed_rows) * H, H, s.h.data() + std::size_t(t) * H);
  const float scale = 1.0f / std::sqrt(float(D));
  for (int l = 0; l < L; ++l) {
    const bool last = l == L - 1;
    rmsnorm(s.h.data(), w.g_attn.data(), w.eps, T, H, s.xn.data());
    // Last layer: only the K/V rows of Wqkv (they follow the q_dim Q rows).
    const int nout = last ? 2 * kvd : qo;
    gemm_bf16(last ? *g.kv : *g.qkv, s.xn.data(), s.qkv.data(), s.xb);
    float* q = last ? nullptr : s.qkv.data();
    const int ld = nout;
    const float* kv_base = s.qkv.data() + (last ? 0 : qd);
    // Bias + RoPE + page write of K/V (ld = row stride). Reuse the X-arm writer row by row.
    {
      // rope_write_cpu expects rows of exactly [K | V]: pack them (cheap, T * 2kvd).
      std::vector<float> kvrows(std::size_t(T) * 2 * kvd);
      for (int t = 0; t < T; ++t)
        std::copy_n(kv_base + std::size_t(t) * ld, 2 * kvd, kvrows.data() + std::size_t(t) * 2 * kvd);
      rope_write_cpu(kvrows.data(), w.bqkv.empty() ? nullptr : w.bqkv.data() + qd, T, {nkv, D}, cos_sin,
                     pos.data(), slot, page_cache[l].data());
      if (last) break;
      // Append the page's K (biased, rotated) and V to the prefix cache in fp32.
#pragma omp parallel for schedule(static) if (std::int64_t(T) * kvd > kOmpMin)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < nkv; ++h) {
          const float* kr = kvrows.data() + std::size_t(t) * 2 * kvd + h * D;
          const float* vr = kr + kvd;
          const float* bk = w.bqkv.empty() ? nullptr : w.bqkv.data() + qd + h * D;
          const float* bv = w.bqkv.empty() ? nullptr : w.bqkv.data() + qd + kvd + h * D;
          float* kd = pc.k_at(l, h) + std::size_t(N + t) * D;
          float* vd = pc.v_at(l, h) + std::size_t(N + t) * D;
          const float* cs = cos_sin + std::size_t(N + t) * D;
          for (int i = 0; i < half; ++i) {
            const RopePair o = rope_rotate(kr[i] + (bk ? bk[i] : 0.f), kr[i + half] + (bk ? bk[i + half] : 0.f),
                                           cs[i], cs[half + i]);
            kd[i] = o.lo;
            kd[i + half] = o.hi;
          }
          for (int i = 0; i < D; ++i) vd[i] = vr[i] + (bv ? bv[i] : 0.f);
        }
    }
    // Q: bias + RoPE in place.
#pragma omp parallel for schedule(static) if (std::int64_t(T) * qd > kOmpMin)
    for (int t = 0; t < T; ++t)
      for (int hq = 0; hq < nh; ++hq) {
        float* qr = q + std::size_t(t) * ld + hq * D;
        const float* bq = w.bqkv.empty() ? nullptr : w.bqkv.data() + hq * D;
        const float* cs = cos_sin + std::size_t(N + t) * D;
        for (int i = 0; i < half; ++i) {
          const RopePair o = rope_rotate(qr[i] + (bq ? bq[i] : 0.f), qr[i + half] + (bq ? bq[i + half] : 0.f),
                                         cs[i], cs[half + i]);
          qr[i] = o.lo;
          qr[i + half] = o.hi;
        }
      }
    // Attention per query head (one head per thread), queries in chunks: S = q K^T, causal softmax, O = P V (fp32,
    // oneDNN's matmul: onednn_sgemm); each head writes its own D columns of attn.
#pragma omp parallel for schedule(dynamic) if (attn_team)
    for (int hq = 0; hq < nh; ++hq) {
      const int hk = hq / G;
      float* sc = s.s.data() + (attn_team ? std::size_t(omp_get_thread_num()) * s_per_thread : 0);
      for (int t0 = 0; t0 < T; t0 += qchunk) {
        const int nt = std::min(qchunk, T - t0), keys = N + t0 + nt;
        onednn_sgemm(true, nt, keys, D, scale, q + std::size_t(t0) * ld + hq * D, ld, pc.k_at(l, hk), D, sc, keys);
        for (int i = 0; i < nt; ++i) causal_softmax_row(sc + std::size_t(i) * keys, N + t0 + i + 1, keys);
        onednn_sgemm(false, nt, D, keys, 1.0f, sc, keys, pc.v_at(l, hk), D, s.attn.data() + std::size_t(t0) * qd + hq * D,
                     qd);
      }
    }
    // h += attn Wo^T
    gemm_bf16(*g.o, s.attn.data(), s.tmp.data(), s.xb);
#pragma omp parallel for schedule(static) if (std::int64_t(T) * H > kOmpMin)
    for (std::size_t i = 0; i < std::size_t(T) * H; ++i) s.h[i] += s.tmp[i];
    // MLP: gate|up = xn Wgu^T; act = silu(gate) * up; h += act Wd^T
    rmsnorm(s.h.data(), w.g_mlp.data(), w.eps, T, H, s.xn.data());
    gemm_bf16(*g.gu, s.xn.data(), s.gu.data(), s.xb);
#pragma omp parallel for schedule(static) if (std::int64_t(T) * I > kOmpMin)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < I; ++i) {
        const float g = s.gu[std::size_t(t) * 2 * I + i], u = s.gu[std::size_t(t) * 2 * I + I + i];
        s.act[std::size_t(t) * I + i] = g / (1.0f + std::exp(-g)) * u;
      }
    gemm_bf16(*g.d, s.act.data(), s.tmp.data(), s.xb);
#pragma omp parallel for schedule(static) if (std::int64_t(T) * H > kOmpMin)
    for (std::size_t i = 0; i < std::size_t(T) * H; ++i) s.h[i] += s.tmp[i];
  }
}

double through_layers_flops(const models::ModelShape& m, int L, int T, int N) {
  const double H = m.hidden, D = m.head_dim, nh = m.n_heads, nkv = m.n_kv_heads, I = m.intermediate;
  const double qkv = 2.0 * T * H * (nh + 2 * nkv) * D;
  const double attn = 4.0 * T * nh * D * (N + (T + 1) / 2.0);  // causal, useful FLOPs
  const double o = 2.0 * T * nh * D * H, mlp = 3 * 2.0 * T * H * I;
  return (L - 1) * (qkv + attn + o + mlp) + 2.0 * T * H * 2 * nkv * D;
}

void decode_attention_cpu(const float* q, const std::uint16_t* k, const std::uint16_t* v, int N, int Hq, int Hkv,
                          int D, float* out, float* scratch) {
  const int G = Hq / Hkv;
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> row(D);
  for (int h = 0; h < Hkv; ++h) {
    float* s = scratch;  // [G][N]
    for (int n = 0; n < N; ++n) {
      const std::uint16_t* kr = k + (std::size_t(n) * Hkv + h) * D;
      for (int d = 0; d < D; ++d) row[d] = bf16_to_f32(kr[d]);
      for (int g = 0; g < G; ++g) {
        const float* qg = q + std::size_t(h * G + g) * D;
        float acc = 0;
        for (int d = 0; d < D; ++d) acc += qg[d] * row[d];
        s[std::size_t(g) * N + n] = acc * scale;
      }
    }
    for (int g = 0; g < G; ++g) {
      float* sg = s + std::size_t(g) * N;
      float mx = -INFINITY;
      for (int n = 0; n < N; ++n) mx = std::max(mx, sg[n]);
      float sum = 0;
      for (int n = 0; n < N; ++n) { sg[n] = std::exp(sg[n] - mx); sum += sg[n]; }
      const float inv = 1.0f / sum;
      for (int n = 0; n < N; ++n) sg[n] *= inv;
      std::fill_n(out + std::size_t(h * G + g) * D, D, 0.0f);
    }
    for (int n = 0; n < N; ++n) {
      const std::uint16_t* vr = v + (std::size_t(n) * Hkv + h) * D;
      for (int d = 0; d < D; ++d) row[d] = bf16_to_f32(vr[d]);
      for (int g = 0; g < G; ++g) {
        const float p = s[std::size_t(g) * N + n];
        float* o = out + std::size_t(h * G + g) * D;
        for (int d = 0; d < D; ++d) o[d] += p * row[d];
      }
    }
  }
}

MlaGeom mla_geom(const models::ModelShape& m) {
  MlaGeom g;
  g.hidden = m.hidden;
  g.rank = m.mla.kv_lora_rank;
  g.rope = m.mla.qk_rope_head_dim;
  g.n_heads = m.n_heads;
  g.nope = m.mla.qk_nope_head_dim;
  g.vdim = m.mla.v_head_dim;
  return g;
}

void mla_latent_write_cpu(const float* Y, int rows, MlaGeom g, float eps, const float* cos_sin,
                          const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache) {
  const int lat = g.latent(), half = g.rope / 2;
#pragma omp parallel for schedule(static) if (std::int64_t(rows) * g.latent() > kOmpMin)
  for (int r = 0; r < rows; ++r) {
    const float* y = Y + std::size_t(r) * lat;
    std::uint16_t* out = cache + std::size_t(slot[r]) * lat;
    float ss = 0;
    for (int i = 0; i < g.rank; ++i) ss += y[i] * y[i];
    const float inv = 1.0f / std::sqrt(ss / float(g.rank) + eps);
    for (int i = 0; i < g.rank; ++i) out[i] = f32_to_bf16(y[i] * inv);
    const float* cs = cos_sin + std::size_t(pos[r]) * g.rope;
    for (int i = 0; i < half; ++i) {
      const RopePair o = rope_rotate(y[g.rank + i], y[g.rank + half + i], cs[i], cs[half + i]);
      out[g.rank + i] = f32_to_bf16(o.lo);
      out[g.rank + half + i] = f32_to_bf16(o.hi);
    }
  }
}

void mla_reference_row(const float* x, const std::uint16_t* w, int hidden, MlaGeom g, float eps,
                       const std::vector<double>& inv_freq, int pos, double* out, double rope_amp) {
  const int lat = g.latent(), half = g.rope / 2;
  std::vector<double> y(lat);
  for (int o = 0; o < lat; ++o) {
    double s = 0;
    for (int k = 0; k < hidden; ++k) s += double(x[k]) * bf16_to_f32(w[std::size_t(o) * hidden + k]);
    y[o] = s;
  }
  double ss = 0;
  for (int i = 0; i < g.rank; ++i) ss += y[i] * y[i];
  const double inv = 1.0 / std::sqrt(ss / g.rank + eps);
  for (int i = 0; i < g.rank; ++i) out[i] = y[i] * inv;
  for (int i = 0; i < half; ++i) {
    const double a = pos * inv_freq[i], c = rope_amp * std::cos(a), s = rope_amp * std::sin(a);
    out[g.rank + i] = y[g.rank + i] * c - y[g.rank + half + i] * s;
    out[g.rank + half + i] = y[g.rank + half + i] * c + y[g.rank + i] * s;
  }
}

}  // namespace kvf::frontier
