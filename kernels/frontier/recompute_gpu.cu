// GPU side of the frontier arms: cuBLASLt GEMM wrapper and the small kernels around it.
// Semantics match the CPU twin (recompute_cpu.cpp, layers_cpu.cpp) through frontier_math.hpp.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cublaslt_dl.hpp"
#include "frontier_elems.hpp"
#include "frontier_math.hpp"
#include "recompute_gpu.hpp"

namespace kvf::frontier::gpu {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublaslt().GetStatusName(s) + " (" +
                             cublaslt().GetStatusString(s) + ")");
}
void check_launch(const char* what) { check(cudaGetLastError(), what); }

constexpr int kThreads = 256;

// ------------------------------------------------------------------ RoPE + paged write
// One thread per (row, kv head, i < D/2); body in frontier_elems.hpp (run on the CPU by the tests).
__global__ void rope_write_kernel(const float* __restrict__ Y, const float* __restrict__ bias, int rows, int nkv,
                                  int D, const float* __restrict__ cos_sin, const std::int32_t* __restrict__ pos,
                                  const std::int64_t* __restrict__ slot, std::uint16_t* __restrict__ cache) {
  const std::int64_t total = std::int64_t(rows) * nkv * (D / 2);
  for (std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += std::int64_t(gridDim.x) * blockDim.x)
    elems::rope_write(idx, Y, bias, nkv, D, cos_sin, pos, slot, cache);
}

// ------------------------------------------------------------------ dequantize X
// int8: one thread per 4 elements (one 32-bit load, two 32-bit stores). Requires hidden % 4 == 0.
__global__ void dequant_int8_kernel(const std::uint8_t* __restrict__ q, const float* __restrict__ scales, int rows,
                                    int hidden, std::uint16_t* __restrict__ x) {
  const std::int64_t quads = std::int64_t(rows) * hidden / 4;
  for (std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < quads;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const elems::Words2 o = elems::dequant_int8_quad(t, reinterpret_cast<const std::uint32_t*>(q)[t], scales, hidden);
    *reinterpret_cast<uint2*>(x + t * 4) = make_uint2(o.w0, o.w1);
  }
}
// int4: one thread per 8 elements (one 32-bit load of 4 packed bytes, one 16-byte store).
// Requires hidden % 8 == 0.
__global__ void dequant_int4_kernel(const std::uint8_t* __restrict__ q, const float* __restrict__ scales, int rows,
                                    int hidden, std::uint16_t* __restrict__ x) {
  const std::int64_t octs = std::int64_t(rows) * hidden / 8;
  for (std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < octs;
       t += std::int64_t(gridDim.x) * blockDim.x) {
    const elems::Words4 o = elems::dequant_int4_oct(t, reinterpret_cast<const std::uint32_t*>(q)[t], scales, hidden);
    *reinterpret_cast<uint4*>(x + t * 8) = make_uint4(o.w[0], o.w[1], o.w[2], o.w[3]);
  }
}

// ------------------------------------------------------------------ MLA latent
// One block per row: RMSNorm over the rank latent values (block reduction), RoPE on the rope part.
__global__ void mla_latent_kernel(const float* __restrict__ Y, int rank, int rope, float eps,
                                  const float* __restrict__ cos_sin, const std::int32_t* __restrict__ pos,
                                  const std::int64_t* __restrict__ slot, std::uint16_t* __restrict__ cache) {
  const int r = blockIdx.x, lat = rank + rope, half = rope / 2;
  const float* y = Y + std::int64_t(r) * lat;
  float ss = 0.f;
  for (int i = threadIdx.x; i < rank; i += blockDim.x) ss += y[i] * y[i];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float v = lane < nwarps ? warp_sums[lane] : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sums[0] = v;
  }
  __syncthreads();
  const float inv = rsqrtf(warp_sums[0] / float(rank) + eps);
  std::uint16_t* out = cache + slot[r] * lat;
  for (int i = threadIdx.x; i < rank; i += blockDim.x) out[i] = f32_to_bf16(y[i] * inv);
  const float* cs = cos_sin + std::int64_t(pos[r]) * rope;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const RopePair o = rope_rotate(y[rank + i], y[rank + half + i], cs[i], cs[half + i]);
    out[rank + i] = f32_to_bf16(o.lo);
    out[rank + half + i] = f32_to_bf16(o.hi);
  }
}

// ------------------------------------------------------------------ SM copy
__global__ void copy16_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, std::int64_t n16) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
__global__ void copy1_kernel(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src, std::int64_t n) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void read_xor_kernel(const uint4* __restrict__ src, std::int64_t n16, unsigned long long* out) {
  unsigned long long acc = 0;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = src[i];
    acc ^= (static_cast<unsigned long long>(v.y) << 32 | v.x) ^ (static_cast<unsigned long long>(v.w) << 32 | v.z);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0 && acc) atomicXor(out, acc);
}

// Enough blocks to fill the GPU several times over, but bounded (grid-stride loops do the rest).
unsigned capped_grid(std::int64_t work_items) {
  const std::int64_t g = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 65536 ? 65536 : g));
}

}  // namespace

// ------------------------------------------------------------------ LtGemm
struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  void* workspace = nullptr;
  std::size_t ws_bytes = std::size_t(32) << 20;
  void release_plan() {
    if (pref) cublaslt().MatmulPreferenceDestroy(pref);
    if (d) cublaslt().MatrixLayoutDestroy(d);
    if (b) cublaslt().MatrixLayoutDestroy(b);
    if (a) cublaslt().MatrixLayoutDestroy(a);
    if (op) cublaslt().MatmulDescDestroy(op);
    pref = nullptr;
    d = b = a = nullptr;
    op = nullptr;
  }
};

