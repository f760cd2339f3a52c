// The Llama-family forward pass on the CPU with attention capture (kvf/attention/forward.hpp).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "gemm_onednn.hpp"
#include "kvf/attention/forward.hpp"
#include "forward_detail.hpp"
#include "kvf/errors.hpp"
#include "layers.hpp"  // causal_softmax_row
#include "recompute.hpp"

namespace kvf::attention {

using frontier::Bf16Gemm;

std::vector<double> hf_inv_freq(const models::ModelShape& m) {
  if (m.rope_scaling.type != "linear") return frontier::rope_inv_freq(m, m.head_dim);
  models::ModelShape plain = m;
  plain.rope_scaling.type = "none";
  auto f = frontier::rope_inv_freq(plain, m.head_dim);
  for (auto& v : f) v /= m.rope_scaling.factor;
  return f;
}

namespace {

// Y[M][N] = X[M][K] W^T for one projection: bf16 weights through Bf16Gemm (X rounded to bf16, as a bf16
// engine feeds its GEMMs), other dtypes in fp32 (OpenBLAS), so an f32 checkpoint is not rounded.
struct Proj {
  std::unique_ptr<Bf16Gemm> bf;
  std::vector<float> wf;
  int M = 0, N = 0, K = 0;
  std::uint64_t bytes() const { return std::uint64_t(N) * K * 4 + std::uint64_t(M) * K * 4; }
  std::string impl() const { return bf ? bf->impl() : "OpenBLAS sgemm fp32 (the weights are not bf16)"; }
  void run(const float* X, float* Y, std::vector<std::uint16_t>& xb) const {
    if (bf) {
      frontier::f32_to_bf16(X, xb.data(), std::size_t(M) * K);
      bf->run(xb.data(), Y);
    } else {
      frontier::gemm_xwT(X, wf.data(), Y, M, N, K);
    }
  }
};

// Memory the layers' weights pass through, kept from one layer to the next (the layers of a model have the same
// sizes): the stacked bf16 rows and, per projection, where oneDNN packs them. Fresh pages per layer cost more than
// the copy and the packing (frontier::PackArena).
struct WeightStage {
  HostArray<std::uint16_t> rows;  // grows to the largest product, 2 MiB pages where the OS grants them
  frontier::PackArena packed[4];  // qkv, o, gate/up, down
};

// The row blocks of `parts` stacked into one [sum rows][K] product ([q; k; v], [gate; up]); bf16 ones are read by
// every thread into ws.rows and packed into `arena` (the product must be gone before the arena is reused).
Proj make_proj(const std::vector<TensorView>& parts, int M, int K, WeightStage& ws, frontier::PackArena& arena) {
  Proj p;
  p.M = M;
  p.K = K;
  bool all_bf16 = true;
  for (const auto& v : parts) {
    p.N += int(v.info->shape[0]);
    all_bf16 = all_bf16 && v.info->dtype == Dtype::bf16;
  }
  std::size_t row = 0;
  if (all_bf16) {
    if (ws.rows.size() < std::size_t(p.N) * K) ws.rows = HostArray<std::uint16_t>(std::size_t(p.N) * K);
    detail::stack_bf16(parts, ws.rows.data());
    p.bf = std::make_unique<Bf16Gemm>(M, p.N, K, ws.rows.data(), &arena);
  } else {
    p.wf.resize(std::size_t(p.N) * K);
    for (const auto& v : parts) {
      to_f32(v, p.wf.data() + row * K);
      row += std::size_t(v.info->shape[0]);
    }
  }
  return p;
}


struct LayerW {
  Proj qkv, o, gu, d;
  std::vector<float> g_in, g_post, bias;  // bias: [q | k | v] (Qwen2), else empty
  std::uint64_t bytes() const {
    return qkv.bytes() + o.bytes() + gu.bytes() + d.bytes() + 4 * (g_in.size() + g_post.size() + bias.size());
  }
};

// Layer l's weights; ws is reused, so the LayerW of the layer before must be gone.
LayerW load_layer(const Checkpoint& ck, int l, int T, WeightStage& ws) {
  const auto& m = ck.config().shape;
  const detail::LayerTensors t = detail::layer_tensors(ck, l);
  LayerW w;
  w.qkv = make_proj(t.qkv, T, m.hidden, ws, ws.packed[0]);
  w.o = make_proj({t.o}, T, m.q_dim(), ws, ws.packed[1]);
  w.gu = make_proj(t.gu, T, m.hidden, ws, ws.packed[2]);
  w.d = make_proj({t.d}, T, m.intermediate, ws, ws.packed[3]);
  w.g_in = detail::vec_f32(t.g_in);
  w.g_post = detail::vec_f32(t.g_post);
  w.bias = detail::vec_f32(t.bias);
  return w;
}

// transformers' LlamaRMSNorm: fp32 x / sqrt(mean(x^2) + eps) * g (the sum in double here).
void rmsnorm(const float* x, const float* g, double eps, int rows, int n, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::size_t(r) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float inv = float(1.0 / std::sqrt(ss / n + eps));
    for (int i = 0; i < n; ++i) y[std::size_t(r) * n + i] = xr[i] * inv * g[i];
  }
}

struct Geometry {
  int C = 0, M = 0, T = 0, H = 0, D = 0, nh = 0, nkv = 0, qd = 0, kvd = 0, qo = 0, I = 0, V = 0;
};

// Only full attention is built: a context past the config's sliding window is refused.
void check_no_sliding_window(const HfConfig& cfg, int context) {
  if (cfg.sliding_window > 0 && context > cfg.sliding_window)
    throw UsageError(cfg.source + ": sliding_window " + std::to_string(cfg.sliding_window) + " is below the context " +
                     std::to_string(context) + "; sliding-window attention is not built (not available: only full attention)");
}

// A mask's geometry against the model and its kept positions against its `from`. from_ok: whether `from` suits the
// caller; wanted: what the caller's message says it needs.
void check_mask(const models::ModelShape& m, const SelectionMask& k, bool from_ok, const std::string& wanted) {
  if (k.layers != m.layers || k.kv_heads != m.n_kv_heads || k.kept.size() != std::size_t(k.layers) * k.kv_heads ||
      !from_ok)
    throw UsageError("selection mask: " + std::to_string(k.layers) + " layers x " + std::to_string(k.kv_heads) +
                     " kv heads from position " + std::to_string(k.from) + "; " + wanted);
  for (const auto& v : k.kept)
    for (auto p : v)
      if (p < 0 || p >= k.from)
        throw UsageError("selection mask: kept position " + std::to_string(p) + " is not in [0, from " +
                         std::to_string(k.from) + ")");
}


// Per layer and kv head, whether a key below mask.from is kept ([kv head][from]).
std::vector<std::uint8_t> keep_bits(const SelectionMask& k, int l) {
  std::vector<std::uint8_t> b(std::size_t(k.kv_heads) * k.from, 0);
  for (int h = 0; h < k.kv_heads; ++h)
    for (auto p : k.kept[std::size_t(l) * k.kv_heads + h]) b[std::size_t(h) * k.from + p] = 1;
  return b;
}

// Where the layer's K/V go and what of the attention is kept.
struct LayerState {
  float* k = nullptr;  // [kv head][C][D]
  float* v = nullptr;
  float* probs = nullptr;  // capture of this layer [q head][M][C], or null
  float* qcap = nullptr;   // [q head][M][D], or null
  const std::uint8_t* keep = nullptr;  // keep_bits, or null
  int mask_from = 0;
};

// Bias and RoPE of one [q | k | v] row at the position whose cos/sin row is `cs`, in place.
void bias_rope_row(const Geometry& g, float* row, const std::vector<float>& bias, const float* cs) {
  const int half = g.D / 2;
  if (!bias.empty())
    for (int j = 0; j < g.qo; ++j) row[j] += bias[j];
  for (int hh = 0; hh < g.nh + g.nkv; ++hh) {  // q heads, then k heads (they follow in the row)
    float* x = row + std::size_t(hh) * g.D;
    for (int j = 0; j < half; ++j) {
      const auto r = frontier::rope_rotate(x[j], x[j + half], cs[j], cs[half + j]);
      x[j] = r.lo;
      x[j + half] = r.hi;
    }
  }
}

// Bias, RoPE, K/V write of rows t0 .. t0 + nt (qkv: [T][qo]); q is left rotated in place.
void qkv_post(const Geometry& g, float* qkv, const std::vector<float>& bias, const float* cos_sin, int t0, int nt,
              LayerState& s) {
  for (int i = 0; i < nt; ++i) {
    float* row = qkv + std::size_t(i) * g.qo;
    bias_rope_row(g, row, bias, cos_sin + std::size_t(t0 + i) * g.D);
    for (int h = 0; h < g.nkv; ++h) {
      std::copy_n(row + g.qd + h * g.D, g.D, s.k + (std::size_t(h) * g.C + t0 + i) * g.D);
      std::copy_n(row + g.qd + g.kvd + h * g.D, g.D, s.v + (std::size_t(h) * g.C + t0 + i) * g.D);
    }
  }
}

// softmax(q K^T / sqrt(D)) V for rows t0 .. t0 + nt, one query head per thread; out [T][qd].
void attention_chunk(const Geometry& g, const float* qkv, int t0, int nt, const LayerState& s, float* out,
                     std::vector<float>& scores) {
  const int G = g.nh / g.nkv, keys = t0 + nt;
  const float scale = 1.0f / std::sqrt(float(g.D));
  const bool team = std::int64_t(nt) * keys * g.D * g.nh > (std::int64_t(1) << 20);
  const std::size_t per_thread = std::size_t(g.T) * g.C;
#pragma omp parallel for schedule(dynamic) if (team)
  for (int hq = 0; hq < g.nh; ++hq) {
    const int hk = hq / G;
    float* sc = scores.data() + (team ? std::size_t(omp_get_thread_num()) * per_thread : 0);
    frontier::onednn_sgemm(true, nt, keys, g.D, scale, qkv + std::size_t(hq) * g.D, g.qo,
                           s.k + std::size_t(hk) * g.C * g.D, g.D, sc, keys);
    for (int i = 0; i < nt; ++i) {
      float* row = sc + std::size_t(i) * keys;
      const int pos = t0 + i;
      if (s.keep && pos >= s.mask_from)
        for (int j = 0; j < s.mask_from; ++j)
          if (!s.keep[std::size_t(hk) * s.mask_from + j]) row[j] = -INFINITY;
      frontier::causal_softmax_row(row, pos + 1, keys);
      const int m = pos - (g.C - g.M);
      if (s.probs && m >= 0) {
        float* dst = s.probs + (std::size_t(hq) * g.M + m) * g.C;
        std::copy_n(row, keys, dst);
        std::fill(dst + keys, dst + g.C, 0.0f);
        std::copy_n(qkv + std::size_t(i) * g.qo + std::size_t(hq) * g.D, g.D, s.qcap + (std::size_t(hq) * g.M + m) * g.D);
      }
    }
    frontier::onednn_sgemm(false, nt, g.D, keys, 1.0f, sc, keys, s.v + std::size_t(hk) * g.C * g.D, g.D,
                           out + std::size_t(hq) * g.D, g.qd);
  }
}

struct Scratch {
  std::vector<float> xn, qkv, attn, gu, act, tmp, scores;
  std::vector<std::uint16_t> xb;
  std::uint64_t bytes() const {
    return 4 * (xn.size() + qkv.size() + attn.size() + gu.size() + act.size() + tmp.size() + scores.size()) +
           2 * xb.size();
  }
};

// The layer after attention, over T rows of which the first nt are real: h += attn Wo^T, then the MLP.
void finish_layer(const Geometry& g, const LayerW& w, double eps, float* hc, int nt, Scratch& x) {
  w.o.run(x.attn.data(), x.tmp.data(), x.xb);
  for (std::size_t i = 0; i < std::size_t(nt) * g.H; ++i) hc[i] += x.tmp[i];
  rmsnorm(hc, w.g_post.data(), eps, g.T, g.H, x.xn.data());
  w.gu.run(x.xn.data(), x.gu.data(), x.xb);
  for (int t = 0; t < nt; ++t)
    for (int i = 0; i < g.I; ++i) {
      const float a = x.gu[std::size_t(t) * 2 * g.I + i], u = x.gu[std::size_t(t) * 2 * g.I + g.I + i];
      x.act[std::size_t(t) * g.I + i] = a / (1.0f + std::exp(-a)) * u;
    }
  w.d.run(x.act.data(), x.tmp.data(), x.xb);
  for (std::size_t i = 0; i < std::size_t(nt) * g.H; ++i) hc[i] += x.tmp[i];
}

// One chunk of one layer: h rows t0 .. t0 + T (rows past C are padding, computed and ignored).
void layer_chunk(const Geometry& g, const LayerW& w, double eps, float* h, const float* cos_sin, int t0,
                 LayerState& s, Scratch& x) {
  const int nt = std::min(g.T, g.C - t0);
  float* hc = h + std::size_t(t0) * g.H;
  rmsnorm(hc, w.g_in.data(), eps, g.T, g.H, x.xn.data());
  w.qkv.run(x.xn.data(), x.qkv.data(), x.xb);
  qkv_post(g, x.qkv.data(), w.bias, cos_sin, t0, nt, s);
  attention_chunk(g, x.qkv.data(), t0, nt, s, x.attn.data(), x.scores);
  finish_layer(g, w, eps, hc, nt, x);
}

Scratch make_scratch(const Geometry& g, std::size_t score_floats) {
  Scratch x;
  x.xn.resize(std::size_t(g.T) * g.H);
  x.qkv.resize(std::size_t(g.T) * g.qo);
  x.attn.assign(std::size_t(g.T) * g.qd, 0.0f);
  x.gu.resize(std::size_t(g.T) * 2 * g.I);
  x.act.assign(std::size_t(g.T) * g.I, 0.0f);
  x.tmp.resize(std::size_t(g.T) * std::max(g.H, g.qd));
  x.xb.resize(std::size_t(g.T) * std::max({g.H, g.qd, g.I}));
  x.scores.resize(score_floats);
  return x;
}

Geometry model_geometry(const models::ModelShape& m) {
  Geometry g;
  g.H = m.hidden, g.D = m.head_dim, g.nh = m.n_heads, g.nkv = m.n_kv_heads, g.qd = m.q_dim(), g.kvd = m.kv_dim();
  g.qo = g.qd + 2 * g.kvd, g.I = m.intermediate, g.V = m.vocab;
  return g;
}

}  // namespace

