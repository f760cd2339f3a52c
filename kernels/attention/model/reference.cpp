// fp64 reference of the Llama-family forward (kvf/attention/forward.hpp): a test oracle for small models,
// written as plain loops over the transformers definitions, sharing nothing with forward_cpu but the loader.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kvf/attention/forward.hpp"
#include "kvf/bf16.hpp"
#include "kvf/errors.hpp"

namespace kvf::attention {

namespace {

std::vector<double> weights(const Checkpoint& ck, const std::string& name, std::vector<std::int64_t> shape) {
  const TensorView v = ck.tensor(name, shape);
  std::vector<float> f(std::size_t(v.info->numel()));
  to_f32(v, f.data());
  return std::vector<double>(f.begin(), f.end());
}

// transformers' default RoPE, then _compute_linear_scaling_rope_parameters or _compute_llama3_parameters.
std::vector<double> reference_inv_freq(const models::ModelShape& m) {
  const double pi = std::acos(-1.0);
  const auto& rs = m.rope_scaling;
  std::vector<double> inv(m.head_dim / 2);
  for (std::size_t i = 0; i < inv.size(); ++i) {
    double f = 1.0 / std::pow(m.rope_theta, double(2 * i) / m.head_dim);
    if (rs.type == "linear") f /= rs.factor;
    if (rs.type == "llama3") {
      const double wavelen = 2 * pi / f, low_wavelen = rs.original_max_position / rs.low_freq_factor,
                   high_wavelen = rs.original_max_position / rs.high_freq_factor;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth = (rs.original_max_position / wavelen - rs.low_freq_factor) /
                              (rs.high_freq_factor - rs.low_freq_factor);
        f = (1 - smooth) * f / rs.factor + smooth * f;
      }
    }
    inv[i] = f;
  }
  return inv;
}

void rmsnorm(const double* x, const std::vector<double>& g, double eps, int n, double* y) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * g[i];
}

// y[n_out] = W[n_out][n_in] x (+ b)
void linear(const std::vector<double>& w, const double* b, const double* x, int n_out, int n_in, double* y) {
  for (int o = 0; o < n_out; ++o) {
    double s = b ? b[o] : 0.0;
    for (int i = 0; i < n_in; ++i) s += w[std::size_t(o) * n_in + i] * x[i];
    y[o] = s;
  }
}

void rope(double* x, int heads, int D, const std::vector<double>& inv, int pos) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < D / 2; ++i) {
      double* p = x + std::size_t(h) * D;
      const double c = std::cos(pos * inv[i]), s = std::sin(pos * inv[i]);
      const double a = p[i], b = p[i + D / 2];
      p[i] = a * c - b * s;
      p[i + D / 2] = b * c + a * s;
    }
}

}  // namespace

