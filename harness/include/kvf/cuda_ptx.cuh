// PTX wrappers the tensor-core and cp.async kernels share (sm_80+; device code only, include from .cu files):
// kernels/access/attention_gpu.cu (decode attention) and kernels/decode/prefill_attn_gpu.cu (prefill attention).
#pragma once
#if !defined(__CUDACC__)
#error "kvf/cuda_ptx.cuh is for CUDA sources"
#endif

namespace kvf::ptx {

// cp.async: 16 bytes from global memory into this thread's shared-memory slot, in the background (.cg: L2 only,
// the rows are read once). ok false reads nothing and fills zeros (rows past a range); src must still be a valid
// global address.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, bool ok) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(__cvta_generic_to_global(gmem_src)),
               "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ldmatrix .x4: lane L gives the shared-memory address of row L % 8 of 8x8 b16 matrix L / 8; r[m] holds matrix m's
// (row g, elements 2t, 2t+1) for lane 4 g + t, or with .trans its (rows 2t, 2t+1 of column g).
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

}  // namespace kvf::ptx
