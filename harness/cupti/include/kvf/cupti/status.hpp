// Why GPU counters are or are not available, in one line that names the fix.
// Counters are an extra: when they cannot be had, a study says why once and goes on with timings only.
#pragma once
#include <stdexcept>
#include <string>

namespace kvf::cupti {

enum class Availability {
  available,
  no_gpu,                    // no driver / no device: the study runs its CPU twin
  insufficient_privileges,   // CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (ERR_NVGPUCTRPERM)
  profiler_busy,             // another subscriber (nsys, ncu, cuda-gdb) or the PM hardware held (DCGM, another process)
  unsupported_device,        // MIG, vGPU without profiling, CMP, confidential computing, WSL, SLI, pre-Turing
  error,                     // anything else CUPTI reported
};
const char* to_string(Availability a);

struct CountersStatus {
  Availability availability = Availability::no_gpu;
  std::string reason;  // one line: what failed and what to do; empty when available
  bool available() const { return availability == Availability::available; }
};

// The CUPTI name of a result code ("CUPTI_ERROR_HARDWARE_BUSY").
std::string result_name(int cupti_result);
// Classify a failed CUPTI call and explain it: `call` is the API function, e.g. "cuptiRangeProfilerEnable".
CountersStatus classify(int cupti_result, const std::string& call);

// A CUPTI call failed where failure is not an environment problem (host API misuse, corrupt image).
struct CuptiError : std::runtime_error {
  CuptiError(int code, const std::string& what) : std::runtime_error(what), code(code) {}
  int code;
};

}  // namespace kvf::cupti
