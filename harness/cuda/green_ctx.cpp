// GreenSplit (kvf/green_ctx.hpp): two SM partitions through green contexts, driver calls through
// cudaGetDriverEntryPointByVersion (no link to libcuda). Every CUresult is checked; the first failure of the
// constructor becomes reason() ("<call>: <CUDA_ERROR_NAME>") and available() == false.
#include "kvf/green_ctx.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>

namespace kvf {

namespace {

// The driver entry points used here, each at the CUDA version that introduced its ABI (asking for a newer
// version than the driver has fails). Loaded once; `error` says which one is missing.
struct Driver {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuCtxPushCurrent_v4000 ctx_push = nullptr;
  PFN_cuCtxPopCurrent_v4000 ctx_pop = nullptr;
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventSynchronize_v2000 event_sync = nullptr;
  PFN_cuEventElapsedTime_v2000 event_elapsed = nullptr;  // same signature as _v12080
  PFN_cuStreamWaitEvent_v3020 stream_wait = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_sync = nullptr;
  PFN_cuStreamDestroy_v4000 stream_destroy = nullptr;
  PFN_cuDeviceGetDevResource_v12040 get_dev_resource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 split_by_count = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 generate_desc = nullptr;
  PFN_cuGreenCtxCreate_v12040 green_create = nullptr;
  PFN_cuGreenCtxDestroy_v12040 green_destroy = nullptr;
  PFN_cuCtxFromGreenCtx_v12040 ctx_from_green = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 green_stream_create = nullptr;
  std::string error;  // empty when every entry point was found

  Driver() {
    // The runtime initializes the driver here; without one this is where cudaErrorInsufficientDriver shows.
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      error = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e);
      return;
    }
    load(get_error_name, "cuGetErrorName", 6000);
    load(device_get, "cuDeviceGet", 2000);
    load(ctx_push, "cuCtxPushCurrent", 4000);
    load(ctx_pop, "cuCtxPopCurrent", 4000);
    load(event_create, "cuEventCreate", 2000);
    load(event_destroy, "cuEventDestroy", 4000);
    load(event_record, "cuEventRecord", 2000);
    load(event_sync, "cuEventSynchronize", 2000);
    // cuEventElapsedTime_v2 (12.8) where the driver has it, else the original ABI (same signature).
    load(event_elapsed, "cuEventElapsedTime", 12080);
    if (!error.empty() && event_elapsed == nullptr && error.find("cuEventElapsedTime") != std::string::npos) {
      error.clear();
      load(event_elapsed, "cuEventElapsedTime", 2000);
    }
    load(stream_wait, "cuStreamWaitEvent", 3020);
    load(stream_sync, "cuStreamSynchronize", 2000);
    load(stream_destroy, "cuStreamDestroy", 4000);
    load(get_dev_resource, "cuDeviceGetDevResource", 12040);
    load(split_by_count, "cuDevSmResourceSplitByCount", 12040);
    load(generate_desc, "cuDevResourceGenerateDesc", 12040);
    load(green_create, "cuGreenCtxCreate", 12040);
    load(green_destroy, "cuGreenCtxDestroy", 12040);
    load(ctx_from_green, "cuCtxFromGreenCtx", 12040);
    load(green_stream_create, "cuGreenCtxStreamCreate", 12050);
  }

  template <class F>
  void load(F& f, const char* name, unsigned version) {
    if (!error.empty()) return;
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q);
    if (e != cudaSuccess || p == nullptr || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      const char* why = e != cudaSuccess ? cudaGetErrorName(e)
                        : q == cudaDriverEntryPointVersionNotSufficent
                            ? "driver too old (cudaDriverEntryPointVersionNotSufficent)"
                            : "symbol not found in the driver (cudaDriverEntryPointSymbolNotFound)";
      // Appended in place: GCC 12 at -O2 warns (-Warray-bounds, a known false positive) on the chain of temporaries.
      error = "cudaGetDriverEntryPointByVersion(";
      error.append(name).append(", ").append(std::to_string(version)).append("): ").append(why);
      return;
    }
    f = reinterpret_cast<F>(p);
  }

  std::string name(CUresult r) const {
    const char* s = nullptr;
    if (get_error_name && get_error_name(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUresult " + std::to_string(static_cast<int>(r));
  }
  // "<what>: <CUDA_ERROR_...>" or empty on success.
  std::string check(CUresult r, const char* what) const {
    return r == CUDA_SUCCESS ? std::string() : std::string(what) + ": " + name(r);
  }
  void must(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) throw std::runtime_error("CUDA driver error in " + check(r, what));
  }
};

