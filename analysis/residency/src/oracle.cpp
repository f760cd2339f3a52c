// `oracle`: offline Belady on HBM alone. On pressure it evicts the resident block whose next request lies
// farthest ahead; among blocks next used by the same request (or never again) the deepest goes first, so an
// ancestor is never evicted before its descendant and, on a prefix-consistent trace, the resident set stays
// closed under prefixes. README "The oracle's bound" says what this makes it optimal for, and what not.
#include <limits>
#include <set>
#include <tuple>
#include <vector>

#include "builtin_policies.hpp"

namespace kvf::residency {
namespace {

class Oracle final : public Policy {
 public:
  void reset(const IndexedTrace& trace, const Capacity& capacity) override {
    trace_ = &trace;
    capacity_ = capacity.hbm_blocks;
    resident_.assign(trace.distinct, 0);
    seen_in_.assign(trace.distinct, kNever);
    key_.assign(trace.distinct, Key{});
    by_next_use_.clear();
    // next_use_[p]: the first request after p's own that references p's block (kNever: none). Filled back to
    // front; a request's own positions are all read before any is recorded, so repeats within it look past it.
    next_use_.assign(trace.references(), kNever);
    std::vector<std::uint32_t> upcoming(trace.distinct, kNever);
    for (std::size_t r = trace.requests(); r-- > 0;) {
      for (std::size_t p = trace.offsets[r]; p < trace.offsets[r + 1]; ++p) next_use_[p] = upcoming[trace.blocks[p]];
      for (std::size_t p = trace.offsets[r]; p < trace.offsets[r + 1]; ++p)
        upcoming[trace.blocks[p]] = static_cast<std::uint32_t>(r);
    }
  }
  Tier where(BlockId b) const override { return resident_[b] ? Tier::hbm : Tier::none; }
  void admit(std::size_t r, std::span<const BlockId> blocks, std::size_t, Moves&) override {
    for (const BlockId b : blocks)
      if (resident_[b]) {
        by_next_use_.erase(key_[b]);
        resident_[b] = 0;
      }
    // The request's distinct blocks in order, at most the capacity of them: a request larger than HBM keeps
    // its prefix, as the LRU policies do.
    keep_.clear();
    const std::size_t base = trace_->offsets[r];
    for (std::size_t j = 0; j < blocks.size() && keep_.size() < capacity_; ++j) {
      if (seen_in_[blocks[j]] == r) continue;
      seen_in_[blocks[j]] = static_cast<std::uint32_t>(r);
      keep_.push_back(Key{next_use_[base + j], static_cast<std::uint32_t>(j), blocks[j]});
    }
    while (!by_next_use_.empty() && by_next_use_.size() + keep_.size() > capacity_) {
      const auto farthest = std::prev(by_next_use_.end());
      resident_[std::get<2>(*farthest)] = 0;
      by_next_use_.erase(farthest);
    }
    for (const Key& k : keep_) {
      const BlockId b = std::get<2>(k);
      key_[b] = k;
      resident_[b] = 1;
      by_next_use_.insert(k);
    }
  }
  std::size_t resident(Tier t) const override { return t == Tier::hbm ? by_next_use_.size() : 0; }

 private:
  // (next request, depth in the request, block): the largest is evicted first.
  using Key = std::tuple<std::uint32_t, std::uint32_t, BlockId>;

  const IndexedTrace* trace_ = nullptr;
  std::size_t capacity_ = 0;
  std::vector<std::uint32_t> next_use_;
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint32_t> seen_in_;
  std::vector<Key> key_;
  std::vector<Key> keep_;
  std::set<Key> by_next_use_;
};

}  // namespace

std::unique_ptr<Policy> make_oracle() { return std::make_unique<Oracle>(); }

}  // namespace kvf::residency