ReferenceResult forward_reference(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, int queries,
                                  const SelectionMask* mask, bool bf16_gemm_inputs) {
  // What a bf16 GEMM reads: the value rounded to bf16 (through fp32, as the pass holds it).
  auto gemm_in = [&](double* x, int n) {
    if (bf16_gemm_inputs)
      for (int i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(float(x[i])));
  };
  const auto& cfg = ck.config();
  const auto& m = cfg.shape;
  const int C = int(tokens.size()), M = queries, H = m.hidden, D = m.head_dim, nh = m.n_heads, nkv = m.n_kv_heads;
  const int qd = nh * D, kvd = nkv * D, I = m.intermediate, V = m.vocab, L = m.layers, G = nh / nkv;
  const double work = double(L) * C * (double(H) * (qd + 2 * kvd + qd) + 3.0 * H * I + 2.0 * C * qd) + double(M) * H * V;
  if (C < 1 || M < 1 || M > C || work > double(std::int64_t(1) << 34))
    throw std::invalid_argument("forward_reference: context " + std::to_string(C) + ", queries " + std::to_string(M) +
                                ": out of range for the fp64 oracle");
  const auto inv = reference_inv_freq(m);
  ReferenceResult r;
  r.queries = M;
  r.context = C;
  r.probs.assign(std::size_t(L) * nh * M * C, 0.0);
  r.q.assign(std::size_t(L) * nh * M * D, 0.0);
  r.k.assign(std::size_t(L) * nkv * C * D, 0.0);
  r.v.assign(r.k.size(), 0.0);
  std::vector<double> h(std::size_t(C) * H);
  {
    const auto e = weights(ck, "model.embed_tokens.weight", {V, H});
    for (int t = 0; t < C; ++t)
      for (int i = 0; i < H; ++i) h[std::size_t(t) * H + i] = e[std::size_t(tokens[t]) * H + i];
  }
  std::vector<double> xn(H), q(std::size_t(C) * qd), o(qd), tmp(std::max(H, 2 * I)), gate(I), up(I), sc(C);
  for (int l = 0; l < L; ++l) {
    auto w = [&](const char* s, std::vector<std::int64_t> shape) { return weights(ck, layer_tensor(l, s), shape); };
    const auto wq = w("self_attn.q_proj.weight", {qd, H}), wk = w("self_attn.k_proj.weight", {kvd, H}),
               wv = w("self_attn.v_proj.weight", {kvd, H}), wo = w("self_attn.o_proj.weight", {H, qd}),
               wg = w("mlp.gate_proj.weight", {I, H}), wu = w("mlp.up_proj.weight", {I, H}),
               wd = w("mlp.down_proj.weight", {H, I}), g_in = w("input_layernorm.weight", {H}),
               g_post = w("post_attention_layernorm.weight", {H});
    std::vector<double> bq, bk, bv;
    if (m.qkv_bias) {
      bq = w("self_attn.q_proj.bias", {qd});
      bk = w("self_attn.k_proj.bias", {kvd});
      bv = w("self_attn.v_proj.bias", {kvd});
    }
    double* K = r.k.data() + std::size_t(l) * nkv * C * D;  // [hk][C][D]
    double* Vv = r.v.data() + std::size_t(l) * nkv * C * D;
    std::vector<double> krow(kvd), vrow(kvd);
    for (int t = 0; t < C; ++t) {
      rmsnorm(h.data() + std::size_t(t) * H, g_in, m.rms_eps, H, xn.data());
      gemm_in(xn.data(), H);
      double* qt = q.data() + std::size_t(t) * qd;
      linear(wq, bq.empty() ? nullptr : bq.data(), xn.data(), qd, H, qt);
      linear(wk, bk.empty() ? nullptr : bk.data(), xn.data(), kvd, H, krow.data());
      linear(wv, bv.empty() ? nullptr : bv.data(), xn.data(), kvd, H, vrow.data());
      rope(qt, nh, D, inv, t);
      rope(krow.data(), nkv, D, inv, t);
      for (int hk = 0; hk < nkv; ++hk)
        for (int d = 0; d < D; ++d) {
          K[(std::size_t(hk) * C + t) * D + d] = krow[hk * D + d];
          Vv[(std::size_t(hk) * C + t) * D + d] = vrow[hk * D + d];
        }
    }
    for (int t = 0; t < C; ++t) {
      const int mm = t - (C - M);
      for (int hq = 0; hq < nh; ++hq) {
        const int hk = hq / G;
        const double* qv = q.data() + std::size_t(t) * qd + hq * D;
        double mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          const bool dropped = mask && t >= mask->from && j < mask->from &&
                               [&] {
                                 for (auto p : mask->kept[std::size_t(l) * nkv + hk])
                                   if (p == j) return false;
                                 return true;
                               }();
          double s = 0;
          for (int d = 0; d < D; ++d) s += qv[d] * K[(std::size_t(hk) * C + j) * D + d];
          sc[j] = dropped ? -INFINITY : s / std::sqrt(double(D));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int d = 0; d < D; ++d) o[hq * D + d] = 0;
        for (int j = 0; j <= t; ++j) {
          sc[j] /= sum;
          for (int d = 0; d < D; ++d) o[hq * D + d] += sc[j] * Vv[(std::size_t(hk) * C + j) * D + d];
        }
        if (mm >= 0) {
          for (int j = 0; j <= t; ++j) r.probs[((std::size_t(l) * nh + hq) * M + mm) * C + j] = sc[j];
          for (int d = 0; d < D; ++d) r.q[((std::size_t(l) * nh + hq) * M + mm) * D + d] = qv[d];
        }
      }
      double* ht = h.data() + std::size_t(t) * H;
      gemm_in(o.data(), qd);
      linear(wo, nullptr, o.data(), H, qd, tmp.data());
      for (int i = 0; i < H; ++i) ht[i] += tmp[i];
    }
    // The MLP of each row needs only that row: after every row's attention read this layer's K/V.
    for (int t = 0; t < C; ++t) {
      double* ht = h.data() + std::size_t(t) * H;
      rmsnorm(ht, g_post, m.rms_eps, H, xn.data());
      gemm_in(xn.data(), H);
      linear(wg, nullptr, xn.data(), I, H, gate.data());
      linear(wu, nullptr, xn.data(), I, H, up.data());
      for (int i = 0; i < I; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      gemm_in(gate.data(), I);
      linear(wd, nullptr, gate.data(), H, I, tmp.data());
      for (int i = 0; i < H; ++i) ht[i] += tmp[i];
    }
  }
  const auto norm = weights(ck, "model.norm.weight", {H});
  const auto head = weights(ck, cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", {V, H});
  r.logits.assign(std::size_t(M) * V, 0.0);
  for (int mm = 0; mm < M; ++mm) {
    rmsnorm(h.data() + std::size_t(C - M + mm) * H, norm, m.rms_eps, H, xn.data());
    linear(head, nullptr, xn.data(), V, H, r.logits.data() + std::size_t(mm) * V);
  }
  return r;
}

}  // namespace kvf::attention
