// Recompute arms, CPU twin + fp32/fp64 references. The GPU versions (recompute_gpu.hpp) compute the
// same thing with cuBLASLt and the kernels in recompute_gpu.cu; both use frontier_math.hpp.
//
// From X (one layer, a batch of `rows` = P pages x T tokens):
//   Y[rows][2*Hkv*D] = X[rows][hidden] . Wkv^T       Wkv = [Wk; Wv], [out][in] like torch.nn.Linear
//   K = RoPE(Y[:, :Hkv*D] + bk), V = Y[:, Hkv*D:] + bv, rounded once to bf16 and written at slot[row]
//   of the paged cache (frontier_math.hpp: cache_index).
// GEMM output is fp32 on both backends; the single rounding to bf16 happens in the write.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "frontier_math.hpp"
#include "models.hpp"

namespace kvf::frontier {

// ---------------------------------------------------------------- setup helpers (host)
// RoPE inverse frequencies for `rot_dim` rotated dims (rot_dim/2 values), with the model's
// rope_scaling (llama3's and yarn's frequency blends).
std::vector<double> rope_inv_freq(const models::ModelShape& m, int rot_dim);
// YaRN's two magnitude terms (Hugging Face DeepSeek-V3 code), yarn_mscale(s, m) = 0.1 m ln(s) + 1 for s > 1:
// - the cos/sin amplitude, rope_amplitude() = yarn_mscale(factor, mscale) / yarn_mscale(factor,
//   mscale_all_dim); it scales the rotated k_pe that MLA caches, so the MLA latent arm applies it
//   (exactly 1 for DeepSeek-V3, whose config sets mscale = mscale_all_dim = 1; 1 for non-yarn models);
// - the softmax scale, q_head_dim^-0.5 * yarn_mscale(factor, mscale_all_dim)^2 (DeepSeek-V3: 1.3689^2 =
//   1.874): it multiplies the attention logits q.k only. No frontier MLA arm computes attention (the
//   latent arm makes the cached [c_KV | k_pe] rows, the up arm the per-head k_nope and v), so it changes
//   none of their values and none of their cost: a scalar on the logits of a later attention step.
double yarn_mscale(double scale, double mscale);
double rope_amplitude(const models::RopeScaling& rs);
// cos/sin table in fp32 computed in double: row p = [a cos(p f_0) .. a cos(p f_{h-1}), a sin(...) ..],
// a = amplitude (rope_amplitude; 1 for plain RoPE).
std::vector<float> rope_table(const std::vector<double>& inv_freq, int n_pos, double amplitude = 1.0);

// bf16(u * scale) with u uniform in [-1, 1) from pattern_word(seed, i).
void fill_bf16_uniform(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale);
void fill_f32_uniform(float* p, std::size_t n, std::uint64_t seed, float scale);
void bf16_to_f32(const std::uint16_t* in, float* out, std::size_t n);  // OpenMP
void f32_to_bf16(const float* in, std::uint16_t* out, std::size_t n);  // OpenMP

// Slots of `rows` tokens: page p's 16-token blocks go to physical blocks taken from a random
// permutation of [0, n_blocks) (seeded), so writes scatter like a real block table.
std::vector<std::int64_t> scattered_slots(int rows, std::int64_t n_blocks, std::uint64_t seed);

// ---------------------------------------------------------------- CPU twin
// BLAS threading: every BLAS call of the CPU twin runs single-threaded OpenBLAS, and the parallelism
// comes from the caller's OpenMP team (gemm_xwT splits N, whole 16-column blocks per thread). Reason:
// this OpenBLAS is the pthread build (libopenblas0-pthread) with its own thread pool, while the rest of
// the process (the harness's cold-cache flush, copies, RoPE, norms) runs on libgomp's team. Each pool's
// idle workers spin after their region (libgomp: GOMP_SPINCOUNT, milliseconds by default; OpenBLAS:
// ~2^28 cycles) and take the cores the other pool needs. Measured on the 2-core VM (one process,
// variants interleaved): a 128x2048x4096 sgemm right after the OpenMP flush ran at 0.72-0.80 of the
// same GEMM after a 20 ms sleep or back to back; in bench_frontier the T=128 cold arm fell to 0.36-0.55
// of the GEMM ceiling, 0.84-0.86 under OMP_WAIT_POLICY=passive. With the split, cold runs like hot.
// Setting OMP_WAIT_POLICY in main() would not help: libgomp reads its environment when it is loaded,
// and a passive team would slow every short OpenMP region of the studies. One pool is also what an
// engine embedding a CPU recompute path would use.
// blas_on_openmp(): OpenBLAS to one thread (idempotent; gemm_xwT calls it, callers of other cblas
// routines call it first). It is process-wide: a thread that wants a one-core GEMM sets its own
// OpenMP team size (omp_set_num_threads(1) is per thread), not OpenBLAS's.
void blas_on_openmp();
// Y[M][N] = X[M][K] . W[N][K]^T in fp32 (OpenBLAS sgemm, or sgemv for M = 1, on each thread's column
// slice; small products stay on the calling thread, and so does a call made inside a parallel region).
// W holds bf16 values widened once at setup: this OpenBLAS build exports no cblas_sbgemm, see
// sbgemm_available().
void gemm_xwT(const float* X, const float* W, float* Y, int M, int N, int K);
// The same product on OpenBLAS's own pthread pool (as many threads as it started with), back to one
// thread afterwards: only for the GEMM ceiling, which takes the better of the two threadings.
void gemm_xwT_blas_threads(const float* X, const float* W, float* Y, int M, int N, int K);
bool sbgemm_available();  // cblas_sbgemm found at run time (dlsym)
// bf16 X and bf16 W through cblas_sbgemm when available (fp32 out). Throws when unavailable.
void gemm_xwT_sbgemm(const std::uint16_t* X, const std::uint16_t* W, float* Y, int M, int N, int K);

struct KvGeom {
  int n_kv_heads = 0, head_dim = 0;
  int kv_dim() const { return n_kv_heads * head_dim; }
};
// RoPE on K, bias on K and V (bias may be null), bf16 write into cache at slot[row]; OpenMP over rows.
void rope_write_cpu(const float* Y, const float* bias, int rows, KvGeom g, const float* cos_sin,
                    const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache);

// XQuant-style group quantization of bf16 X (bits 8 or 4; kQuantGroup along hidden, fp32 scales).
// q: rows*hidden bytes (int8) or rows*hidden/2 (int4 packed); scales: rows * hidden/kQuantGroup.
void quantize_x(const std::uint16_t* x, int rows, int hidden, int bits, std::uint8_t* q, float* scales);
// Dequantize to bf16(q*scale) widened to fp32 (CPU GEMM input) or kept bf16 (GPU GEMM input).
void dequant_x_f32(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits, float* x);
void dequant_x_bf16(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits,
                    std::uint16_t* x);

// ---------------------------------------------------------------- reference and verify
// fp64 reference of K (after bias + RoPE) and V (after bias) for one row: out[2*kv_dim].
// x: the row's hidden values (exactly what the GEMM consumed), w: bf16 Wkv [2*kv_dim][hidden].
void kv_reference_row(const float* x, const std::uint16_t* w, const float* bias, int hidden, KvGeom g,
                      const std::vector<double>& inv_freq, int pos, double* out);

// Tolerance of the recomputed bf16 K/V against the fp64 reference (documented in README of tests):
//   |got - ref| <= kRelTol * |ref| + kAbsTol * rms(ref over the checked rows)
// kRelTol = 2^-8 (twice bf16's half-ulp: one output rounding plus fp32 accumulation and RoPE),
// kAbsTol = 2^-10 (fp32/tensor-core accumulation error of near-zero outputs).
inline constexpr double kRelTol = 1.0 / 256, kAbsTol = 1.0 / 1024;
struct VerifyStats {
  std::int64_t checked = 0, bad = 0;
  double max_abs_err = 0, max_rel_to_rms = 0, rms_ref = 0, rms_err = 0;  // rms_err: over checked values
  std::string first_bad;  // "row r kv k head h dim d: got g ref r"
};
// Checks the given rows of the cache against the reference. x_row(r) gives row r's GEMM input.
VerifyStats verify_rows(const std::vector<int>& rows, const std::vector<std::vector<float>>& x_rows,
                        const std::uint16_t* w, const float* bias, int hidden, KvGeom g,
                        const std::vector<double>& inv_freq, const std::int32_t* pos,
                        const std::int64_t* slot, const std::uint16_t* cache);
// Rows to check in a batch of `rows`: first, last, and up to `n` spread between.
std::vector<int> sample_rows(int rows, int n);

}  // namespace kvf::frontier
