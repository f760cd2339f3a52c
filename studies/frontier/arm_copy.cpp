// Fetch from host memory. copy (CPU backend): the host tier, Backend::copy DRAM -> DRAM, against glibc
// memcpy of the same size. granularity: one page of T tokens over all layers (Llama-3.1-8B, T=128: 32 x
// 512 KiB = 16 MiB) moved as chunks of copy_bytes to scattered destinations, against one contiguous copy
// (GPU: pinned host -> device). Every copy is checked against its pattern before it is timed.
#include <algorithm>
#include <cstring>
#include <random>

#include "frontier.hpp"
#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "kvf/units.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::frontier_study {
namespace {

class HostCopy final : public Case {
 public:
  HostCopy(std::size_t n, bool memcpy_baseline) : n_(n), base_(memcpy_baseline) {}
  void setup(Backend& be) override {
    src_ = BufferHandle(be, n_, MemKind::pageable_host);
    dst_ = BufferHandle(be, n_, MemKind::pageable_host);
    be.fill(src_.get(), kSeed + n_);
  }
  void run(Backend& be) override {
    if (base_) std::memcpy(dst_->ptr, src_->ptr, n_);
    else be.copy(dst_.get(), src_.get(), n_);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    std::memset(dst_->ptr, 0, n_);
    run(be);
    std::string why;
    if (!fr::check_pattern(dst_->ptr, n_, kSeed + n_, 0, &why)) throw kvf::VerifyError("copy: " + why);
  }
  void teardown(Backend&) override {
    src_.reset();
    dst_.reset();
  }

 private:
  std::size_t n_;
  bool base_;
  BufferHandle src_, dst_;
};

std::unique_ptr<Case> make_copy(const kvf::Point& p, Env& env) {
  const std::size_t n = std::size_t(p.integer("copy_bytes"));
  const bool base = p["arm"] == "memcpy";
  auto c = std::make_unique<HostCopy>(n, base);
  c->params = {{"link", "dram"}, {"src_mem", "pageable_host"}, {"dst_mem", "pageable_host"}};
  c->bytes = double(n);
  c->ceiling = kvf::CeilingRef{"frontier", {{"arm", "memcpy"}, {"copy_bytes", i2s(n)}}, "gbps"};
  // The one-thread memcpy is a baseline, not a bound: the parallel copy is expected above 100% of it (the memory
  // bound of a copy is the stream study's copy rows, which count bytes read and written).
  c->note = base ? "glibc memcpy, one call on one thread: the baseline of the host tier (not a hardware bound)"
                 : "Backend::copy (the host tier: OpenMP-parallel memcpy); bytes = bytes copied; pct_of_ceiling is "
                   "against the one-thread memcpy of the same size: above 100 is what the threads add";
  c->est_seconds = est(env, double(n) / 5e9, 0.05 + double(n) / 1e9);
  return c;
}

// One page as n copies of `chunk` bytes to randomly chosen slots of a destination twice the page.
class Granularity final : public Case {
 public:
  Granularity(std::size_t page, std::size_t chunk, bool gpu) : page_(page), chunk_(chunk), n_(page / chunk), gpu_(gpu) {}
  void setup(Backend& be) override {
    src_ = BufferHandle(be, page_, gpu_ ? MemKind::pinned_host : MemKind::pageable_host);
    dst_ = BufferHandle(be, 2 * page_, gpu_ ? MemKind::device : MemKind::pageable_host);
    be.fill(src_.get(), kSeed + 7);
    std::vector<std::size_t> slots(2 * n_);
    for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = i;
    std::mt19937_64 rng(kSeed);
    std::shuffle(slots.begin(), slots.end(), rng);
    order_.assign(slots.begin(), slots.begin() + n_);
  }
  void run(Backend& be) override {
#if defined(KVF_HAVE_CUDA)
    if (gpu_) {
      for (std::size_t i = 0; i < n_; ++i)
        KVF_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst_->ptr) + order_[i] * chunk_,
                                       static_cast<const char*>(src_->ptr) + i * chunk_, chunk_,
                                       cudaMemcpyHostToDevice, kvf::cuda_stream(be)));
      return;
    }
#endif
    // CPU: the chunks spread over the threads in one parallel region, each one memcpy, as the contiguous page is
    // (Backend::copy: the page split over the threads). Backend::copy per chunk ran chunks under its 1 MiB
    // per-thread split on one thread against the two-thread page, and opened a region per chunk, each of which
    // waited a scheduler tick for a descheduled thread on a loaded machine (2 MiB chunks 40x slower, 2026-11-29).
    if (n_ == 1) {
      be.copy(sub(dst_.get(), order_[0] * chunk_, chunk_), src_.get(), chunk_);
      return;
    }
    char* dst = static_cast<char*>(dst_->ptr);
    const char* src = static_cast<const char*>(src_->ptr);
    const auto n = static_cast<std::int64_t>(n_);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) std::memcpy(dst + order_[i] * chunk_, src + i * chunk_, chunk_);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    run(be);
    be.synchronize();
    std::vector<unsigned char> h(chunk_);
    for (std::size_t i = 0; i < n_; ++i) {
      const kvf::Buffer d = sub(dst_.get(), order_[i] * chunk_, chunk_);
      if (gpu_) be.copy(host_view(h.data(), chunk_), d, chunk_);
      else std::memcpy(h.data(), d.ptr, chunk_);
      std::string why;
      if (!fr::check_pattern(h.data(), chunk_, kSeed + 7, i * chunk_ / 8, &why))
        throw kvf::VerifyError("chunk " + i2s(i) + ": " + why);
    }
  }
  void teardown(Backend&) override {
    src_.reset();
    dst_.reset();
    order_ = {};
  }

 private:
  std::size_t page_, chunk_, n_;
  bool gpu_;
  BufferHandle src_, dst_;
  std::vector<std::size_t> order_;
};

