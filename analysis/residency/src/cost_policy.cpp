// `cost`: an online, cost-aware two-tier policy of the GreedyDual-Size-Frequency family (Cherkasova 1998). Each
// block carries a priority H = L + f x c: f the number of requests that referenced it so far, c what losing it
// costs (prefilling its tokens with attention over its prefix, restore_costs), L the inflation value, the
// priority of the last block pushed out of HBM, so blocks not referenced for a while age out without a clock.
// One priority orders both tiers: the fetch cost is the same for every block, so within HBM it would rank
// nothing, and with one key HBM holds the most valuable blocks and host the next most valuable.
// Forms (Capacity::compress_to): budgets are bytes, a block's priority is per byte of its form
// (L + f x c x bytes of the entry form / bytes of its form), and the lowest block takes the action that adds
// the least expected restore cost per byte freed: compress (quantized K/V: a dequantize before use; X: a
// recompute of K/V before use), demote to host (a fetch), or drop (a prefill). With no compress_to every
// block has one size and the policy is the two-tier one above.
// A disk tier (Capacity::disk_blocks) takes the host's lowest-priority blocks when reading one back costs less
// than its prefill; the same key orders it.
// Prefix handling (README "The `cost` policy"): a block's priority is clamped to its parent's, victims are taken
// deepest-first among equal priorities, and dropping a block drops its resident descendants, so the resident set
// stays closed under prefixes and no tier holds a block the prefix rule could never reuse.
#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "builtin_policies.hpp"
#include "kvf/errors.hpp"

namespace kvf::residency {
namespace {

constexpr BlockId kNone = std::numeric_limits<BlockId>::max();

class CostPolicy final : public Policy {
 public:
  void set_costs(const RestoreCosts* costs) override { costs_ = costs; }

  void reset(const IndexedTrace& trace, const Capacity& capacity) override {
    if (costs_ == nullptr || !costs_->prefill_s)
      throw UsageError("policy cost: needs a cost model (prefill and host fetch times) and was given none");
    trace_ = &trace;
    capacity_ = capacity;
    const std::size_t n = trace.distinct;
    tier_.assign(n, Tier::none);
    form_.assign(n, capacity.form);
    units_.fill(0);
    for (auto& c : count_) c.fill(0);
    key_.assign(n, Key{});
    cost_.assign(n, 0.0);
    tokens_.assign(n, trace.block_tokens);
    freq_.assign(n, 0);
    seen_in_.assign(n, kNever);
    parent_.assign(n, kNone);
    first_child_.assign(n, kNone);
    next_sibling_.assign(n, kNone);
    prev_sibling_.assign(n, kNone);
    for (auto& set : sets_) set.clear();
    full_block_cost_.clear();
    inflation_ = 0;
  }

  Tier where(BlockId b) const override { return tier_[b]; }

  void admit(std::size_t r, std::span<const BlockId> blocks, std::size_t hit_prefix, Moves& moves) override;

  std::size_t resident(Tier t) const override {
    return t == Tier::none ? 0 : sets_[index(t)].size();
  }
  std::optional<Form> form(BlockId b) const override { return form_[b]; }
  bool blocks_by_form(Tier t, std::array<std::size_t, kForms>& blocks) const override {
    if (t != Tier::none) blocks = count_[index(t)];
    return true;
  }

 private:
  // (priority, depth flipped so deeper sorts first, block): the set's first element is the next victim.
  using Key = std::tuple<double, std::uint32_t, BlockId>;

