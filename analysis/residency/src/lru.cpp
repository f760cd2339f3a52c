// `lru` (vLLM's prefix cache: HBM only, evict-only) and `lru-host` (LMCache-style: HBM evictions demote to a
// host tier, host evictions to a disk tier when there is one, else drop; disk evictions drop). Both admit a request in two passes: first its resident blocks leave the
// recency lists, so making room for its misses can only evict other requests' blocks (vLLM holds a running
// request's blocks by reference count); then its blocks enter HBM last to first, so its first block is the most
// recent and its tail goes first (vLLM frees a finished sequence's blocks in reverse order).
#include <vector>

#include "builtin_policies.hpp"
#include "lru_list.hpp"

namespace kvf::residency {
namespace {

class Lru final : public Policy {
 public:
  void reset(const IndexedTrace& trace, const Capacity& capacity) override {
    in_.assign(trace.distinct, 0);
    list_.reset(trace.distinct);
    capacity_ = capacity.hbm_blocks;
  }
  Tier where(BlockId b) const override { return in_[b] ? Tier::hbm : Tier::none; }
  void admit(std::size_t, std::span<const BlockId> blocks, std::size_t, Moves&) override {
    for (const BlockId b : blocks)
      if (in_[b]) {
        list_.unlink(b);
        in_[b] = 0;
      }
    for (std::size_t j = blocks.size(); j-- > 0;) {
      const BlockId b = blocks[j];
      if (in_[b]) list_.unlink(b);  // an id repeated within the request
      in_[b] = 1;
      list_.push_front(b);
      if (list_.size() > capacity_) {
        const BlockId victim = list_.least_recent();
        list_.unlink(victim);
        in_[victim] = 0;
      }
    }
  }
  std::size_t resident(Tier t) const override { return t == Tier::hbm ? list_.size() : 0; }

 private:
  std::vector<std::uint8_t> in_;
  LruList list_;
  std::size_t capacity_ = 0;
};

class LruHost final : public Policy {
 public:
  void reset(const IndexedTrace& trace, const Capacity& capacity) override {
    tier_.assign(trace.distinct, Tier::none);
    hbm_.reset(trace.distinct);
    host_.reset(trace.distinct);
    disk_.reset(trace.distinct);
    capacity_ = capacity;
  }
  Tier where(BlockId b) const override { return tier_[b]; }
  void admit(std::size_t, std::span<const BlockId> blocks, std::size_t hit_prefix, Moves& moves) override {
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      const BlockId b = blocks[j];
      if (tier_[b] == Tier::none) continue;
      // A host or disk block beyond the reused prefix is prefilled again, not fetched: its copy just goes.
      if (tier_[b] != Tier::hbm && j < hit_prefix) ++moves.promoted;
      take_out(b);
    }
    for (std::size_t j = blocks.size(); j-- > 0;) {
      const BlockId b = blocks[j];
      take_out(b);  // an id repeated within the request
      tier_[b] = Tier::hbm;
      hbm_.push_front(b);
      if (hbm_.size() > capacity_.hbm_blocks) demote(hbm_.least_recent(), moves);
    }
  }
  std::size_t resident(Tier t) const override {
    return t == Tier::hbm ? hbm_.size() : t == Tier::host ? host_.size() : t == Tier::disk ? disk_.size() : 0;
  }

 private:
  void take_out(BlockId b) {
    if (tier_[b] == Tier::hbm) hbm_.unlink(b);
    else if (tier_[b] == Tier::host) host_.unlink(b);
    else if (tier_[b] == Tier::disk) disk_.unlink(b);
    tier_[b] = Tier::none;
  }
  // An HBM eviction goes to host, a host eviction to disk, a disk eviction out; one bound for a tier of no capacity
  // leaves the cache.
  void demote(BlockId b, Moves& moves) {
    if (!move_down(b, hbm_, host_, capacity_.host_blocks, Tier::host)) return;
    ++moves.demoted_form[static_cast<std::size_t>(capacity_.form)];
    if (host_.size() <= capacity_.host_blocks) return;
    if (!move_down(host_.least_recent(), host_, disk_, capacity_.disk_blocks, Tier::disk)) return;
    ++moves.to_disk;
    if (disk_.size() > capacity_.disk_blocks) move_down(disk_.least_recent(), disk_, disk_, 0, Tier::none);
  }
  // `b` leaves `from` for the front of `to` (tier `t`), or leaves the cache when `to` holds nothing (capacity 0).
  bool move_down(BlockId b, LruList& from, LruList& to, std::size_t capacity, Tier t) {
    from.unlink(b);
    if (capacity == 0) {
      tier_[b] = Tier::none;
      return false;
    }
    to.push_front(b);
    tier_[b] = t;
    return true;
  }

  std::vector<Tier> tier_;
  LruList hbm_, host_, disk_;
  Capacity capacity_;
};

}  // namespace

std::unique_ptr<Policy> make_lru() { return std::make_unique<Lru>(); }
std::unique_ptr<Policy> make_lru_host() { return std::make_unique<LruHost>(); }

}  // namespace kvf::residency
