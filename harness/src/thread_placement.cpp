#include "kvf/thread_placement.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "kvf/host_memory.hpp"

namespace kvf {

std::string thread_placement_names() {
  std::string s;
  for (const char* n : kThreadPlacements) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::vector<std::string> thread_placement_env(const std::string& name) {
  if (name == "inherit") return {};
  if (name == "close" || name == "spread") return {"OMP_PROC_BIND=" + name, "OMP_PLACES=cores"};
  throw std::invalid_argument("thread placement '" + name + "': allowed " + thread_placement_names());
}

namespace {
std::string first_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  if (in) std::getline(in, s);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}
}  // namespace

CpuDomains cpu_domains(const std::string& sysfs_system) {
  namespace fs = std::filesystem;
  CpuDomains d;
  d.numa_nodes = numa_nodes_online(sysfs_system);
  std::set<std::string> l3;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(sysfs_system) / "cpu", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() < 4 || name.rfind("cpu", 0) != 0 ||
        !std::all_of(name.begin() + 3, name.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    std::error_code ec2;
    for (fs::directory_iterator c(it->path() / "cache", ec2), cend; !ec2 && c != cend; c.increment(ec2))
      if (c->path().filename().string().rfind("index", 0) == 0 && first_line(c->path() / "level") == "3") {
        const std::string shared = first_line(c->path() / "shared_cpu_list");
        if (!shared.empty()) l3.insert(shared);
      }
  }
  d.l3_domains = static_cast<int>(l3.size());
  return d;
}

PlacementPick pick_thread_placement(const std::vector<std::pair<std::string, std::vector<double>>>& gbps,
                                    double min_gain) {
  const std::vector<double>* base = !gbps.empty() && gbps.front().first == "inherit" ? &gbps.front().second : nullptr;
  const bool base_ok = base && std::any_of(base->begin(), base->end(), [](double x) { return x > 0; });
  char buf[200];
  if (!base_ok) {
    const std::pair<std::string, std::vector<double>>* best = nullptr;
    double best_v = 0;
    for (const auto& c : gbps)
      for (const double x : c.second)
        if (c.first != "inherit" && x > best_v) best_v = x, best = &c;
    if (!best) return {"inherit", "no candidate measured: left as it is"};
    std::snprintf(buf, sizeof buf, "inherit not measured: the fastest run's placement (%.1f GB/s)", best_v);
    return {best->first, buf};
  }
  std::string choice = "inherit";
  double choice_ratio = 0;  // its smallest ratio to inherit over the rounds
  for (const auto& c : gbps) {
    if (c.first == "inherit" || c.second.size() != base->size()) continue;
    double worst = 1e300;
    for (std::size_t r = 0; r < base->size(); ++r)
      worst = std::min(worst, (*base)[r] > 0 && c.second[r] > 0 ? c.second[r] / (*base)[r] : 0.0);
    if (worst >= 1 + min_gain && worst > choice_ratio) choice = c.first, choice_ratio = worst;
  }
  if (choice != "inherit") {
    std::snprintf(buf, sizeof buf, "read >= %.2fx the inherited placement's rate in every round (>= %.2fx needed)",
                  choice_ratio, 1 + min_gain);
    return {choice, buf};
  }
  std::snprintf(buf, sizeof buf, "no candidate read >= %.2fx the inherited placement's rate in every round",
                1 + min_gain);
  return {"inherit", buf};
}

}  // namespace kvf
