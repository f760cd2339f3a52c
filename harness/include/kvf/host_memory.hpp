// Host memory with or without transparent huge pages, and a way to check what the kernel granted.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace kvf {

inline constexpr std::size_t kHugePage = 2u << 20;

// mmap'ed, 2 MiB aligned, length rounded up to 2 MiB. huge=true: madvise(MADV_HUGEPAGE);
// huge=false: madvise(MADV_NOHUGEPAGE) so the TLB comparison is clean. *advised tells whether the
// madvise call succeeded. Throws UsageError naming the size when the memory cannot be had.
void* host_alloc(std::size_t bytes, bool huge, bool* advised = nullptr);
void host_free(void* p, std::size_t bytes) noexcept;

// n elements of a trivial T from host_alloc (huge pages where the OS grants them), NOT initialized: for large
// scratch arrays a parallel loop writes first, so each core faults in the pages it fills, 2 MiB at a time. A
// zero-filled std::vector of 64 MiB spent 0.25 s in page faults on one core of the 2-core AMD EPYC VM (15 us
// per 4 KiB page), while the loop filling it took 6 ms.
template <class T>
class HostArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>);

 public:
  HostArray() = default;
  explicit HostArray(std::size_t n) : n_(n), p_(n ? static_cast<T*>(host_alloc(n * sizeof(T), true)) : nullptr) {}
  HostArray(HostArray&& o) noexcept : n_(std::exchange(o.n_, 0)), p_(std::exchange(o.p_, nullptr)) {}
  HostArray& operator=(HostArray&& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    return *this;
  }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  ~HostArray() { host_free(p_, n_ * sizeof(T)); }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](std::size_t i) { return p_[i]; }
  const T& operator[](std::size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  std::size_t n_ = 0;
  T* p_ = nullptr;
};

// Bytes of [p, p+bytes) backed by huge pages now (touched memory only; -1 when it cannot be read): the
// AnonHugePages of each mapping in /proc/self/smaps that overlaps it, in proportion to the overlap (smaps counts
// whole mappings), at most `bytes`.
long long huge_backed_bytes(const void* p, std::size_t bytes);
// The share of [p, p+bytes) backed by huge pages, in percent rounded to 0.1; none when smaps cannot be read.
// For a row's huge_backed_pct: `huge` says what was asked for (madvise), this what the kernel granted.
std::optional<double> huge_backed_pct(const void* p, std::size_t bytes);
// "always" | "madvise" | "never" | "unknown" (from /sys/kernel/mm/transparent_hugepage/enabled).
std::string thp_mode();

// NUMA, from sysfs (no libnuma): how many nodes a list such as "0-1,3" names (0 for an empty or malformed list),
// the nodes online (1 when unknown), and the node of a PCI device ("0000:65:00.0"; -1: none or unknown).
int count_node_list(const std::string& list);
int numa_nodes_online(const std::string& sysfs_system = "/sys/devices/system");  // node/online; 1 when absent
int pci_numa_node(const std::string& sysfs_bus_id);
// Places [p, p + bytes) (page aligned, not yet touched) on NUMA node `node` (mbind MPOL_PREFERRED: a full node
// spills elsewhere rather than failing) and touches it so the pages are placed now. Returns false with *why set when
// the kernel refuses (then nothing is bound).
bool bind_to_node(void* p, std::size_t bytes, int node, std::string* why);
// The NUMA node of the page holding p (get_mempolicy MPOL_F_NODE|MPOL_F_ADDR), -1 when unknown.
int node_of_address(const void* p);

// Physical memory and LLC size of this machine (0 when unknown). host_llc_bytes: one last-level cache as cpu0's
// sysfs reports it; host_llc().total_bytes(): that times the L3 domains (a Zen part has one per CCD): the cache a
// run's threads fill together, what a cold flush and a pool must outgrow (each thread's share of a flush passes
// through its own domain only).
std::size_t host_memory_bytes();
std::size_t host_llc_bytes();
struct HostLlc {
  std::size_t domain_bytes = 0;  // host_llc_bytes()
  int domains = 1;               // L3 domains (cpu_domains), at least 1
  std::size_t total_bytes() const { return domain_bytes * static_cast<std::size_t>(domains); }
};
HostLlc host_llc();

// Sizes meant to reach past the last-level cache (the cold flush, gather pools, stream arrays):
// max(multiple x llc, floor), at most cap. The caps exist because a VM may report its host socket's whole L3:
// 480 MiB on a 2-core Xeon VM (2x that flushed 960 MiB per cold sample), 508 MiB on the 2-core AMD EPYC VM
// this was written on, whose cores reach far less. Measured there (a 32 MiB array read by both cores, then a
// read-only flush of F, then the array re-read; medians of 15, machine loaded): re-read at 43 GB/s after
// F = 64 MiB (still cached), 3-5 GB/s (memory) after F = 128 MiB .. 1 GiB. So 512 MiB is 4x what these cores
// reach; on a part whose cores reach more than 256 MiB of L3 the flush falls below the 2x rule. meta.json
// records llc_bytes as the OS reports it beside flush_bytes, so a reader sees where a cap bound.
inline constexpr std::size_t kFlushCapBytes = std::size_t{512} << 20;
inline constexpr std::size_t kPoolCapBytes = std::size_t{1} << 30;
std::size_t past_llc_bytes(std::size_t llc, std::size_t multiple, std::size_t floor, std::size_t cap);

}  // namespace kvf