  // Restore-from-nothing cost of block `j` of request r: prefill of its tokens after j full blocks of prefix.
  double restore_cost(std::size_t r, std::size_t j) {
    const std::int64_t tokens = block_tokens_of(trace_->input_length[r], j, trace_->block_tokens);
    const std::int64_t prefix = static_cast<std::int64_t>(j) * trace_->block_tokens;
    if (tokens != trace_->block_tokens) return tokens > 0 ? costs_->prefill_s(tokens, prefix) : 0.0;
    while (full_block_cost_.size() <= j)  // the common case, cached per depth
      full_block_cost_.push_back(costs_->prefill_s(
          trace_->block_tokens, static_cast<std::int64_t>(full_block_cost_.size()) * trace_->block_tokens));
    return full_block_cost_[j];
  }
  static std::size_t index(Tier t) { return static_cast<std::size_t>(t); }
  // Out of its tier's set and budget (tier_ unchanged: the caller says where it goes); no-op when not in it.
  void take_out(BlockId b) {
    if (tier_[b] == Tier::none || sets_[index(tier_[b])].erase(key_[b]) == 0) return;
    units_[index(tier_[b])] -= capacity_.unit(form_[b]);
    --count_[index(tier_[b])][static_cast<std::size_t>(form_[b])];
  }
  void put(BlockId b, Tier t) {
    tier_[b] = t;
    sets_[index(t)].insert(key_[b]);
    units_[index(t)] += capacity_.unit(form_[b]);
    ++count_[index(t)][static_cast<std::size_t>(form_[b])];
  }
  BlockId lowest(Tier t) const { return std::get<2>(*sets_[index(t)].begin()); }
  // Block b made usable from form f: a partial last block recomputed from X costs its rows, not a block's.
  double restore_s(Form f, BlockId b) const {
    if (tokens_[b] < trace_->block_tokens && costs_->restore_tokens_s) return costs_->restore_tokens_s(f, tokens_[b]);
    return costs_->restore_form_s[static_cast<std::size_t>(f)];
  }
  double disk_fetch_s(Form f) const { return costs_->disk_fetch_form_s[static_cast<std::size_t>(f)]; }
  double fetch_s(Form f) const {
    const double s = costs_->fetch_form_s[static_cast<std::size_t>(f)];
    return s > 0 ? s : costs_->fetch_block_s;
  }
  // L + f x c per byte of the block's form (in units of the entry form), clamped to its resident parent's.
  double priority(BlockId b) const { return priority_as(b, form_[b]); }
  double priority_as(BlockId b, Form f) const {
    double h = inflation_ + double(freq_[b]) * cost_[b] * double(capacity_.unit(capacity_.form)) /
                                double(capacity_.unit(f));
    if (parent_[b] != kNone && tier_[parent_[b]] != Tier::none) h = std::min(h, std::get<0>(key_[parent_[b]]));
    return h;
  }
  void compress(BlockId v, Form to);
  void demote(BlockId v);
  void evict_from_host();
  void link(BlockId b, BlockId parent);
  void unlink(BlockId b);
  void drop(BlockId b);
  void evict_from_hbm();

