// The stream study: the bandwidth ceilings every other study states its figures against.
//
// Run:   build/bin/bench_stream [--size 512MiB] [--quick] [--out DIR]   (or: kvf run --study stream)
// CPU:   read / write / copy over buffers of at least 4x the LLC with all cores and huge pages, and
//        the baselines the read ceiling is judged against: the same loop on one thread, and glibc
//        memcpy (one thread and one call per core; bytes counted = read + written).
// GPU:   device read / write / copy kernels with 16-byte vector accesses, cudaMemcpy D2D, H2D and
//        D2H from pinned and pageable memory, and SM reads of mapped pinned memory (zero-copy).
// Every arm is verified (checksum or pattern compare) before it is timed.
#include <CLI/CLI.hpp>
#include <cstring>
#include <functional>

#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"
#include "kvf/fn_case.hpp"
#include "kvf/study.hpp"
#include "kvf/units.hpp"
#include "stream.hpp"

#if defined(KVF_HAVE_CUDA)
#include "kvf/cuda_backend.hpp"
#include "stream_gpu.hpp"
#endif

namespace {

using kvf::Backend;
using kvf::FnCase;
using kvf::BufferHandle;
using kvf::MemKind;

constexpr std::uint64_t kSeed = 0x5eed;

// Buffers shared by a case's closures; released at teardown so only one case's memory is live.
struct Arrays {
  BufferHandle a, b;
  std::uint64_t sink = 0;
  void reset() { a.reset(); b.reset(); }
};

class StreamStudy final : public kvf::Study {
 public:
  std::string name() const override { return "stream"; }

  void add_options(CLI::App& app) override {
    size_opt_ = app.add_option("--size", size_text_,
                               "bytes per array, at least 4 KiB, rounded down to 64 bytes; two arrays within 70% of "
                               "host memory (and 90% of GPU memory), e.g. 512MiB (default: 8x LLC and at least "
                               "256 MiB on CPU, 1 GiB on GPU; --quick: 4x LLC)");
  }

  std::vector<std::unique_ptr<kvf::Case>> cases(const kvf::StudyContext& ctx) override {
    Backend& be = *ctx.backend;
    quick_ = ctx.quick;
    const auto& info = be.info();
    const std::size_t llc = info.llc_bytes ? info.llc_bytes : std::size_t{32} << 20;
    std::size_t bytes;
    // Given but empty is refused, never taken for "not given".
    if (size_opt_ && size_opt_->count() > 0) {
      if (size_text_.empty()) throw kvf::UsageError("--size '': a size is needed, e.g. 512MiB (at least 4 KiB)");
      bytes = kvf::parse_bytes(size_text_, "--size");
    } else if (be.name() == "cuda") {
      bytes = std::max<std::size_t>(std::size_t{1} << 30, 8 * llc);
    } else {
      bytes = ctx.quick ? 4 * llc : std::max<std::size_t>(8 * llc, std::size_t{256} << 20);
    }
    bytes = bytes / 64 * 64;  // whole cache lines and 16-byte vectors
    // The value as typed when there is one (a message names what the user wrote), else the default's size.
    const auto shown_size = [&](std::size_t b) {
      return size_text_.empty() ? kvf::format_bytes(static_cast<double>(b)) : size_text_;
    };
    if (bytes < 4096)
      throw kvf::UsageError("--size " + size_text_ + ": must be at least 4 KiB (and 4x the LLC, " +
                            kvf::format_bytes(4.0 * llc) + ", to measure memory rather than cache)");
    const std::size_t host_mem = kvf::host_memory_bytes();
    if (host_mem && 2 * bytes > host_mem * 7 / 10)
      throw kvf::UsageError("--size " + shown_size(bytes) + ": two arrays need more than 70% of host memory (" +
                            kvf::format_bytes(static_cast<double>(host_mem)) + ")");
    if (be.name() == "cuda" && info.memory_bytes && 2 * bytes > info.memory_bytes * 9 / 10)
      throw kvf::UsageError("--size " + shown_size(bytes) + ": two arrays exceed 90% of GPU memory (" +
                            kvf::format_bytes(static_cast<double>(info.memory_bytes)) + ")");
    const std::string note = bytes < 4 * llc ? "arrays smaller than 4x LLC: partly cache, not memory" : "";

    std::vector<std::unique_ptr<kvf::Case>> out;
    if (be.name() == "cuda") {
#if defined(KVF_HAVE_CUDA)
      add_gpu_cases(out, bytes, note);
#endif
    } else {
      add_cpu_cases(out, bytes, note);
    }
    return out;
  }

