// Device-side wall clock shared by the harness's kernels: %globaltimer in ns (a deadlock timeout, not a
// precise timer: its update granularity is 32 ns to 1 us).
#pragma once
#include <cstdint>

namespace kvf::detail {
__device__ __forceinline__ std::uint64_t globaltimer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}  // namespace kvf::detail