  const RestoreCosts* costs_ = nullptr;
  const IndexedTrace* trace_ = nullptr;
  Capacity capacity_;
  std::vector<Tier> tier_;
  std::vector<Form> form_;
  // Per tier (indexed by Tier; none unused): the blocks by priority, their units and their count per form.
  std::array<std::set<Key>, 4> sets_;
  std::array<std::int64_t, 4> units_{};
  std::array<std::array<std::size_t, kForms>, 4> count_{};
  std::vector<Key> key_;
  std::vector<double> cost_;
  std::vector<std::int32_t> tokens_;  // of the block in the request that last referenced it
  std::vector<std::uint32_t> freq_, seen_in_;
  // The resident-children lists (intrusive): a drop walks only resident descendants.
  std::vector<BlockId> parent_, first_child_, next_sibling_, prev_sibling_;
  std::vector<double> full_block_cost_;
  std::vector<BlockId> kept_, cut_, stack_;
  double inflation_ = 0;
  Moves* moves_ = nullptr;  // the admit in progress's
  std::size_t current_ = 0;  // the running request: its blocks are held
};

void CostPolicy::link(BlockId b, BlockId parent) {
  parent_[b] = parent;
  if (parent == kNone) return;
  prev_sibling_[b] = kNone;
  next_sibling_[b] = first_child_[parent];
  if (first_child_[parent] != kNone) prev_sibling_[first_child_[parent]] = b;
  first_child_[parent] = b;
}

void CostPolicy::unlink(BlockId b) {
  const BlockId p = parent_[b];
  if (p == kNone) return;
  if (prev_sibling_[b] != kNone) next_sibling_[prev_sibling_[b]] = next_sibling_[b];
  else first_child_[p] = next_sibling_[b];
  if (next_sibling_[b] != kNone) prev_sibling_[next_sibling_[b]] = prev_sibling_[b];
  parent_[b] = prev_sibling_[b] = next_sibling_[b] = kNone;
}

// `b` leaves every tier, and with it its resident descendants: under the prefix rule none of them could be reused
// before `b` is prefilled again, which re-admits them anyway. A descendant the running request holds (only on a
// trace with prefix violations, where a block's parent changes) stays and is cut loose instead.
void CostPolicy::drop(BlockId b) {
  stack_.assign(1, b);
  while (!stack_.empty()) {
    const BlockId x = stack_.back();
    stack_.pop_back();
    for (BlockId c = first_child_[x]; c != kNone;) {
      const BlockId next = next_sibling_[c];
      if (seen_in_[c] == current_) unlink(c);
      else stack_.push_back(c);
      c = next;
    }
    unlink(x);
    take_out(x);
    tier_[x] = Tier::none;
  }
}

// The lowest-priority HBM block makes room: of compress (to each smaller form of compress_to, where the block then
// outranks the next victim), demote (with a host tier; in its form, or as a smaller one after a compress pass)
// and drop, the action whose added restore cost per unit freed is least; ties go to the earlier of drop, demote,
// demote as a smaller form, compress. With one form this is: demoted when restoring it from nothing costs more than
// fetching it, else dropped.
void CostPolicy::evict_from_hbm() {
  const Key victim_key = *sets_[index(Tier::hbm)].begin();
  const BlockId v = std::get<2>(victim_key);
  inflation_ = std::max(inflation_, std::get<0>(victim_key));
  take_out(v);
  const Form fv = form_[v];
  const double uv = double(capacity_.unit(fv)), now = restore_s(fv, v);
  double best = (cost_[v] - now) / uv;
  enum class Action { drop, demote, compress, demote_compressed } action = Action::drop;
  Form to = fv;
  if (capacity_.host_units() >= capacity_.unit(fv) && fetch_s(fv) / uv < best) {
    best = fetch_s(fv) / uv;
    action = Action::demote;
  }
  // Demoted in a smaller form: the host holds more blocks and fetches each faster, for a compress pass now and a
  // restore from that form at reuse. Priced as its own action (it had happened only as a compress whose block came
  // straight back as the next victim).
  for (const Form k : capacity_.compress_to) {
    const double uk = double(capacity_.unit(k));
    if (uk >= uv || capacity_.host_units() < capacity_.unit(k)) continue;
    const double c = (fetch_s(k) + restore_s(k, v) - now) / uv;
    if (!(c < best)) continue;
    best = c;
    action = Action::demote_compressed;
    to = k;
  }
  // Compressing pays only when the block then outranks the next victim. One clamped to its resident parent's
  // priority (every block of a chain is) came straight back as the next victim and left in its new form: a
  // review's replay paid 112,374 compress passes and held 2.6% of HBM compressed.
  const auto stays = [&](Form k) {
    return sets_[index(Tier::hbm)].empty() ||
           *sets_[index(Tier::hbm)].begin() < Key{priority_as(v, k), std::get<1>(victim_key), v};
  };
  for (const Form k : capacity_.compress_to) {
    const double uk = double(capacity_.unit(k));
    if (uk >= uv || !((restore_s(k, v) - now) / (uv - uk) < best) || !stays(k)) continue;
    best = (restore_s(k, v) - now) / (uv - uk);
    action = Action::compress;
    to = k;
  }
  if (action == Action::drop) {
    drop(v);  // takes its resident descendants with it
  } else if (action == Action::demote) {
    demote(v);
  } else if (action == Action::compress) {
    compress(v, to);
  } else {
    form_[v] = to;
    key_[v] = Key{priority(v), std::get<1>(key_[v]), v};
    ++moves_->compressed[static_cast<std::size_t>(to)];
    demote(v);
  }
}

// A full host first makes room from its lowest-priority blocks: every host block was a victim when it left HBM,
// so its priority is at most L, and this victim's is at least L: never worth less.
void CostPolicy::demote(BlockId v) {
  const std::int64_t uv = capacity_.unit(form_[v]);
  while (!sets_[index(Tier::host)].empty() && units_[index(Tier::host)] + uv > capacity_.host_units())
    evict_from_host();
  // Only at equal priorities (blocks that cost nothing) can a dropped block be v's ancestor: then v went with it.
  if (tier_[v] == Tier::none) return;
  put(v, Tier::host);
  ++moves_->demoted_form[static_cast<std::size_t>(form_[v])];
}

// The lowest-priority host block goes to disk when reading it back (disk read + host link) costs less than what
// losing it adds (its prefill less the restore it pays anyway), else it is dropped; a full disk drops its lowest
// first (its priority is at most this block's, by the same argument as the host's).
void CostPolicy::evict_from_host() {
  const BlockId h = lowest(Tier::host);
  take_out(h);
  const std::int64_t uh = capacity_.unit(form_[h]);
  if (capacity_.disk_units() < uh || !(disk_fetch_s(form_[h]) < cost_[h] - restore_s(form_[h], h))) {
    drop(h);
    return;
  }
  while (!sets_[index(Tier::disk)].empty() && units_[index(Tier::disk)] + uh > capacity_.disk_units())
    drop(lowest(Tier::disk));
  if (tier_[h] == Tier::none) return;  // it went with an ancestor of equal priority
  put(h, Tier::disk);
  ++moves_->to_disk;
}

// Stays in HBM in a smaller form, priced per byte of it (so it now ranks above blocks its value per byte
// passes), after the new inflation value.
void CostPolicy::compress(BlockId v, Form to) {
  form_[v] = to;
  key_[v] = Key{priority(v), std::get<1>(key_[v]), v};
  put(v, Tier::hbm);
  ++moves_->compressed[static_cast<std::size_t>(to)];
}

void CostPolicy::admit(std::size_t r, std::span<const BlockId> blocks, std::size_t hit_prefix, Moves& moves) {
  current_ = r;
  moves_ = &moves;
  // Pass 1: the request's distinct blocks leave their tier sets (held: only other requests' blocks can go), get
  // their new priority, clamped to the parent's, and hang under their parent in this request.
  kept_.clear();
  cut_.clear();
  double parent_priority = std::numeric_limits<double>::infinity();
  BlockId parent = kNone;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const BlockId b = blocks[j];
    if (seen_in_[b] == r) continue;  // an id repeated within the request
    seen_in_[b] = static_cast<std::uint32_t>(r);
    if ((tier_[b] == Tier::host || tier_[b] == Tier::disk) && j < hit_prefix) ++moves.promoted;
    take_out(b);
    unlink(b);
    tier_[b] = Tier::none;  // held until pass 2
    form_[b] = capacity_.form;  // restored (dequantized, recomputed, fetched) for this request: it re-enters whole
    if (kept_.size() >= capacity_.hbm_blocks) {  // a request larger than HBM keeps its first hbm_blocks
      cut_.push_back(b);
      continue;
    }
    ++freq_[b];
    cost_[b] = restore_cost(r, j);
    tokens_[b] = static_cast<std::int32_t>(block_tokens_of(trace_->input_length[r], j, trace_->block_tokens));
    const double h = std::min(inflation_ + double(freq_[b]) * cost_[b], parent_priority);
    key_[b] = Key{h, kNever - static_cast<std::uint32_t>(j), b};
    parent_priority = h;
    link(b, parent);
    parent = b;
    kept_.push_back(b);
  }
  // The tail past HBM's capacity left above; its resident descendants (not in this request) go with it.
  for (const BlockId b : cut_) drop(b);
  // Pass 2: room for the kept blocks, then they enter HBM.
  const std::int64_t incoming = static_cast<std::int64_t>(kept_.size()) * capacity_.unit(capacity_.form);
  while (!sets_[index(Tier::hbm)].empty() && units_[index(Tier::hbm)] + incoming > capacity_.hbm_units())
    evict_from_hbm();
  for (const BlockId b : kept_) put(b, Tier::hbm);
}

}  // namespace

std::unique_ptr<Policy> make_cost() { return std::make_unique<CostPolicy>(); }

}  // namespace kvf::residency
