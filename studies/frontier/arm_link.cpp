// The GPU's links (CUDA backend): H2D and D2H copies from pinned and pageable host memory on the copy
// engine, SM zero-copy reads of mapped pinned memory, bidirectional H2D + D2H, and peer to peer (a row in
// every run, skipped with its reason on a one-GPU box). Each is checked against its pattern before it is
// timed, and stated against the stream study's copy of the same direction.
#include "frontier.hpp"
#include "kvf/errors.hpp"
#include "kvf/units.hpp"

#if defined(KVF_HAVE_CUDA)
#include "recompute_gpu.hpp"
#include "side_stream.hpp"
#endif

namespace kvf::frontier_study {
namespace {

#if defined(KVF_HAVE_CUDA)
struct LinkKind {
  const char* arm;
  MemKind src, dst;
  const char* stream_op;
  bool zero_copy, bidir;
};
const LinkKind kLinks[] = {{"h2d_pinned", MemKind::pinned_host, MemKind::device, "h2d_pinned", false, false},
                           {"h2d_pageable", MemKind::pageable_host, MemKind::device, "h2d_pageable", false, false},
                           {"d2h_pinned", MemKind::device, MemKind::pinned_host, "d2h_pinned", false, false},
                           {"d2h_pageable", MemKind::device, MemKind::pageable_host, "d2h_pageable", false, false},
                           {"zero_copy", MemKind::pinned_host, MemKind::device, "h2d_pinned", true, false},
                           {"bidir", MemKind::pinned_host, MemKind::device, "h2d_pinned", false, true}};

class LinkCopy final : public Case {
 public:
  LinkCopy(const LinkKind& k, std::size_t n) : k_(k), n_(n) {}
  void setup(Backend& be) override {
    kvf::AllocOptions o;
    o.mapped = k_.zero_copy;
    src_ = BufferHandle(be, n_, k_.src, o);
    dst_ = BufferHandle(be, n_, k_.dst);
    be.fill(src_.get(), kSeed + 40);
    if (k_.bidir) {
      src2_ = BufferHandle(be, n_, MemKind::device);
      dst2_ = BufferHandle(be, n_, MemKind::pinned_host);
      be.fill(src2_.get(), kSeed + 41);
      side_ = SideStream::make();
    }
  }
  void run(Backend& be) override {
    cudaStream_t st = kvf::cuda_stream(be);
    if (k_.zero_copy) return fr::gpu::sm_copy(dst_->ptr, src_->device_alias, n_, st);
    if (k_.bidir) KVF_CUDA_CHECK(cudaMemcpyAsync(dst2_->ptr, src2_->ptr, n_, cudaMemcpyDeviceToHost, side_->fork(st)));
    KVF_CUDA_CHECK(cudaMemcpyAsync(dst_->ptr, src_->ptr, n_, cudaMemcpyDefault, st));
    if (k_.bidir) side_->join(st);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    run(be);
    be.synchronize();
    std::vector<unsigned char> h(n_);
    be.copy(host_view(h.data(), n_), dst_.get(), n_);
    std::string why;
    if (!fr::check_pattern(h.data(), n_, kSeed + 40, 0, &why)) throw kvf::VerifyError(std::string(k_.arm) + ": " + why);
    if (k_.bidir && !fr::check_pattern(dst2_->ptr, n_, kSeed + 41, 0, &why)) throw kvf::VerifyError("bidir D2H: " + why);
  }
  void teardown(Backend&) override {
    side_.reset();  // drains the D2H before its buffers go
    src_.reset();
    dst_.reset();
    src2_.reset();
    dst2_.reset();
  }

