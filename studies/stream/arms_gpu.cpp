// GPU arms: device read / write / copy kernels with 16-byte vector accesses, cudaMemcpy D2D, H2D and D2H
// from pinned and pageable memory, and SM reads of mapped pinned memory (zero-copy). Every arm is verified
// (checksum or pattern compare against the host reference) before it is timed.
#include "stream_study.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/cuda_backend.hpp"
#include "kvf/errors.hpp"
#include "stream.hpp"
#include "stream_gpu.hpp"
#endif

namespace kvf::stream_study {

#if !defined(KVF_HAVE_CUDA)
std::vector<StreamArm> gpu_arms() { return {}; }
#else
namespace {

namespace st = kvf::stream;
constexpr std::size_t kLinkBytes = std::size_t{256} << 20;  // host-link copies: long enough, within pinned limits

// Reads the device checksum of `src` and compares it with the host reference.
void check_read(Backend& be, const BufferHandle& checksum, const void* src, std::size_t n, bool mapped) {
  cudaStream_t s = kvf::cuda_stream(be);
  KVF_CUDA_CHECK(cudaMemsetAsync(checksum->ptr, 0, 8, s));
  auto* sum = static_cast<unsigned long long*>(checksum->ptr);
  if (mapped) st::gpu_read_mapped(src, n, sum, s);
  else st::gpu_read(src, n, sum, s);
  unsigned long long got = 0;
  KVF_CUDA_CHECK(cudaMemcpyAsync(&got, checksum->ptr, 8, cudaMemcpyDeviceToHost, s));
  KVF_CUDA_CHECK(cudaStreamSynchronize(s));
  if (got != st::read_checksum_ref(kSeed, n))
    throw VerifyError(mapped ? "zero-copy read checksum differs from the reference"
                             : "GPU read checksum differs from the host reference xor of the fill pattern");
}

// SMs read device memory, or mapped pinned host memory over the link (zero-copy), and XOR it into a
// checksum the verify step compares with the host reference.
class GpuReadCase final : public StreamCase {
 public:
  GpuReadCase(const StreamEnv& env, std::size_t n, bool mapped)
      : StreamCase(env, n, double(n)), n_(n), mapped_(mapped) {
    if (mapped_) {
      note = "SMs read mapped pinned host memory over the link";
      ceiling = CeilingRef{"stream", {{"op", "h2d_pinned"}}, "gbps"};
    }
  }
  void setup(Backend& be) override {
    arrays->a = mapped_ ? BufferHandle(be, n_, MemKind::pinned_host, {.huge_pages = true, .mapped = true})
                        : BufferHandle(be, n_, MemKind::device);
    checksum_ = BufferHandle(be, 8, MemKind::device);
    be.fill(arrays->a.get(), kSeed);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override { check_read(be, checksum_, src(), n_, mapped_); }
  void run(Backend& be) override {
    auto* sum = static_cast<unsigned long long*>(checksum_->ptr);
    if (mapped_) st::gpu_read_mapped(src(), n_, sum, kvf::cuda_stream(be));
    else st::gpu_read(src(), n_, sum, kvf::cuda_stream(be));
  }
  void teardown(Backend& be) override {
    checksum_.reset();
    StreamCase::teardown(be);
  }

 private:
  const void* src() const { return mapped_ ? arrays->a->device_alias : arrays->a->ptr; }
  std::size_t n_;
  bool mapped_;
  BufferHandle checksum_;
};

class GpuWriteCase final : public StreamCase {
 public:
  explicit GpuWriteCase(const StreamEnv& env) : StreamCase(env, env.array_bytes, double(env.array_bytes)), n_(env.array_bytes) {}
  void setup(Backend& be) override { arrays->a = BufferHandle(be, n_, MemKind::device); }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    st::gpu_write(arrays->a->ptr, n_, kSeed, kvf::cuda_stream(be));
    BufferHandle host(be, n_, MemKind::pageable_host);
    be.copy(host.get(), arrays->a.get(), n_);
    if (!st::pattern_matches(host->ptr, n_, kSeed)) throw VerifyError("GPU write: pattern differs");
  }
  void run(Backend& be) override { st::gpu_write(arrays->a->ptr, n_, kSeed, kvf::cuda_stream(be)); }