 private:
  std::shared_ptr<Arrays> arrays_ = std::make_shared<Arrays>();
  std::string size_text_;
  CLI::Option* size_opt_ = nullptr;  // owned by bench_main's app, which outlives cases()
  bool quick_ = false;

  FnCase& add(std::vector<std::unique_ptr<kvf::Case>>& out, const std::string& op, const std::string& extra_name,
              std::vector<kvf::Param> params, std::size_t bytes, double moved, const std::string& note) {
    auto c = std::make_unique<FnCase>();
    c->name = op + (extra_name.empty() ? "" : "/" + extra_name) + "/" + std::to_string(bytes >> 20) + "MiB";
    c->params = {{"op", op}, {"array_bytes", std::to_string(bytes)}};
    c->params.insert(c->params.end(), params.begin(), params.end());
    c->bytes = moved;
    c->ceiling = kvf::CeilingRef{"stream", {{"op", "read"}}, "gbps"};
    c->note = note;
    // Estimated: fill + verify + (warm-up + ~budget) per mode (--quick: 0.1 s budget).
    c->est_seconds = 0.3 + static_cast<double>(bytes) / 2e9 + 2 * (quick_ ? 0.2 : 0.6);
    c->on_teardown = [a = arrays_](Backend&) { a->reset(); };
    auto& ref = *c;
    out.push_back(std::move(c));
    return ref;
  }