namespace detail {

// logits [M][V] of the M rows `rows` ([M][H]): final norm, then lm_head in 4096-row blocks widened to fp32 (an 8B
// model's lm_head is 1 GB in bf16: never copied whole).
void logits_of_rows(const Checkpoint& ck, const float* rows, int M, ForwardResult& r) {
  const auto& cfg = ck.config();
  const int H = cfg.shape.hidden, V = cfg.shape.vocab;
  const auto norm = detail::vec_f32(ck.tensor("model.norm.weight", {H}));
  std::vector<float> xn(std::size_t(M) * H);
  rmsnorm(rows, norm.data(), cfg.shape.rms_eps, M, H, xn.data());
  const std::string head = cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const TensorView w = ck.tensor(head, {V, H});
  constexpr int kBlock = 4096;
  std::vector<float> wb(std::size_t(std::min(kBlock, V)) * H), yb(std::size_t(M) * std::min(kBlock, V));
  r.logits.assign(std::size_t(M) * V, 0.0f);
  for (int v0 = 0; v0 < V; v0 += kBlock) {
    const int nv = std::min(kBlock, V - v0);
    to_f32(w, wb.data(), std::int64_t(v0) * H, std::int64_t(nv) * H);
    frontier::gemm_xwT(xn.data(), wb.data(), yb.data(), M, nv, H);
    for (int mm = 0; mm < M; ++mm) std::copy_n(yb.data() + std::size_t(mm) * nv, nv, r.logits.data() + std::size_t(mm) * V + v0);
  }
  const float* last = r.logits.data() + std::size_t(M - 1) * V;
  r.next_token = std::int32_t(std::max_element(last, last + V) - last);
  r.allocated_bytes += 4 * (xn.size() + wb.size() + yb.size() + r.logits.size());
}

void validate_forward(const HfConfig& cfg, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt) {
  const auto& m = cfg.shape;
  const int C = int(tokens.size());
  if (C < 1) throw UsageError("attention forward: no tokens");
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= m.vocab)
      throw UsageError("attention forward: position " + std::to_string(i) + ": token id " + std::to_string(tokens[i]) +
                       " is not in [0, " + std::to_string(m.vocab) + ")");
  if (opt.queries < 1 || opt.queries > C)
    throw UsageError("attention forward: queries " + std::to_string(opt.queries) + " must be in [1, context " +
                     std::to_string(C) + "]");
  if (opt.chunk < 1) throw UsageError("attention forward: chunk " + std::to_string(opt.chunk) + " must be at least 1");
  for (int l : opt.capture_layers)
    if (l < 0 || l >= m.layers)
      throw UsageError("attention forward: capture layer " + std::to_string(l) + " is not in [0, " +
                       std::to_string(m.layers) + ")");
  check_no_sliding_window(cfg, C);
  if (const SelectionMask* k = opt.mask)
    check_mask(m, *k, k->from >= 0 && k->from <= C,
               "the model has " + std::to_string(m.layers) + " x " + std::to_string(m.n_kv_heads) + " and the context " +
                   std::to_string(C));
}

