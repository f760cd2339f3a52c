// The gather part: runs of R bytes at random run-aligned offsets, without replacement, from a pool of at
// least 4x the LLC (1 GiB at most), beside a sequential read of the same pool (the figure each gather row is
// stated against) and, on the CPU, the same runs read by a plain OpenMP loop (the control the tuned gather must
// not lose to: issue 14's Xeon read 256 B runs faster with one).
#include <algorithm>
#include <chrono>

#include "access_env.hpp"
#include "kvf/errors.hpp"
#include "kvf/csv.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/stats.hpp"

#if defined(KVF_HAVE_CUDA)
#include "access_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::access_study {
namespace {

// The sequential arm reads 64 KiB runs in address order: the bandwidth a gather of the same pool could reach.
constexpr std::uint64_t kSeqRun = 65536;

// Software prefetch helps on one microarchitecture and halves bandwidth on another (the issue-14 Xeon: 64 KiB
// runs at 11.5 GB/s with it, 24.6 without), and reading two runs at once (ka::GatherPath::two_streams) won on a
// Zen 3 VM where neither did, so by default each CPU case times the three paths on its own pool just before it is
// measured, takes the fastest, and its note says which and why. Prefetch is taken only when faster than the best
// path without it by more than kPrefetchMargin (the attention's far prefetch rule): with three rounds and ties to
// on, a 2-core Zen 3 VM took it for the sequential arm on 2.59 against 2.63 ms, where alternated in one process it
// reads at 0.67-0.85 of the same loop without it, and the arm fell to 0.71 of the stream read.
constexpr int kCalibrationRounds = 5;
constexpr double kPrefetchMargin = 0.03;

class GatherCase final : public Case {
 public:
  std::shared_ptr<Shared> sh;
  ka::GatherGeom g;
  bool huge = true;
  ka::GatherPath path = ka::GatherPath::prefetch;
  bool calibrate_path = false;  // --prefetch auto: the fastest path, timed in setup
  std::string seq_key;    // sequential arm of the same pool/huge setting (for the vs_seq note)
  std::string plain_key;  // plain loop over the same runs (for the vs_plain note)
  bool is_seq = false, is_plain = false;
#if defined(KVF_HAVE_CUDA)
  BufferHandle dsum;
  int sms = 0;
#endif

