// Helpers shared by the kvf_cupti sources (not installed, not part of the contract).
#pragma once
#include <cupti.h>
#include <cupti_result.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvf/cupti/metric_sets.hpp"
#include "kvf/cupti/status.hpp"

namespace kvf::cupti::detail {

// Throws CuptiError "<call>: <CUPTI name>" unless r is CUPTI_SUCCESS.
void check(CUptiResult r, const char* call);
std::vector<const char*> c_names(const std::vector<std::string>& names);

// Makes sure a CUDA context exists on `device` (cudaSetDevice + cudaFree(0)) and returns it (cuCtxGetCurrent,
// fetched through cudaGetDriverEntryPointByVersion so no binary links libcuda). Returns the status; on success
// *ctx holds the context.
CountersStatus current_context(int device, CUcontext* ctx);
// cuCtxSynchronize on ctx (no-op when the entry point is unavailable).
void synchronize(CUcontext ctx);
// cuptiProfilerInitialize once per process.
CountersStatus profiler_initialize();
// cuptiDeviceGetChipName.
CountersStatus device_chip_name(int device, std::string* chip);

// What the range profiler and the PM sampler both do before they enable their own object: a context on the device,
// the profiler initialized, the chip name (given or asked), the metric list (the user's, or the chip's default set;
// a chip without study sets gets the GH100 names, which the host API then validates for that chip), the device's
// counter availability through the collector's own call, and a config image that must need one pass.
struct CollectorSetup {
  CountersStatus status;      // not available: why (printed here, except "no GPU", which the study says)
  CUcontext ctx = nullptr;
  std::string chip;
  std::vector<std::string> metrics;
  std::vector<std::uint8_t> config;
};
struct CollectorKind {
  Profiler profiler;
  const char* set_label;         // "default set", "default PM-sampling set": in the "not valid on chip" reason
  const char* one_pass_why;      // ends the UsageError for a set needing more passes
  const char* availability_call; // names the availability call in failure reasons
  // Two calls as CUPTI's availability APIs work: image == nullptr asks the size into *size, then fills image.
  std::function<CUptiResult(CUcontext ctx, std::size_t* size, std::uint8_t* image)> availability;
};
// Throws UsageError for a user metric the chip does not know and for a set that needs more than one pass.
CollectorSetup setup_collector(int device, const std::string& chip, const std::vector<std::string>& user_metrics,
                               const std::string& set, const CollectorKind& kind);

}  // namespace kvf::cupti::detail
