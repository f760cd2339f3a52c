#include <string>

#include "builtin_policies.hpp"
#include "kvf/errors.hpp"

namespace kvf::residency {

std::vector<PolicyInfo>& policy_registry() {
  static std::vector<PolicyInfo> registry = {
      {"lru", "HBM only, least recently used block evicted (vLLM's prefix cache)", false, false, make_lru},
      {"lru-host", "LRU in HBM, in a host tier and in an optional disk tier: HBM evictions demote to host, host "
                   "evictions to disk (or drop without one), disk evictions drop, a hit in a lower tier is fetched "
                   "back to HBM (LMCache-style)",
       true, false, make_lru_host, true},
      {"oracle", "offline Belady on HBM alone: evicts the block whose next use is farthest ahead (a bound, see "
                 "analysis/residency/README.md)",
       false, true, make_oracle},
      {"cost", "cost-aware GreedyDual-Size-Frequency over HBM, host and disk: priority = L + references x prefill "
               "cost per byte; the lowest is compressed, demoted or dropped, whichever adds the least restore cost "
               "per byte freed (needs the cost model)",
       true, false, make_cost, true, true},
  };
  return registry;
}

const PolicyInfo& find_policy(std::string_view name) {
  std::string names;
  for (const PolicyInfo& p : policy_registry()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  throw UsageError("policy " + shown_value(name) + ": expected one of " + names);
}

}  // namespace kvf::residency