std::vector<float> vec_f32(const TensorView& v) {
  std::vector<float> out(std::size_t(v.info->numel()));
  to_f32(v, out.data());
  return out;
}

std::vector<float> vec_f32(const std::vector<TensorView>& vs) {
  std::vector<float> out;
  for (const auto& v : vs) {
    const auto f = vec_f32(v);
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

LayerTensors layer_tensors(const Checkpoint& ck, int l) {
  const auto& m = ck.config().shape;
  const std::int64_t H = m.hidden, qd = m.q_dim(), kvd = m.kv_dim(), I = m.intermediate;
  auto t = [&](const char* s, std::vector<std::int64_t> shape) { return ck.tensor(layer_tensor(l, s), shape); };
  LayerTensors r;
  r.qkv = {t("self_attn.q_proj.weight", {qd, H}), t("self_attn.k_proj.weight", {kvd, H}),
           t("self_attn.v_proj.weight", {kvd, H})};
  r.o = t("self_attn.o_proj.weight", {H, qd});
  r.gu = {t("mlp.gate_proj.weight", {I, H}), t("mlp.up_proj.weight", {I, H})};
  r.d = t("mlp.down_proj.weight", {H, I});
  r.g_in = t("input_layernorm.weight", {H});
  r.g_post = t("post_attention_layernorm.weight", {H});
  if (m.qkv_bias)
    r.bias = {t("self_attn.q_proj.bias", {qd}), t("self_attn.k_proj.bias", {kvd}), t("self_attn.v_proj.bias", {kvd})};
  return r;
}

void stack_bf16(const std::vector<TensorView>& parts, std::uint16_t* out) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // elements (2 MiB): many chunks per thread, even shares
  struct Piece { std::size_t part; std::int64_t first, n, at; };
  std::vector<Piece> pieces;
  std::int64_t at = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const std::int64_t n = parts[p].info->numel();
    for (std::int64_t i = 0; i < n; i += kChunk) pieces.push_back({p, i, std::min(kChunk, n - i), at + i});
    at += n;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t i = 0; i < pieces.size(); ++i)
    to_bf16(parts[pieces[i].part], out + pieces[i].at, pieces[i].first, pieces[i].n);
}

