// Helpers shared by the kvf_cupti sources (not installed, not part of the contract).
#pragma once
#include <cupti.h>
#include <cupti_result.h>

#include <string>
#include <vector>

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

}  // namespace kvf::cupti::detail
