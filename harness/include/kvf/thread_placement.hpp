// Where a run's OpenMP threads go. A placement that gains on one host loses on another (a 2-socket box reads
// memory at very different rates with its threads packed on one socket or spread over both; a 1-socket VM does
// not care), so `kvf run` chooses one per run, on the host it runs on (cli/run_placement.cpp: a short stream read
// under each candidate when the host has more than one NUMA node or L3 domain), hands it to every bench through
// OMP_PROC_BIND / OMP_PLACES, and each bench records what its OpenMP runtime took (meta.json machine_load).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace kvf {

// The candidates, in the order a calibration measures them: inherit (the environment as it is: the OpenMP
// runtime's default, or what the user set), close and spread (one place per core).
inline constexpr const char* kThreadPlacements[] = {"inherit", "close", "spread"};
// "a, b, c" of kThreadPlacements.
std::string thread_placement_names();
// The environment of a placement: {"OMP_PROC_BIND=close", "OMP_PLACES=cores"}; {} for inherit. Throws
// std::invalid_argument for a name not in kThreadPlacements.
std::vector<std::string> thread_placement_env(const std::string& name);

// The host's NUMA nodes (node/online) and L3 domains (distinct shared_cpu_list of the online CPUs' level-3
// caches) under a sysfs `system` directory. l3_domains 0: sysfs lists no L3 (some VMs); numa_nodes 1 when
// node/online is absent.
struct CpuDomains {
  int numa_nodes = 1;
  int l3_domains = 0;
};
CpuDomains cpu_domains(const std::string& sysfs_system = "/sys/devices/system");

// The calibration's rule: `gbps` holds each candidate's stream read rate per round (the rounds alternate the
// candidates; <= 0: that run failed), inherit first. Another candidate is taken only when it reads at least
// (1 + min_gain) x inherit in every round (paired: a slow phase of a shared host hits both of a round's runs; a
// gain inside run-to-run noise is no reason to pin threads); of several, the one with the largest smallest ratio.
// Where inherit failed in every round, the fastest run's candidate. `why` says which rule decided.
struct PlacementPick {
  std::string choice, why;
};
PlacementPick pick_thread_placement(const std::vector<std::pair<std::string, std::vector<double>>>& gbps,
                                    double min_gain);

}  // namespace kvf