  void add_cpu_cases(std::vector<std::unique_ptr<kvf::Case>>& out, std::size_t bytes, const std::string& note) {
    namespace st = kvf::stream;
    auto a = arrays_;
    auto setup_src = [a, bytes](bool huge) {
      return [a, bytes, huge](Backend& be) {
        a->a = BufferHandle(be, bytes, MemKind::device, {.huge_pages = huge});
        be.fill(a->a.get(), kSeed);
      };
    };
    auto verify_read = [a, bytes](std::uint64_t (*fn)(const void*, std::size_t)) {
      return [a, bytes, fn](Backend&) {
        if (fn(a->a->ptr, bytes) != st::read_checksum_ref(kSeed, bytes))
          throw kvf::VerifyError("read checksum differs from the reference xor of the fill pattern");
      };
    };
    // Two read kernels (compiler-vectorized loop; explicit vectors + software prefetch): the read ceiling
    // is the better of them, so it is the best read this machine gives to code we can write.
    for (bool huge : {true, false})
      for (bool pf : {false, true}) {
        auto fn = pf ? &st::cpu_read_prefetch : &st::cpu_read;
        auto& c = add(out, "read", std::string(pf ? "prefetch/" : "loop/") + (huge ? "huge" : "nohuge"),
                      {{"threads", "all"}, {"huge", huge ? "on" : "off"}, {"kernel", pf ? "vector_prefetch" : "loop"}},
                      bytes, static_cast<double>(bytes), note);
        c.on_setup = setup_src(huge);
        c.on_verify = verify_read(fn);
        c.on_run = [a, bytes, fn](Backend&) { a->sink ^= fn(a->a->ptr, bytes); };
      }
    {
      auto& c = add(out, "read_1thread", "huge", {{"threads", "1"}, {"huge", "on"}, {"kernel", "loop"}}, bytes,
                    static_cast<double>(bytes), note);
      c.on_setup = setup_src(true);
      c.on_verify = verify_read(&st::cpu_read_1thread);
      c.on_run = [a, bytes](Backend&) { a->sink ^= st::cpu_read_1thread(a->a->ptr, bytes); };
    }
    {
      auto& c = add(out, "write", "huge", {{"threads", "all"}, {"huge", "on"}}, bytes, static_cast<double>(bytes), note);
      c.on_setup = [a, bytes](Backend& be) { a->a = BufferHandle(be, bytes, MemKind::device); be.fill(a->a.get(), 1); };
      c.on_verify = [a, bytes](Backend&) {
        st::cpu_write(a->a->ptr, bytes, kSeed);
        if (!st::write_matches(a->a->ptr, bytes, kSeed)) throw kvf::VerifyError("write: words differ from seed ^ i");
      };
      c.on_run = [a, bytes](Backend&) { st::cpu_write(a->a->ptr, bytes, kSeed); };
    }
    struct CopyArm {
      const char* op;
      const char* threads;
      void (*fn)(void*, const void*, std::size_t);
    };
    for (const CopyArm& arm : {CopyArm{"copy", "all", &st::cpu_copy}, CopyArm{"memcpy", "all", &st::cpu_memcpy_threads},
                               CopyArm{"memcpy_1thread", "1", &st::cpu_memcpy_1thread}}) {
      auto& c = add(out, arm.op, "huge", {{"threads", arm.threads}, {"huge", "on"}}, bytes, 2.0 * static_cast<double>(bytes),
                    note.empty() ? "bytes = read + written" : note + "; bytes = read + written");
      c.on_setup = [a, bytes](Backend& be) {
        a->a = BufferHandle(be, bytes, MemKind::device);
        a->b = BufferHandle(be, bytes, MemKind::device);
        be.fill(a->a.get(), kSeed);
        be.fill(a->b.get(), 1);
      };
      c.on_verify = [a, bytes, fn = arm.fn, op = std::string(arm.op)](Backend&) {
        fn(a->b->ptr, a->a->ptr, bytes);
        if (!st::pattern_matches(a->b->ptr, bytes, kSeed)) throw kvf::VerifyError(op + ": destination differs from source pattern");
      };
      c.on_run = [a, bytes, fn = arm.fn](Backend&) { fn(a->b->ptr, a->a->ptr, bytes); };
    }
  }

#if defined(KVF_HAVE_CUDA)
  void add_gpu_cases(std::vector<std::unique_ptr<kvf::Case>>& out, std::size_t bytes, const std::string& note) {
    namespace st = kvf::stream;
    auto a = arrays_;
    auto checksum = std::make_shared<BufferHandle>();
    auto read_check = [a, checksum, bytes](Backend& be, const void* src) {
      cudaStream_t s = kvf::cuda_stream(be);
      KVF_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>((*checksum)->ptr), 0, 8, s));
      st::gpu_read(src, bytes, static_cast<unsigned long long*>((*checksum)->ptr), s);
      unsigned long long got = 0;
      KVF_CUDA_CHECK(cudaMemcpyAsync(&got, (*checksum)->ptr, 8, cudaMemcpyDeviceToHost, s));
      KVF_CUDA_CHECK(cudaStreamSynchronize(s));
      if (got != st::read_checksum_ref(kSeed, bytes))
        throw kvf::VerifyError("GPU read checksum differs from the host reference xor of the fill pattern");
    };
    {
      auto& c = add(out, "read", "device", {{"mem", "device"}}, bytes, static_cast<double>(bytes), note);
      c.on_setup = [a, checksum, bytes](Backend& be) {
        a->a = BufferHandle(be, bytes, MemKind::device);
        *checksum = BufferHandle(be, 8, MemKind::device);
        be.fill(a->a.get(), kSeed);
      };
      c.on_verify = [a, read_check](Backend& be) { read_check(be, a->a->ptr); };
      c.on_run = [a, checksum, bytes](Backend& be) {
        st::gpu_read(a->a->ptr, bytes, static_cast<unsigned long long*>((*checksum)->ptr), kvf::cuda_stream(be));
      };
    }
    {
      auto& c = add(out, "write", "device", {{"mem", "device"}}, bytes, static_cast<double>(bytes), note);
      c.on_setup = [a, bytes](Backend& be) { a->a = BufferHandle(be, bytes, MemKind::device); };
      c.on_verify = [a, bytes](Backend& be) {
        st::gpu_write(a->a->ptr, bytes, kSeed, kvf::cuda_stream(be));
        BufferHandle host(be, bytes, MemKind::pageable_host);
        be.copy(host.get(), a->a.get(), bytes);
        if (!st::pattern_matches(host->ptr, bytes, kSeed)) throw kvf::VerifyError("GPU write: pattern differs");
      };
      c.on_run = [a, bytes](Backend& be) { st::gpu_write(a->a->ptr, bytes, kSeed, kvf::cuda_stream(be)); };
    }
    // Copies: the kernel, cudaMemcpy D2D, and the host link in both directions from pinned and pageable memory.
    struct CopyArm {
      const char* op;
      MemKind dst, src;
      bool kernel;
    };
    const CopyArm arms[] = {{"copy", MemKind::device, MemKind::device, true},
                            {"memcpy_d2d", MemKind::device, MemKind::device, false},
                            {"h2d_pinned", MemKind::device, MemKind::pinned_host, false},
                            {"h2d_pageable", MemKind::device, MemKind::pageable_host, false},
                            {"d2h_pinned", MemKind::pinned_host, MemKind::device, false},
                            {"d2h_pageable", MemKind::pageable_host, MemKind::device, false}};
    for (const CopyArm& arm : arms) {
      const bool d2d = arm.dst == MemKind::device && arm.src == MemKind::device;
      const std::size_t n = d2d ? bytes : std::min<std::size_t>(bytes, std::size_t{256} << 20);
      auto& c = add(out, arm.op, "", {{"mem", std::string(kvf::to_string(arm.src)) + "->" + std::string(kvf::to_string(arm.dst))}},
                    n, d2d ? 2.0 * static_cast<double>(n) : static_cast<double>(n),
                    d2d ? "bytes = read + written" : "bytes = bytes crossing the link");
      if (!d2d) c.ceiling = kvf::CeilingRef{"stream", {{"op", arm.op}}, "gbps"};
      // Host-synchronous copies (pageable) cannot sit behind the blocking kernel; copies are long anyway.
      c.time_opts.hide_launch = false;
      c.on_setup = [a, n, arm](Backend& be) {
        a->a = BufferHandle(be, n, arm.src);
        a->b = BufferHandle(be, n, arm.dst);
        be.fill(a->a.get(), kSeed);
      };
      auto do_copy = [a, n, kernel = arm.kernel](Backend& be) {
        cudaStream_t s = kvf::cuda_stream(be);
        if (kernel) st::gpu_copy(a->b->ptr, a->a->ptr, n, s);
        else KVF_CUDA_CHECK(cudaMemcpyAsync(a->b->ptr, a->a->ptr, n, cudaMemcpyDefault, s));
      };
      c.on_verify = [a, n, arm, do_copy](Backend& be) {
        do_copy(be);
        be.synchronize();
        BufferHandle host(be, n, MemKind::pageable_host);
        be.copy(host.get(), a->b.get(), n);
        if (!st::pattern_matches(host->ptr, n, kSeed)) throw kvf::VerifyError(std::string(arm.op) + ": destination differs from source pattern");
      };
      c.on_run = do_copy;
    }
    {
      const std::size_t n = std::min<std::size_t>(bytes, std::size_t{256} << 20);
      auto& c = add(out, "zero_copy_read", "", {{"mem", "pinned_host(mapped)"}}, n, static_cast<double>(n),
                    "SMs read mapped pinned host memory over the link");
      c.ceiling = kvf::CeilingRef{"stream", {{"op", "h2d_pinned"}}, "gbps"};
      c.on_setup = [a, checksum, n](Backend& be) {
        a->a = BufferHandle(be, n, MemKind::pinned_host, {.huge_pages = true, .mapped = true});
        *checksum = BufferHandle(be, 8, MemKind::device);
        be.fill(a->a.get(), kSeed);
      };
      c.on_verify = [a, checksum, n](Backend& be) {
        cudaStream_t s = kvf::cuda_stream(be);
        KVF_CUDA_CHECK(cudaMemsetAsync((*checksum)->ptr, 0, 8, s));
        st::gpu_read_mapped(a->a->device_alias, n, static_cast<unsigned long long*>((*checksum)->ptr), s);
        unsigned long long got = 0;
        KVF_CUDA_CHECK(cudaMemcpyAsync(&got, (*checksum)->ptr, 8, cudaMemcpyDeviceToHost, s));
        KVF_CUDA_CHECK(cudaStreamSynchronize(s));
        if (got != st::read_checksum_ref(kSeed, n)) throw kvf::VerifyError("zero-copy read checksum differs from the reference");
      };
      c.on_run = [a, checksum, n](Backend& be) {
        st::gpu_read_mapped(a->a->device_alias, n, static_cast<unsigned long long*>((*checksum)->ptr), kvf::cuda_stream(be));
      };
    }
  }
#endif
};

}  // namespace

int main(int argc, char** argv) {
  StreamStudy study;
  return kvf::bench_main(argc, argv, study);
}