std::unique_ptr<Case> make_granularity(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.model(p["model"]);
  const int T = int(p.integer("tokens"));
  const std::size_t chunk = std::size_t(p.integer("copy_bytes")), page = kv_page_bytes(m, T) * m.layers;
  const std::size_t n = page / chunk;
  const bool gpu = env.gpu;
  std::string unit = chunk == page ? "contiguous page" : "chunk";
  if (chunk == kv_page_bytes(m, T)) unit = "per layer";
  else if (chunk * m.n_kv_heads * m.layers == page) unit = "per layer and KV head (K and V), = per layer and 16-token block";
  else if (chunk * 2 * m.n_kv_heads * m.layers == page) unit = "per layer, KV head, K or V";
  auto c = std::make_unique<Granularity>(page, chunk, gpu);
  c->params = {{"layers", i2s(m.layers)}, {"copy_bytes", i2s(chunk)}, {"page_bytes", i2s(page)}, {"copies", i2s(n)},
               {"link", gpu ? "h2d" : "dram"}, {"src_mem", gpu ? "pinned_host" : "pageable_host"},
               {"dst_mem", gpu ? "device" : "pageable_host"}};
  c->bytes = double(page);
  c->note = "one page (all layers) as " + i2s(n) + " copies of " + kvf::format_bytes(double(chunk)) + " (" + unit +
            ") to scattered destinations";
  if (gpu) c->ceiling = kvf::CeilingRef{"stream", {{"op", "h2d_pinned"}}, "gbps"};
  else c->ceiling = kvf::CeilingRef{"frontier", {{"arm", "granularity"}, {"copy_bytes", i2s(page)}}, "gbps"};
  c->est_seconds = est(env, double(page) / (gpu ? 20e9 : 5e9) + n * (gpu ? 3e-6 : 1e-6), 0.2);
  c->time_opts.hide_launch = n <= 256;  // more copies than that may not fit the queue behind the blocking kernel
  return c;
}

const std::vector<std::string> kCopySizes = {"32768", "524288", "2097152", "67108864"};  // 32 KiB .. 64 MiB
const std::vector<std::string> kChunkSizes = {"32768", "65536", "524288", "2097152"};   // 32 KiB .. 2 MiB

}  // namespace

Arm copy_arm(const Env&) {
  const std::vector<std::string> arms = {"memcpy", "dram_copy"};
  return Arm{
      .name = "copy",
      .doc = "host tier: Backend::copy DRAM to DRAM (dram_copy) against one glibc memcpy (memcpy); CPU only",
      .on_gpu = false,
      .axes = {{.name = "copy_bytes", .doc = "bytes per copy", .cpu = kCopySizes, .quick = {"524288"},
                .flag = "--copy-sizes"},
               arm_axis(arms, "memcpy, then dram_copy, at each size")},
      .case_name_fn = [](const kvf::Point& p) { return p["arm"] + "/" + kvf::format_bytes(p.number("copy_bytes")); },
      .make = make_copy};
}

// The contiguous page first (the chunked rows are stated against it), then the chunk sizes that divide it.
// --copy-sizes gives the chunks beside the page, not the whole list: the axis is built from the Env.
Arm granularity_arm(const Env& env) {
  const md::ModelShape* m = env.first_gqa();
  std::vector<std::string> chunks;
  if (m) chunks.push_back(i2s(std::int64_t(kv_page_bytes(*m, 128) * m->layers)));
  for (const auto& s : env.copy_sizes.empty() ? kChunkSizes : env.copy_sizes) chunks.push_back(s);
  const std::vector<std::string> model = m ? std::vector<std::string>{m->name} : std::vector<std::string>{};
  return Arm{
      .name = "granularity",
      .doc = "one page (all layers) fetched as chunks of copy_bytes to scattered destinations, against one "
             "contiguous copy (GPU: pinned H2D)",
      .axes = {arm_axis({"granularity"}),
               {.name = "model", .doc = "the first GQA model of --models", .cpu = model},
               {.name = "tokens", .doc = "tokens per page", .cpu = {"128"}},
               {.name = "copy_bytes", .doc = "the whole page, then --copy-sizes (default 32KiB,64KiB,512KiB,2MiB)",
                .cpu = chunks}},
      .valid =
          [](const kvf::Point& p, const Env& e) {
            const md::ModelShape& mm = e.model(p["model"]);
            const auto page = kv_page_bytes(mm, int(p.integer("tokens"))) * mm.layers;
            const auto chunk = std::size_t(p.integer("copy_bytes"));
            return chunk <= page && page % chunk == 0;
          },
      .case_name_fn =
          [](const kvf::Point& p) {
            return "granularity/" + p["model"] + "/T" + p["tokens"] + "/" + kvf::format_bytes(p.number("copy_bytes"));
          },
      .make = make_granularity};
}

}  // namespace kvf::frontier_study
