// GPU stream kernels (16-byte vector loads/stores, grid-stride). Declared here, defined in
// stream_gpu.cu; only in builds with KVF_HAVE_CUDA.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvf::stream {

// Reads `bytes` (multiple of 16) from src; folds the words into *checksum (xor) so the loads cannot
// be elided. *checksum must be zeroed before; the result equals stream_read_checksum_ref().
void gpu_read(const void* src, std::size_t bytes, unsigned long long* checksum, cudaStream_t s);
// Writes pattern_word(seed, i) to every 8-byte word i.
void gpu_write(void* dst, std::size_t bytes, std::uint64_t seed, cudaStream_t s);
// dst[i] = src[i], 16 bytes per thread per step.
void gpu_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t s);
// Zero-copy read of mapped pinned host memory by SMs (src is the device alias).
// Same semantics as gpu_read.
inline void gpu_read_mapped(const void* src_alias, std::size_t bytes, unsigned long long* checksum,
                            cudaStream_t s) {
  gpu_read(src_alias, bytes, checksum, s);
}

}  // namespace kvf::stream
#endif
