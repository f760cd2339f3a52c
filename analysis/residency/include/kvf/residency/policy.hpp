// Residency policies (issue 17): one small class each behind one interface, all listed in one registry that a
// user extends by appending a PolicyInfo. The simulator (simulate.hpp) owns the prefix rule and the counting;
// a policy only says where a block lives and what a finished request leaves resident.
#pragma once
#include <cstddef>
#include <cstdint>
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvf/residency/forms.hpp"
#include "kvf/residency/trace.hpp"

namespace kvf::residency {

enum class Tier : std::uint8_t { none = 0, hbm = 1, host = 2, disk = 3 };

// Capacities in blocks of the form blocks enter HBM in (`form`). host_blocks 0: no host tier; disk_blocks 0: no
// disk tier (a disk tier sits behind the host tier: host evictions go to it).
struct Capacity {
  std::size_t hbm_blocks = 0;
  std::size_t host_blocks = 0;
  std::size_t disk_blocks = 0;
  Form form = Form::kv;
  // Bytes of one block in each form (costs.hpp form_bytes). A policy that keeps blocks in several forms (`cost`
  // with compress_to) budgets bytes: hbm_blocks x form_bytes[form] in HBM, host_blocks x form_bytes[form] on
  // host. All 0 (hand-made capacities in tests): every block is one unit and compress_to must be empty.
  std::array<std::int64_t, kForms> form_bytes{};
  // The forms a multi-form policy may turn an HBM block into when it needs room (compress: quantized K/V;
  // recompute: X). Only a policy with PolicyInfo::compresses (`cost`) takes one; the others keep every block in
  // `form`.
  std::vector<Form> compress_to;

  // Size of one block of form f in the units budgets are counted in (bytes, or 1 with no form_bytes).
  std::int64_t unit(Form f) const {
    return form_bytes[static_cast<std::size_t>(form)] > 0 ? form_bytes[static_cast<std::size_t>(f)] : 1;
  }
  std::int64_t hbm_units() const { return static_cast<std::int64_t>(hbm_blocks) * unit(form); }
  std::int64_t host_units() const { return static_cast<std::int64_t>(host_blocks) * unit(form); }
  std::int64_t disk_units() const { return static_cast<std::int64_t>(disk_blocks) * unit(form); }
};

// Blocks a policy moved between tiers while admitting one request.
struct Moves {
  // HBM -> host, by the form the block crossed the host link in
  std::array<std::size_t, kForms> demoted_form{};
  std::size_t promoted = 0;  // host or disk -> HBM, for blocks of the request's reused prefix (fetched, not recomputed)
  std::size_t to_disk = 0;   // host -> disk
  std::array<std::size_t, kForms> compressed{};  // HBM blocks turned into each form (compress or keep-as-X)
};

// What a cost-aware policy is told of the costs, in seconds (costs.hpp's restore_costs builds it from a CostModel;
// the core library prices nothing itself, so a test can hand a policy costs it computes by hand).
struct RestoreCosts {
  double fetch_block_s = 0;  // one block from the host tier to HBM: fetch_s(model, 1)
  // Per form: one block fetched from host (0: fetch_block_s), and made usable once in HBM (0 for kv: the
  // dequantize pass of quantized K/V, the recompute of K/V from X).
  std::array<double, kForms> fetch_form_s{}, restore_form_s{};
  // A block of `tokens` tokens, fewer than a block (a request's partial last block), made usable from `form`: an X
  // form recomputes only its rows. Null: restore_form_s for every block.
  std::function<double(Form form, std::int64_t tokens)> restore_tokens_s;
  // Per form: one block read from the disk tier and brought to HBM through host memory (a disk tier only).
  std::array<double, kForms> disk_fetch_form_s{};
  // Prefilling `tokens` tokens after `prefix` reused ones: prefill_s(model, tokens, prefix).
  std::function<double(std::int64_t tokens, std::int64_t prefix)> prefill_s;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Called before reset with the costs simulate() was given (null: none). A policy that prices its choices
  // (`cost`) throws UsageError in reset when it has none; the others ignore them.
  virtual void set_costs(const RestoreCosts* /*costs*/) {}
  // Before a replay: the trace (an offline policy may read ahead; an online one must only use requests it was
  // given through admit) and the capacities (hbm_blocks >= 1). Drops any state of an earlier replay.
  virtual void reset(const IndexedTrace& trace, const Capacity& capacity) = 0;
  // Where `block` lives now: Tier::none when it is in no tier.
  virtual Tier where(BlockId block) const = 0;
  // Request r has run: `blocks` is trace.request(r), of which the first `hit_prefix` were reused (each in some
  // tier). The built-in policies make every block of the request resident in HBM (the first capacity.hbm_blocks
  // distinct ones when it has more), and evict or demote only blocks of other requests to make room.
  virtual void admit(std::size_t r, std::span<const BlockId> blocks, std::size_t hit_prefix, Moves& moves) = 0;
  // Blocks now in `tier`; the simulator checks them against the capacities after every request.
  virtual std::size_t resident(Tier tier) const = 0;
  // A policy that keeps blocks in several forms says which (the simulator counts hits and occupancy by form);
  // nullopt / false: every block is in capacity.form.
  virtual std::optional<Form> form(BlockId /*block*/) const { return std::nullopt; }
  virtual bool blocks_by_form(Tier /*tier*/, std::array<std::size_t, kForms>& /*blocks*/) const { return false; }
};

struct PolicyInfo {
  std::string name;     // as --policies spells it
  std::string summary;  // one line for --help and the README
  bool host_tier = false;  // false: the policy has only HBM and refuses a host capacity
  bool offline = false;    // reads the future: a bound, not something a server can run
  std::function<std::unique_ptr<Policy>()> make;
  bool disk_tier = false;  // false: the policy refuses a disk capacity (last: older initializers stay valid)
  bool compresses = false;  // reads Capacity::compress_to; the others refuse a non-empty one
};

// Every policy: the built-ins (lru, lru-host, oracle, cost) first. Append a PolicyInfo to add one.
std::vector<PolicyInfo>& policy_registry();
// The registry entry named `name`; UsageError("policy <name>: expected one of lru, lru-host, oracle, cost") otherwise.
const PolicyInfo& find_policy(std::string_view name);

}  // namespace kvf::residency
