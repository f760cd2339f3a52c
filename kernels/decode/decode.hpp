// The idleness study's workload: a decoder layer's decode step (and a prefill chunk for contrast) over
// L layers, for a batch of B sequences at context C, model shapes from data/models.json.
//
// One layer, for every row r (a sequence at position C-1 in decode; a chunk token in prefill):
//   xn  = bf16(RMSNorm(h) * g_attn)                       rounded: the GEMM input is bf16 on both backends
//   qkv = xn . Wqkv^T (+ b)                               fp32 GEMM output
//   q   = bf16(RoPE(q)), k = bf16(RoPE(k)), v = bf16(v)   k, v written to the cache at position C-1
//   a   = bf16(softmax(q K^T / sqrt(D)) V)                over C tokens (GQA groups), fp32 accumulation
//   h  += a . Wo^T
//   xn  = bf16(RMSNorm(h) * g_mlp);  gu = xn . Wgu^T;  act = bf16(silu(g) * u);  h += act . Wd^T
// h (the residual stream) stays fp32. The same rounding points hold in the CPU twin (OpenBLAS sgemm on
// fp32 weights that hold bf16 values; attention through the access study's split-KV twin), the GPU
// version (cuBLASLt bf16 x bf16 -> fp32; the access study's split-KV kernel) and the reference
// (double accumulation), so all three compute the same function; only summation order differs.
//
// Weights: one synthetic layer (kvf::frontier::LayerWeights) serves every layer: each layer's weights
// exceed the LLC/L2, so they are re-read from DRAM every layer either way. KV cache: bf16, HND
// [batch][kv head][C][D], one copy per layer where memory allows (else layers share copies; the note
// says how many).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "access.hpp"
#include "layers.hpp"
#include "models.hpp"