 private:
  LinkKind k_;
  std::size_t n_;
  BufferHandle src_, dst_, src2_, dst2_;
  std::unique_ptr<SideStream> side_;  // the D2H of bidir
};

std::unique_ptr<Case> make_link_copy(const LinkKind& a, std::size_t n, const Env& env) {
  auto c = std::make_unique<LinkCopy>(a, n);
  c->params = {{"link", a.zero_copy ? "pcie_sm_zero_copy" : "pcie_copy_engine"},
               {"src_mem", std::string(kvf::to_string(a.src))}, {"dst_mem", std::string(kvf::to_string(a.dst))}};
  c->bytes = double(n) * (a.bidir ? 2 : 1);
  // bidir moves both directions at once: one direction's ceiling is no bound on it (stated against h2d_pinned it
  // read ~180%); compare its gbps with the stream study's h2d_pinned + d2h_pinned rows.
  if (!a.bidir) c->ceiling = kvf::CeilingRef{"stream", {{"op", a.stream_op}}, "gbps"};
  c->note = a.bidir ? "H2D on the timed stream while D2H of the same size runs on a second stream; bytes = both; no "
                      "ceiling (a duplex copy): its bound is stream h2d_pinned + d2h_pinned"
            : a.zero_copy ? "SM copy kernel reading mapped pinned host memory into device memory"
                          : "cudaMemcpyAsync, copy engine";
  const bool pageable = a.src == MemKind::pageable_host || a.dst == MemKind::pageable_host;
  c->time_opts.hide_launch = !pageable;  // host-synchronous copies cannot wait behind the blocking kernel
  c->est_seconds = est(env, double(n) / 20e9 + 10e-6, 0.2);
  return c;
}

class PeerCopy final : public Case {
 public:
  PeerCopy(std::size_t n, int dev, int peer, bool can) : n_(n), dev_(dev), peer_(peer), can_(can) {}
  void setup(Backend& be) override {
    src_ = BufferHandle(be, n_, MemKind::device);
    be.fill(src_.get(), kSeed + 42);
    if (can_) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer_, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) kvf::cuda_check(e, "cudaDeviceEnablePeerAccess");
      (void)cudaGetLastError();
    }
    KVF_CUDA_CHECK(cudaSetDevice(peer_));
    const cudaError_t e = cudaMalloc(&dst_, n_);
    KVF_CUDA_CHECK(cudaSetDevice(dev_));
    kvf::cuda_check(e, "cudaMalloc on the peer");
  }
  void run(Backend& be) override {
    KVF_CUDA_CHECK(cudaMemcpyPeerAsync(dst_, peer_, src_->ptr, dev_, n_, kvf::cuda_stream(be)));
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    run(be);
    be.synchronize();
    std::vector<unsigned char> h(n_);
    KVF_CUDA_CHECK(cudaMemcpy(h.data(), dst_, n_, cudaMemcpyDefault));
    std::string why;
    if (!fr::check_pattern(h.data(), n_, kSeed + 42, 0, &why)) throw kvf::VerifyError("p2p: " + why);
  }
  void teardown(Backend& be) override {
    be.synchronize();
    if (dst_) (void)cudaFree(dst_);
    dst_ = nullptr;
    src_.reset();
  }

 private:
  std::size_t n_;
  int dev_, peer_;
  bool can_;
  BufferHandle src_;
  void* dst_ = nullptr;
};

std::unique_ptr<Case> make_peer_copy(std::size_t n, const Env& env) {
  int count = 0;
  (void)cudaGetDeviceCount(&count);
  int dev = 0;
  (void)cudaGetDevice(&dev);
  const int peer = count >= 2 ? (dev + 1) % count : -1;
  int can = 0;
  if (peer >= 0) (void)cudaDeviceCanAccessPeer(&can, dev, peer);
  std::vector<Param> params = {{"link", "peer"}, {"src_mem", "device"}, {"dst_mem", "device(peer)"}};
  if (count < 2) return kvf::skipped_case("", std::move(params), "needs 2 GPUs");
  auto c = std::make_unique<PeerCopy>(n, dev, peer, can != 0);
  params.push_back({"peer_access", can ? "yes" : "no (staged through host)"});
  c->params = std::move(params);
  c->bytes = double(n);
  c->note = "cudaMemcpyPeerAsync device " + i2s(dev) + " -> device " + i2s(peer) + (can ? " with peer access" : "");
  c->est_seconds = est(env, double(n) / 50e9 + 10e-6, 0.3);
  return c;
}
#endif

std::unique_ptr<Case> make_link(const kvf::Point& p, [[maybe_unused]] Env& env) {
#if defined(KVF_HAVE_CUDA)
  const std::size_t n = std::size_t(p.integer("copy_bytes"));
  if (p["arm"] == "p2p") return make_peer_copy(n, env);
  for (const auto& k : kLinks)
    if (p["arm"] == k.arm) return make_link_copy(k, n, env);
#endif
  return kvf::skipped_case("", {}, "link " + p["arm"] + ": this build has no CUDA");
}

const std::vector<std::string> kLinkArms = {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable",
                                            "zero_copy",  "bidir",        "p2p"};

}  // namespace

Arm link_arm(const Env&) {
  return Arm{
      .name = "link",
      .doc = "PCIe links: H2D/D2H pinned and pageable, SM zero-copy reads, bidirectional, peer to peer; GPU only",
      .on_cpu = false,
      .axes = {{.name = "copy_bytes", .doc = "bytes per copy", .cpu = {"16384", "32768", "131072", "524288", "2097152",
                                                                     "8388608", "67108864"},
                .quick = {"524288"}, .flag = "--copy-sizes"},
               {.name = "arm", .doc = "the seven links at each size, p2p last", .cpu = kLinkArms, .quick = kLinkArms,
                .fixed = kLinkArms}},
      .case_name_fn = [](const kvf::Point& p) { return p["arm"] + "/" + kvf::format_bytes(p.number("copy_bytes")); },
      .make = make_link};
}

}  // namespace kvf::frontier_study
