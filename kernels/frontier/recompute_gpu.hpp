// GPU side of the frontier arms (only in builds with KVF_HAVE_CUDA). Same semantics as the CPU twin
// in recompute.hpp / layers.hpp: fp32 GEMM output, one bf16 rounding in the write, frontier_math.hpp.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvf::frontier::gpu {

// Y[M][N] (row-major, fp32 or bf16) = X[M][K] (row-major bf16) . W[N][K]^T (row-major bf16), fp32
// accumulation, through cuBLASLt. In cuBLASLt's column-major terms: D[N x M] = op(A = W)^T . B = X,
// i.e. the TN layout, m = N, n = M, k = K. plan() picks the heuristic's first algorithm and throws
// std::runtime_error with cuBLASLt's status text when there is none.
class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  void plan(int M, int N, int K, cudaDataType_t out_type = CUDA_R_32F);
  void run(const void* X, const void* W, void* Y, cudaStream_t s);
  int M() const { return M_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int M_ = 0;
};

// K = RoPE(Y[:, :kvd] + bk), V = Y[:, kvd:] + bv -> bf16 paged cache (frontier_math.hpp cache_index).
void rope_write(const float* Y, const float* bias, int rows, int n_kv_heads, int head_dim, const float* cos_sin,
                const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache, cudaStream_t s);
// x = bf16(q * scale) for int8 (bits 8) or packed int4 (bits 4) X; group kQuantGroup along hidden.
void dequant_x(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits, std::uint16_t* x,
               cudaStream_t s);
// MLA latent: RMSNorm(c) (gamma 1) and RoPE(k_pe) -> bf16 cache rows [slot][rank + rope].
void mla_latent_write(const float* Y, int rows, int rank, int rope, float eps, const float* cos_sin,
                      const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache, cudaStream_t s);
// SM-driven copy (zero-copy read of mapped pinned host memory when src is a device alias);
// 16-byte accesses when both pointers and bytes are 16-byte aligned, else byte by byte.
void sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t s);
// XOR of every 8-byte word of src folded into *out (which the caller zeroes): a full-bandwidth read of
// `bytes` (multiple of 16, src 16-byte aligned), the memory traffic of a decode step over that K/V.
void read_xor(const void* src, std::size_t bytes, unsigned long long* out, cudaStream_t s);

}  // namespace kvf::frontier::gpu
#endif
