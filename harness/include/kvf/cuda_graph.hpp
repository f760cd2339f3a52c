// One CUDA graph of whatever a multi-kernel arm enqueues, for the "graph" row beside the "eager" one
// (only in builds with KVF_HAVE_CUDA). The arm's own enqueue function is captured once, so the eager
// and graph rows run the same kernels with the same arguments; only how they reach the GPU differs.
#pragma once
#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

namespace kvf {

class CudaGraph {
 public:
  // Captures enqueue(s) on s (thread-local capture mode: another thread's CUDA calls cannot invalidate
  // it), instantiates and uploads the graph. s must be idle and not the legacy default stream. The
  // captured work must not synchronize or allocate; a failed capture throws std::runtime_error naming it.
  CudaGraph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, const std::string& what);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch(cudaStream_t s) const;
  // Kernel nodes in the graph (what one launch replaces).
  std::size_t kernel_nodes() const { return kernel_nodes_; }

 private:
  void count_and_instantiate(cudaStream_t s, const std::string& what);
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::size_t kernel_nodes_ = 0;
};

// The two ways a multi-kernel arm reaches the GPU, as an axis value: "eager" (one launch per kernel)
// and "graph" (the same kernels as one CUDA graph launch).
inline const std::vector<std::string>& launch_modes() {
  static const std::vector<std::string> modes{"eager", "graph"};
  return modes;
}

}  // namespace kvf
#endif
