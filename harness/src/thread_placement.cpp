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
  const std::string nodes = first_line(fs::path(sysfs_system) / "node" / "online");
  if (const int n = nodes.empty() ? 0 : count_node_list(nodes); n > 0) d.numa_nodes = n;
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

PlacementPick pick_thread_placement(const std::vector<std::pair<std::string, double>>& gbps, double min_gain) {
  const double base = !gbps.empty() && gbps.front().first == "inherit" ? gbps.front().second : 0;
  const std::pair<std::string, double>* best = nullptr;
  for (const auto& c : gbps)
    if (c.first != "inherit" && c.second > 0 && (!best || c.second > best->second)) best = &c;
  char buf[160];
  if (base <= 0) {
    if (!best) return {"inherit", "no candidate measured: left as it is"};
    std::snprintf(buf, sizeof buf, "inherit not measured: the fastest measured one (%.1f GB/s)", best->second);
    return {best->first, buf};
  }
  if (best && best->second >= (1 + min_gain) * base) {
    std::snprintf(buf, sizeof buf, "%.2fx the inherited placement's read rate (>= %.2fx needed)", best->second / base,
                  1 + min_gain);
    return {best->first, buf};
  }
  std::snprintf(buf, sizeof buf, "no candidate read >= %.2fx the inherited placement's rate%s", 1 + min_gain,
                best ? "" : " (none other measured)");
  return {"inherit", buf};
}

}  // namespace kvf