  void setup(Backend& be) override {
    const auto& pool = sh->ensure_pool(be, g.pool_bytes, huge);
    if (!is_cuda(be)) {
      const auto pct = huge_backed_pct(pool.ptr, g.pool_bytes);
      if (pct) set_param(params, "huge_backed_pct", csv_number(*pct));
      if (huge && (!pool.huge || (pct && *pct < 50)))
        pool_note_ =
            "huge pages not granted (" + (pct ? csv_number(*pct) + "% backed" : std::string("not advised")) + "); ";
    }
    if (!is_cuda(be) && calibrate_path) pick_path(be);
#if defined(KVF_HAVE_CUDA)
    if (is_cuda(be)) {
      dsum = BufferHandle(be, 8, MemKind::device);
      sms = cuda_props(be).multiProcessorCount;
    }
#endif
  }
  bool has_verify() const override { return true; }
  std::uint64_t once(Backend& be) {
    if (!is_cuda(be)) return gather_host();
#if defined(KVF_HAVE_CUDA)
    KVF_CUDA_CHECK(cudaMemsetAsync(dsum->ptr, 0, 8, cuda_stream(be)));
    ka::gpu::gather(sh->pool->ptr, g, dsum.get().as<unsigned long long>(), sms, cuda_stream(be));
    be.synchronize();
    std::uint64_t r = 0;
    KVF_CUDA_CHECK(cudaMemcpy(&r, dsum->ptr, 8, cudaMemcpyDeviceToHost));
    return r;
#else
    return 0;
#endif
  }
  void verify(Backend& be) override {
    const std::uint64_t got = once(be), want = ka::gather_ref(kSeed, g);
    if (got != want)
      throw VerifyError("gather checksum " + std::to_string(got) + " differs from the reference " +
                        std::to_string(want) + " (run " + std::to_string(g.run_bytes) + " B)");
  }
  void run(Backend& be) override {
    if (!is_cuda(be)) {
      sh->sink += gather_host();
      return;
    }
#if defined(KVF_HAVE_CUDA)
    ka::gpu::gather(sh->pool->ptr, g, dsum.get().as<unsigned long long>(), sms, cuda_stream(be));
#endif
  }
  void teardown(Backend&) override {
#if defined(KVF_HAVE_CUDA)
    dsum.reset();
#endif
  }
  // Rounds that turn the order of the three paths each time (a drift of the machine weighs on all), each after a
  // cache flush as a cold sample is; the fastest median wins, prefetch only by the margin.
  void pick_path(Backend& be) {
    constexpr ka::GatherPath paths[3] = {ka::GatherPath::prefetch, ka::GatherPath::one_stream,
                                         ka::GatherPath::two_streams};
    std::vector<double> t[3];
    for (int r = 0; r < kCalibrationRounds; ++r)
      for (int i = 0; i < 3; ++i) {
        const int k = (i + r) % 3;
        be.flush_caches();
        const auto t0 = std::chrono::steady_clock::now();
        sh->sink += ka::gather_cpu(sh->pool->ptr, g, paths[k]);
        t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    const double on = summarize(t[0]).median, one = summarize(t[1]).median, two = summarize(t[2]).median;
    const double without = std::min(one, two);
    path = on < (1 - kPrefetchMargin) * without ? ka::GatherPath::prefetch
           : two < one                          ? ka::GatherPath::two_streams
                                                : ka::GatherPath::one_stream;
    path_note_ = std::string("path=") + ka::gather_path_name(path) + " (calibrated cold: prefetch " +
                     fmt(on * 1e3) + " ms, one_stream " + fmt(one * 1e3) + " ms, two_streams " + fmt(two * 1e3) +
                     " ms, median of " + std::to_string(kCalibrationRounds) + ", prefetch only when 3% faster); ";
  }
  std::string after_measure(Backend&, const Summary& m, const std::string& mode) override {
    std::string n = pool_note_ + path_note_;
    if (is_plain) {
      sh->record(plain_key, mode, m.median);
      return n + "control: a plain OpenMP loop over the same runs, no intrinsics, no software prefetch";
    }
    if (is_seq) sh->record(seq_key, mode, m.median);
    std::string vs;
    if (!is_seq)
      if (auto s = sh->median(seq_key, mode)) vs = "vs_seq=" + fmt(*s / m.median);
    if (auto s = sh->median(plain_key, mode))
      vs += (vs.empty() ? "" : " ") + std::string("vs_plain=") + fmt(*s / m.median);
    if (!vs.empty()) return n + vs;
    // The notes above end in "; " for what follows; nothing does (the harness adds its own separator).
    while (n.size() >= 2 && n.compare(n.size() - 2, 2, "; ") == 0) n.resize(n.size() - 2);
    return n;
  }

 private:
  std::uint64_t gather_host() const {
    return is_plain ? ka::gather_plain_cpu(sh->pool->ptr, g) : ka::gather_cpu(sh->pool->ptr, g, path);
  }
  std::string pool_note_, path_note_;  // in every mode's note
};

std::unique_ptr<Case> make_gather(const Point& p, AccessEnv& env) {
  const bool gpu = env.target.gpu, seq = p["arm"] == "sequential", plain = p["arm"] == "plain";
  const bool huge = p["huge"] == "on";
  const bool pf = p["prefetch"] != "off", calibrate = !gpu && !plain && p["prefetch"] == "auto";
  const std::uint64_t pool = std::uint64_t(p.integer("pool_mib")) << 20, R = std::uint64_t(p.integer("run_bytes"));
  const std::uint64_t total = gather_total(env, pool);
  ka::GatherGeom g{pool, R, total / R * R, kSeed, seq};
  kernel_check("--run-bytes, --pool-mib, --gather-mib", [&] { ka::validate_gather(g); });
  auto c = std::make_unique<GatherCase>();
  c->sh = env.shared;
  c->g = g;
  c->huge = huge;
  c->path = pf ? ka::GatherPath::prefetch : ka::GatherPath::one_stream;
  c->calibrate_path = calibrate;
  c->is_seq = seq;
  c->is_plain = plain;
  c->seq_key = "seq" + std::to_string(pool) + (huge ? "h" : "n") + p["prefetch"];
  if (!seq) c->plain_key = "plain" + std::to_string(pool) + (huge ? "h" : "n") + "R" + std::to_string(R);
  const double llc = double(env.llc);
  c->params = {{"working_set_bytes", std::to_string(g.total_bytes)},
               {"llc_bytes", std::to_string(env.llc)},
               {"working_set_vs_llc", fmt(double(g.total_bytes) / llc)}};
  c->bytes = double(g.total_bytes);
  c->ceiling = CeilingRef{"stream", {{"op", "read"}}, "gbps"};
  // Hot samples only where the gathered bytes fit the cache (else hot = cold, and time is short).
  c->hot = g.total_bytes < env.llc;
  c->hot_in_cache = c->hot;
  const double t = double(g.total_bytes) / (gpu ? 1e12 : (R < 256 ? 2e9 : 8e9));
  c->est_seconds = 0.05 + double(pool) / (gpu ? 5e11 : 3e9) +
                   (c->hot ? 2 : 1) * std::min(0.6, std::max(0.2, 10 * t + 0.05)) + double(g.total_bytes) / 1e9 +
                   (calibrate ? 3 * kCalibrationRounds * (t + double(env.llc) * 2 / 10e9) : 0);
  return c;
}

// Per (pool, huge pages): on the CPU the plain loop over every run length first, then
// per prefetch setting the sequential read and the gathers, so every row finds its vs_seq and vs_plain medians.
Grid gather_grid(const Target& t, const AccessEnv& env) {
  Grid grid;
  std::vector<std::string> runs;
  for (auto r : env.runs) runs.push_back(std::to_string(r));
  for (auto pool : env.pools)
    for (const auto& huge : env.gather_huge) {
      const auto prod = [&](const char* arm, std::vector<std::string> rs, const std::string& pf) {
        return Product{{{"part", {"gather"}},
                        {"arm", {arm}},
                        {"run_bytes", std::move(rs)},
                        {"pool_mib", {std::to_string(pool >> 20)}},
                        {"huge", {huge}},
                        {"prefetch", {pf}}}};
      };
      if (!t.gpu) grid.push_back(prod("plain", runs, ""));
      for (const auto& pf : env.prefetch) {
        grid.push_back(prod("sequential", {std::to_string(kSeqRun)}, pf));
        grid.push_back(prod("gather", runs, pf));
      }
    }
  return grid;
}

}  // namespace

std::uint64_t gather_total(const AccessEnv& env, std::uint64_t pool) {
  const bool gpu = env.target.gpu;
  return env.gather_bytes ? *env.gather_bytes
                          : std::min<std::uint64_t>(gpu ? 256ull << 20 : (env.target.quick ? 16ull << 20 : 64ull << 20),
                                                    pool / 2);
}

Arm<AccessEnv> gather_arm() {
  return Arm<AccessEnv>{
      .name = "gather",
      .doc = "runs of R bytes at random run-aligned offsets, without replacement, from a pool of 4x the LLC (128 MiB .. 1 GiB), "
             "beside a sequential read of the pool",
      .axes = {everywhere_axis("part", {"gather"}),
               everywhere_axis("arm", {"sequential", "gather", "plain"},
                               "sequential (64 KiB runs in order), gather, or plain (CPU: the same random runs read by a "
                               "plain OpenMP loop, no intrinsics or software prefetch: the control)"),
               {.name = "run_bytes", .doc = "bytes of one run, a power of two from 32",
                .cpu = {"32", "64", "128", "256", "512", "1024", "4096", "16384", "65536"}, .quick = {"256"},
                .flag = "--run-bytes"},
               // The pool follows the LLC: 4x LLC within 128 MiB (64 MiB with --quick) .. 1 GiB, resolved into the env.
               {.name = "pool_mib", .doc = "MiB of the pool the runs are drawn from", .flag = "--pool-mib"},
               {.name = "huge", .doc = "huge pages (CPU)", .cpu = {"on", "off"}, .gpu = {"on"}, .quick = {"on"},
                .flag = "--huge-pages"},
               {.name = "prefetch", .doc = "how the CPU gather reads: auto (the fastest of one run at a time with "
                "software prefetch, without, and two runs at a time, timed before each case and named in the note; "
                "prefetch only where more than 3% faster), on, off (one run at a time; empty on the GPU)",
                .cpu = {"auto"},
                .gpu = {""}, .quick = {"auto"}, .quick_gpu = {""}, .flag = "--prefetch"}},
      .default_grid = gather_grid,
      .case_name_fn =
          [](const Point& p) {
            const bool seq = p["arm"] == "sequential";
            return std::string("gather/") + (seq ? "seq" : "R" + p["run_bytes"]) + "/pool" + p["pool_mib"] + "MiB/" +
                   (p["huge"] == "on" ? "huge" : "nohuge") +
                   (p["arm"] == "plain" ? "/plain"
                    : p["prefetch"] == "off" ? "/noprefetch"
                    : p["prefetch"] == "on" ? "/prefetch" : "");
          },
      .make = make_gather};
}

}  // namespace kvf::access_study
