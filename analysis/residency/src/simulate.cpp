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
  if (capacity.disk_blocks > 0 && !info.disk_tier)
    throw UsageError("policy " + info.name + " has no disk tier: disk capacity must be 0 blocks, got " +
                     std::to_string(capacity.disk_blocks));
  if (capacity.disk_blocks > 0 && capacity.host_blocks == 0)
    throw UsageError("a disk tier of " + std::to_string(capacity.disk_blocks) +
                     " blocks without a host tier: the disk tier takes the host tier's evictions, give it a host capacity");
  if (!capacity.compress_to.empty() && !info.compresses)
    throw UsageError("policy " + info.name + " keeps every block in one form: it takes no forms to compress to");
  for (const Form f : capacity.compress_to)
    if (capacity.form_bytes[static_cast<std::size_t>(capacity.form)] <= 0 || capacity.unit(f) <= 0)
      throw UsageError("compress to " + std::string(form_name(f)) + ": no bytes per block given for it");
}

// Blocks per form in `tier`, and their units.
std::int64_t held(const Policy& policy, const Capacity& capacity, Tier tier, std::array<std::size_t, kForms>& blocks) {
  blocks.fill(0);
  if (!policy.blocks_by_form(tier, blocks)) blocks[static_cast<std::size_t>(capacity.form)] = policy.resident(tier);
  std::int64_t units = 0;
  for (const Form f : kAllForms) units += static_cast<std::int64_t>(blocks[static_cast<std::size_t>(f)]) * capacity.unit(f);
  return units;
}

// Adds the HBM units per form to `sum`; std::logic_error when a tier holds more than its capacity.
void check_occupancy(const Policy& policy, const PolicyInfo& info, const Capacity& capacity, std::size_t r,
                     std::array<double, kForms>& sum) {
  std::array<std::size_t, kForms> blocks{};
  const std::int64_t disk = held(policy, capacity, Tier::disk, blocks);
  const std::int64_t host = held(policy, capacity, Tier::host, blocks);
  const std::int64_t hbm = held(policy, capacity, Tier::hbm, blocks);
  for (const Form f : kAllForms)
    sum[static_cast<std::size_t>(f)] += double(blocks[static_cast<std::size_t>(f)]) * double(capacity.unit(f));
  if (hbm > capacity.hbm_units() || host > capacity.host_units() || disk > capacity.disk_units())
    throw std::logic_error("policy " + info.name + " holds " + std::to_string(hbm) + " HBM, " + std::to_string(host) +
                           " host and " + std::to_string(disk) + " disk units after request " + std::to_string(r) +
                           ", over its capacity of " + std::to_string(capacity.hbm_units()) + ", " +
                           std::to_string(capacity.host_units()) + " and " + std::to_string(capacity.disk_units()) +
                           " (a unit: a byte, or a block without form sizes)");
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
  // Per tier (indexed by Tier; none unused) and form: the blocks a request reused from it and their real tokens.
  struct Reused {
    std::array<std::size_t, kForms> blocks{};
    std::array<std::int64_t, kForms> tokens{};
  };
  std::array<Reused, 4> from;
  for (std::size_t r = 0; r < res.requests; ++r) {
    const std::span<const BlockId> blocks = trace.request(r);
    const std::int64_t input = trace.input_length[r];
    std::size_t hits = 0, from_host = 0, from_disk = 0;
    std::int64_t reused = 0;
    // The prefix rule: a block is reused only if every block before it was.
    from.fill({});
    for (; hits < blocks.size(); ++hits) {
      const Tier t = policy->where(blocks[hits]);
      if (t == Tier::none) break;
      from_host += t == Tier::host;
      from_disk += t == Tier::disk;
      const auto f = static_cast<std::size_t>(policy->form(blocks[hits]).value_or(capacity.form));
      const std::int64_t tokens = block_tokens_of(input, hits, trace.block_tokens);
      Reused& x = from[static_cast<std::size_t>(t)];
      ++x.blocks[f];
      x.tokens[f] += tokens;
      reused += tokens;
    }
    for (const Form f : kAllForms) {
      const auto i = static_cast<std::size_t>(f);
      res.hits_hbm_form[i] += from[static_cast<std::size_t>(Tier::hbm)].blocks[i];
      res.hits_host_form[i] += from[static_cast<std::size_t>(Tier::host)].blocks[i];
      res.hits_disk_form[i] += from[static_cast<std::size_t>(Tier::disk)].blocks[i];
      for (const Tier t : {Tier::hbm, Tier::host, Tier::disk}) {
        const Reused& x = from[static_cast<std::size_t>(t)];
        // An HBM hit kept as bf16 K/V is read as it is: nothing to restore.
        if (x.blocks[i] > 0 && (t != Tier::hbm || f != Form::kv))
          res.restores.push_back(
              {static_cast<std::uint32_t>(r), t, f, static_cast<std::uint32_t>(x.blocks[i]), x.tokens[i]});
      }
    }
    res.hits_hbm += hits - from_host - from_disk;
    res.hits_host += from_host;
    res.hits_disk += from_disk;
    res.input_tokens += input;
    res.reused_tokens += reused;
    res.request_reused_tokens[r] = reused;
    res.request_host_blocks[r] = static_cast<std::uint32_t>(from_host);
    res.request_missed_tokens[r] = input - reused;
    policy->admit(r, blocks, hits, moves);
    check_occupancy(*policy, info, capacity, r, res.mean_hbm_units_form);
  }
  if (res.requests > 0)
    for (double& u : res.mean_hbm_units_form) u /= double(res.requests);
  res.compressed = moves.compressed;
  res.misses = res.references - res.hits_hbm - res.hits_host - res.hits_disk;
  res.prefill_tokens = res.input_tokens - res.reused_tokens;
  res.demoted_form = moves.demoted_form;
  res.promoted = moves.promoted;
  res.to_disk = moves.to_disk;
  return res;
}

Result simulate(const IndexedTrace& trace, std::string_view policy, const Capacity& capacity,
                const RestoreCosts* costs) {
  return simulate(trace, find_policy(policy), capacity, costs);
}

}  // namespace kvf::residency
