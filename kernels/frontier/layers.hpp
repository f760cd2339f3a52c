// Recompute from token embeddings through L layers (dense GQA models), and MLA latent recompute.
// CPU twin: fp32 activations rounded to bf16 where a GEMM reads them (the norms' outputs, the attention output,
// the MLP activation), bf16 weights, oneDNN bf16 matmuls with fp32 outputs (LayerGemms: as CPU inference engines
// run a layer); attention over the prefix in fp32 (OpenBLAS sgemm per head). On the GPU the frontier bench runs the
// idleness study's prefill chunk instead (kernels/decode PrefillGpu::step_kv: bf16 rounding at the decode points, one
// shared bf16 prefix cache, contiguous K/V append): the same cost per layer, not bit-identical to this twin.
//
// Through L layers, for a page of T tokens at positions N .. N+T-1 over a resident prefix of N tokens:
//   h = embed[token]
//   for l in 0 .. L-1:
//     xn = RMSNorm(h) * g_attn;  [q|k|v] = xn Wqkv^T (+ b);  q, k = RoPE(q, k)
//     write k, v (bf16) to layer l's paged cache      <- the recomputed page
//     if l == L-1: stop (layer L's K/V need neither its attention nor its MLP)
//     append k, v to layer l's prefix cache; o = softmax(q K^T / sqrt(D), causal) V over N + t + 1 keys
//     h += o Wo^T;  h += (silu(RMSNorm(h) g_mlp Wg^T) * (... Wu^T)) Wd^T
// One synthetic layer's weights serve every layer (memory: an 8B layer is ~0.9 GB in fp32); the
// prefix K/V is per layer. Weights are re-read from DRAM every layer either way (they exceed the LLC).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gemm_onednn.hpp"
#include "models.hpp"
#include "recompute.hpp"

namespace kvf::frontier {

// exp(x) for x <= 0 (or -inf) in plain float arithmetic the compiler vectorizes: n = round(x / ln 2) (the
// 1.5 x 2^23 shifter: exact for |n| < 2^22, no floor call to stop vectorization, and n is then the shifted
// value's low mantissa bits), r = x - n ln 2 in two parts (Cody-Waite: r exact to ~1 ulp), e^r for |r| <= ln2 / 2
// by its degree-7 Taylor polynomial, n put into the exponent. Relative error 7.6e-8 at most on [-86.5, 0] (std::exp:
// 6e-8). Below e^-86.6 (2^-125) it gives 0 (std::exp: a denormal there), 0 for -inf (a masked key), NaN for NaN.
// std::exp is a libm call per element: 4.25 of the 4.4 ns a softmax element took on a Zen 5 core, 41% of the
// prefill's attention (scores and P.V, then by OpenBLAS, took the rest).
inline float exp_nonpositive(float x) {
  constexpr float kShift = 12582912.0f, kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187045e-06f;
  const float xc = std::max(x, -87.0f);
  const float k = xc * kLog2e + kShift, n = k - kShift;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  std::int32_t pb, kb, sb;
  std::memcpy(&pb, &p, 4);
  std::memcpy(&kb, &k, 4);
  std::memcpy(&sb, &kShift, 4);
  pb += (kb - sb) * (1 << 23);
  float out;
  std::memcpy(&out, &pb, 4);
  return x > -86.6f || x != x ? out : 0.0f;
}

// Causal softmax of one attention row in place: the first `valid` scores become probabilities
// (max-subtracted, fp32), the masked rest up to `keys` become 0. Shared by every CPU attention over
// a prefix plus a chunk of new tokens. The loops vectorize (the sum in the vector's lanes, then added).
inline void causal_softmax_row(float* row, int valid, int keys) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < valid; ++j) mx = std::max(mx, row[j]);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < valid; ++j) {
    const float e = exp_nonpositive(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < valid; ++j) row[j] *= inv;
  for (int j = valid; j < keys; ++j) row[j] = 0;
}

struct LayerWeights {
  int hidden = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, intermediate = 0, embed_rows = 0;
  float eps = 1e-5f;
  std::vector<float> wqkv, bqkv, wo, wgu, wd, g_attn, g_mlp, embed;
  std::vector<std::uint16_t> wqkv_bf16;  // for the reference of layer 0's K/V
  int qkv_out() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  std::size_t bytes() const;  // resident fp32 bytes
};
// Synthetic weights of the model's shape; the embedding table has min(vocab, 4096) rows.
LayerWeights make_layer_weights(const models::ModelShape& m, std::uint64_t seed);

