// kvf/thread_placement.hpp: the candidates' environments, the host's NUMA and L3 domains as sysfs lists them, and
// the calibration's rule (kvf run --thread-placement; run_test.cpp runs it end to end).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "kvf/thread_placement.hpp"

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("kvf_placement_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}
// A sysfs `system` tree: node/online, and per CPU its caches (level, shared_cpu_list).
void add_cache(const fs::path& sys, int cpu, int index, int level, const std::string& shared) {
  const fs::path c = sys / "cpu" / ("cpu" + std::to_string(cpu)) / "cache" / ("index" + std::to_string(index));
  write_file(c / "level", std::to_string(level));
  write_file(c / "shared_cpu_list", shared);
}

TEST(ThreadPlacement, CandidatesAndTheirEnvironment) {
  EXPECT_EQ(kvf::thread_placement_names(), "inherit, close, spread");
  EXPECT_TRUE(kvf::thread_placement_env("inherit").empty());
  EXPECT_EQ(kvf::thread_placement_env("close"), (std::vector<std::string>{"OMP_PROC_BIND=close", "OMP_PLACES=cores"}));
  EXPECT_EQ(kvf::thread_placement_env("spread"),
            (std::vector<std::string>{"OMP_PROC_BIND=spread", "OMP_PLACES=cores"}));
  EXPECT_THROW(kvf::thread_placement_env("master"), std::invalid_argument);
  EXPECT_THROW(kvf::thread_placement_env(""), std::invalid_argument);
}

TEST(ThreadPlacement, DomainsOfATwoSocketTree) {
  const fs::path sys = fresh_dir("sysfs_two_socket");
  write_file(sys / "node" / "online", "0-1");
  for (int cpu = 0; cpu < 8; ++cpu) {
    add_cache(sys, cpu, 0, 1, std::to_string(cpu));
    add_cache(sys, cpu, 2, 2, std::to_string(cpu));
    add_cache(sys, cpu, 3, 3, cpu < 4 ? "0-3" : "4-7");
  }
  fs::create_directories(sys / "cpu" / "cpufreq");  // not a CPU
  fs::create_directories(sys / "cpu" / "cpuidle");
  const kvf::CpuDomains d = kvf::cpu_domains(sys.string());
  EXPECT_EQ(d.numa_nodes, 2);
  EXPECT_EQ(d.l3_domains, 2);
}

TEST(ThreadPlacement, DomainsOfOneSocketWithTwoL3sAndOfABareVm) {
  const fs::path sys = fresh_dir("sysfs_ccds");
  write_file(sys / "node" / "online", "0");
  for (int cpu = 0; cpu < 16; ++cpu) add_cache(sys, cpu, 3, 3, cpu < 8 ? "0-7" : "8-15");
  EXPECT_EQ(kvf::cpu_domains(sys.string()).numa_nodes, 1);
  EXPECT_EQ(kvf::cpu_domains(sys.string()).l3_domains, 2);
  // A VM without cache directories or node/online: one node, no L3 listed.
  const fs::path bare = fresh_dir("sysfs_bare");
  fs::create_directories(bare / "cpu" / "cpu0");
  fs::create_directories(bare / "cpu" / "cpu1");
  const kvf::CpuDomains b = kvf::cpu_domains(bare.string());
  EXPECT_EQ(b.numa_nodes, 1);
  EXPECT_EQ(b.l3_domains, 0);
  EXPECT_EQ(kvf::cpu_domains((bare / "absent").string()).l3_domains, 0);
}

TEST(ThreadPlacement, PickTakesAnotherPlacementOnlyWhenItGainsInEveryRound) {
  using G = std::vector<std::pair<std::string, std::vector<double>>>;
  auto pick = [](const G& g) { return kvf::pick_thread_placement(g, 0.05); };
  // within 5% in some round: inherit stays, whichever is fastest
  EXPECT_EQ(pick(G{{"inherit", {50, 50}}, {"close", {51, 51}}, {"spread", {52.4, 53}}}).choice, "inherit");
  // a large gain in one round only (a noisy run) is not enough
  EXPECT_EQ(pick(G{{"inherit", {50, 50}}, {"close", {70, 50.5}}, {"spread", {40, 40}}}).choice, "inherit");
  // past it in every round: the one whose smallest ratio is largest
  const kvf::PlacementPick p = pick(G{{"inherit", {50, 40}}, {"close", {60, 50}}, {"spread", {65, 44}}});
  EXPECT_EQ(p.choice, "close");
  EXPECT_NE(p.why.find("1.20x"), std::string::npos) << p.why;
  EXPECT_EQ(pick(G{{"inherit", {50, 40}}, {"close", {52.5, 42}}, {"spread", {30, 30}}}).choice, "close");
  // paired by round: a slow second round for every candidate does not hide a steady gain
  EXPECT_EQ(pick(G{{"inherit", {60, 30}}, {"close", {66, 33}}, {"spread", {58, 29}}}).choice, "close");
  // a failed run disqualifies its candidate; a failed inherit leaves the fastest measured run's candidate
  EXPECT_EQ(pick(G{{"inherit", {50, 50}}, {"close", {80, -1}}, {"spread", {-1, -1}}}).choice, "inherit");
  EXPECT_EQ(pick(G{{"inherit", {-1, -1}}, {"close", {40, 41}}, {"spread", {45, 30}}}).choice, "spread");
  EXPECT_EQ(pick(G{{"inherit", {-1, -1}}, {"close", {-1, -1}}, {"spread", {-1, -1}}}).choice, "inherit");
  EXPECT_EQ(pick(G{}).choice, "inherit");
}

}  // namespace
