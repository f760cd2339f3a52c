#include "kvf/cuda_graph.hpp"

#include <stdexcept>

#include "kvf/cuda_backend.hpp"

namespace kvf {

CudaGraph::CudaGraph(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, const std::string& what) {
  if (s == nullptr) throw std::invalid_argument("CudaGraph(" + what + "): the legacy default stream cannot be captured");
  KVF_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  std::string failure;
  try {
    enqueue(s);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const cudaError_t launched = cudaGetLastError();
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &g);  // always ends the capture, even after a throw
  if (!failure.empty()) {
    if (g) (void)cudaGraphDestroy(g);
    throw std::runtime_error("capturing " + what + " into a CUDA graph: " + failure);
  }
  if (launched != cudaSuccess && g) (void)cudaGraphDestroy(g);
  cuda_check(launched, ("a launch while capturing " + what).c_str());
  cuda_check(ended, ("cudaStreamEndCapture of " + what).c_str());
  graph_ = g;
  try {
    count_and_instantiate(s, what);
  } catch (...) {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    (void)cudaGraphDestroy(graph_);
    throw;
  }
}

void CudaGraph::count_and_instantiate(cudaStream_t s, const std::string& what) {
  std::size_t n = 0;
  KVF_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) KVF_CUDA_CHECK(cudaGraphGetNodes(graph_, nodes.data(), &n));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t{};
    KVF_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeKernel) ++kernel_nodes_;
  }
  cuda_check(cudaGraphInstantiate(&exec_, graph_, 0), ("cudaGraphInstantiate of " + what).c_str());
  KVF_CUDA_CHECK(cudaGraphUpload(exec_, s));
}

CudaGraph::~CudaGraph() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
}

void CudaGraph::launch(cudaStream_t s) const { KVF_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

}  // namespace kvf
