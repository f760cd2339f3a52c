// An intrusive doubly linked recency list over dense block ids: O(1) push, unlink and least-recent lookup with
// two flat arrays, no allocation per reference. Membership is the owning policy's to track.
#pragma once
#include <cstddef>
#include <limits>
#include <vector>

#include "kvf/residency/trace.hpp"

namespace kvf::residency {

class LruList {
 public:
  static constexpr BlockId kNil = std::numeric_limits<BlockId>::max();

  void reset(std::size_t blocks) {
    prev_.assign(blocks, kNil);
    next_.assign(blocks, kNil);
    head_ = tail_ = kNil;
    size_ = 0;
  }
  // `b` becomes the most recent; it must not be in the list.
  void push_front(BlockId b) {
    prev_[b] = kNil;
    next_[b] = head_;
    if (head_ != kNil) prev_[head_] = b;
    head_ = b;
    if (tail_ == kNil) tail_ = b;
    ++size_;
  }
  // `b` must be in the list.
  void unlink(BlockId b) {
    if (prev_[b] != kNil) next_[prev_[b]] = next_[b];
    else head_ = next_[b];
    if (next_[b] != kNil) prev_[next_[b]] = prev_[b];
    else tail_ = prev_[b];
    prev_[b] = next_[b] = kNil;
    --size_;
  }
  BlockId least_recent() const { return tail_; }
  std::size_t size() const { return size_; }

 private:
  std::vector<BlockId> prev_, next_;
  BlockId head_ = kNil, tail_ = kNil;
  std::size_t size_ = 0;
};

}  // namespace kvf::residency