void embed_rows(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, float* h) {
  const int H = ck.config().shape.hidden;
  const TensorView embed = ck.tensor("model.embed_tokens.weight", {ck.config().shape.vocab, H});
  for (std::size_t t = 0; t < tokens.size(); ++t) to_f32(embed, h + t * H, std::int64_t(tokens[t]) * H, H);
}

void init_capture(const models::ModelShape& m, int C, const ForwardOptions& opt, AttentionCapture& cap) {
  if (!opt.capture) return;
  cap.layer_ids = opt.capture_layers;
  if (cap.layer_ids.empty())
    for (int l = 0; l < m.layers; ++l) cap.layer_ids.push_back(l);
  cap.q_heads = m.n_heads, cap.kv_heads = m.n_kv_heads, cap.head_dim = m.head_dim, cap.queries = opt.queries;
  cap.context = C;
  const std::size_t nl = cap.layer_ids.size(), M = std::size_t(opt.queries), D = std::size_t(m.head_dim);
  auto zeroed = [](std::size_t n) {  // first touched by every thread, 2 MiB pages where the OS grants them
    HostArray<float> a(n);
    float* p = a.data();
    constexpr std::ptrdiff_t kBlock = std::ptrdiff_t{1} << 16;
    const auto blocks = static_cast<std::ptrdiff_t>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t b = 0; b < blocks; ++b)
      std::fill(p + b * kBlock, p + std::min<std::ptrdiff_t>((b + 1) * kBlock, std::ptrdiff_t(n)), 0.0f);
    return a;
  };
  cap.probs = zeroed(nl * m.n_heads * M * std::size_t(C));
  cap.q = zeroed(nl * m.n_heads * M * D);
  cap.k = zeroed(nl * m.n_kv_heads * std::size_t(C) * D);
  cap.v = zeroed(cap.k.size());
}

}  // namespace detail

