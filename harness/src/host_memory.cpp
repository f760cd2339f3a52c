#include <algorithm>
#include "kvf/host_memory.hpp"

#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "kvf/errors.hpp"
#include "kvf/thread_placement.hpp"

namespace kvf {

namespace {
std::size_t round_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }
}  // namespace

void* host_alloc(std::size_t bytes, bool huge, bool* advised) {
  if (bytes == 0) throw UsageError("allocation of 0 bytes: sizes must be positive");
  const std::size_t len = round_up(bytes, kHugePage);
  // Over-map by one huge page, then trim so the mapping starts on a 2 MiB boundary.
  const std::size_t span = len + kHugePage;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED)
    throw UsageError("cannot allocate " + std::to_string(bytes) + " bytes of host memory: " + std::strerror(errno));
  auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(base, kHugePage);
  if (aligned > base) ::munmap(raw, aligned - base);
  const std::uintptr_t end = aligned + len;
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  void* p = reinterpret_cast<void*>(aligned);
  const int rc = ::madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  if (advised) *advised = rc == 0;
  return p;
}

void host_free(void* p, std::size_t bytes) noexcept {
  if (p) ::munmap(p, round_up(bytes, kHugePage));
}

int count_node_list(const std::string& list) {
  int n = 0;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back()))) part.pop_back();
    if (part.empty()) continue;
    int a = -1, b = -1;
    char extra = 0;
    if (std::sscanf(part.c_str(), "%d-%d%c", &a, &b, &extra) == 2 && a >= 0 && b >= a) n += b - a + 1;
    else if (std::sscanf(part.c_str(), "%d%c", &a, &extra) == 1 && a >= 0) n += 1;
    else return 0;
  }
  return n;
}

int numa_nodes_online(const std::string& sysfs_system) {
  std::ifstream in(sysfs_system + "/node/online");
  std::string line;
  if (!in || !std::getline(in, line)) return 1;
  const int n = count_node_list(line);
  return n > 0 ? n : 1;
}

int pci_numa_node(const std::string& sysfs_bus_id) {
  if (sysfs_bus_id.empty()) return -1;
  std::ifstream in("/sys/bus/pci/devices/" + sysfs_bus_id + "/numa_node");
  int node = -1;
  if (!in || !(in >> node)) return -1;
  return node;
}

bool bind_to_node(void* p, std::size_t bytes, int node, std::string* why) {
  if (node < 0 || node >= 1024) {
    if (why) *why = "node " + std::to_string(node) + " out of range";
    return false;
  }
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
  mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t len = round_up(bytes, static_cast<std::size_t>(page > 0 ? page : 4096));
  // mbind from the libc syscall table: libnuma is not a dependency of the suite.
  // MPOL_PREFERRED, not MPOL_BIND: a full node then spills to another node instead of invoking the OOM killer on
  // the first-touch faults below; node_of_address() tells where the pages landed.
  if (::syscall(SYS_mbind, p, len, MPOL_PREFERRED, mask, 1024ul, 0u) != 0) {
    if (why) *why = std::string("mbind: ") + std::strerror(errno);
    return false;
  }
  std::memset(p, 0, bytes);  // first touch under the policy: the pages land on `node` now
  return true;
}

int node_of_address(const void* p) {
  int node = -1;
  if (::syscall(SYS_get_mempolicy, &node, nullptr, 0ul, const_cast<void*>(p), MPOL_F_NODE | MPOL_F_ADDR) != 0) return -1;
  return node;
}

long long huge_backed_bytes(const void* p, std::size_t bytes) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return -1;
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + bytes;
  std::string line;
  double total = 0;
  double share = 0;  // of the current mapping inside [lo, hi): smaps counts a whole mapping, which may be larger
  bool any = false;
  while (std::getline(in, line)) {
    unsigned long long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      // A 1 MB array in its 2 MiB-aligned mapping (or arrays in merged mappings) would otherwise count huge pages
      // outside it: a share of the mapping's huge bytes in proportion to the overlap (over 100% before).
      const auto from = std::max<std::uintptr_t>(a, lo), to = std::min<std::uintptr_t>(b, hi);
      share = a < hi && b > lo && b > a ? static_cast<double>(to - from) / static_cast<double>(b - a) : 0;
      continue;
    }
    if (share > 0 && line.rfind("AnonHugePages:", 0) == 0) {
      long long kb = 0;
      std::sscanf(line.c_str() + 14, "%lld", &kb);
      total += share * static_cast<double>(kb) * 1024;
      any = true;
    }
  }
  return any ? std::min(static_cast<long long>(std::llround(total)), static_cast<long long>(bytes)) : 0;
}

std::optional<double> huge_backed_pct(const void* p, std::size_t bytes) {
  const long long b = huge_backed_bytes(p, bytes);
  if (b < 0 || bytes == 0) return std::nullopt;
  return std::round(1000.0 * static_cast<double>(b) / static_cast<double>(bytes)) / 10;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  if (!in || !std::getline(in, s)) return "unknown";
  const auto a = s.find('['), b = s.find(']');
  return (a != std::string::npos && b > a) ? s.substr(a + 1, b - a - 1) : "unknown";
}

std::size_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), psz = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(psz) : 0;
}

std::size_t host_llc_bytes() {
  for (const char* idx : {"index3", "index2"}) {
    std::ifstream in(std::string("/sys/devices/system/cpu/cpu0/cache/") + idx + "/size");
    std::string s;
    if (in && std::getline(in, s) && !s.empty()) {
      std::size_t v = std::stoull(s);
      if (s.back() == 'K') v <<= 10;
      else if (s.back() == 'M') v <<= 20;
      return v;
    }
  }
  const long v = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return v > 0 ? static_cast<std::size_t>(v) : 0;
}

HostLlc host_llc() { return {host_llc_bytes(), std::max(1, cpu_domains().l3_domains)}; }

std::size_t past_llc_bytes(std::size_t llc, std::size_t multiple, std::size_t floor, std::size_t cap) {
  return std::min(std::max(multiple * llc, floor), std::max(cap, floor));
}

}  // namespace kvf
