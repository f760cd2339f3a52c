// CPU arms: read / write / copy over arrays of at least 4x the LLC with all cores and huge pages, and
// the baselines the read ceiling is judged against: the same loop on one thread, and glibc memcpy (one
// thread, and one call per core; bytes counted = read + written). Every arm is verified before timing.
#include "kvf/errors.hpp"
#include "kvf/csv.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/results.hpp"
#include "stream.hpp"
#include "stream_study.hpp"

namespace kvf::stream_study {
namespace {

namespace st = kvf::stream;
using ReadFn = std::uint64_t (*)(const void*, std::size_t);
using CopyFn = void (*)(void*, const void*, std::size_t);

class ReadCase final : public StreamCase {
 public:
  ReadCase(const StreamEnv& env, ReadFn fn, bool huge) : StreamCase(env, env.array_bytes, double(env.array_bytes)), fn_(fn), huge_(huge) {}
  void setup(Backend& be) override {
    arrays->a = BufferHandle(be, bytes_(), MemKind::device, {.huge_pages = huge_});
    be.fill(arrays->a.get(), kSeed);
    // What the kernel granted (huge says what was asked): THP "always" backs the nohuge rows too, a busy host
    // may back neither.
    if (const auto pct = huge_backed_pct(arrays->a->ptr, bytes_()))
      set_param(params, "huge_backed_pct", csv_number(*pct));
  }
  bool has_verify() const override { return true; }
  void verify(Backend&) override {
    if (fn_(arrays->a->ptr, bytes_()) != st::read_checksum_ref(kSeed, bytes_()))
      throw VerifyError("read checksum differs from the reference xor of the fill pattern");
  }
  void run(Backend&) override { arrays->sink ^= fn_(arrays->a->ptr, bytes_()); }

 private:
  std::size_t bytes_() const { return static_cast<std::size_t>(bytes); }
  ReadFn fn_;
  bool huge_;
};

class WriteCase final : public StreamCase {
 public:
  explicit WriteCase(const StreamEnv& env) : StreamCase(env, env.array_bytes, double(env.array_bytes)) {}
  void setup(Backend& be) override {
    arrays->a = BufferHandle(be, n(), MemKind::device);
    be.fill(arrays->a.get(), 1);
  }
  bool has_verify() const override { return true; }
  void verify(Backend&) override {
    st::cpu_write(arrays->a->ptr, n(), kSeed);
    if (!st::write_matches(arrays->a->ptr, n(), kSeed)) throw VerifyError("write: words differ from seed ^ i");
  }
  void run(Backend&) override { st::cpu_write(arrays->a->ptr, n(), kSeed); }

 private:
  std::size_t n() const { return static_cast<std::size_t>(bytes); }
};

class CopyCase final : public StreamCase {
 public:
  CopyCase(const StreamEnv& env, std::string op, CopyFn fn)
      : StreamCase(env, env.array_bytes, 2.0 * double(env.array_bytes)), n_(env.array_bytes), op_(std::move(op)), fn_(fn) {
    note = env.note.empty() ? "bytes = read + written" : env.note + "; bytes = read + written";
  }
  void setup(Backend& be) override {
    arrays->a = BufferHandle(be, n_, MemKind::device);
    arrays->b = BufferHandle(be, n_, MemKind::device);
    be.fill(arrays->a.get(), kSeed);
    be.fill(arrays->b.get(), 1);
  }
  bool has_verify() const override { return true; }
  void verify(Backend&) override {
    fn_(arrays->b->ptr, arrays->a->ptr, n_);
    if (!st::pattern_matches(arrays->b->ptr, n_, kSeed)) throw VerifyError(op_ + ": destination differs from source pattern");
  }
  void run(Backend&) override { fn_(arrays->b->ptr, arrays->a->ptr, n_); }

