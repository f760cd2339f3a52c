// The launch-floor arm (GPU): the fixed cost under every multi-kernel arm, measured in the same run. One
// kernel; a chain of dependent kernels launched one by one and the same chain as one CUDA graph launch; a
// 1-byte pinned H2D copy; an event round trip (the host records an event and waits for it). Timed without
// hiding the launch (hide_launch = false): the launch is the figure. Each is verified before it is timed.
// Beside them kernel_timed: the one kernel timed as every other GPU case is (queued behind the blocking
// kernel, between two events): the floor of any GPU row's time, whatever its kernel does.
#include "stream_study.hpp"

#if !defined(KVF_HAVE_CUDA)
std::vector<kvf::stream_study::StreamArm> kvf::stream_study::launch_arms() { return {}; }
#else
#include "kvf/cuda_backend.hpp"
#include "kvf/cuda_graph.hpp"
#include "kvf/errors.hpp"
#include "launch_gpu.hpp"

namespace kvf::stream_study {
namespace {

namespace st = kvf::stream;
constexpr int kChain = 16;  // about the kernels of one decode layer step (norms, GEMMs, RoPE, attention, merge)

class LaunchCase final : public Case {
 public:
  LaunchCase(std::string variant, int kernels) : variant_(std::move(variant)), kernels_(kernels) {
    time_opts.hide_launch = variant_ == "kernel_timed";
    cold = false;  // nothing to flush: no data is read
    est_seconds = 0.5;
  }
  void setup(Backend& be) override {
    cudaStream_t s = kvf::cuda_stream(be);
    counter_ = BufferHandle(be, 4, MemKind::device);
    KVF_CUDA_CHECK(cudaMemsetAsync(counter_->ptr, 0, 4, s));
    if (variant_ == "chain_graph")
      graph_ = std::make_unique<CudaGraph>([this](cudaStream_t cs) { st::gpu_ticks(counter(), kernels_, cs); }, s,
                                           "the launch chain");
    if (variant_ == "h2d_1byte") {
      host_byte_ = BufferHandle(be, 64, MemKind::pinned_host);
      static_cast<unsigned char*>(host_byte_->ptr)[0] = 0x5a;
    }
    if (variant_ == "event_roundtrip") KVF_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    KVF_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  bool has_verify() const override { return variant_ != "event_roundtrip"; }
  // Tick variants: the counter moved by exactly the kernels of one run; the copy: the byte arrived.
  void verify(Backend& be) override {
    cudaStream_t s = kvf::cuda_stream(be);
    const unsigned before = read_counter(s);
    run(be);
    KVF_CUDA_CHECK(cudaStreamSynchronize(s));
    if (variant_ == "h2d_1byte") {
      unsigned char got = 0;
      KVF_CUDA_CHECK(cudaMemcpy(&got, counter_->ptr, 1, cudaMemcpyDeviceToHost));
      if (got != 0x5a) throw VerifyError("the 1-byte H2D copy did not arrive");
      return;
    }
    const unsigned moved = read_counter(s) - before;
    if (moved != unsigned(kernels_))
      throw VerifyError(std::to_string(kernels_) + " launches moved the counter by " + std::to_string(moved));
  }
  void run(Backend& be) override {
    cudaStream_t s = kvf::cuda_stream(be);
    if (graph_) return graph_->launch(s);
    if (variant_ == "h2d_1byte") {
      KVF_CUDA_CHECK(cudaMemcpyAsync(counter_->ptr, host_byte_->ptr, 1, cudaMemcpyHostToDevice, s));
    } else if (variant_ == "event_roundtrip") {
      KVF_CUDA_CHECK(cudaEventRecord(event_, s));
      KVF_CUDA_CHECK(cudaEventSynchronize(event_));
    } else {
      st::gpu_ticks(counter(), kernels_, s);
    }
  }
  std::string after_measure(Backend&, const Summary& m, const std::string&) override {
    if (kernels_ <= 1) return {};
    return "per_kernel_us=" + std::to_string(m.median / kernels_ * 1e6);
  }
  void teardown(Backend&) override {
    graph_.reset();
    if (event_) (void)cudaEventDestroy(event_);
    event_ = nullptr;
    counter_.reset();
    host_byte_.reset();
  }

 private:
  unsigned* counter() { return static_cast<unsigned*>(counter_->ptr); }
  unsigned read_counter(cudaStream_t s) {
    unsigned v = 0;
    KVF_CUDA_CHECK(cudaMemcpyAsync(&v, counter_->ptr, 4, cudaMemcpyDeviceToHost, s));
    KVF_CUDA_CHECK(cudaStreamSynchronize(s));
    return v;
  }
  std::string variant_;
  int kernels_;
  BufferHandle counter_, host_byte_;
  std::unique_ptr<CudaGraph> graph_;
  cudaEvent_t event_ = nullptr;
};

struct Variant {
  const char* name;
  int kernels;
  const char* doc;
};
constexpr Variant kVariants[] = {
    {"kernel", 1, "one one-thread kernel: launch and kernel boundary"},
    {"kernel_timed", 1, "the same kernel timed as every GPU case (behind the blocking kernel, between events): their floor"},
    {"chain", kChain, "16 dependent one-thread kernels launched one by one (per_kernel_us in the note)"},
    {"chain_graph", kChain, "the same 16 kernels as one CUDA graph launch"},
    {"h2d_1byte", 0, "a 1-byte cudaMemcpyAsync from pinned host memory"},
    {"event_roundtrip", 0, "cudaEventRecord then cudaEventSynchronize: the host waits for the stream"},
};

int kernels_of(const std::string& v) {
  for (const auto& x : kVariants)
    if (v == x.name) return x.kernels;
  throw UsageError("launch variant '" + v + "': unknown");
}

}  // namespace

std::vector<StreamArm> launch_arms() {
  std::vector<std::string> names;
  std::string doc = "the fixed cost under every multi-kernel arm:";
  for (const auto& v : kVariants) {
    names.push_back(v.name);
    doc += std::string(" ") + v.name + " (" + v.doc + ");";
  }
  return {StreamArm{.name = "launch",
                    .doc = doc,
                    .on_cpu = false,
                    .axes = {everywhere_axis("variant", names, "what one run launches")},
                    .default_grid =
                        [names](const Target&, const StreamEnv&) {
                          return Grid{Product{{{"op", {"launch"}}, {"variant", names}}}};
                        },
                    .case_name_fn =
                        [](const Point& p) {
                          const int n = kernels_of(p["variant"]);
                          if (p["variant"] == "chain") return "launch/chain" + std::to_string(n);
                          if (p["variant"] == "chain_graph") return "launch/chain" + std::to_string(n) + "_graph";
                          return "launch/" + p["variant"];
                        },
                    .make = [](const Point& p, StreamEnv&) -> std::unique_ptr<Case> {
                      const std::string v = p["variant"];
                      auto c = std::make_unique<LaunchCase>(v, kernels_of(v));
                      c->params = {{"kernels", std::to_string(kernels_of(v))}};
                      return c;
                    }}};
}

}  // namespace kvf::stream_study
#endif
