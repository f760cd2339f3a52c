#include "figures_during_pass.hpp"

#include <utility>

#include "needle_decode.hpp"

namespace kvf::attention {

FiguresDuringPass::FiguresDuringPass(quality::QualityOptions qo) : qo_(std::move(qo)), worker_([this] { run(); }) {}

FiguresDuringPass::~FiguresDuringPass() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    closing_ = stop_ = true;
  }
  cv_.notify_one();
  if (worker_.joinable()) worker_.join();
}

void FiguresDuringPass::add(const AttentionCapture& cap, int c) {
  // The view holds pointers into the capture's arrays, which the pass neither writes again for this layer nor
  // reallocates (ForwardOptions::on_captured).
  quality::LayerAttention a = captured_layer(cap, c);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(a);
  }
  cv_.notify_one();
}

std::vector<quality::LayerFigures> FiguresDuringPass::finish() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_one();
  if (worker_.joinable()) worker_.join();
  if (error_) std::rethrow_exception(error_);
  return std::move(done_);
}

void FiguresDuringPass::run() {
  for (;;) {
    quality::LayerAttention a;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || closing_ || !queue_.empty(); });
      if (stop_ || queue_.empty()) return;  // closing with nothing left, or told to stop
      a = queue_.front();
      queue_.pop_front();
    }
    try {
      quality::LayerFigures f = quality::layer_figures(a, qo_);
      const std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(std::move(f));
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      return;
    }
  }
}

}  // namespace kvf::attention