 private:
  std::size_t n_;
  std::string op_;
  CopyFn fn_;
};

CopyFn copy_fn(const std::string& op) {
  if (op == "memcpy") return &st::cpu_memcpy_threads;
  if (op == "memcpy_1thread") return &st::cpu_memcpy_1thread;
  return &st::cpu_copy;
}

}  // namespace

std::vector<StreamArm> cpu_arms() {
  return {
      // Three read kernels (a 32-byte vector loop; explicit vectors + software prefetch; the loop over two
      // streams per thread): the read ceiling is the best of them, the best read this machine gives to code we
      // can write (which one wins depends on the core: two streams won on the AMD EPYC VMs here).
      StreamArm{.name = "read",
                .doc = "all threads read the array (loop, vector+prefetch, two-stream kernels; huge pages on, off)",
                .on_gpu = false,
                .axes = {{.name = "threads", .doc = "threads reading"},
                         {.name = "huge", .doc = "transparent huge pages"},
                         {.name = "kernel", .doc = "read kernel: " + st::cpu_read_kernel_names() + " (kvf::stream)"}},
                .default_grid = [](const Target&,
                                   const StreamEnv& e) {
                  return Grid{sized("read", e.array_bytes,
                                    {{"threads", {"all"}}, {"huge", {"on", "off"}}, {"kernel", {"loop", "prefetch"}}}),
                              sized("read", e.array_bytes,
                                    {{"threads", {"all"}}, {"huge", {"on"}}, {"kernel", {"two_streams"}}})};
                },
                .case_name_fn = [](const Point& p) {
                  return sized_name(p, p["kernel"] + (p["huge"] == "on" ? "/huge" : "/nohuge"));
                },
                .make = [](const Point& p, StreamEnv& e) -> std::unique_ptr<Case> {
                  return std::make_unique<ReadCase>(e, st::cpu_read_kernel(p["kernel"]).read, p["huge"] == "on");
                }},
      StreamArm{.name = "read_1thread",
                .doc = "the read loop on one thread: the baseline the all-thread read is judged against",
                .on_gpu = false,
                .default_grid = [](const Target&,
                                   const StreamEnv& e) {
                  return Grid{sized("read_1thread", e.array_bytes, {{"threads", {"1"}}, {"huge", {"on"}}, {"kernel", {"loop"}}})};
                },
                .case_name_fn = [](const Point& p) { return sized_name(p, "huge"); },
                .make = [](const Point&, StreamEnv& e) -> std::unique_ptr<Case> {
                  return std::make_unique<ReadCase>(e, &st::cpu_read_1thread, true);
                }},
      StreamArm{.name = "write",
                .doc = "all threads write word i = seed ^ i",
                .on_gpu = false,
                .default_grid = [](const Target&,
                                   const StreamEnv& e) {
                  return Grid{sized("write", e.array_bytes, {{"threads", {"all"}}, {"huge", {"on"}}})};
                },
                .case_name_fn = [](const Point& p) { return sized_name(p, "huge"); },
                .make = [](const Point&, StreamEnv& e) -> std::unique_ptr<Case> { return std::make_unique<WriteCase>(e); }},
      StreamArm{.name = "copy",
                .doc = "copy the array: a word loop on all threads, glibc memcpy per thread and on one thread",
                .on_gpu = false,
                .default_grid = [](const Target&,
                                   const StreamEnv& e) {
                  return Grid{sized("copy", e.array_bytes, {{"threads", {"all"}}, {"huge", {"on"}}}),
                              sized("memcpy", e.array_bytes, {{"threads", {"all"}}, {"huge", {"on"}}}),
                              sized("memcpy_1thread", e.array_bytes, {{"threads", {"1"}}, {"huge", {"on"}}})};
                },
                .case_name_fn = [](const Point& p) { return sized_name(p, "huge"); },
                .make = [](const Point& p, StreamEnv& e) -> std::unique_ptr<Case> {
                  return std::make_unique<CopyCase>(e, p["op"], copy_fn(p["op"]));
                }},
  };
}

}  // namespace kvf::stream_study