 private:
  std::size_t n_;
};

struct CopyRoute {
  const char* op;
  MemKind dst, src;
  bool kernel;
  bool d2d() const { return dst == MemKind::device && src == MemKind::device; }
};
constexpr CopyRoute kRoutes[] = {{"copy", MemKind::device, MemKind::device, true},
                                 {"memcpy_d2d", MemKind::device, MemKind::device, false},
                                 {"h2d_pinned", MemKind::device, MemKind::pinned_host, false},
                                 {"h2d_pageable", MemKind::device, MemKind::pageable_host, false},
                                 {"d2h_pinned", MemKind::pinned_host, MemKind::device, false},
                                 {"d2h_pageable", MemKind::pageable_host, MemKind::device, false}};
const CopyRoute& route(const std::string& op) {
  for (const auto& r : kRoutes)
    if (op == r.op) return r;
  throw std::logic_error("no copy route " + op);
}
std::string mem_text(const CopyRoute& r) { return std::string(kvf::to_string(r.src)) + "->" + std::string(kvf::to_string(r.dst)); }

class GpuCopyCase final : public StreamCase {
 public:
  GpuCopyCase(const StreamEnv& env, const CopyRoute& r, std::size_t n)
      : StreamCase(env, n, r.d2d() ? 2.0 * double(n) : double(n)), r_(r), n_(n) {
    note = r.d2d() ? "bytes = read + written" : "bytes = bytes crossing the link";
    if (!r.d2d()) ceiling = CeilingRef{"stream", {{"op", r.op}}, "gbps"};
    // Host-synchronous copies (pageable) cannot sit behind the blocking kernel; copies are long anyway.
    time_opts.hide_launch = false;
  }
  void setup(Backend& be) override {
    arrays->a = BufferHandle(be, n_, r_.src);
    arrays->b = BufferHandle(be, n_, r_.dst);
    be.fill(arrays->a.get(), kSeed);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    run(be);
    be.synchronize();
    BufferHandle host(be, n_, MemKind::pageable_host);
    be.copy(host.get(), arrays->b.get(), n_);
    if (!st::pattern_matches(host->ptr, n_, kSeed))
      throw VerifyError(std::string(r_.op) + ": destination differs from source pattern");
  }
  void run(Backend& be) override {
    cudaStream_t s = kvf::cuda_stream(be);
    if (r_.kernel) st::gpu_copy(arrays->b->ptr, arrays->a->ptr, n_, s);
    else KVF_CUDA_CHECK(cudaMemcpyAsync(arrays->b->ptr, arrays->a->ptr, n_, cudaMemcpyDefault, s));
  }

 private:
  CopyRoute r_;
  std::size_t n_;
};

// An arm over one device array of the study's size: op/device/<MiB>.
StreamArm device_array_arm(const char* op, const char* doc, std::unique_ptr<Case> (*make)(StreamEnv&)) {
  return StreamArm{.name = op,
                   .doc = doc,
                   .on_cpu = false,
                   .default_grid = [op](const Target&,
                                        const StreamEnv& e) { return Grid{sized(op, e.array_bytes, {{"mem", {"device"}}})}; },
                   .case_name_fn = [](const Point& p) { return sized_name(p, "device"); },
                   .make = [make](const Point&, StreamEnv& e) { return make(e); }};
}

}  // namespace

std::vector<StreamArm> gpu_arms() {
  std::vector<StreamArm> arms = {
      device_array_arm("read", "device read kernel, 16-byte vector loads",
                       [](StreamEnv& e) -> std::unique_ptr<Case> { return std::make_unique<GpuReadCase>(e, e.array_bytes, false); }),
      device_array_arm("write", "device write kernel, 16-byte vector stores",
                       [](StreamEnv& e) -> std::unique_ptr<Case> { return std::make_unique<GpuWriteCase>(e); }),
      StreamArm{.name = "copy",
                .doc = "copy kernel, cudaMemcpy D2D, and the host link (H2D, D2H) from pinned and pageable memory",
                .on_cpu = false,
                .default_grid =
                    [](const Target&, const StreamEnv& e) {
                      Grid g;
                      for (const auto& r : kRoutes)
                        g.push_back(sized(r.op, r.d2d() ? e.array_bytes : std::min(e.array_bytes, kLinkBytes),
                                          {{"mem", {mem_text(r)}}}));
                      return g;
                    },
                .case_name_fn = [](const Point& p) { return sized_name(p, ""); },
                .make = [](const Point& p, StreamEnv& e) -> std::unique_ptr<Case> {
                  return std::make_unique<GpuCopyCase>(e, route(p["op"]), static_cast<std::size_t>(p.integer("array_bytes")));
                }},
      StreamArm{.name = "zero_copy_read",
                .doc = "SMs read mapped pinned host memory over the link",
                .on_cpu = false,
                .default_grid =
                    [](const Target&, const StreamEnv& e) {
                      return Grid{sized("zero_copy_read", std::min(e.array_bytes, kLinkBytes), {{"mem", {"pinned_host(mapped)"}}})};
                    },
                .case_name_fn = [](const Point& p) { return sized_name(p, ""); },
                .make = [](const Point& p, StreamEnv& e) -> std::unique_ptr<Case> {
                  return std::make_unique<GpuReadCase>(e, static_cast<std::size_t>(p.integer("array_bytes")), true);
                }},
  };
  for (auto& a : launch_arms()) arms.push_back(std::move(a));
  return arms;
}
#endif

}  // namespace kvf::stream_study