const Driver& driver() {
  static const Driver d;
  return d;
}

}  // namespace

struct GreenSplit::Part {
  CUgreenCtx green = nullptr;
  CUcontext ctx = nullptr;  // cuCtxFromGreenCtx(green): no lifetime of its own
  CUstream stream = nullptr;
  int sms = 0;
  std::vector<CUevent> events;
};

namespace {
// The device's handle and its whole SM resource; false with the failing call in `reason`.
bool sm_resource(int device, CUdevice& dev, CUdevResource& res, std::string& reason) {
  const Driver& d = driver();
  if (!d.error.empty()) {
    reason = d.error;
    return false;
  }
  reason = d.check(d.device_get(&dev, device), "cuDeviceGet");
  if (!reason.empty()) return false;
  reason = d.check(d.get_dev_resource(dev, &res, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource(SM)");
  return reason.empty();
}
SmLimits limits_of(const CUdevResource& res) {
  SmLimits out;
  out.total = static_cast<int>(res.sm.smCount);
  // Drivers before 12.8 leave the two granularity fields zero: fall back to cuda.h's table for Hopper and later
  // (the strictest listed), which a split then confirms or rejects with its own error.
  out.min_partition = res.sm.minSmPartitionSize > 0 ? static_cast<int>(res.sm.minSmPartitionSize) : 8;
  out.alignment = res.sm.smCoscheduledAlignment > 0 ? static_cast<int>(res.sm.smCoscheduledAlignment) : 8;
  return out;
}
}  // namespace

bool query_sm_limits(int device, SmLimits& out, std::string& reason) {
  CUdevice dev = 0;
  CUdevResource res{};
  if (!sm_resource(device, dev, res, reason)) return false;
  out = limits_of(res);
  return true;
}

GreenSplit::GreenSplit(int device, int sms) {
  const Driver& d = driver();
  CUdevice dev = 0;
  CUdevResource input{};
  if (!sm_resource(device, dev, input, reason_)) return;
  limits_ = limits_of(input);
  if (const std::string p = partition_request_problem(sms, limits_); !p.empty()) {
    reason_ = "SM split: " + p;
    return;
  }
  // The primary context must exist before a green context retains it (cuGreenCtxCreate's advice), and the
  // runtime's device must be this one for the events and streams the caller mixes in.
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    (void)cudaGetLastError();
    reason_ = std::string("cudaSetDevice: ") + cudaGetErrorName(e);
    return;
  }
  if (const cudaError_t e = cudaFree(nullptr); e != cudaSuccess) {
    (void)cudaGetLastError();
    reason_ = std::string("cudaFree(nullptr) (primary context): ") + cudaGetErrorName(e);
    return;
  }
  // One group of at least `sms` SMs (the driver rounds up), and the remainder for partition 1.
  CUdevResource groups[1]{};
  CUdevResource rest{};
  unsigned int n = 1;
  if (!(reason_ = d.check(d.split_by_count(groups, &n, &input, &rest, 0, static_cast<unsigned>(sms)),
                          "cuDevSmResourceSplitByCount"))
           .empty())
    return;
  if (n != 1 || groups[0].sm.smCount == 0 || rest.sm.smCount == 0) {
    reason_ = "cuDevSmResourceSplitByCount: asked for one group of " + std::to_string(sms) + " SMs, got " +
              std::to_string(n) + " group(s) of " + std::to_string(n ? groups[0].sm.smCount : 0u) +
              " SMs and a remainder of " + std::to_string(rest.sm.smCount) + " of " + std::to_string(limits_.total);
    return;
  }
  CUdevResource* res[2] = {&groups[0], &rest};
  for (int p = 0; p < 2; ++p) {
    auto part = std::make_unique<Part>();
    part->sms = static_cast<int>(res[p]->sm.smCount);
    CUdevResourceDesc desc = nullptr;
    const std::string tag = " (partition " + std::to_string(p) + ", " + std::to_string(part->sms) + " SMs)";
    if (!(reason_ = d.check(d.generate_desc(&desc, res[p], 1), ("cuDevResourceGenerateDesc" + tag).c_str())).empty())
      break;
    if (!(reason_ = d.check(d.green_create(&part->green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM),
                            ("cuGreenCtxCreate" + tag).c_str()))
             .empty()) {
      part->green = nullptr;
      break;
    }
    parts_.push_back(std::move(part));  // owned from here: release() destroys it on a later failure
    Part& q = *parts_.back();
    if (!(reason_ = d.check(d.ctx_from_green(&q.ctx, q.green), ("cuCtxFromGreenCtx" + tag).c_str())).empty()) break;
    if (!(reason_ = d.check(d.green_stream_create(&q.stream, q.green, CU_STREAM_NON_BLOCKING, 0),
                            ("cuGreenCtxStreamCreate" + tag).c_str()))
             .empty()) {
      q.stream = nullptr;
      break;
    }
  }
  if (!reason_.empty()) release();
}

GreenSplit::~GreenSplit() { release(); }

void GreenSplit::release() noexcept {
  const Driver& d = driver();
  if (!d.error.empty()) return;
  // Streams first (cuGreenCtxDestroy does not destroy them and they fail once their context is gone), then
  // events (after the work that records them has finished), then the green contexts.
  for (auto& p : parts_)
    if (p->stream) (void)d.stream_sync(p->stream);
  for (auto& p : parts_) {
    for (CUevent e : p->events) (void)d.event_destroy(e);
    p->events.clear();
    if (p->stream) (void)d.stream_destroy(p->stream);
    p->stream = nullptr;
  }
  for (auto& p : parts_) {
    if (p->green) (void)d.green_destroy(p->green);
    p->green = nullptr;
    p->ctx = nullptr;
  }
  parts_.clear();
}

int GreenSplit::sm_count(int p) const {
  return available() && p >= 0 && p < static_cast<int>(parts_.size()) ? parts_[static_cast<std::size_t>(p)]->sms : 0;
}

cudaStream_t GreenSplit::stream(int p) const {
  return available() && p >= 0 && p < static_cast<int>(parts_.size()) ? parts_[static_cast<std::size_t>(p)]->stream
                                                                      : nullptr;
}

cudaEvent_t GreenSplit::make_event(int p) {
  if (!available() || p < 0 || p >= static_cast<int>(parts_.size()))
    throw std::runtime_error("GreenSplit::make_event(" + std::to_string(p) + "): no such partition" +
                             (available() ? std::string() : " (" + reason_ + ")"));
  const Driver& d = driver();
  Part& q = *parts_[static_cast<std::size_t>(p)];
  d.must(d.ctx_push(q.ctx), "cuCtxPushCurrent(green context)");
  CUevent e = nullptr;
  const CUresult r = d.event_create(&e, CU_EVENT_DEFAULT);
  CUcontext popped = nullptr;
  const CUresult rp = d.ctx_pop(&popped);
  d.must(r, "cuEventCreate(green context)");
  if (rp != CUDA_SUCCESS) {
    (void)d.event_destroy(e);
    d.must(rp, "cuCtxPopCurrent");
  }
  q.events.push_back(e);
  return e;  // CUevent and cudaEvent_t are the same handle type
}

void GreenSplit::record(cudaEvent_t ev, int p) const {
  const cudaStream_t s = stream(p);
  if (!s) throw std::runtime_error("GreenSplit::record: partition " + std::to_string(p) + " unavailable");
  const Driver& d = driver();
  d.must(d.event_record(ev, s), "cuEventRecord(partition event, partition stream)");
}

void GreenSplit::wait(cudaStream_t s, cudaEvent_t ev) const {
  const Driver& d = driver();
  if (!d.error.empty()) throw std::runtime_error("GreenSplit::wait: " + d.error);
  d.must(d.stream_wait(s, ev, 0), "cuStreamWaitEvent");
}

void GreenSplit::sync(cudaEvent_t ev) const {
  const Driver& d = driver();
  if (!d.error.empty()) throw std::runtime_error("GreenSplit::sync: " + d.error);
  d.must(d.event_sync(ev), "cuEventSynchronize");
}

bool GreenSplit::elapsed_ms(cudaEvent_t a, cudaEvent_t b, float& ms, std::string& err) const {
  const Driver& d = driver();
  if (!d.error.empty()) {
    err = d.error;
    return false;
  }
  err = d.check(d.event_elapsed(&ms, a, b), "cuEventElapsedTime");
  return err.empty();
}

void GreenSplit::synchronize() const {
  const Driver& d = driver();
  for (const auto& p : parts_)
    if (p->stream) d.must(d.stream_sync(p->stream), "cuStreamSynchronize(partition stream)");
}

}  // namespace kvf
