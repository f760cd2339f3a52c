#include "kvf/residency/simulate.hpp"

#include <stdexcept>

#include "kvf/errors.hpp"

namespace kvf::residency {
namespace {

void check_capacity(const PolicyInfo& info, const Capacity& capacity) {
  if (capacity.hbm_blocks == 0) throw UsageError("HBM capacity 0 blocks: at least 1 block is needed");
  if (capacity.host_blocks > 0 && !info.host_tier)
    throw UsageError("policy " + info.name + " has no host tier: host capacity must be 0 blocks, got " +
                     std::to_string(capacity.host_blocks));
}

void check_occupancy(const Policy& policy, const PolicyInfo& info, const Capacity& capacity, std::size_t r) {
  const std::size_t hbm = policy.resident(Tier::hbm), host = policy.resident(Tier::host);
  if (hbm > capacity.hbm_blocks || host > capacity.host_blocks)
    throw std::logic_error("policy " + info.name + " holds " + std::to_string(hbm) + " HBM and " +
                           std::to_string(host) + " host blocks after request " + std::to_string(r) +
                           ", over its capacity of " + std::to_string(capacity.hbm_blocks) + " and " +
                           std::to_string(capacity.host_blocks));
}

}  // namespace

Result simulate(const IndexedTrace& trace, const PolicyInfo& info, const Capacity& capacity,
                const RestoreCosts* costs) {
  check_capacity(info, capacity);
  const std::unique_ptr<Policy> policy = info.make();
  policy->set_costs(costs);
  policy->reset(trace, capacity);
  Result res;
  res.policy = info.name;
  res.capacity = capacity;
  res.block_tokens = trace.block_tokens;
  res.requests = trace.requests();
  res.references = trace.references();
  res.request_reused_tokens.resize(res.requests);
  res.request_host_blocks.resize(res.requests);
  res.request_missed_tokens.resize(res.requests);
  Moves moves;
  for (std::size_t r = 0; r < res.requests; ++r) {
    const std::span<const BlockId> blocks = trace.request(r);
    const std::int64_t input = trace.input_length[r];
    std::size_t hits = 0, from_host = 0;
    std::int64_t reused = 0;
    // The prefix rule: a block is reused only if every block before it was.
    for (; hits < blocks.size(); ++hits) {
      const Tier t = policy->where(blocks[hits]);
      if (t == Tier::none) break;
      from_host += t == Tier::host;
      reused += block_tokens_of(input, hits, trace.block_tokens);
    }
    res.hits_hbm += hits - from_host;
    res.hits_host += from_host;
    res.input_tokens += input;
    res.reused_tokens += reused;
    res.request_reused_tokens[r] = reused;
    res.request_host_blocks[r] = static_cast<std::uint32_t>(from_host);
    res.request_missed_tokens[r] = input - reused;
    policy->admit(r, blocks, hits, moves);
    check_occupancy(*policy, info, capacity, r);
  }
  res.misses = res.references - res.hits_hbm - res.hits_host;
  res.prefill_tokens = res.input_tokens - res.reused_tokens;
  res.demoted = moves.demoted;
  res.promoted = moves.promoted;
  return res;
}

Result simulate(const IndexedTrace& trace, std::string_view policy, const Capacity& capacity,
                const RestoreCosts* costs) {
  return simulate(trace, find_policy(policy), capacity, costs);
}

}  // namespace kvf::residency
