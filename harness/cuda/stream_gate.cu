#include "kvf/stream_gate.hpp"

#include "device_time.cuh"
#include "kvf/cuda_check.hpp"

namespace kvf {
namespace {

__global__ void gate_wait_kernel(volatile unsigned* word, unsigned ticket, unsigned long long timeout_ns) {
  const std::uint64_t t0 = detail::globaltimer_ns();
  while (static_cast<int>(word[0] - ticket) < 0) {  // wrap-safe "word[0] < ticket"
    if (detail::globaltimer_ns() - t0 > timeout_ns) {
      atomicAdd(const_cast<unsigned*>(word) + 1, 1u);
      return;
    }
  }
}
__global__ void gate_open_kernel(unsigned* word, unsigned ticket) {
  *reinterpret_cast<volatile unsigned*>(word) = ticket;
  __threadfence();
}

}  // namespace

StreamGate::StreamGate(double timeout_s) : timeout_ns_(static_cast<unsigned long long>(timeout_s * 1e9)) {
  KVF_CUDA_CHECK(cudaMalloc(&word_, 2 * sizeof(unsigned)));
  KVF_CUDA_CHECK(cudaMemset(word_, 0, 2 * sizeof(unsigned)));
}
StreamGate::~StreamGate() {
  if (word_) (void)cudaFree(word_);
}
void StreamGate::warm(cudaStream_t s) {
  gate_wait_kernel<<<1, 1, 0, s>>>(word_, ticket_, timeout_ns_);  // word >= ticket already: returns at once
  KVF_CUDA_CHECK(cudaGetLastError());
  gate_open_kernel<<<1, 1, 0, s>>>(word_, ticket_);
  KVF_CUDA_CHECK(cudaGetLastError());
  KVF_CUDA_CHECK(cudaStreamSynchronize(s));
}
void StreamGate::close(cudaStream_t s) {
  ++ticket_;
  gate_wait_kernel<<<1, 1, 0, s>>>(word_, ticket_, timeout_ns_);
  KVF_CUDA_CHECK(cudaGetLastError());
}
void StreamGate::open(cudaStream_t t) {
  gate_open_kernel<<<1, 1, 0, t>>>(word_, ticket_);
  KVF_CUDA_CHECK(cudaGetLastError());
}
bool StreamGate::timed_out() const {
  unsigned w[2] = {0, 0};
  KVF_CUDA_CHECK(cudaMemcpy(w, word_, sizeof(w), cudaMemcpyDeviceToHost));
  return w[1] != 0;
}

}  // namespace kvf
