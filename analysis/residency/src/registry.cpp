#include <string>

#include "builtin_policies.hpp"
#include "kvf/errors.hpp"

namespace kvf::residency {

std::vector<PolicyInfo>& policy_registry() {
  static std::vector<PolicyInfo> registry = {
      {"lru", "HBM only, least recently used block evicted (vLLM's prefix cache)", false, false, make_lru},
      {"lru-host", "LRU in HBM and in a host tier: HBM evictions demote to host, host evictions drop, a host hit "
                   "is fetched back to HBM (LMCache-style)",
       true, false, make_lru_host},
      {"oracle", "offline Belady on HBM alone: evicts the block whose next use is farthest ahead (a bound, see "
                 "analysis/residency/README.md)",
       false, true, make_oracle},
      {"cost", "cost-aware GreedyDual-Size-Frequency over HBM and host: priority = L + references x prefill cost, "
               "lowest demoted to host when prefill costs more than a fetch, else dropped (needs the cost model)",
       true, false, make_cost},
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