void fill_probs_from_qk(AttentionCapture& cap, int c) {
  if (c < 0 || std::size_t(c) >= cap.layer_ids.size())
    throw std::invalid_argument("fill_probs_from_qk: layer index " + std::to_string(c) + " not captured");
  const int C = cap.context, M = cap.queries, D = cap.head_dim, G = cap.q_heads / cap.kv_heads;
  const float scale = 1.0f / std::sqrt(float(D));
  frontier::blas_on_openmp();
#pragma omp parallel for schedule(dynamic)
  for (int hq = 0; hq < cap.q_heads; ++hq) {
    float* p = cap.probs.data() + ((std::size_t(c) * cap.q_heads + hq) * M) * C;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, C, D, scale, cap.q_at(c, hq, 0), D, cap.k_at(c, hq / G), D,
                0.0f, p, C);
    for (int m = 0; m < M; ++m) frontier::causal_softmax_row(p + std::size_t(m) * C, C - M + m + 1, C);
  }
}

ForwardResult forward_cpu(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt) {
  auto last = std::chrono::steady_clock::now();
  const auto& cfg = ck.config();
  const auto& m = cfg.shape;
  detail::validate_forward(cfg, tokens, opt);
  frontier::blas_on_openmp();
  Geometry g = model_geometry(m);
  g.C = int(tokens.size());
  g.M = opt.queries;
  g.T = std::min(opt.chunk, g.C);
  const int C_pad = (g.C + g.T - 1) / g.T * g.T;
  const auto cos_sin = frontier::rope_table(hf_inv_freq(m), g.C);
  std::vector<float> h(std::size_t(C_pad) * g.H, 0.0f);
  detail::embed_rows(ck, tokens, h.data());

  ForwardResult r;
  auto& cap = r.capture;
  detail::init_capture(m, g.C, opt, cap);
  std::vector<float> k_own, v_own;  // a layer not captured keeps its K/V here
  Scratch x = make_scratch(g, std::size_t(omp_get_max_threads()) * g.T * g.C);
  r.phase_s = {{"setup", 0.0}, {"weights_host", 0.0}, {"layers", 0.0}, {"logits", 0.0}};
  auto tick = [&](std::size_t phase) {  // charges the time since the last tick to a phase
    const auto now = std::chrono::steady_clock::now();
    r.phase_s[phase].second += std::chrono::duration<double>(now - last).count();
    last = now;
  };
  tick(0);
  std::uint64_t layer_bytes = 0;
  WeightStage ws;
  for (int l = 0; l < m.layers; ++l) {
    const LayerW w = load_layer(ck, l, g.T, ws);
    tick(1);
    layer_bytes = std::max(layer_bytes, w.bytes());
    if (r.gemm.empty()) r.gemm = w.qkv.impl();
    LayerState s;
    const auto it = std::find(cap.layer_ids.begin(), cap.layer_ids.end(), l);
    const int captured = opt.capture && it != cap.layer_ids.end() ? int(it - cap.layer_ids.begin()) : -1;
    if (captured >= 0) {
      const std::size_t c = std::size_t(captured);
      s.k = cap.k.data() + c * g.nkv * g.C * g.D;
      s.v = cap.v.data() + c * g.nkv * g.C * g.D;
      s.probs = cap.probs.data() + c * g.nh * g.M * g.C;
      s.qcap = cap.q.data() + c * g.nh * g.M * g.D;
    } else {
      k_own.resize(std::size_t(g.nkv) * g.C * g.D);
      v_own.resize(k_own.size());
      s.k = k_own.data();
      s.v = v_own.data();
    }
    std::vector<std::uint8_t> keep;
    if (opt.mask) {
      keep = keep_bits(*opt.mask, l);
      s.keep = keep.data();
      s.mask_from = opt.mask->from;
    }
    for (int t0 = 0; t0 < g.C; t0 += g.T) layer_chunk(g, w, m.rms_eps, h.data(), cos_sin.data(), t0, s, x);
    tick(2);
    if (captured >= 0 && opt.on_captured) opt.on_captured(cap, captured);
  }
  r.allocated_bytes = layer_bytes + x.bytes() + 4 * (h.size() + cos_sin.size() + k_own.size() + v_own.size()) +
                      4 * (cap.probs.size() + cap.q.size() + cap.k.size() + cap.v.size());
  detail::logits_of_rows(ck, h.data() + std::size_t(g.C - g.M) * g.H, g.M, r);
  tick(3);
  return r;
}