namespace kvf::decode {

namespace md = kvf::models;

// ---------------------------------------------------------------- ranges and counts
inline constexpr int kMinBatch = 1, kMaxBatch = 256;
inline constexpr int kMinContext = 1024, kMaxContext = 131072;

// std::invalid_argument unless kMinBatch <= b <= kMaxBatch, and c a multiple of 1024 in kMinContext..kMaxContext.
void validate_batch(int b);
void validate_context(int c);
// Empty when the decode step supports the model, else the reason (MLA, head dim, GQA group).
std::string unsupported_reason(const md::ModelShape& m);

// Parameters of one layer's GEMMs (Wqkv, Wo, Wgate|up, Wdown; biases not counted).
double layer_params(const md::ModelShape& m);
// FLOPs of one decode step over L layers at batch B, context C: GEMMs 2*B*params + attention 4*B*Hq*D*C.
double decode_flops(const md::ModelShape& m, int B, int C, int L);
// Bytes a decode step must move at least: weights (weight_bytes per parameter) + K/V read (bf16) per layer.
double decode_bytes(const md::ModelShape& m, int B, int C, int L, double weight_bytes);
// K and V bytes of one layer (bf16) for B sequences of C tokens.
double kv_layer_bytes(const md::ModelShape& m, int B, int C);
// Prefill chunk of T tokens after a prefix of N: GEMMs + causal attention (useful FLOPs).
double prefill_flops(const md::ModelShape& m, int T, int N, int L);
double prefill_bytes(const md::ModelShape& m, int T, int N, int L, double weight_bytes);

// Background work achieved while overlapped with decode steps (the GPU co-run arm). Checkpoint k records, at time
// t_ms[k] (ms from one common origin), the completion of min((k + 1) * stride, total) background pages; the steps
// ran in [t0_ms, t1_ms]. Rate = pages completed between the first and the last checkpoint inside the window over
// the time between them; pages 0 (no rate) when fewer than two checkpoints fall inside.
struct OverlapRate {
  long pages = 0;
  double ms = 0;
  double per_s() const { return pages > 0 && ms > 0 ? pages / (ms * 1e-3) : 0; }
};
OverlapRate overlap_rate(const std::vector<double>& t_ms, int stride, int total, double t0_ms, double t1_ms);

// Ridge point: FLOP per byte where a device with peak `flops_per_s` and memory `bytes_per_s` turns compute
// bound; the decode GEMMs do 2*B/weight_bytes FLOP per weight byte, so the bound batch is
// B* = ridge * weight_bytes / 2.
double ridge_flop_per_byte(double flops_per_s, double bytes_per_s);
double bound_batch(double flops_per_s, double bytes_per_s, double weight_bytes);

// CPU idleness of one measured step, against ceilings measured in the same run.
struct CpuIdleness {
  double step_s = 0;
  double achieved_gflops = 0, ceiling_gflops = 0, idle_compute_pct = 0;  // 100 * (1 - achieved/ceiling)
  double achieved_gbps = 0, read_ceiling_gbps = 0, mem_use_pct = 0;      // 100 * achieved/ceiling
};
// ceiling_* <= 0 leaves the matching figures NaN.
CpuIdleness cpu_idleness(double flops, double bytes, double seconds, double gemm_ceiling_flops_per_s,
                         double read_ceiling_bytes_per_s);

// ---------------------------------------------------------------- CPU twin
// All BLAS parallelism of the twin goes through OpenMP: kvf::frontier::gemm_xwT / blas_on_openmp (recompute.hpp).
struct RopeRow {  // cos/sin of one position, D/2 each (double-computed, stored fp32)
  std::vector<float> cs;  // [cos(0..D/2-1) | sin(0..D/2-1)]
  std::vector<double> ang;
};
RopeRow rope_row(const md::ModelShape& m, int pos);
// The same from the inverse frequencies (D/2 of them), e.g. a checkpoint's (kvf::attention::hf_inv_freq).
RopeRow rope_row(const std::vector<double>& inv_freq, int pos);

// KV cache and scratch of a batch of B sequences at context C.
struct DecodeState {
  int B = 0, C = 0, H = 0, Hq = 0, Hkv = 0, D = 0, I = 0;
  float eps = 1e-5f;
  kvf::access::AttnShape shape;
  kvf::access::Selection sel;
  kvf::access::AttnWorkspace ws;
  std::vector<std::vector<std::uint16_t>> k, v;  // per copy: bf16 [B][Hkv][C][D]
  RopeRow rope;
  std::vector<float> h0, h, xn, qkv, attn, tmp, gu, act;
  std::vector<std::uint16_t> qb;  // bf16 q [B][Hq][D]
  // Phase split of one step (instrument = true: steady_clock around each phase; off while timing).
  bool instrument = false;
  double t_gemm = 0, t_attn = 0, t_other = 0;
  int copies() const { return int(k.size()); }
};
// kv_copies >= 1 distinct K/V copies (layer l uses copy l % kv_copies); filled deterministically.
DecodeState make_decode_state(const md::ModelShape& m, int B, int C, int kv_copies, std::uint64_t seed);
std::size_t decode_state_bytes(const md::ModelShape& m, int B, int C, int kv_copies);

// One layer on all cores (h updated in place); `copy` selects the K/V copy.
void decode_layer_cpu(const kvf::frontier::LayerWeights& w, DecodeState& s, int copy);
// A decode step: h = h0, then L layers.
void decode_step_cpu(const kvf::frontier::LayerWeights& w, DecodeState& s, int L);

// Reference of one layer for row b (double accumulation, the same rounding points), from h0 and K/V copy 0
// as they were before the step (positions < C-1; position C-1 is computed here). out: H values.
void reference_layer_row(const kvf::frontier::LayerWeights& w, const DecodeState& s, int b, std::vector<double>& out);
// The same from raw inputs: h0 row (H), K and V of the sequence ([Hkv][C][D] bf16, position C-1 ignored).
void reference_layer(const kvf::frontier::LayerWeights& w, const float* h0, const std::uint16_t* k,
                     const std::uint16_t* v, int C, const RopeRow& rope, std::vector<double>& out);

// Tolerance of the twin (and the GPU) against the reference, on h after one layer:
//   max |got - ref| <= kVerifyMaxTol * rms(ref)   and   rms(got - ref) <= kVerifyRmsTol * rms(ref)
// Why this wide: the layer rounds to bf16 at five points. Where two implementations' fp32 values straddle a bf16
// rounding boundary (probability ~ fp32 error / bf16 ulp, i.e. a few elements per layer), one element moves by one
// bf16 ulp (2^-8 relative) and that move crosses hundreds of boundaries downstream (one flip in the MLP input
// changes every gate/up output by ~1e-4, which flips ~6% of the 14336 bf16 SwiGLU outputs): measured on the CPU
// twin for Llama-3.1-8B, 0 to 2 upstream flips give rms(err)/rms(ref) from 2e-7 to 8e-4 and max from 1e-6 to 3e-3
// (seed-dependent). The GPU (tensor-core summation order) flips more. The bounds allow ~20 such cascades and still
// catch a missing or wrong attention (its output is ~3% of rms(h) at C = 1K: rms error >= 1e-2), a wrong RoPE,
// a wrong norm or a missing residual. tests/idleness checks the attention + O path alone (MLP zeroed, no cascade)
// to kVerifyPathTol.
inline constexpr double kVerifyMaxTol = 2e-2, kVerifyRmsTol = 4e-3, kVerifyPathTol = 1e-5;
struct VerifyResult {
  double max_err_rel = 0, rms_err_rel = 0, rms_ref = 0;
  int rows = 0;
  bool ok() const { return max_err_rel <= kVerifyMaxTol && rms_err_rel <= kVerifyRmsTol; }
  std::string text() const;
};
// Runs one layer of the twin from h0 and checks rows `rows` against the reference (restores h afterwards).
VerifyResult verify_cpu(const kvf::frontier::LayerWeights& w, DecodeState& s, const std::vector<int>& rows);
VerifyResult compare_rows(const std::vector<float>& h, int H, const std::vector<int>& rows,
                          const std::vector<std::vector<double>>& refs);

// The reference's bf16 q [Hq][D], k and v [Hkv][D] of one row (RMSNorm, QKV in double, bias, RoPE at rope's
// position), as fp32 values; reference_layer computes its new token's K/V with it.
void reference_qkv(const kvf::frontier::LayerWeights& w, const float* h0, const RopeRow& rope, std::vector<float>& q,
                   std::vector<float>& k, std::vector<float>& v);

// ---------------------------------------------------------------- prefill chunk (CPU twin)
// T tokens of one sequence at positions N .. N+T-1 over a resident prefix of N tokens: K/V in one cache per layer
// copy, head-major [Hkv][N+T][D], holding bf16 values (fp32 storage in the twin, bf16 on the GPU: the same values),
// the chunk's K/V appended at N..N+T-1; causal attention (row t sees keys 0..N+t) by sgemm in the twin; the same
// layer and rounding points otherwise. Inputs: prefix K = bf16(fill_f32_uniform(seed + 20)), V = ... (seed + 21)
// over the whole [Hkv][N+T][D] array, h0 = fill_f32_uniform(seed + 21) over [T][H] (kernels/decode/decode_gpu.cu
// fills the GPU's copy the same way).
inline constexpr int kMinPrefillTokens = 1, kMaxPrefillTokens = 4096;
struct PrefillState {
  int T = 0, N = 0;
  kvf::frontier::PrefixCache pc;  // one layer's prefix (+ chunk) K/V, layers share it
  std::vector<float> cos_sin;     // positions 0 .. N+T-1
  std::vector<float> h0, h, xn, qkv, attn, tmp, gu, act, s;
};
PrefillState make_prefill_state(const md::ModelShape& m, int T, int N, std::uint64_t seed);
void prefill_step_cpu(const kvf::frontier::LayerWeights& w, PrefillState& s, int L);

// Check of one prefill layer, for the twin and the GPU alike: for each checked row t, h after the layer against
// reference_layer over keys 0..N+t (prefix from the cache, chunk tokens < t as the implementation appended them,
// token t computed by the reference), and the appended K/V of token t against reference_qkv. Both with the decode
// tolerance (kVerifyMaxTol / kVerifyRmsTol, relative to rms of the reference values).
struct PrefillVerifyResult {
  VerifyResult h, kv;
  bool ok() const { return h.ok() && kv.ok(); }
  std::string text() const;
};
// The K/V appended at N + t for `rows` against the reference's (RMSNorm of h0, the K/V rows of Wqkv, bias, RoPE).
VerifyResult check_appended_kv(const kvf::frontier::LayerWeights& w, const md::ModelShape& m, int T, int N,
                               const float* h0, const std::uint16_t* kc, const std::uint16_t* vc,
                               const std::vector<int>& rows);
// h: [T][H] after one layer from h0; kc, vc: bf16 caches [Hkv][N+T][D] after that layer.
PrefillVerifyResult check_prefill_rows(const kvf::frontier::LayerWeights& w, const md::ModelShape& m, int T, int N,
                                       const float* h0, const std::vector<float>& h, const std::uint16_t* kc,
                                       const std::uint16_t* vc, const std::vector<int>& rows);
// Rows worth checking in a chunk of T: the first two, both sides of the middle, the last (deduplicated).
std::vector<int> prefill_check_rows(int T);
// One layer of the twin from h0, checked (h is left as one layer from h0).
PrefillVerifyResult verify_prefill_cpu(const kvf::frontier::LayerWeights& w, const md::ModelShape& m, PrefillState& s,
                                       const std::vector<int>& rows);

// ---------------------------------------------------------------- recompute from X (co-run background)
// The frontier study's recompute-from-X: Y = X Wkv^T, RoPE + bf16 write of P pages of T tokens into a
// paged cache (kvf::frontier::gemm_xwT + rope_write_cpu), here on the calling thread's OpenBLAS.
struct RecomputeState {
  int rows = 0, hidden = 0;
  kvf::frontier::KvGeom g;
  std::vector<float> wf, x, y, cos_sin;
  std::vector<std::uint16_t> xb, cache;
  std::vector<std::int32_t> pos;
  std::vector<std::int64_t> slot;
};
RecomputeState make_recompute_state(const md::ModelShape& m, int T, int P, std::uint64_t seed);
void recompute_cpu(RecomputeState& s);

}  // namespace kvf::decode