// Per-layer prefix K/V in fp32, head-major [layer][kv head][N + T][D], prefix filled at random.
struct PrefixCache {
  int layers = 0, n_kv_heads = 0, head_dim = 0, capacity = 0;  // capacity = N + T
  std::vector<float> k, v;
  float* k_at(int l, int h) { return k.data() + (std::size_t(l) * n_kv_heads + h) * capacity * head_dim; }
  float* v_at(int l, int h) { return v.data() + (std::size_t(l) * n_kv_heads + h) * capacity * head_dim; }
};
PrefixCache make_prefix(const models::ModelShape& m, int layers, int prefix, int tokens, std::uint64_t seed);
std::size_t prefix_bytes(const models::ModelShape& m, int layers, int prefix, int tokens);

struct LayerScratch {
  std::vector<float> h, xn, qkv, attn, s, gu, act, tmp;
  std::vector<std::uint16_t> xb;  // the bf16 GEMM input
};

// The layer's GEMMs for T rows, weights packed once into oneDNN's layout (LayerWeights' fp32 values are bf16
// exactly). kv: the K/V rows of Wqkv, all the last layer computes; qkv, o, gu, d only when whole layers run.
struct LayerGemms {
  std::unique_ptr<Bf16Gemm> qkv, kv, o, gu, d;
};
LayerGemms make_layer_gemms(const LayerWeights& w, int T, bool whole_layers);

// Recompute the page's K/V for layers 0..L-1; page_cache[l] is layer l's paged bf16 cache. g from
// make_layer_gemms(w, T, L > 1).
void through_layers_cpu(const LayerWeights& w, const LayerGemms& g, int L, int T, int N, const std::int32_t* tokens,
                        PrefixCache& pc, const float* cos_sin, const std::int64_t* slot,
                        std::vector<std::vector<std::uint16_t>>& page_cache, LayerScratch& s);
double through_layers_flops(const models::ModelShape& m, int L, int T, int N);
// h0 = bf16(RMSNorm(embed[token]) * g_attn) of row r: the GEMM input of layer 0 (for verify).
std::vector<float> layer0_input(const LayerWeights& w, std::int32_t token);

// ---------------------------------------------------------------- decode step (interference arm)
// One decode step's attention for one sequence and one layer, on the calling thread: q [Hq][D] fp32,
// K and V bf16 [N][Hkv][D], out [Hq][D] = softmax(q K^T / sqrt(D)) V per query head (GQA groups).
// scratch: at least (Hq / Hkv) * N floats. Reads N * Hkv * D * 4 bytes of K/V.
void decode_attention_cpu(const float* q, const std::uint16_t* k, const std::uint16_t* v, int N, int Hq, int Hkv,
                          int D, float* out, float* scratch);

// ---------------------------------------------------------------- MLA (DeepSeek-V3)
// Latent: [c | k_pe] = X Wdkv^T, c = RMSNorm(c) (kv_a_layernorm, gamma = 1), k_pe = RoPE(k_pe);
// cache row (bf16) = [c (kv_lora_rank) | k_pe (qk_rope_head_dim)], vLLM's MLA layout [slot][576].
// Up-projection: [k_nope | v] per head = c Wukv^T, Wukv [H * (qk_nope + v_head)][kv_lora_rank].
struct MlaGeom {
  int hidden = 0, rank = 0, rope = 0, n_heads = 0, nope = 0, vdim = 0;
  int latent() const { return rank + rope; }
  int up_out() const { return n_heads * (nope + vdim); }
};
MlaGeom mla_geom(const models::ModelShape& m);
void mla_latent_write_cpu(const float* Y /*[rows][latent]*/, int rows, MlaGeom g, float eps,
                          const float* cos_sin, const std::int32_t* pos, const std::int64_t* slot,
                          std::uint16_t* cache /*[slots][latent]*/);
// fp64 reference of one cache row; rope_amp: the cos/sin amplitude of the table the write used
// (rope_amplitude(), recompute.hpp: YaRN's mscale terms and why the softmax one plays no part here).
void mla_reference_row(const float* x, const std::uint16_t* w, int hidden, MlaGeom g, float eps,
                       const std::vector<double>& inv_freq, int pos, double* out, double rope_amp = 1.0);

}  // namespace kvf::frontier