std::vector<std::int32_t> greedy_decode_cpu(const Checkpoint& ck, const std::vector<std::int32_t>& prompt, int n,
                                            const SelectionMask* mask, int chunk) {
  std::vector<std::int32_t> seq = prompt, out;
  ForwardOptions opt;
  opt.chunk = chunk;
  opt.capture = false;
  opt.mask = mask;
  for (int i = 0; i < n; ++i) {
    const auto r = forward_cpu(ck, seq, opt);
    out.push_back(r.next_token);
    seq.push_back(r.next_token);
  }
  return out;
}

namespace {

// The cached decode's keys and values: the prompt's (the capture's, shared by every row) and each row's own decoded
// tokens ([row][layer][kv head][n][D]); per (row, layer, kv head) the kept prompt positions, sorted and unique
// (a row without a mask keeps them all).
struct DecodeCache {
  const AttentionCapture* prompt = nullptr;
  int rows = 0, layers = 0, n = 0;
  std::vector<float> k, v;
  std::vector<std::vector<std::int32_t>> kept;
  std::vector<std::uint8_t> dense;  // per row
  std::size_t slot(const Geometry& g, int row, int l, int hk) const {
    return ((std::size_t(row) * layers + l) * g.nkv + hk) * n;
  }
};

// softmax(q k^T / sqrt(D)) v of one decode row per (row, q head) over its kept prompt keys and its decoded keys
// 0 .. step (the row's own, the current one included); q from x.qkv, out to x.attn. Scores in fp32 as the prefill's,
// one buffer of prompt + n floats per thread.
void decode_attention(const Geometry& g, const DecodeCache& c, int l, int step, Scratch& x) {
  const AttentionCapture& p = *c.prompt;
  const int G = g.nh / g.nkv, C = p.context, D = g.D;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::size_t per_thread = std::size_t(C) + c.n;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int row = 0; row < c.rows; ++row)
    for (int hq = 0; hq < g.nh; ++hq) {
      const int hk = hq / G;
      float* sc = x.scores.data() + std::size_t(omp_get_thread_num()) * per_thread;
      const float* q = x.qkv.data() + std::size_t(row) * g.qo + std::size_t(hq) * D;
      const float* pk = p.k_at(l, hk);
      const float* pv = p.v_at(l, hk);
      const auto& kept = c.kept[(std::size_t(row) * c.layers + l) * g.nkv + hk];
      const bool all = c.dense[row] != 0;
      const int nk = all ? C : int(kept.size());
      const std::size_t own = c.slot(g, row, l, hk);
      auto dot = [&](const float* k) {
        float s = 0;
        for (int j = 0; j < D; ++j) s += q[j] * k[j];
        return s * scale;
      };
      for (int j = 0; j < nk; ++j) sc[j] = dot(pk + std::size_t(all ? j : kept[j]) * D);
      for (int t = 0; t <= step; ++t) sc[nk + t] = dot(c.k.data() + (own + t) * D);
      const int total = nk + step + 1;
      frontier::causal_softmax_row(sc, total, total);
      float* out = x.attn.data() + std::size_t(row) * g.qd + std::size_t(hq) * D;
      std::fill(out, out + D, 0.0f);
      auto axpy = [&](float w, const float* v) {
        for (int j = 0; j < D; ++j) out[j] += w * v[j];
      };
      for (int j = 0; j < nk; ++j) axpy(sc[j], pv + std::size_t(all ? j : kept[j]) * D);
      for (int t = 0; t <= step; ++t) axpy(sc[nk + t], c.v.data() + (own + t) * D);
    }
}

