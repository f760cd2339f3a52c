// Launch-floor kernels of the stream study: the fixed cost under every multi-kernel arm (a kernel boundary,
// a graph launch). Only in builds with KVF_HAVE_CUDA.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

namespace kvf::stream {

// n dependent launches of a one-thread kernel that adds 1 to *counter (device memory).
void gpu_ticks(unsigned int* counter, int n, cudaStream_t s);

// The same n launches captured once into a CUDA graph and instantiated; launch() replays them with one call.
class TickGraph {
 public:
  TickGraph(unsigned int* counter, int n, cudaStream_t s);
  ~TickGraph();
  TickGraph(const TickGraph&) = delete;
  TickGraph& operator=(const TickGraph&) = delete;
  void launch(cudaStream_t s);
  int kernels() const { return n_; }

 private:
  int n_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace kvf::stream
#endif
