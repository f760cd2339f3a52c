// Replaying a trace against one policy at one capacity (issue 17). Pure counting: no cost model here; the
// per-request arrays are what a cost model turns into added latency (mean, p50, p99).
#pragma once
#include <cstddef>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvf/residency/policy.hpp"
#include "kvf/residency/trace.hpp"

namespace kvf::residency {

struct Result {
  std::string policy;
  Capacity capacity;
  int block_tokens = 0;
  std::size_t requests = 0;
  std::size_t references = 0;  // block references: every hash id of every request
  std::size_t hits_hbm = 0;    // references reused from HBM
  std::size_t hits_host = 0;   // references reused from the host tier (fetched, then promoted)
  std::size_t hits_disk = 0;   // references reused from the disk tier (read, fetched, then promoted)
  std::size_t misses = 0;      // references - hits_hbm - hits_host - hits_disk
  std::int64_t input_tokens = 0;
  std::int64_t reused_tokens = 0;
  std::int64_t prefill_tokens = 0;  // input_tokens - reused_tokens: what must be prefilled
  std::array<std::size_t, kForms> demoted_form{};  // Moves::demoted_form, summed
  std::size_t demoted() const {  // blocks demoted, every form
    std::size_t n = 0;
    for (const std::size_t d : demoted_form) n += d;
    return n;
  }
  std::size_t promoted = 0;
  std::size_t to_disk = 0;
  // By the form the block was in when reused (Capacity::form for a single-form policy).
  std::array<std::size_t, kForms> hits_hbm_form{}, hits_host_form{}, hits_disk_form{};
  std::array<std::size_t, kForms> compressed{};  // Moves::compressed, summed
  // HBM occupancy by form: the units (bytes, Capacity::unit) held in each form after each request, averaged
  // over requests; divided by capacity.hbm_units() it is the share of the budget.
  std::array<double, kForms> mean_hbm_units_form{};
  // Reused blocks that cost something before attention can read them: every host or disk hit (a fetch, plus a
  // restore when its form is not kv) and every HBM hit in a form other than kv (a dequantize or a recompute
  // from X).
  // One entry per (request, tier, form) with blocks > 0, in trace order.
  struct Restore {
    std::uint32_t request = 0;
    Tier tier = Tier::hbm;
    Form form = Form::kv;
    std::uint32_t blocks = 0;
    std::int64_t tokens = -1;  // their real tokens (a request's partial last block counts what it holds); -1: whole
  };
  std::vector<Restore> restores;
  // Per request, in trace order.
  std::vector<std::int64_t> request_reused_tokens;
  std::vector<std::uint32_t> request_host_blocks;  // blocks fetched from the host tier
  std::vector<std::int64_t> request_missed_tokens;

  double hit_rate() const {
    return references ? double(hits_hbm + hits_host + hits_disk) / double(references) : 0.0;
  }
};

// Replays `trace` through `policy`. Per request: the reused prefix is the longest run of leading blocks that
// policy.where() finds in some tier; its tokens are reused, the rest of input_length is prefilled (the last
// partial block counts its real tokens, block_tokens_of). Then policy.admit(). UsageError when
// capacity.hbm_blocks is 0, capacity.host_blocks > 0 for a policy without a host tier, capacity.disk_blocks > 0
// for a policy without a disk tier or without a host tier in front of it, or capacity.compress_to
// naming a form without bytes; std::logic_error when a policy holds more than a tier's capacity (in units:
// Capacity::unit; a bug in that policy). `costs` (may be null) is handed to
// the policy (Policy::set_costs); `cost` refuses to run without it. It must outlive the call.
Result simulate(const IndexedTrace& trace, const PolicyInfo& policy, const Capacity& capacity,
                const RestoreCosts* costs = nullptr);
// By registry name (find_policy).
Result simulate(const IndexedTrace& trace, std::string_view policy, const Capacity& capacity,
                const RestoreCosts* costs = nullptr);

}  // namespace kvf::residency