void check_cached_decode(const HfConfig& cfg, const AttentionCapture& p, std::int32_t first, int n,
                         const std::vector<const SelectionMask*>& masks) {
  const auto& m = cfg.shape;
  bool every_layer = int(p.layer_ids.size()) == m.layers;
  for (int l = 0; every_layer && l < m.layers; ++l) every_layer = p.layer_ids[l] == l;
  if (!every_layer || p.q_heads != m.n_heads || p.kv_heads != m.n_kv_heads || p.head_dim != m.head_dim ||
      p.context < 1 || p.k.size() != std::size_t(m.layers) * p.kv_heads * p.context * p.head_dim ||
      p.v.size() != p.k.size())
    throw UsageError("cached decode: the prompt's capture must hold K and V of every layer of this model (" +
                     std::to_string(m.layers) + " layers, " + std::to_string(m.n_kv_heads) + " kv heads of " +
                     std::to_string(m.head_dim) + "); it holds " + std::to_string(p.layer_ids.size()) + " layers");
  if (first < 0 || first >= m.vocab)
    throw UsageError("cached decode: first token " + std::to_string(first) + " is not in [0, " + std::to_string(m.vocab) + ")");
  if (n < 1) throw UsageError("cached decode: tokens " + std::to_string(n) + " must be at least 1");
  if (masks.empty()) throw UsageError("cached decode: no selection to decode under (nullptr: full attention)");
  check_no_sliding_window(cfg, p.context + n);
  for (const SelectionMask* k : masks)
    if (k)
      check_mask(m, *k, k->from == p.context,
                 "the cached decode needs " + std::to_string(m.layers) + " x " + std::to_string(m.n_kv_heads) +
                     " from the prompt's end " + std::to_string(p.context));
}

}  // namespace

