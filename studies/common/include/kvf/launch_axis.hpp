// The launch axis of the multi-kernel GPU arms (frontier x, xq, mla, layers; idleness decode, prefill): a point is
// measured with its kernels launched one by one ("eager") and as one CUDA graph launch of the same enqueue
// function ("graph"), so the two rows differ only in how the work reaches the GPU. GPU targets only: CPU rows have
// no launch column, and the eager row keeps the case name it had before the axis existed (old results still match).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvf/arms.hpp"

#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include "kvf/cuda_graph.hpp"
#endif

namespace kvf::study {

inline constexpr const char* kLaunchAxis = "launch";

// eager, graph. A user sweep of an arm (any of its flags given) measures both at every point; the default GPU grids
// add the graph row only at the launch-bound points.
const std::vector<std::string>& launch_values();
kvf::Axis launch_axis();
// Appends the launch list to every product of a grid.
kvf::Grid with_launch(kvf::Grid g, const std::vector<std::string>& values);
// "graph" or "eager" ("eager" for a point without the axis: CPU rows).
std::string launch_of(const kvf::Point& p);
// "/graph" for the graph row, "" for the eager row and CPU rows.
std::string launch_suffix(const kvf::Point& p);

// A case's outputs as fp32 values, by name (bf16 outputs widened exactly), for the graph row's check.
using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;
// The graph path's outputs against the eager path's, both taken after poisoning (NaN): what the note says ("outputs
// vs eager: bit-identical (N values)" or how many differ), or kvf::VerifyError naming the first value that is NaN
// where eager is not, or further than two bf16 ulps (2^-6 relative) plus 1e-3 of the output's rms from it.
std::string compare_outputs(const Outputs& eager, const Outputs& graph);

#if defined(KVF_HAVE_CUDA)

// How one multi-kernel GPU case reaches the GPU. The case hands its one enqueue function to set(); run() calls it
// (eager) or launches the graph captured from it (graph): the two rows cannot run different work.
class LaunchPath {
 public:
  explicit LaunchPath(std::string mode);  // "eager" or "graph"; std::invalid_argument otherwise
  bool graph() const { return graph_mode_; }
  const std::string& mode() const { return mode_; }
  // At setup, once every buffer the function reads exists. Graph rows run it once and synchronize (modules and
  // library state loaded outside the capture), then capture it; a capture error throws, naming `what`.
  void set(std::function<void(cudaStream_t)> enqueue, cudaStream_t s, const std::string& what);
  void run(cudaStream_t s) const;
  void enqueue_eager(cudaStream_t s) const;
  // Graph rows: `poison` the outputs (0xFF bytes: NaN in bf16 and fp32), the eager path once and its outputs, then
  // `poison`, one graph launch and the outputs again, which must match the eager ones (VerifyError "graph: ..."
  // otherwise). The case's own verify has already checked the eager path against its reference. Eager rows: nothing.
  void verify_graph(cudaStream_t s, const std::function<Outputs()>& read, const std::function<void()>& poison);
  // For the row's note: "graph: N kernel nodes in one launch; outputs vs eager: ...", or "" on eager rows.
  std::string note() const;
  void reset();  // before the buffers the graph reads are freed

 private:
  std::string mode_;
  bool graph_mode_ = false;
  std::function<void(cudaStream_t)> enqueue_;
  std::unique_ptr<kvf::CudaGraph> graph_;
  std::string compared_;  // what verify_graph found
};

// cudaMemsetAsync of 0xFF bytes: NaN in bf16 and fp32, so an output the graph did not write cannot pass.
void poison(void* p, std::size_t bytes, cudaStream_t s);
// Exact bf16 -> fp32 of n values.
std::vector<float> widen_bf16(const std::uint16_t* p, std::size_t n);
#endif

}  // namespace kvf::study
