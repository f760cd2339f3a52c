#include "kvf/launch_axis.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kvf/errors.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/bf16.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::study {

const std::vector<std::string>& launch_values() {
#if defined(KVF_HAVE_CUDA)
  return kvf::launch_modes();
#else
  // A build without CUDA has no GPU target, so no grid ever takes these values.
  static const std::vector<std::string> eager_only{"eager"};
  return eager_only;
#endif
}

kvf::Axis launch_axis() {
  const auto& v = launch_values();
  // --quick measures the eager rows only: it is the smoke run, and the eager row is the one older results have.
  return {.name = kLaunchAxis,
          .doc = "eager: one launch per kernel; graph: the same enqueue function as one CUDA graph launch",
          .cpu = v,
          .quick = {v.front()},
          .fixed = v};
}

kvf::Grid with_launch(kvf::Grid g, const std::vector<std::string>& values) {
  for (auto& prod : g) prod.lists.push_back({kLaunchAxis, values});
  return g;
}

std::string launch_of(const kvf::Point& p) { return p.has(kLaunchAxis) ? p[kLaunchAxis] : "eager"; }

std::string launch_suffix(const kvf::Point& p) { return launch_of(p) == "graph" ? "/graph" : ""; }

// Graph against eager outputs: the same kernels with the same arguments, so normally bit-identical; a library
// kernel that reduces in a run-dependent order may differ in the last bits, so two bf16 ulps (2^-6 relative) plus
// 1e-3 of the output's rms are allowed, and the note says which it was. A value the eager path wrote and the graph
// left poisoned (NaN) never passes; a value neither wrote is the same NaN bits in both.
std::string compare_outputs(const Outputs& eager, const Outputs& graph) {
  std::size_t n = 0, identical = 0;
  double worst = 0;
  for (std::size_t o = 0; o < eager.size(); ++o) {
    const auto& [name, e] = eager[o];
    if (o >= graph.size() || graph[o].second.size() != e.size())
      throw std::logic_error("compare_outputs: output " + name + " missing or of another size");
    const auto& g = graph[o].second;
    double ss = 0;
    std::size_t finite = 0;
    for (float v : e)
      if (std::isfinite(v)) {  // the poison neither path overwrote (unused cache slots) is no output
        ss += double(v) * v;
        ++finite;
      }
    const double rms = finite ? std::sqrt(ss / double(finite)) : 0;
    for (std::size_t i = 0; i < e.size(); ++i) {
      ++n;
      if (std::memcmp(&e[i], &g[i], sizeof(float)) == 0) {
        ++identical;
        continue;
      }
      const double d = std::fabs(double(g[i]) - double(e[i]));
      if (!std::isfinite(g[i]) || !(d <= std::ldexp(std::fabs(double(e[i])), -6) + 1e-3 * rms))
        throw kvf::VerifyError("graph: " + name + "[" + std::to_string(i) + "] = " + std::to_string(g[i]) +
                               " after one graph launch, eager " + std::to_string(e[i]));
      if (rms > 0) worst = std::max(worst, d / rms);
    }
  }
  if (identical == n) return "outputs vs eager: bit-identical (" + std::to_string(n) + " values)";
  return "outputs vs eager: " + std::to_string(n - identical) + " of " + std::to_string(n) +
         " values differ, max |diff| " + std::to_string(worst) + " of the rms";
}

#if defined(KVF_HAVE_CUDA)
LaunchPath::LaunchPath(std::string mode) : mode_(std::move(mode)), graph_mode_(mode_ == "graph") {
  if (mode_ != "eager" && mode_ != "graph")
    throw std::invalid_argument("launch mode '" + mode_ + "': must be eager or graph");
}

void LaunchPath::set(std::function<void(cudaStream_t)> enqueue, cudaStream_t s, const std::string& what) {
  graph_.reset();
  enqueue_ = std::move(enqueue);
  if (!graph_mode_) return;
  enqueue_(s);
  KVF_CUDA_CHECK(cudaStreamSynchronize(s));
  graph_ = std::make_unique<kvf::CudaGraph>(enqueue_, s, what);
}

void LaunchPath::run(cudaStream_t s) const {
  if (graph_) return graph_->launch(s);
  enqueue_eager(s);
}

void LaunchPath::enqueue_eager(cudaStream_t s) const {
  if (!enqueue_) throw std::logic_error("LaunchPath::run before set()");
  enqueue_(s);
}

void LaunchPath::verify_graph(cudaStream_t s, const std::function<Outputs()>& read, const std::function<void()>& poison) {
  if (!graph_) return;
  // Poisoned before both runs: what neither path writes (the unused slots of a paged cache) stays equal.
  poison();
  enqueue_eager(s);
  KVF_CUDA_CHECK(cudaStreamSynchronize(s));
  const Outputs eager = read();
  poison();
  graph_->launch(s);
  KVF_CUDA_CHECK(cudaStreamSynchronize(s));
  compared_ = compare_outputs(eager, read());
}

std::string LaunchPath::note() const {
  if (!graph_) return {};
  return "graph: " + std::to_string(graph_->kernel_nodes()) + " kernel nodes in one launch" +
         (compared_.empty() ? "" : "; " + compared_);
}

void LaunchPath::reset() {
  graph_.reset();
  enqueue_ = nullptr;
  compared_.clear();
}

void poison(void* p, std::size_t bytes, cudaStream_t s) {
  if (bytes) KVF_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, s));
}

std::vector<float> widen_bf16(const std::uint16_t* p, std::size_t n) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = kvf::bf16_to_f32(p[i]);
  return out;
}
#endif

}  // namespace kvf::study