std::vector<std::vector<std::int32_t>> greedy_decode_cached_cpu(const Checkpoint& ck, const AttentionCapture& prompt_kv,
                                                                std::int32_t first, int n,
                                                                const std::vector<const SelectionMask*>& masks,
                                                                std::string* gemm) {
  const auto& cfg = ck.config();
  const auto& m = cfg.shape;
  check_cached_decode(cfg, prompt_kv, first, n, masks);
  std::vector<std::vector<std::int32_t>> out(masks.size(), std::vector<std::int32_t>{first});
  if (n == 1) return out;
  frontier::blas_on_openmp();
  const int A = int(masks.size()), C = prompt_kv.context;
  Geometry g = model_geometry(m);
  g.C = A;  // the rows of h: one per selection
  g.M = A;
  g.T = A;
  DecodeCache c;
  c.prompt = &prompt_kv;
  c.rows = A;
  c.layers = m.layers;
  c.n = n;
  c.k.assign(std::size_t(A) * m.layers * g.nkv * n * g.D, 0.0f);
  c.v.assign(c.k.size(), 0.0f);
  c.kept.resize(std::size_t(A) * m.layers * g.nkv);
  c.dense.assign(A, 0);
  for (int row = 0; row < A; ++row) {
    if (!masks[row]) {
      c.dense[row] = 1;
      continue;
    }
    for (std::size_t i = 0; i < masks[row]->kept.size(); ++i) {
      auto kept = masks[row]->kept[i];  // repeats allowed in a mask: a key is attended once
      std::sort(kept.begin(), kept.end());
      kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
      c.kept[std::size_t(row) * m.layers * g.nkv + i] = std::move(kept);
    }
  }
  const auto cos_sin = frontier::rope_table(hf_inv_freq(m), C + n);
  const TensorView embed = ck.tensor("model.embed_tokens.weight", {g.V, g.H});
  std::vector<float> h(std::size_t(A) * g.H);
  Scratch x = make_scratch(g, std::size_t(omp_get_max_threads()) * (std::size_t(C) + n));
  WeightStage ws;
  for (int step = 0; step + 1 < n; ++step) {
    // the query of the token decoded last, at position C + step; it makes token step + 1
    for (int row = 0; row < A; ++row)
      to_f32(embed, h.data() + std::size_t(row) * g.H, std::int64_t(out[row][step]) * g.H, g.H);
    const float* cs = cos_sin.data() + std::size_t(C + step) * g.D;
    for (int l = 0; l < m.layers; ++l) {
      const LayerW w = load_layer(ck, l, A, ws);
      if (gemm && gemm->empty()) *gemm = w.qkv.impl();
      rmsnorm(h.data(), w.g_in.data(), m.rms_eps, A, g.H, x.xn.data());
      w.qkv.run(x.xn.data(), x.qkv.data(), x.xb);
      for (int row = 0; row < A; ++row) {
        float* r = x.qkv.data() + std::size_t(row) * g.qo;
        bias_rope_row(g, r, w.bias, cs);
        for (int hk = 0; hk < g.nkv; ++hk) {
          const std::size_t at = (c.slot(g, row, l, hk) + step) * g.D;
          std::copy_n(r + g.qd + hk * g.D, g.D, c.k.data() + at);
          std::copy_n(r + g.qd + g.kvd + hk * g.D, g.D, c.v.data() + at);
        }
      }
      decode_attention(g, c, l, step, x);
      finish_layer(g, w, m.rms_eps, h.data(), A, x);
    }
    ForwardResult r;
    detail::logits_of_rows(ck, h.data(), A, r);
    for (int row = 0; row < A; ++row) {
      const float* lr = r.logits.data() + std::size_t(row) * g.V;
      out[row].push_back(std::int32_t(std::max_element(lr, lr + g.V) - lr));
    }
  }
  return out;
}

double measure_attention_rate(const models::ModelShape& m, int rows, int keys) {
  if (rows < 1 || keys < rows) throw std::invalid_argument("measure_attention_rate: rows " + std::to_string(rows) +
                                                           ", keys " + std::to_string(keys));
  Geometry g;
  g.C = keys;
  g.M = 1;
  g.T = rows;
  g.D = m.head_dim;
  g.nh = m.n_heads;
  g.nkv = m.n_kv_heads;
  g.qd = g.nh * g.D;
  g.kvd = g.nkv * g.D;
  g.qo = g.qd + 2 * g.kvd;
  std::vector<float> k(std::size_t(g.kvd) * keys), v(k.size()), qkv(std::size_t(rows) * g.qo),
      out(std::size_t(rows) * g.qd), scores(std::size_t(omp_get_max_threads()) * rows * keys);
  frontier::fill_f32_uniform(k.data(), k.size(), 11, 1.0f);
  frontier::fill_f32_uniform(v.data(), v.size(), 12, 1.0f);
  frontier::fill_f32_uniform(qkv.data(), qkv.size(), 13, 1.0f);
  LayerState s;
  s.k = k.data();
  s.v = v.data();
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    attention_chunk(g, qkv.data(), keys - rows, rows, s, out.data(), scores);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 4.0 * g.nh * g.D * double(rows) * keys / best;
}

double measure_read_rate() {
  const std::size_t n = std::size_t(32) << 20;  // doubles: 256 MiB
  std::vector<double> a(n, 1.0);
  double best = 1e30, sink = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (std::size_t j = 0; j < n; ++j) s += a[j];
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink += s;
  }
  if (sink != 3.0 * double(n)) throw std::logic_error("measure_read_rate: the sum is wrong");
  return 8.0 * double(n) / best;
}

double measure_gemm_rate(int rows, int hidden, std::string* what) {
  std::vector<std::uint16_t> w(std::size_t(hidden) * hidden), x(std::size_t(rows) * hidden);
  frontier::fill_bf16_uniform(w.data(), w.size(), 7, 1.0f);
  frontier::fill_bf16_uniform(x.data(), x.size(), 8, 1.0f);
  std::vector<float> y(std::size_t(rows) * hidden);
  const Bf16Gemm gemm(rows, hidden, hidden, w.data());
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm.run(x.data(), y.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (what) *what = gemm.impl();
  return 2.0 * rows * double(hidden) * hidden / best;
}

}  // namespace kvf::attention
