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
// rope_scaling (llama3 applied; yarn's frequency blend is applied, its attention mscale is not).
std::vector<double> rope_inv_freq(const models::ModelShape& m, int rot_dim);
// cos/sin table in fp32 computed in double: row p = [cos(p f_0) .. cos(p f_{h-1}), sin(...) ..].
std::vector<float> rope_table(const std::vector<double>& inv_freq, int n_pos);

// bf16(u * scale) with u uniform in [-1, 1) from pattern_word(seed, i).
void fill_bf16_uniform(std::uint16_t* p, std::size_t n, std::uint64_t seed, float scale);
void fill_f32_uniform(float* p, std::size_t n, std::uint64_t seed, float scale);
void bf16_to_f32(const std::uint16_t* in, float* out, std::size_t n);  // OpenMP
void f32_to_bf16(const float* in, std::uint16_t* out, std::size_t n);  // OpenMP

// Slots of `rows` tokens: page p's 16-token blocks go to physical blocks taken from a random
// permutation of [0, n_blocks) (seeded), so writes scatter like a real block table.
std::vector<std::int64_t> scattered_slots(int rows, std::int64_t n_blocks, std::uint64_t seed);

// ---------------------------------------------------------------- CPU twin
// Y[M][N] = X[M][K] . W[N][K]^T in fp32 (OpenBLAS sgemm; W holds bf16 values widened once at setup:
// this OpenBLAS build exports no cblas_sbgemm, see sbgemm_available()).
void gemm_xwT(const float* X, const float* W, float* Y, int M, int N, int K);
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
