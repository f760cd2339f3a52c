// A second, non-blocking stream beside the timed one (overlap, bidirectional copies). fork(main): work queued on `s` afterwards starts after what `main` holds so far;
// join(main): `main` waits for everything queued on `s` so far, so it falls inside the timed region.
// Destruction waits for `s` to drain; reset it before freeing buffers its work touches.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <memory>

#include "kvf/cuda_backend.hpp"

namespace kvf::frontier_study {

struct SideStream {
  cudaStream_t s = nullptr;
  cudaEvent_t fork_ev = nullptr, join_ev = nullptr;

  static std::unique_ptr<SideStream> make() {
    auto p = std::make_unique<SideStream>();  // the destructor releases whatever was created if one call throws
    KVF_CUDA_CHECK(cudaStreamCreateWithFlags(&p->s, cudaStreamNonBlocking));
    KVF_CUDA_CHECK(cudaEventCreateWithFlags(&p->fork_ev, cudaEventDisableTiming));
    KVF_CUDA_CHECK(cudaEventCreateWithFlags(&p->join_ev, cudaEventDisableTiming));
    return p;
  }
  cudaStream_t fork(cudaStream_t main) {
    KVF_CUDA_CHECK(cudaEventRecord(fork_ev, main));
    KVF_CUDA_CHECK(cudaStreamWaitEvent(s, fork_ev, 0));
    return s;
  }
  void join(cudaStream_t main) {
    KVF_CUDA_CHECK(cudaEventRecord(join_ev, s));
    KVF_CUDA_CHECK(cudaStreamWaitEvent(main, join_ev, 0));
  }
  SideStream() = default;
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  ~SideStream() {
    if (s) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
    if (fork_ev) (void)cudaEventDestroy(fork_ev);
    if (join_ev) (void)cudaEventDestroy(join_ev);
  }
};

}  // namespace kvf::frontier_study
#endif
