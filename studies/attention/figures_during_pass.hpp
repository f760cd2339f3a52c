// The figures of each captured layer computed on a worker thread while the forward pass goes on with the next
// layers (ForwardOptions::on_captured feeds it): on a GPU pass the host's cores otherwise wait for the GPU, and the
// figures ran after the pass (H200, 32K: pass 27.7 s, then figures 36.6 s; beside it, with the figures' own
// speedups: 3.0 s left after a 20.3 s pass). Layers are taken in order, one at a
// time; each layer's figures use the OpenMP threads as after the pass. Results equal the figures computed after
// the pass (the capture's layer is final when it is handed over).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kvf/attention/forward.hpp"
#include "kvf/attention/quality.hpp"

namespace kvf::attention {

class FiguresDuringPass {
 public:
  explicit FiguresDuringPass(quality::QualityOptions qo);
  ~FiguresDuringPass();  // stops after the layer in work and joins (a pass that threw)
  FiguresDuringPass(const FiguresDuringPass&) = delete;
  FiguresDuringPass& operator=(const FiguresDuringPass&) = delete;

  // Queues captured layer c (the pass's thread: ForwardOptions::on_captured).
  void add(const AttentionCapture& cap, int c);
  // Waits for every queued layer; their figures in the order added. Rethrows the first error of a layer.
  std::vector<quality::LayerFigures> finish();

 private:
  void run();
  quality::QualityOptions qo_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<quality::LayerAttention> queue_;
  std::vector<quality::LayerFigures> done_;
  std::exception_ptr error_;
  bool closing_ = false, stop_ = false;
  std::thread worker_;  // last: started once the members above exist
};

}  // namespace kvf::attention