LtGemm::LtGemm() : impl_(std::make_unique<Impl>()) {
  check(cublaslt().Create(&impl_->handle), "cublasLtCreate");
  const cudaError_t e = cudaMalloc(&impl_->workspace, impl_->ws_bytes);
  if (e != cudaSuccess) {
    cublaslt().Destroy(impl_->handle);
    check(e, "cudaMalloc(cuBLASLt workspace)");
  }
}

LtGemm::~LtGemm() {
  if (!impl_) return;
  impl_->release_plan();
  if (impl_->workspace) cudaFree(impl_->workspace);
  if (impl_->handle) cublaslt().Destroy(impl_->handle);
}

void LtGemm::plan(int M, int N, int K, cudaDataType_t out_type) {
  auto& p = *impl_;
  p.release_plan();
  M_ = M;
  check(cublaslt().MatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublaslt().MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
  check(cublaslt().MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
  // Column-major views: A = W as K x N (ld K), B = X as K x M (ld K), D = Y as N x M (ld N).
  check(cublaslt().MatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K), "layout A");
  check(cublaslt().MatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K), "layout B");
  check(cublaslt().MatrixLayoutCreate(&p.d, out_type, N, M, N), "layout D");
  check(cublaslt().MatmulPreferenceCreate(&p.pref), "cublasLtMatmulPreferenceCreate");
  check(cublaslt().MatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p.ws_bytes,
                                                sizeof p.ws_bytes),
        "set MAX_WORKSPACE_BYTES");
  int found = 0;
  check(cublaslt().MatmulAlgoGetHeuristic(p.handle, p.op, p.a, p.b, p.d, p.d, p.pref, 1, &p.heur, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  if (found < 1)
    throw std::runtime_error("cuBLASLt has no algorithm for bf16 TN GEMM m=" + std::to_string(N) +
                             " n=" + std::to_string(M) + " k=" + std::to_string(K));
}

void LtGemm::run(const void* X, const void* W, void* Y, cudaStream_t s) {
  auto& p = *impl_;
  if (!p.op) throw std::runtime_error("LtGemm::run before plan()");
  const float alpha = 1.f, beta = 0.f;
  check(cublaslt().Matmul(p.handle, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.d, Y, p.d, &p.heur.algo,
                          p.workspace, p.ws_bytes, s),
        "cublasLtMatmul");
}

// ------------------------------------------------------------------ launchers
void rope_write(const float* Y, const float* bias, int rows, int n_kv_heads, int head_dim, const float* cos_sin,
                const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache, cudaStream_t s) {
  if (head_dim % 2) throw std::invalid_argument("rope_write: head_dim must be even");
  const std::int64_t total = std::int64_t(rows) * n_kv_heads * (head_dim / 2);
  rope_write_kernel<<<capped_grid(total), kThreads, 0, s>>>(Y, bias, rows, n_kv_heads, head_dim, cos_sin, pos, slot,
                                                             cache);
  check_launch("rope_write_kernel");
}

void dequant_x(const std::uint8_t* q, const float* scales, int rows, int hidden, int bits, std::uint16_t* x,
               cudaStream_t s) {
  if (reinterpret_cast<std::uintptr_t>(q) % 4 || reinterpret_cast<std::uintptr_t>(x) % 16)
    throw std::invalid_argument("dequant_x: q must be 4-byte and x 16-byte aligned");
  if (bits == 8) {
    if (hidden % 4) throw std::invalid_argument("dequant_x int8: hidden must be a multiple of 4");
    dequant_int8_kernel<<<capped_grid(std::int64_t(rows) * hidden / 4), kThreads, 0, s>>>(q, scales, rows, hidden, x);
  } else if (bits == 4) {
    if (hidden % 8) throw std::invalid_argument("dequant_x int4: hidden must be a multiple of 8");
    dequant_int4_kernel<<<capped_grid(std::int64_t(rows) * hidden / 8), kThreads, 0, s>>>(q, scales, rows, hidden, x);
  } else {
    throw std::invalid_argument("dequant_x: bits must be 8 or 4");
  }
  check_launch("dequant_x kernel");
}

void mla_latent_write(const float* Y, int rows, int rank, int rope, float eps, const float* cos_sin,
                      const std::int32_t* pos, const std::int64_t* slot, std::uint16_t* cache, cudaStream_t s) {
  if (rope % 2) throw std::invalid_argument("mla_latent_write: rope dims must be even");
  if (rows <= 0) return;
  mla_latent_kernel<<<rows, kThreads, 0, s>>>(Y, rank, rope, eps, cos_sin, pos, slot, cache);
  check_launch("mla_latent_kernel");
}

void sm_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (bytes == 0) return;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src) | bytes) % 16 == 0;
  if (aligned) {
    const std::int64_t n16 = std::int64_t(bytes / 16);
    copy16_kernel<<<capped_grid(n16), kThreads, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), n16);
  } else {
    copy1_kernel<<<capped_grid(std::int64_t(bytes)), kThreads, 0, s>>>(
        static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), std::int64_t(bytes));
  }
  check_launch("sm_copy kernel");
}

void read_xor(const void* src, std::size_t bytes, unsigned long long* out, cudaStream_t s) {
  if (bytes % 16 || reinterpret_cast<std::uintptr_t>(src) % 16)
    throw std::invalid_argument("read_xor: src and bytes must be 16-byte aligned");
  if (bytes == 0) return;
  const std::int64_t n16 = std::int64_t(bytes / 16);
  read_xor_kernel<<<capped_grid(n16), kThreads, 0, s>>>(static_cast<const uint4*>(src), n16, out);
  check_launch("read_xor_kernel");
}

}  // namespace kvf::frontier::gpu
