// Launch-floor kernels (launch_gpu.hpp): one thread adds 1 to a device counter, so a run of N launches can be
// checked (the counter moved by exactly N) while the kernel does as little as a kernel can.
#include "launch_gpu.hpp"

#include "kvf/cuda_backend.hpp"

namespace kvf::stream {
namespace {

__global__ void tick_kernel(unsigned int* counter) { *counter += 1; }

}  // namespace

void gpu_ticks(unsigned int* counter, int n, cudaStream_t s) {
  for (int i = 0; i < n; ++i) tick_kernel<<<1, 1, 0, s>>>(counter);
  cuda_check(cudaGetLastError(), "tick_kernel launch");
}

TickGraph::TickGraph(unsigned int* counter, int n, cudaStream_t s) : n_(n) {
  // Captured on the caller's (non-default) stream, thread-local mode: another thread's CUDA calls (the
  // harness's are on this one) cannot invalidate the capture. The stream is idle while a case sets up.
  KVF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; ++i) tick_kernel<<<1, 1, 0, s>>>(counter);
  const cudaError_t launched = cudaGetLastError();
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &g);
  cuda_check(launched, "tick_kernel launch during capture");
  cuda_check(ended, "cudaStreamEndCapture");
  graph_ = g;
  KVF_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  KVF_CUDA_CHECK(cudaGraphUpload(exec_, s));
}

TickGraph::~TickGraph() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
}

void TickGraph::launch(cudaStream_t s) { KVF_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

}  // namespace kvf::stream
