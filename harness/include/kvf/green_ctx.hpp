// SM partitions of one device through CUDA green contexts (driver API, CUDA 12.4+ drivers), for studies
// that run two workloads side by side on disjoint SMs. The harness knows no study: this only splits,
// hands out one stream per partition and moves events between the partitions and the backend's stream.
//
// Driver entry points come through cudaGetDriverEntryPointByVersion: nothing links libcuda, so a binary
// built with this still starts on a machine without a driver (the split then reports available() == false).
//
// Memory: a green context is the device's primary context with a subset of the SMs (cuda.h: cuCtxFromGreenCtx
// "is a normal primary context but with the resources of the specified green context"), so memory allocated
// with cudaMalloc in the primary context, and kernels the runtime loaded there, are used as they are by work
// launched on a partition's stream. Runtime launches (<<<>>>, cuBLASLt) take a partition's stream like any
// other stream.
//
// Events: cuEventRecord needs the event and the stream from the same context, so events recorded on a
// partition's stream are made here with that partition's context current (make_event) and recorded with
// record(); waits (cuStreamWaitEvent) accept events of any context.
#pragma once
#include <string>

#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include <memory>
#include <vector>
#endif

namespace kvf {

// What the driver says about splitting a device's SMs (cuDeviceGetDevResource, CU_DEV_RESOURCE_TYPE_SM):
// a partition has at least min_partition SMs and a multiple of alignment (Hopper: 8 and 8; Ampere: 4 and 2).
struct SmLimits {
  int total = 0;
  int min_partition = 1;
  int alignment = 1;
};

// SMs a split gives a partition asked for `requested` SMs: rounded up to the alignment, at least the minimum
// (what cuDevSmResourceSplitByCount does with its minCount). 0 for requested < 1 or limits without SMs.
inline int round_partition_sms(int requested, const SmLimits& l) {
  if (requested < 1 || l.total < 1) return 0;
  const int a = l.alignment > 0 ? l.alignment : 1;
  int n = (requested + a - 1) / a * a;
  if (n < l.min_partition) n = (l.min_partition + a - 1) / a * a;
  return n;
}

// Largest request that still leaves the rest of the device at least one minimum partition; 0 if none.
inline int max_partition_request(const SmLimits& l) {
  const int a = l.alignment > 0 ? l.alignment : 1;
  const int rest_min = l.min_partition > 0 ? l.min_partition : 1;
  const int n = (l.total - rest_min) / a * a;  // rounded down: its own rounding up must not exceed it
  return n >= l.min_partition && n >= 1 ? n : 0;
}

// Empty when `requested` SMs can be split off, else why not (one line, names the value and what is allowed).
inline std::string partition_request_problem(int requested, const SmLimits& l) {
  const int hi = max_partition_request(l);
  if (hi == 0)
    return "this " + std::to_string(l.total) + "-SM device cannot be split in two (partitions need at least " +
           std::to_string(l.min_partition) + " SMs)";
  if (requested < 1 || round_partition_sms(requested, l) > hi)
    return std::to_string(requested) + " SMs: allowed 1.." + std::to_string(hi) + " on this " +
           std::to_string(l.total) + "-SM device (partitions are multiples of " + std::to_string(l.alignment) +
           " SMs, at least " + std::to_string(l.min_partition) + ", and the rest of the device keeps at least " +
           std::to_string(l.min_partition) + ")";
  return {};
}

// About a quarter of the device, rounded to the nearest multiple of the alignment and kept splittable;
// 0 when the device cannot be split.
inline int default_partition_sms(const SmLimits& l) {
  const int hi = max_partition_request(l);
  if (hi == 0) return 0;
  const int a = l.alignment > 0 ? l.alignment : 1;
  int n = (l.total / 4 + a / 2) / a * a;
  if (n < l.min_partition) n = round_partition_sms(l.min_partition, l);
  return n > hi ? hi : n;
}

#if defined(KVF_HAVE_CUDA)
// The SM limits of `device` from the driver. False with `reason` (the failing call and its error name) when
// the driver, its green-context entry points or the device are missing. Never throws.
bool query_sm_limits(int device, SmLimits& out, std::string& reason);

// Two SM partitions of one device: partition 0 gets about `sms` SMs (rounded as the driver requires: see
// round_partition_sms; the split reports what it gave), partition 1 the rest of the device. One green context
// and one non-blocking stream each. Never throws from the constructor: any failure (no driver, a driver
// without green contexts, a split the device cannot make) gives available() == false and reason() names the
// failing call and the error ("cuDevSmResourceSplitByCount: CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION").
// Not copyable; destroys its events, streams and green contexts (in that order) after synchronizing them.
class GreenSplit {
 public:
  GreenSplit(int device, int sms);
  ~GreenSplit();
  GreenSplit(const GreenSplit&) = delete;
  GreenSplit& operator=(const GreenSplit&) = delete;

  bool available() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }
  const SmLimits& limits() const { return limits_; }
  int sm_count(int p) const;          // SMs of partition p (0 or 1), as the driver reports them
  cudaStream_t stream(int p) const;   // the partition's stream (CU_STREAM_NON_BLOCKING)

  // The calls below throw std::runtime_error naming the driver call and the error; they need available().
  // An event of partition p's context (timing enabled), owned by the split.
  cudaEvent_t make_event(int p);
  // cuEventRecord(ev, stream(p)); ev from make_event(p).
  void record(cudaEvent_t ev, int p) const;
  // cuStreamWaitEvent(s, ev): any stream (a partition's or the backend's) waits for an event of any context.
  void wait(cudaStream_t s, cudaEvent_t ev) const;
  // cuEventSynchronize.
  void sync(cudaEvent_t ev) const;
  // cuEventElapsedTime(a, b) in ms; false with the error in `err` instead of throwing (events of two
  // different contexts: whether the driver times them is settled by the first run, see docs/idleness.md).
  bool elapsed_ms(cudaEvent_t a, cudaEvent_t b, float& ms, std::string& err) const;
  // Both partitions' streams synchronized (cuStreamSynchronize).
  void synchronize() const;

 private:
  struct Part;
  std::string reason_;
  SmLimits limits_;
  std::vector<std::unique_ptr<Part>> parts_;
  void release() noexcept;
};
#endif

}  // namespace kvf
