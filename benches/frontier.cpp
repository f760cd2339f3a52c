// The frontier study: recompute a KV page or fetch it? Measures both sides of the crossover.
//
// Run:   build/bin/bench_frontier [--quick] [--models Llama-3.1-8B] [--tokens 128] [--pages 1,4]
//        [--arms x,xq,layers,mla,copy,granularity,file,overlap,link] [--file-dir /var/tmp] [--out DIR]
//
// Recompute arms (kernels/frontier/): from the resident bf16 layer input X (K/V projection GEMM,
// RoPE, paged write), from int8/int4 X (dequantize pass, then the same GEMM: not fused), from token
// embeddings through L layers over a resident prefix of N tokens (CPU twin; GPU: kernels/decode PrefillGpu), and MLA's latent
// (DeepSeek-V3) with its up-projection. Every recompute arm is checked against an fp64 reference
// (tolerance in kernels/frontier/recompute.hpp) before it is timed, and every one states its TFLOP/s
// against the "gemm_ceiling" cases of this study measured first in the same run (CPU: the better of
// OpenBLAS's own pthread pool and the OpenMP split the arms use; why the arms run BLAS on the OpenMP
// team: "BLAS threading" in kernels/frontier/recompute.hpp).
// Shared or oversubscribed CPU (load average above the core count): OpenMP's default spin-then-sleep
// wait lets an idle worker lose its core, and the next parallel region (a 2 MiB host copy, a GEMM)
// can wait a whole scheduler period for it (~24 ms measured on the 2-core VM, against ~0.1 ms for the
// copy). Run with OMP_WAIT_POLICY=passive there; it must be in the environment at start (libgomp reads
// it when loaded), and on a dedicated machine the default is the better choice.
// Transfer arms: host DRAM->DRAM (Backend::copy) against glibc memcpy, one page as many small copies
// against one contiguous copy, the O_DIRECT file tier against dd iflag=direct on the same file, and
// on CUDA: H2D/D2H pinned and pageable, SM zero-copy reads, bidirectional, peer-to-peer. Every
// transfer is verified by a pattern compare. Overlap: part of a page recomputed while the rest is
// fetched. Each arm records the resident bytes per page it needs (resident_bytes_per_page).
#include <CLI/CLI.hpp>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <atomic>
#include <omp.h>
#include <thread>

#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/pattern.hpp"
#include "kvf/fn_case.hpp"
#include "kvf/study.hpp"
#include "kvf/units.hpp"
#include "layers.hpp"
#include "kvf/model_shapes.hpp"
#include "models.hpp"
#include "recompute.hpp"
#include "transfer.hpp"

#if defined(KVF_HAVE_CUDA)
#include "access.hpp"
#include "access_gpu.hpp"
#include "decode.hpp"
#include "decode_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#include "recompute_gpu.hpp"
#endif

namespace {

using kvf::FnCase;

using kvf::Backend;
using kvf::BufferHandle;
using kvf::MemKind;
using kvf::Param;
namespace fr = kvf::frontier;
namespace md = kvf::models;
#if defined(KVF_HAVE_CUDA)
namespace ka = kvf::access;
#endif

constexpr std::uint64_t kSeed = 0xf00d;
constexpr int kPos0 = 4096;  // pages of the X arms sit at positions 4096 .. 4096 + T - 1

std::string str(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
std::string i2s(long long v) { return std::to_string(v); }
kvf::Buffer host_view(const void* p, std::size_t bytes) {
  kvf::Buffer b;
  b.ptr = const_cast<void*>(p);
  b.bytes = bytes;
  b.kind = MemKind::pageable_host;
  return b;
}
kvf::Buffer sub(const kvf::Buffer& b, std::size_t off, std::size_t bytes) {
  kvf::Buffer s = b;
  s.ptr = static_cast<char*>(b.ptr) + off;
  s.bytes = bytes;
  return s;
}
// Device buffer holding a copy of host data.
[[maybe_unused]] BufferHandle upload(Backend& be, const void* p, std::size_t bytes) {
  BufferHandle d(be, std::max<std::size_t>(bytes, 16), MemKind::device);
  if (bytes) be.copy(d.get(), host_view(p, bytes), bytes);
  return d;
}
[[maybe_unused]] void download(Backend& be, void* p, const BufferHandle& d, std::size_t bytes) {
  be.copy(host_view(p, bytes), d.get(), bytes);
}

#if defined(KVF_HAVE_CUDA)
// A second, non-blocking stream beside the timed one (overlap, bidirectional copies, interference
// background). fork(main): work queued on `s` afterwards starts after what `main` holds so far;
// join(main): `main` waits for everything queued on `s` so far, so it falls inside the timed region.
// Destruction waits for `s` to drain; reset it before freeing buffers its work touches.
struct SideStream {
  cudaStream_t s = nullptr;
  cudaEvent_t fork_ev = nullptr, join_ev = nullptr;

  static std::unique_ptr<SideStream> make() {
    auto p = std::make_unique<SideStream>();  // the destructor releases whatever was created if one call throws
    KVF_CUDA_CHECK(cudaStreamCreateWithFlags(&p->s, cudaStreamNonBlocking));
    KVF_CUDA_CHECK(cudaEventCreateWithFlags(&p->fork_ev, cudaEventDisableTiming));
    KVF_CUDA_CHECK(cudaEventCreateWithFlags(&p->join_ev, cudaEventDisableTiming));
    return p;
  }
  cudaStream_t fork(cudaStream_t main) {
    KVF_CUDA_CHECK(cudaEventRecord(fork_ev, main));
    KVF_CUDA_CHECK(cudaStreamWaitEvent(s, fork_ev, 0));
    return s;
  }
  void join(cudaStream_t main) {
    KVF_CUDA_CHECK(cudaEventRecord(join_ev, s));
    KVF_CUDA_CHECK(cudaStreamWaitEvent(main, join_ev, 0));
  }
  SideStream() = default;
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  ~SideStream() {
    if (s) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
    if (fork_ev) (void)cudaEventDestroy(fork_ev);
    if (join_ev) (void)cudaEventDestroy(join_ev);
  }
};
#endif

// Estimated seconds for a case whose run takes `t` seconds: setup/verify + warm-up and samples of
// both modes under the default stop rule (5 samples at least, 0.5 s per mode at most).
double est(double t, double setup_s, int modes = 2) {
  return setup_s + modes * (2 * t + std::max(std::min(0.5, 1000 * t), 5 * t)) + 0.02;
}

const char* kAllArms = "x,xq,layers,mla,copy,granularity,file,overlap,interference,link";

class FrontierStudy final : public kvf::Study {
 public:
  std::string name() const override { return "frontier"; }

  void add_options(CLI::App& app) override {
    app_ = &app;
    app.add_option("--models", models_, "model names from data/models.json (default Llama-3.1-8B,DeepSeek-V3)")
        ->delimiter(',');
    app.add_option("--models-file", models_file_, "model shape file (default: <source>/data/models.json)");
    app.add_option("--tokens", tokens_text_, "tokens per page T, 16..4096, multiple of 16 (default per arm)")
        ->delimiter(',');
    app.add_option("--pages", pages_text_, "pages per recompute call P, 1..64 (default per arm)")->delimiter(',');
    app.add_option("--layers", layers_text_, "layers L for the through-layers arm, 1..model layers")->delimiter(',');
    app.add_option("--prefix", prefix_text_, "resident prefix N tokens for the through-layers arm, 0..1048576 "
                   "(and the decode tokens of the interference arm)")->delimiter(',');
    app.add_option("--xdtypes", xdtypes_, "X forms of the quantized arm: int8,int4 (default both)")->delimiter(',');
    app.add_option("--arms", arms_, std::string("arms to run (default all): ") + kAllArms)->delimiter(',');
    app.add_option("--copy-sizes", copy_sizes_, "copy sizes of the transfer arms, multiples of 4 KiB in 4 KiB .. 1 GiB, "
                   "e.g. 32KiB,2MiB")->delimiter(',');
    app.add_option("--file-dir", file_dir_, "directory on local disk for the O_DIRECT file tier (default /var/tmp)");
    app.add_option("--file-size", file_size_text_, "size of the file tier's file, a multiple of 2 MiB that fits the "
                   "free space of --file-dir (default 256MiB; --quick 64MiB)");
  }

  std::vector<std::unique_ptr<kvf::Case>> cases(const kvf::StudyContext& ctx) override;

 private:
  std::vector<std::string> models_, xdtypes_, arms_, copy_sizes_;
  std::string models_file_, file_dir_ = "/var/tmp", file_size_text_;
  // Numbers are kept as text and parsed in cases(): plain digits in a stated range, one clear line otherwise.
  std::vector<std::string> tokens_text_, pages_text_, layers_text_, prefix_text_;
  std::vector<int> tokens_, pages_, layers_, prefix_;
  CLI::App* app_ = nullptr;  // outlives cases(): bench_main owns it
  std::vector<md::ModelShape> all_;
  std::map<std::string, std::shared_ptr<fr::LayerWeights>> layer_weights_;
  bool gpu_ = false, quick_ = false;
  double mem_avail_ = 0;
  std::size_t gpu_memory_bytes_ = 0;

  using Out = std::vector<std::unique_ptr<kvf::Case>>;
  bool arm_on(const std::string& a) const {
    return arms_.empty() || std::find(arms_.begin(), arms_.end(), a) != arms_.end();
  }
  FnCase& add(Out& out, std::string name, std::vector<Param> params) {
    return kvf::add_fn_case(out, std::move(name), std::move(params));
  }
  void add_gemm_ceiling(Out& out, Backend& be);
  void add_x(Out& out, const md::ModelShape& m, int T, int P, const std::string& xdtype);
  void add_layers(Out& out, const md::ModelShape& m, int T, int L, int N);
#if defined(KVF_HAVE_CUDA)
  void add_layers_gpu(Out& out, const md::ModelShape& m, int T, int L, int N, const std::string& name,
                      std::vector<Param> params);
#endif
  void add_mla(Out& out, const md::ModelShape& m, int T, int P, const std::string& part);
  void add_copies(Out& out, const std::vector<std::size_t>& sizes);
  void add_granularity(Out& out, const md::ModelShape& m, int T, const std::vector<std::size_t>& sizes);
  void add_file(Out& out, const std::vector<std::size_t>& sizes, std::size_t file_bytes, const md::ModelShape& m, int T);
  void add_overlap(Out& out, const md::ModelShape& m, int T, double f);
  void add_link(Out& out, const std::vector<std::size_t>& sizes);
  void add_interference(Out& out, const md::ModelShape& m, int N, const std::string& background);
};

// ---------------------------------------------------------------- validation and case list
// Every flag value is checked before any case exists: one line naming the flag, the value and what is allowed.


// Each item through kvf::flag_int (plain digits in [lo, hi], a multiple of `multiple`).
std::vector<int> parse_ints(const std::vector<std::string>& texts, const char* flag, int lo, int hi, int multiple,
                            const std::string& allowed) {
  std::vector<int> out;
  for (const auto& t : texts) out.push_back(kvf::flag_int(t, flag, lo, hi, multiple, allowed));
  return out;
}

std::vector<std::unique_ptr<kvf::Case>> FrontierStudy::cases(const kvf::StudyContext& ctx) {
  Backend& be = *ctx.backend;
  gpu_ = be.name() == "cuda";
  quick_ = ctx.quick;
#if !defined(KVF_HAVE_CUDA)
  if (gpu_) throw kvf::UsageError("--backend cuda: this build of bench_frontier has no CUDA kernels");
#endif
  // A flag given with an empty value is refused, never taken for "not given".
  const auto given = [&](const char* flag) { return app_ && app_->count(flag) > 0; };
  if (given("--models-file") && models_file_.empty()) kvf::bad_flag("--models-file", "", "the path of a model shape file");
  if (given("--file-dir") && file_dir_.empty()) kvf::bad_flag("--file-dir", "", "a writable directory on local disk");
  if (given("--file-size") && file_size_text_.empty())
    kvf::bad_flag("--file-size", "", "a size, a multiple of 2 MiB (e.g. 64MiB, 1GiB)");
  {
    const std::string known = kAllArms;
    for (const auto& a : arms_)
      if (("," + known + ",").find("," + a + ",") == std::string::npos) kvf::bad_flag("--arms", a, "unknown arm; allowed: " + known);
  }
  tokens_ = parse_ints(tokens_text_, "--tokens", 16, 4096, fr::kBlockTokens,
                       "tokens per page must be a whole number in 16..4096 and a multiple of 16");
  pages_ = parse_ints(pages_text_, "--pages", 1, 64, 1, "pages per call must be a whole number in 1..64");
  prefix_ = parse_ints(prefix_text_, "--prefix", 0, 1 << 20, 1, "prefix must be a whole number of tokens in 0..1048576");
  layers_ = parse_ints(layers_text_, "--layers", 1, 1 << 16, 1, "must be a whole number in 1..the model's layers");
  for (const auto& x : xdtypes_)
    if (x != "int8" && x != "int4") kvf::bad_flag("--xdtypes", x, "allowed: int8, int4");
  all_ = md::load_models(models_file_.empty() ? md::default_models_path() : models_file_);
  const bool user_models = !models_.empty();
  std::vector<std::string> names = user_models ? models_ : std::vector<std::string>{"Llama-3.1-8B", "DeepSeek-V3"};
  if (gpu_ && !user_models && !quick_) {
    names.clear();
    for (const auto& m : all_) names.push_back(m.name);
  }
  std::vector<const md::ModelShape*> ms;
  for (const auto& n : names) ms.push_back(&md::find_model(all_, n));
  for (int L : layers_)
    for (const auto* m : ms)
      if (!m->is_mla && L > m->layers)
        throw kvf::UsageError("--layers " + std::to_string(L) + ": " + m->name + " has " + std::to_string(m->layers) +
                              " layers");
  std::vector<std::size_t> sizes;
  for (const auto& s : copy_sizes_) {
    if (s.empty()) kvf::bad_flag("--copy-sizes", s, "a size, a multiple of 4 KiB between 4 KiB and 1 GiB (e.g. 32KiB)");
    const std::size_t b = kvf::parse_bytes(s, "--copy-sizes");
    if (b < 4096 || b > (std::size_t(1) << 30) || b % 4096)
      kvf::bad_flag("--copy-sizes", s, "must be a multiple of 4 KiB between 4 KiB and 1 GiB");
    sizes.push_back(b);
  }
  std::size_t file_bytes = quick_ ? std::size_t(64) << 20 : std::size_t(256) << 20;
  if (!file_size_text_.empty()) {
    file_bytes = kvf::parse_bytes(file_size_text_, "--file-size");
    if (file_bytes % (std::size_t(2) << 20) || file_bytes < (std::size_t(2) << 20))
      kvf::bad_flag("--file-size", file_size_text_, "must be a multiple of 2 MiB");
  }
  mem_avail_ = double(kvf::host_memory_bytes() ? kvf::host_memory_bytes() : (std::size_t(8) << 30)) * 0.6;
  if ((arm_on("file") || arm_on("overlap") || arm_on("interference")) && !gpu_) {
    fr::check_file_dir(file_dir_);
    // The tier file is written whole at setup: one that cannot fit would fill the disk mid-run.
    struct statvfs fs {};
    if (arm_on("file") && ::statvfs(file_dir_.c_str(), &fs) == 0) {
      const double free_bytes = double(fs.f_bavail) * double(fs.f_frsize);
      if (double(file_bytes) > 0.9 * free_bytes)
        kvf::bad_flag("--file-size", file_size_text_.empty() ? kvf::format_bytes(double(file_bytes)) : file_size_text_,
            "more than 90% of the free space of --file-dir " + kvf::shown_value(file_dir_) + " (" + kvf::format_bytes(free_bytes) +
                " free)");
    }
  }

  // Memory: the largest recompute batch and the through-layers prefix must fit.
  const double dev_mem = gpu_ ? double(be.info().memory_bytes) * 0.8 : mem_avail_;
  if (gpu_) gpu_memory_bytes_ = be.info().memory_bytes;
  for (const auto* m : ms) {
    for (int T : tokens_)
      for (int P : pages_) {
        const double need = double(T) * P * m->hidden * (gpu_ ? 2 + 8 : 2 + 4 + 8);
        if (need > dev_mem)
          throw kvf::UsageError("--tokens " + std::to_string(T) + " --pages " + std::to_string(P) + ": " + m->name +
                                " needs " + kvf::format_bytes(need) + " for X and the GEMM output, more than the " +
                                kvf::format_bytes(dev_mem) + " available");
      }
    if (m->is_mla) continue;
    for (int L : layers_)
      for (int N : prefix_) {
        const double need = double(fr::prefix_bytes(*m, L, N, 4096));
        if (need > mem_avail_)
          throw kvf::UsageError("--prefix " + std::to_string(N) + ": the fp32 prefix K/V of " + std::to_string(L) +
                                " layers of " + m->name + " needs " + kvf::format_bytes(need) + ", more than the " +
                                kvf::format_bytes(mem_avail_) + " available");
      }
  }

  Out out;
  add_gemm_ceiling(out, be);
  const auto pick = [&](const std::vector<int>& user, std::vector<int> dflt) { return user.empty() ? dflt : user; };
  const md::ModelShape* first_gqa = nullptr;
  for (const auto* m : ms)
    if (!m->is_mla) { first_gqa = m; break; }

  for (const auto* m : ms) {
    if (m->is_mla) continue;
    if (arm_on("x")) {
      if (!tokens_.empty() || !pages_.empty()) {
        for (int T : pick(tokens_, {128}))
          for (int P : pick(pages_, {1})) add_x(out, *m, T, P, "bf16");
      } else if (quick_) {
        add_x(out, *m, 128, 1, "bf16");
      } else if (gpu_) {
        for (int T : {16, 32, 64, 128, 256, 512, 1024, 2048, 4096})
          for (int P : {1, 2, 4, 8, 16, 32, 64})
            if (T * P <= 65536) add_x(out, *m, T, P, "bf16");
      } else {
        for (auto [T, P] : std::vector<std::pair<int, int>>{{128, 1}, {16, 8}, {128, 4}, {16, 1}, {512, 1}})
          add_x(out, *m, T, P, "bf16");
      }
    }
    if (arm_on("xq") && !quick_) {
      const std::vector<std::string> xd = xdtypes_.empty() ? std::vector<std::string>{"int8", "int4"} : xdtypes_;
      for (const auto& x : xd) {
        if (!tokens_.empty() || !pages_.empty()) {
          for (int T : pick(tokens_, {128}))
            for (int P : pick(pages_, {1})) add_x(out, *m, T, P, x);
        } else if (gpu_) {
          for (int T : {16, 128, 1024, 4096})
            for (int P : {1, 8, 64})
              if (T * P <= 65536) add_x(out, *m, T, P, x);
        } else {
          add_x(out, *m, 128, 1, x);
        }
      }
    }
    if (arm_on("layers") && !quick_) {
      for (int T : pick(tokens_, {128}))
        for (int L : pick(layers_, gpu_ ? std::vector<int>{1} : std::vector<int>{1, 2}))
          for (int N : pick(prefix_, {1024})) add_layers(out, *m, T, L, N);
    }
  }
  for (const auto* m : ms) {
    if (!m->is_mla || !arm_on("mla") || quick_) continue;
    std::vector<std::pair<int, int>> tp;
    if (!tokens_.empty() || !pages_.empty()) {
      for (int T : pick(tokens_, {128}))
        for (int P : pick(pages_, {1})) tp.emplace_back(T, P);
    } else if (gpu_) {
      for (int T : {16, 128, 1024, 4096})
        for (int P : {1, 8, 64})
          if (T * P <= 65536) tp.emplace_back(T, P);
    } else {
      tp = {{128, 1}};
    }
    for (auto [T, P] : tp) {
      add_mla(out, *m, T, P, "latent");
      add_mla(out, *m, T, P, "up");
    }
  }
  const auto KiB = [](std::size_t k) { return k << 10; };
  if (arm_on("copy") && !gpu_) {
    add_copies(out, !sizes.empty() ? sizes
                    : quick_       ? std::vector<std::size_t>{KiB(512)}
                                   : std::vector<std::size_t>{KiB(32), KiB(512), KiB(2048), KiB(64 << 10)});
  }
  if (arm_on("granularity") && first_gqa && !quick_) {
    add_granularity(out, *first_gqa, 128,
                    !sizes.empty() ? sizes : std::vector<std::size_t>{KiB(32), KiB(64), KiB(512), KiB(2048)});
  }
  if (arm_on("file") && !gpu_) {
    add_file(out, !sizes.empty() ? sizes : quick_ ? std::vector<std::size_t>{KiB(512)} : std::vector<std::size_t>{KiB(512), KiB(2048)},
             file_bytes, first_gqa ? *first_gqa : *ms[0], 128);
  }
  if (arm_on("overlap") && first_gqa && !quick_) {
    if (gpu_) {
      for (int T : {128, 1024})
        for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) add_overlap(out, *first_gqa, T, f);
    } else {
      for (double f : {0.0, 0.5, 1.0}) add_overlap(out, *first_gqa, 128, f);
    }
  }
  if (arm_on("interference") && first_gqa && !quick_) {
    const int N = prefix_.empty() ? (gpu_ ? 32768 : 16384) : prefix_[0];
    for (const char* bg : {"none", "recompute", "copy", "file"})
      if (!(gpu_ && std::string(bg) == "file")) add_interference(out, *first_gqa, N, bg);
  }
  if (arm_on("link") && gpu_) {
    add_link(out, !sizes.empty() ? sizes
                  : quick_       ? std::vector<std::size_t>{KiB(512)}
                                 : std::vector<std::size_t>{KiB(16), KiB(32), KiB(128), KiB(512), KiB(2048), KiB(8192),
                                                            KiB(64 << 10)});
  }
  return out;
}

// ---------------------------------------------------------------- GEMM ceiling
void FrontierStudy::add_gemm_ceiling(Out& out, Backend& be) {
  const int n = gpu_ ? 8192 : (quick_ ? 1024 : 2048);
  if (!gpu_) {
    // Two rows; the arms take the better one (best row of arm=gemm_ceiling in the same mode):
    // OpenBLAS's own pthread pool, and the OpenMP split the arms run on (kernels/frontier/recompute.hpp,
    // "BLAS threading"). On a loaded machine either can come out ahead.
    for (const bool own : {true, false}) {
      auto& c = add(out, "gemm_ceiling/" + i2s(n) + (own ? "" : "/openmp_split"),
                    {{"arm", "gemm_ceiling"}, {"gemm_m", i2s(n)}, {"gemm_n", i2s(n)}, {"gemm_k", i2s(n)},
                     {"blas_threading", own ? "openblas_pthreads" : "openmp_split"}});
      c.flops = 2.0 * n * n * n;
      c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};
      c.note = own ? "OpenBLAS cblas_sgemm, fp32, square, OpenBLAS's own threads"
                   : "OpenBLAS sgemm, fp32, square, through gemm_xwT like the arms (one-thread OpenBLAS per OpenMP "
                     "thread, N split)";
      c.note += "; the CPU recompute arms are stated against the better of the two rows";
      c.est_seconds = est(c.flops / 180e9, 0.1);
      auto s = std::make_shared<std::vector<float>>();
      c.on_setup = [s, n](Backend&) {
        s->resize(3 * std::size_t(n) * n);
        fr::fill_f32_uniform(s->data(), std::size_t(n) * n, 1, 1.f);
        fr::fill_f32_uniform(s->data() + std::size_t(n) * n, std::size_t(n) * n, 2, 1.f);
      };
      c.on_run = [s, n, own](Backend&) {
        const float* a = s->data();
        const float* b = a + std::size_t(n) * n;
        float* y = s->data() + 2 * std::size_t(n) * n;
        if (own) fr::gemm_xwT_blas_threads(a, b, y, n, n, n);
        else fr::gemm_xwT(a, b, y, n, n, n);
      };
      c.on_teardown = [s](Backend&) { *s = {}; };
    }
    (void)be;
    return;
  }
  auto& c = add(out, "gemm_ceiling/" + i2s(n), {{"arm", "gemm_ceiling"}, {"gemm_m", i2s(n)}, {"gemm_n", i2s(n)}, {"gemm_k", i2s(n)}});
  c.flops = 2.0 * n * n * n;
  c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};
#if defined(KVF_HAVE_CUDA)
  struct S {
    BufferHandle da, db, dy;
    std::unique_ptr<fr::gpu::LtGemm> g;
  };
  auto s = std::make_shared<S>();
  {
    c.note = "cuBLASLt bf16 x bf16 -> fp32 (TN), square: the GPU recompute arms are stated against it";
    c.est_seconds = est(c.flops / 600e12, 1.0);
    c.on_setup = [s, n](Backend& be) {
      std::vector<std::uint16_t> h(std::size_t(n) * n);
      fr::fill_bf16_uniform(h.data(), h.size(), 1, 1.f);
      s->da = upload(be, h.data(), h.size() * 2);
      s->db = upload(be, h.data(), h.size() * 2);
      s->dy = BufferHandle(be, std::size_t(n) * n * 4, MemKind::device);
      s->g = std::make_unique<fr::gpu::LtGemm>();
      s->g->plan(n, n, n);
      s->g->run(s->da->ptr, s->db->ptr, s->dy->ptr, kvf::cuda_stream(be));  // loads the kernel before timing
      be.synchronize();
    };
    c.on_run = [s](Backend& be) { s->g->run(s->da->ptr, s->db->ptr, s->dy->ptr, kvf::cuda_stream(be)); };
    c.on_teardown = [s](Backend&) {
      s->g.reset();
      s->da.reset();
      s->db.reset();
      s->dy.reset();
    };
  }
#endif
  (void)be;
}

// ---------------------------------------------------------------- recompute from X (bf16, int8, int4)
struct XState {
  int rows = 0, hidden = 0, bits = 16;
  fr::KvGeom g;
  std::vector<std::uint16_t> w, x, xdq;  // bf16 W [2kvd][hidden], bf16 X, GPU-dequantized X (verify)
  std::vector<float> wf, xf, y, bias, cos_sin;
  std::vector<std::uint8_t> xq;
  std::vector<float> scales;
  std::vector<double> inv_freq;
  std::vector<std::int32_t> pos;
  std::vector<std::int64_t> slot;
  std::vector<std::uint16_t> cache;
  std::int64_t n_blocks = 0;
#if defined(KVF_HAVE_CUDA)
  BufferHandle dw, dx, dxq, dsc, dy, dbias, dcs, dpos, dslot, dcache;
  std::unique_ptr<fr::gpu::LtGemm> gemm;
#endif
};

std::string resident_name(const std::string& xdtype) { return "x_" + xdtype; }
fr::Resident resident_of(const std::string& xdtype) {
  return xdtype == "int8" ? fr::Resident::x_int8 : xdtype == "int4" ? fr::Resident::x_int4 : fr::Resident::x_bf16;
}

void x_setup_host(XState& s, const md::ModelShape& m, int T, int P, int bits, bool gpu) {
  s.rows = T * P;
  s.hidden = m.hidden;
  s.bits = bits;
  s.g = {m.n_kv_heads, m.head_dim};
  const int out = 2 * s.g.kv_dim();
  s.w.resize(std::size_t(out) * m.hidden);
  fr::fill_bf16_uniform(s.w.data(), s.w.size(), kSeed + 1, float(std::sqrt(3.0 / m.hidden)));
  if (!gpu) {
    s.wf.resize(s.w.size());
    fr::bf16_to_f32(s.w.data(), s.wf.data(), s.w.size());
  }
  s.x.resize(std::size_t(s.rows) * m.hidden);
  fr::fill_bf16_uniform(s.x.data(), s.x.size(), kSeed + 2, 1.0f);
  if (bits != 16) {
    s.xq.resize(std::size_t(s.rows) * m.hidden * bits / 8);
    s.scales.resize(std::size_t(s.rows) * ((m.hidden + fr::kQuantGroup - 1) / fr::kQuantGroup));
    fr::quantize_x(s.x.data(), s.rows, m.hidden, bits, s.xq.data(), s.scales.data());
  }
  if (m.qkv_bias) {
    s.bias.resize(out);
    fr::fill_f32_uniform(s.bias.data(), out, kSeed + 3, 0.5f);
  }
  s.inv_freq = fr::rope_inv_freq(m, m.head_dim);
  s.cos_sin = fr::rope_table(s.inv_freq, kPos0 + T);
  s.pos.resize(s.rows);
  for (int r = 0; r < s.rows; ++r) s.pos[r] = kPos0 + r % T;
  s.n_blocks = 2 * ((s.rows + fr::kBlockTokens - 1) / fr::kBlockTokens);
  s.slot = fr::scattered_slots(s.rows, s.n_blocks, kSeed + 4);
  s.cache.assign(std::size_t(s.n_blocks) * 2 * fr::kBlockTokens * s.g.kv_dim(), 0);
  if (!gpu) {
    s.xf.resize(s.x.size());
    s.y.resize(std::size_t(s.rows) * out);
  }
}

void x_run_cpu(XState& s) {
  if (s.bits == 16) fr::bf16_to_f32(s.x.data(), s.xf.data(), s.x.size());
  else fr::dequant_x_f32(s.xq.data(), s.scales.data(), s.rows, s.hidden, s.bits, s.xf.data());
  fr::gemm_xwT(s.xf.data(), s.wf.data(), s.y.data(), s.rows, 2 * s.g.kv_dim(), s.hidden);
  fr::rope_write_cpu(s.y.data(), s.bias.empty() ? nullptr : s.bias.data(), s.rows, s.g, s.cos_sin.data(),
                     s.pos.data(), s.slot.data(), s.cache.data());
}

#if defined(KVF_HAVE_CUDA)
void x_setup_gpu(XState& s, Backend& be) {
  s.dw = upload(be, s.w.data(), s.w.size() * 2);
  s.dx = upload(be, s.x.data(), s.x.size() * 2);
  if (s.bits != 16) {
    s.dxq = upload(be, s.xq.data(), s.xq.size());
    s.dsc = upload(be, s.scales.data(), s.scales.size() * 4);
  }
  s.dy = BufferHandle(be, std::size_t(s.rows) * 2 * s.g.kv_dim() * 4, MemKind::device);
  s.dbias = upload(be, s.bias.data(), s.bias.size() * 4);
  s.dcs = upload(be, s.cos_sin.data(), s.cos_sin.size() * 4);
  s.dpos = upload(be, s.pos.data(), s.pos.size() * 4);
  s.dslot = upload(be, s.slot.data(), s.slot.size() * 8);
  s.dcache = upload(be, s.cache.data(), s.cache.size() * 2);
  s.gemm = std::make_unique<fr::gpu::LtGemm>();
  s.gemm->plan(s.rows, 2 * s.g.kv_dim(), s.hidden);
}
void x_run_gpu(XState& s, cudaStream_t st) {
  if (s.bits != 16)
    fr::gpu::dequant_x(s.dxq->as<std::uint8_t>(), s.dsc->as<float>(), s.rows, s.hidden, s.bits,
                       s.dx->as<std::uint16_t>(), st);
  s.gemm->run(s.dx->ptr, s.dw->ptr, s.dy->ptr, st);
  fr::gpu::rope_write(s.dy->as<float>(), s.bias.empty() ? nullptr : s.dbias->as<float>(), s.rows, s.g.n_kv_heads,
                      s.g.head_dim, s.dcs->as<float>(), s.dpos->as<std::int32_t>(), s.dslot->as<std::int64_t>(),
                      s.dcache->as<std::uint16_t>(), st);
}
#endif

// Checks sampled rows of s.cache against the fp64 reference of `xin` (bf16 values of the GEMM input).
fr::VerifyStats x_check(const XState& s, const std::vector<std::uint16_t>& xin_bf16) {
  const auto rows = fr::sample_rows(s.rows, 24);
  std::vector<std::vector<float>> xr;
  for (int r : rows) {
    std::vector<float> v(s.hidden);
    fr::bf16_to_f32(xin_bf16.data() + std::size_t(r) * s.hidden, v.data(), s.hidden);
    xr.push_back(std::move(v));
  }
  return fr::verify_rows(rows, xr, s.w.data(), s.bias.empty() ? nullptr : s.bias.data(), s.hidden, s.g, s.inv_freq,
                         s.pos.data(), s.slot.data(), s.cache.data());
}

std::vector<Param> page_params(const md::ModelShape& m, const std::string& arm, int T, int P, int L) {
  const std::int64_t kvb = fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token());
  return {{"arm", arm},
          {"model", m.name},
          {"tokens", i2s(T)},
          {"pages", i2s(P)},
          {"rows", i2s(std::int64_t(T) * P)},
          {"layers", i2s(L)},
          {"kv_bytes_per_page", i2s(kvb * L)},
          {"kv_fp8_bytes_per_page", i2s(fr::resident_bytes(fr::Resident::kv_fp8, T, m.hidden, m.kv_values_per_token()) * L)}};
}

void FrontierStudy::add_x(Out& out, const md::ModelShape& m, int T, int P, const std::string& xdtype) {
  const int bits = xdtype == "int8" ? 8 : xdtype == "int4" ? 4 : 16;
  const std::string arm = bits == 16 ? "x" : "xq";
  auto params = page_params(m, arm, T, P, 1);
  const std::int64_t res = fr::resident_bytes(resident_of(xdtype), T, m.hidden, m.kv_values_per_token());
  params.push_back({"xdtype", xdtype});
  params.push_back({"resident_form", resident_name(xdtype)});
  params.push_back({"resident_bytes_per_page", i2s(res)});
  params.push_back({"fused", bits == 16 ? "n/a" : "no"});
  params.push_back({"gemm", gpu_ ? "cublaslt_bf16_fp32out" : "openblas_sgemm_w_fp32"});
  auto& c = add(out, arm + "/" + m.name + "/" + xdtype + "/T" + i2s(T) + "/P" + i2s(P), std::move(params));
  const double rows = double(T) * P, kvd = m.kv_dim();
  c.flops = 2.0 * rows * m.hidden * 2 * kvd;
  const double wbytes = 2 * kvd * m.hidden * (gpu_ ? 2 : 4);
  c.bytes = double(res) * P + wbytes + rows * 2 * kvd * 2;
  c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};
  c.note = std::string("bytes = resident X read + K/V weights read + K/V written; pages at positions ") + i2s(kPos0) +
           "+; K/V written to scattered 16-token blocks" +
           (bits == 16 ? "" : "; dequantize pass (bf16 X) then the GEMM: not fused") +
           (gpu_ ? "" : "; CPU: W widened to fp32 once (this OpenBLAS has no cblas_sbgemm), X widened per call");
  const double t = c.flops / (gpu_ ? 400e12 : 150e9) + (gpu_ ? 10e-6 : 0);
  c.est_seconds = est(t, gpu_ ? 0.3 : 0.05 + rows * m.hidden * 2e-9);
  auto s = std::make_shared<XState>();
  const bool gpu = gpu_;
  const md::ModelShape mm = m;
  c.on_setup = [s, mm, T, P, bits, gpu](Backend& be) {
    x_setup_host(*s, mm, T, P, bits, gpu);
#if defined(KVF_HAVE_CUDA)
    if (gpu) x_setup_gpu(*s, be);
#endif
    (void)be;
  };
  c.on_run = [s, gpu](Backend& be) {
#if defined(KVF_HAVE_CUDA)
    if (gpu) return x_run_gpu(*s, kvf::cuda_stream(be));
#endif
    (void)be;
    (void)gpu;
    x_run_cpu(*s);
  };
  auto quant_note = std::make_shared<std::string>();
  c.on_verify = [s, gpu, bits, quant_note, run = c.on_run](Backend& be) {
    run(be);
    be.synchronize();
    std::vector<std::uint16_t> xin = s->x;
    if (bits != 16) {
      xin.assign(s->x.size(), 0);
      fr::dequant_x_bf16(s->xq.data(), s->scales.data(), s->rows, s->hidden, bits, xin.data());
    }
#if defined(KVF_HAVE_CUDA)
    if (gpu) {
      download(be, s->cache.data(), s->dcache, s->cache.size() * 2);
      if (bits != 16) {
        std::vector<std::uint16_t> got(s->x.size());
        download(be, got.data(), s->dx, got.size() * 2);
        if (got != xin) throw kvf::VerifyError("GPU dequantized X differs from the CPU twin's bit for bit");
      }
    }
#endif
    (void)gpu;
    const auto st = x_check(*s, xin);
    if (st.bad)
      throw kvf::VerifyError(i2s(st.bad) + " of " + i2s(st.checked) + " K/V values outside tolerance; first: " +
                             st.first_bad);
    if (bits != 16) {  // accuracy cost of quantizing X: against the reference of the original bf16 X
      const auto q = x_check(*s, s->x);
      *quant_note = "K/V error vs the bf16-X reference: rms " + str(q.rms_err / q.rms_ref * 100) + "%, max " +
                    str(q.max_rel_to_rms * 100) + "% of the K/V rms";
    }
  };
  c.on_after = [quant_note](Backend&, const kvf::Summary&, const std::string&) { return *quant_note; };
  c.on_teardown = [s](Backend&) { *s = XState{}; };
}

// ---------------------------------------------------------------- through L layers (CPU twin)
void FrontierStudy::add_layers(Out& out, const md::ModelShape& m, int T, int L, int N) {
  auto params = page_params(m, "layers", T, 1, L);
  params.push_back({"prefix", i2s(N)});
  params.push_back({"resident_form", "token_ids"});
  params.push_back({"resident_bytes_per_page", i2s(fr::resident_bytes(fr::Resident::token_ids, T, m.hidden, 0))});
  params.push_back({"prefix_kv_bytes",
                    i2s(fr::resident_bytes(fr::Resident::kv_bf16, N, m.hidden, m.kv_values_per_token()) * L)});
  const std::string name = "layers/" + m.name + "/T" + i2s(T) + "/L" + i2s(L) + "/N" + i2s(N);
  if (gpu_) {
#if defined(KVF_HAVE_CUDA)
    add_layers_gpu(out, m, T, L, N, name, std::move(params));
#else
    out.push_back(kvf::skipped_case(name, params, "this build has no CUDA"));
#endif
    return;
  }
  auto& c = add(out, name, std::move(params));
  c.flops = fr::through_layers_flops(m, L, T, N);
  const double kvd = m.kv_dim(), H = m.hidden, qd = m.q_dim(), I = m.intermediate;
  const double layer_w = 4 * (H * (qd + 2 * kvd) + H * qd + 3 * H * I);
  c.bytes = (L - 1) * layer_w + 4 * H * 2 * kvd + double(fr::prefix_bytes(m, L - 1, N, 0)) + double(T) * 2 * kvd * 2 * L;
  c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};
  c.note = "CPU twin: fp32 activations, bf16-valued fp32 weights (one synthetic layer reused by every layer), fp32 "
           "prefix K/V per layer; layer L computes only its K/V; bytes = weights + prefix K/V read + page K/V written";
  c.est_seconds = est(c.flops / 150e9, 1.0 + layer_w / 1e9);
  struct S {
    std::shared_ptr<fr::LayerWeights> w;
    fr::PrefixCache pc;
    std::vector<float> cs;
    std::vector<double> inv_freq;
    std::vector<std::int32_t> tok;
    std::vector<std::int64_t> slot;
    std::vector<std::vector<std::uint16_t>> pages;
    fr::LayerScratch scratch;
  };
  auto s = std::make_shared<S>();
  const md::ModelShape mm = m;
  auto& cache = layer_weights_;
  c.on_setup = [s, mm, T, L, N, &cache](Backend&) {
    auto& w = cache[mm.name];
    if (!w) w = std::make_shared<fr::LayerWeights>(fr::make_layer_weights(mm, kSeed + 10));
    s->w = w;
    s->pc = fr::make_prefix(mm, L, N, T, kSeed + 11);
    s->inv_freq = fr::rope_inv_freq(mm, mm.head_dim);
    s->cs = fr::rope_table(s->inv_freq, N + T);
    s->tok.resize(T);
    for (int t = 0; t < T; ++t) s->tok[t] = int(kvf::pattern_word(kSeed, t) % 100000);
    const std::int64_t blocks = 2 * (T / fr::kBlockTokens);
    s->slot = fr::scattered_slots(T, blocks, kSeed + 12);
    s->pages.assign(L, std::vector<std::uint16_t>(std::size_t(blocks) * 2 * fr::kBlockTokens * mm.kv_dim()));
  };
  c.on_run = [s, T, L, N](Backend&) {
    fr::through_layers_cpu(*s->w, L, T, N, s->tok.data(), s->pc, s->cs.data(), s->slot.data(), s->pages, s->scratch);
  };
  c.on_verify = [s, mm, T, run = c.on_run](Backend& be) {
    run(be);
    // Layer 0's K/V against the fp64 reference of RMSNorm(embedding) . Wkv (the deeper layers are
    // checked against a naive fp64 forward in tests/frontier).
    const auto rows = fr::sample_rows(T, 16);
    std::vector<std::vector<float>> xr;
    for (int r : rows) xr.push_back(fr::layer0_input(*s->w, s->tok[r]));
    std::vector<std::int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = s->pc.capacity - T + t;
    const int qd = mm.q_dim();
    const auto st = fr::verify_rows(rows, xr, s->w->wqkv_bf16.data() + std::size_t(qd) * mm.hidden,
                                    s->w->bqkv.empty() ? nullptr : s->w->bqkv.data() + qd, mm.hidden,
                                    {mm.n_kv_heads, mm.head_dim}, s->inv_freq, pos.data(), s->slot.data(),
                                    s->pages[0].data());
    if (st.bad) throw kvf::VerifyError("layer 0: " + i2s(st.bad) + " K/V values outside tolerance; first: " + st.first_bad);
  };
  c.on_teardown = [s](Backend&) { *s = S{}; };
}

#if defined(KVF_HAVE_CUDA)
// Through L layers on the GPU: the idleness study's prefill chunk (kernels/decode PrefillGpu), whose step_kv runs
// L-1 full layers and then only layer L's K/V, as the CPU twin does. Verified (one layer: h and the appended K/V
// against the fp64 reference) before timing.
void FrontierStudy::add_layers_gpu(Out& out, const md::ModelShape& m, int T, int L, int N, const std::string& name,
                                   std::vector<Param> params) {
  if (const std::string why = kvf::decode::unsupported_reason(m); !why.empty()) {
    out.push_back(kvf::skipped_case(name, params, "GPU through-layers: " + why));
    return;
  }
  const double need = double(kvf::decode::gpu::PrefillGpu::device_bytes(m, T, N));
  if (need > 0.9 * double(gpu_memory_bytes_)) {
    out.push_back(kvf::skipped_case(name, params, "GPU through-layers needs " + str(need / (1 << 30)) +
                                                      " GiB of device memory; the device has " +
                                                      str(double(gpu_memory_bytes_) / (1 << 30))));
    return;
  }
  auto& c = add(out, name, std::move(params));
  c.flops = fr::through_layers_flops(m, L, T, N);
  const double kvd = m.kv_dim(), H = m.hidden, qd = m.q_dim(), I = m.intermediate;
  const double layer_w = 2 * (H * (qd + 2 * kvd) + H * qd + 3 * H * I);  // bf16 weights
  // weights of L-1 layers + layer L's K/V rows, the shared prefix K/V read by L-1 attentions, the page's K/V written
  c.bytes = (L - 1) * layer_w + 2 * H * 2 * kvd + (L - 1) * kvf::decode::kv_layer_bytes(m, 1, N) + double(T) * 2 * kvd * 2 * L;
  c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};
  c.note = "GPU: kernels/decode PrefillGpu::step_kv: cuBLASLt bf16 GEMMs, a CUDA-core causal attention (not tensor-core "
           "FlashAttention: at long N it understates a tuned recompute), one bf16 prefix cache shared by the layers "
           "(the CPU twin keeps one per layer: a prefix small enough for the L2 is re-read from L2 here), K/V appended "
           "contiguously (not paged); layer L computes only its K/V";
  c.est_seconds = est(c.flops / 200e12 + c.bytes / 2e12, 3.0);
  struct G {
    std::shared_ptr<fr::LayerWeights> w;
    std::unique_ptr<kvf::decode::gpu::PrefillGpu> pre;
  };
  auto s = std::make_shared<G>();
  const md::ModelShape mm = m;
  auto& cache = layer_weights_;
  c.on_setup = [s, mm, T, N, &cache](Backend& be) {
    auto& w = cache[mm.name];
    if (!w) w = std::make_shared<fr::LayerWeights>(fr::make_layer_weights(mm, kSeed + 10));
    s->w = w;
    s->pre = std::make_unique<kvf::decode::gpu::PrefillGpu>(*w, mm, T, N, kSeed + 11,
                                                            kvf::cuda_props(be).multiProcessorCount,
                                                            kvf::cuda_stream(be));
  };
  c.on_verify = [s, T](Backend& be) {
    const auto r = s->pre->verify(*s->w, kvf::decode::prefill_check_rows(T), kvf::cuda_stream(be));
    if (!r.ok()) throw kvf::VerifyError("GPU through-layers (one layer) vs reference: " + r.text());
    // The timed path (step_kv: layer L computes only its K/V) on its own, against the reference K/V.
    const auto kv = s->pre->verify_kv(*s->w, kvf::decode::prefill_check_rows(T), kvf::cuda_stream(be));
    if (!kv.ok()) throw kvf::VerifyError("GPU through-layers K/V-only layer vs reference: " + kv.text());
  };
  c.on_run = [s, L](Backend& be) { s->pre->step_kv(L, kvf::cuda_stream(be)); };
  c.on_after = [s](Backend&, const kvf::Summary&, const std::string&) {
    return "attention KV splits " + std::to_string(s->pre->attention_splits());
  };
  c.on_teardown = [s](Backend&) {
    s->pre.reset();
    s->w.reset();
  };
}
#endif

// ---------------------------------------------------------------- MLA
void FrontierStudy::add_mla(Out& out, const md::ModelShape& m, int T, int P, const std::string& part) {
  const fr::MlaGeom g = fr::mla_geom(m);
  const double rows = double(T) * P;
  auto params = page_params(m, "mla_" + part, T, P, 1);
  // kv_bytes_per_page of an MLA model is its latent cache; the decompressed K/V is what "up" makes.
  const std::int64_t lat = fr::resident_bytes(fr::Resident::mla_latent_bf16, T, m.hidden, g.latent());
  params.push_back({"resident_form", part == "latent" ? "x_bf16" : "mla_latent_bf16"});
  params.push_back({"resident_bytes_per_page",
                    i2s(part == "latent" ? fr::resident_bytes(fr::Resident::x_bf16, T, m.hidden, 0) : lat)});
  params.push_back({"gemm", gpu_ ? "cublaslt_bf16_fp32out" : "openblas_sgemm_w_fp32"});
  auto& c = add(out, "mla_" + part + "/" + m.name + "/T" + i2s(T) + "/P" + i2s(P), std::move(params));
  const int K = part == "latent" ? g.hidden : g.rank, N = part == "latent" ? g.latent() : g.up_out();
  c.flops = 2.0 * rows * K * N;
  c.bytes = rows * K * 2 + double(N) * K * (gpu_ ? 2 : 4) + rows * N * (part == "latent" ? 2 : 4);
  c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};
  c.note = part == "latent"
               ? "c_KV = RMSNorm(X Wdkv^T[:512]), k_pe = RoPE(.[512:576]) (YaRN frequencies, cos/sin amplitude " +
                     str(fr::rope_amplitude(m.rope_scaling)) + ") -> bf16 latent cache rows"
               : "up-projection c_KV . Wukv^T -> per-head [k_nope | v] in fp32, H*(128+128) per token; not written to a cache";
  c.est_seconds = est(c.flops / (gpu_ ? 300e12 : 150e9) + (gpu_ ? 10e-6 : 0), gpu_ ? 0.3 : 0.1 + double(N) * K * 6e-9);
  struct S {
    std::vector<std::uint16_t> w, x;
    std::vector<float> wf, xf, y, cs;
    std::vector<double> inv_freq;
    std::vector<std::int32_t> pos;
    std::vector<std::int64_t> slot;
    std::vector<std::uint16_t> cache;
#if defined(KVF_HAVE_CUDA)
    BufferHandle dw, dx, dy, dcs, dpos, dslot, dcache;
    std::unique_ptr<fr::gpu::LtGemm> gemm;
#endif
  };
  auto s = std::make_shared<S>();
  const bool gpu = gpu_, latent = part == "latent";
  const int R = T * P;
  const float eps = float(m.rms_eps);
  const md::ModelShape mm = m;
  c.on_setup = [s, g, R, T, K, N, gpu, latent, mm](Backend& be) {
    s->w.resize(std::size_t(N) * K);
    fr::fill_bf16_uniform(s->w.data(), s->w.size(), kSeed + 20, float(std::sqrt(3.0 / K)));
    s->x.resize(std::size_t(R) * K);
    fr::fill_bf16_uniform(s->x.data(), s->x.size(), kSeed + 21, 1.f);
    if (!gpu) {
      s->wf.resize(s->w.size());
      fr::bf16_to_f32(s->w.data(), s->wf.data(), s->w.size());
      s->xf.resize(s->x.size());
      s->y.resize(std::size_t(R) * N);
    }
    if (latent) {
      s->inv_freq = fr::rope_inv_freq(mm, g.rope);
      s->cs = fr::rope_table(s->inv_freq, kPos0 + T, fr::rope_amplitude(mm.rope_scaling));
      s->pos.resize(R);
      for (int r = 0; r < R; ++r) s->pos[r] = kPos0 + r % T;
      const std::int64_t blocks = 2 * ((R + 15) / 16);
      s->slot = fr::scattered_slots(R, blocks, kSeed + 22);
      s->cache.assign(std::size_t(blocks) * fr::kBlockTokens * g.latent(), 0);
    }
#if defined(KVF_HAVE_CUDA)
    if (gpu) {
      s->dw = upload(be, s->w.data(), s->w.size() * 2);
      s->dx = upload(be, s->x.data(), s->x.size() * 2);
      s->dy = BufferHandle(be, std::size_t(R) * N * 4, MemKind::device);
      if (latent) {
        s->dcs = upload(be, s->cs.data(), s->cs.size() * 4);
        s->dpos = upload(be, s->pos.data(), s->pos.size() * 4);
        s->dslot = upload(be, s->slot.data(), s->slot.size() * 8);
        s->dcache = upload(be, s->cache.data(), s->cache.size() * 2);
      }
      s->gemm = std::make_unique<fr::gpu::LtGemm>();
      s->gemm->plan(R, N, K);
    }
#endif
    (void)be;
  };
  c.on_run = [s, g, R, K, N, gpu, latent, eps](Backend& be) {
#if defined(KVF_HAVE_CUDA)
    if (gpu) {
      cudaStream_t st = kvf::cuda_stream(be);
      s->gemm->run(s->dx->ptr, s->dw->ptr, s->dy->ptr, st);
      if (latent)
        fr::gpu::mla_latent_write(s->dy->as<float>(), R, g.rank, g.rope, eps, s->dcs->as<float>(),
                                  s->dpos->as<std::int32_t>(), s->dslot->as<std::int64_t>(),
                                  s->dcache->as<std::uint16_t>(), st);
      return;
    }
#endif
    (void)be;
    (void)gpu;
    fr::bf16_to_f32(s->x.data(), s->xf.data(), s->x.size());
    fr::gemm_xwT(s->xf.data(), s->wf.data(), s->y.data(), R, N, K);
    if (latent)
      fr::mla_latent_write_cpu(s->y.data(), R, g, eps, s->cs.data(), s->pos.data(), s->slot.data(), s->cache.data());
  };
  const double amp = fr::rope_amplitude(m.rope_scaling);  // the table's cos/sin amplitude (1 for DeepSeek-V3)
  c.on_verify = [s, g, R, K, N, gpu, latent, eps, amp, run = c.on_run](Backend& be) {
    run(be);
    be.synchronize();
    const auto rows = fr::sample_rows(R, 16);
    std::vector<float> xr(K);
    if (latent) {
#if defined(KVF_HAVE_CUDA)
      if (gpu) download(be, s->cache.data(), s->dcache, s->cache.size() * 2);
#endif
      std::vector<double> ref(g.latent());
      for (int r : rows) {
        fr::bf16_to_f32(s->x.data() + std::size_t(r) * K, xr.data(), K);
        fr::mla_reference_row(xr.data(), s->w.data(), K, g, eps, s->inv_freq, s->pos[r], ref.data(), amp);
        double ss = 0;
        for (double v : ref) ss += v * v;
        const double rms = std::sqrt(ss / ref.size());
        for (int i = 0; i < g.latent(); ++i) {
          const double got = fr::bf16_to_f32(s->cache[std::size_t(s->slot[r]) * g.latent() + i]);
          if (std::fabs(got - ref[i]) > fr::kRelTol * std::fabs(ref[i]) + fr::kAbsTol * rms)
            throw kvf::VerifyError("MLA latent row " + i2s(r) + " value " + i2s(i) + ": got " + str(got) + " ref " +
                                   str(ref[i]));
        }
      }
    } else {
      std::vector<float> y(std::size_t(R) * N);
#if defined(KVF_HAVE_CUDA)
      if (gpu) download(be, y.data(), s->dy, y.size() * 4);
#endif
      if (!gpu) y = s->y;
      for (int r : rows) {
        fr::bf16_to_f32(s->x.data() + std::size_t(r) * K, xr.data(), K);
        for (int o = 0; o < N; o += 97) {
          double ref = 0, mag = 0;
          for (int k = 0; k < K; ++k) {
            const double p = double(xr[k]) * fr::bf16_to_f32(s->w[std::size_t(o) * K + k]);
            ref += p;
            mag += std::fabs(p);
          }
          const double got = y[std::size_t(r) * N + o];
          if (std::fabs(got - ref) > 1e-5 * mag + 1e-6)
            throw kvf::VerifyError("MLA up-projection row " + i2s(r) + " col " + i2s(o) + ": got " + str(got) +
                                   " ref " + str(ref));
        }
      }
    }
  };
  c.on_teardown = [s](Backend&) { *s = S{}; };
}

// ---------------------------------------------------------------- host copies (CPU backend)
struct CopyBufs {
  BufferHandle src, dst;
  std::vector<std::size_t> order;
};

void FrontierStudy::add_copies(Out& out, const std::vector<std::size_t>& sizes) {
  for (std::size_t n : sizes) {
    for (const char* arm : {"memcpy", "dram_copy"}) {
      const bool base = std::string(arm) == "memcpy";
      auto& c = add(out, std::string(arm) + "/" + kvf::format_bytes(double(n)),
                    {{"arm", arm}, {"copy_bytes", i2s(n)}, {"link", "dram"}, {"src_mem", "pageable_host"},
                     {"dst_mem", "pageable_host"}});
      c.bytes = double(n);
      c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "memcpy"}, {"copy_bytes", i2s(n)}}, "gbps"};
      c.note = base ? "glibc memcpy, one call on one thread: the baseline of the host tier"
                    : "Backend::copy (the host tier: OpenMP-parallel memcpy); bytes = bytes copied";
      c.est_seconds = est(double(n) / 5e9, 0.05 + double(n) / 1e9);
      auto s = std::make_shared<CopyBufs>();
      c.on_setup = [s, n](Backend& be) {
        s->src = BufferHandle(be, n, MemKind::pageable_host);
        s->dst = BufferHandle(be, n, MemKind::pageable_host);
        be.fill(s->src.get(), kSeed + n);
      };
      c.on_run = [s, n, base](Backend& be) {
        if (base) std::memcpy(s->dst->ptr, s->src->ptr, n);
        else be.copy(s->dst.get(), s->src.get(), n);
      };
      c.on_verify = [s, n, run = c.on_run](Backend& be) {
        std::memset(s->dst->ptr, 0, n);
        run(be);
        std::string why;
        if (!fr::check_pattern(s->dst->ptr, n, kSeed + n, 0, &why)) throw kvf::VerifyError("copy: " + why);
      };
      c.on_teardown = [s](Backend&) { *s = CopyBufs{}; };
    }
  }
}

// One page of T tokens over all layers (e.g. Llama-3.1-8B, T=128: 32 x 512 KiB = 16 MiB) moved as
// chunks of copy_bytes to scattered destinations, against one contiguous copy.
void FrontierStudy::add_granularity(Out& out, const md::ModelShape& m, int T, const std::vector<std::size_t>& sizes) {
  const std::size_t page = std::size_t(fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token())) *
                           m.layers;
  std::vector<std::size_t> chunks = {page};  // the contiguous copy first: the others are stated against it
  chunks.insert(chunks.end(), sizes.begin(), sizes.end());
  for (std::size_t chunk : chunks) {
    if (chunk > page || page % chunk) continue;
    const std::size_t n = page / chunk;
    std::string unit = chunk == page ? "contiguous page" : "chunk";
    if (chunk == std::size_t(fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token())))
      unit = "per layer";
    else if (chunk * m.n_kv_heads * m.layers == page) unit = "per layer and KV head (K and V), = per layer and 16-token block";
    else if (chunk * 2 * m.n_kv_heads * m.layers == page) unit = "per layer, KV head, K or V";
    auto& c = add(out, "granularity/" + m.name + "/T" + i2s(T) + "/" + kvf::format_bytes(double(chunk)),
                  {{"arm", "granularity"}, {"model", m.name}, {"tokens", i2s(T)}, {"layers", i2s(m.layers)},
                   {"copy_bytes", i2s(chunk)}, {"page_bytes", i2s(page)}, {"copies", i2s(n)},
                   {"link", gpu_ ? "h2d" : "dram"}, {"src_mem", gpu_ ? "pinned_host" : "pageable_host"},
                   {"dst_mem", gpu_ ? "device" : "pageable_host"}});
    c.bytes = double(page);
    c.note = "one page (all layers) as " + i2s(n) + " copies of " + kvf::format_bytes(double(chunk)) + " (" + unit +
             ") to scattered destinations";
    c.ceiling = gpu_ ? kvf::CeilingRef{"stream", {{"op", "h2d_pinned"}}, "gbps"}
                     : kvf::CeilingRef{"frontier", {{"arm", "granularity"}, {"copy_bytes", i2s(page)}}, "gbps"};
    c.est_seconds = est(double(page) / (gpu_ ? 20e9 : 5e9) + n * (gpu_ ? 3e-6 : 1e-6), 0.2);
    c.time_opts.hide_launch = n <= 256;  // more copies than that may not fit the queue behind the blocking kernel
    auto s = std::make_shared<CopyBufs>();
    const bool gpu = gpu_;
    c.on_setup = [s, page, chunk, n, gpu](Backend& be) {
      s->src = BufferHandle(be, page, gpu ? MemKind::pinned_host : MemKind::pageable_host);
      s->dst = BufferHandle(be, 2 * page, gpu ? MemKind::device : MemKind::pageable_host);
      be.fill(s->src.get(), kSeed + 7);
      std::vector<std::size_t> slots(2 * n);
      for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = i;
      std::mt19937_64 rng(kSeed);
      std::shuffle(slots.begin(), slots.end(), rng);
      s->order.assign(slots.begin(), slots.begin() + n);
      (void)chunk;
    };
    c.on_run = [s, chunk, n, gpu](Backend& be) {
      for (std::size_t i = 0; i < n; ++i) {
#if defined(KVF_HAVE_CUDA)
        if (gpu) {
          KVF_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(s->dst->ptr) + s->order[i] * chunk,
                                         static_cast<const char*>(s->src->ptr) + i * chunk, chunk,
                                         cudaMemcpyHostToDevice, kvf::cuda_stream(be)));
          continue;
        }
#endif
        (void)gpu;
        be.copy(sub(s->dst.get(), s->order[i] * chunk, chunk), sub(s->src.get(), i * chunk, chunk), chunk);
      }
    };
    c.on_verify = [s, chunk, n, gpu, run = c.on_run](Backend& be) {
      run(be);
      be.synchronize();
      std::vector<unsigned char> h(chunk);
      for (std::size_t i = 0; i < n; ++i) {
        const kvf::Buffer d = sub(s->dst.get(), s->order[i] * chunk, chunk);
        if (gpu) be.copy(host_view(h.data(), chunk), d, chunk);
        else std::memcpy(h.data(), d.ptr, chunk);
        std::string why;
        if (!fr::check_pattern(h.data(), chunk, kSeed + 7, i * chunk / 8, &why))
          throw kvf::VerifyError("chunk " + i2s(i) + ": " + why);
      }
    };
    c.on_teardown = [s](Backend&) { *s = CopyBufs{}; };
  }
}

// ---------------------------------------------------------------- file tier (O_DIRECT) and dd
void FrontierStudy::add_file(Out& out, const std::vector<std::size_t>& sizes, std::size_t file_bytes,
                             const md::ModelShape& m, int T) {
  auto file = std::make_shared<std::shared_ptr<fr::DirectFile>>();
  const std::string dir = file_dir_;
  auto ensure = [file, dir, file_bytes] {
    if (!*file) *file = std::make_shared<fr::DirectFile>(dir, file_bytes, kSeed + 30);
    return *file;
  };
  std::vector<std::size_t> all = sizes;
  for (std::size_t bs : all) {
    if (file_bytes % bs) continue;
    for (const char* arm : {"dd_direct", "file_direct", "file_direct_huge"}) {
      if (quick_ && std::string(arm) == "file_direct_huge") continue;
      const bool dd = std::string(arm) == "dd_direct", huge = std::string(arm) == "file_direct_huge";
      auto& c = add(out, std::string(arm) + "/" + kvf::format_bytes(double(bs)),
                    {{"arm", arm}, {"copy_bytes", i2s(bs)}, {"file_bytes", i2s(file_bytes)}, {"link", "file_o_direct"},
                     {"src_mem", "file"}, {"dst_mem", "pageable_host"}, {"huge_buffer", huge ? "yes" : "no"}});
      c.bytes = double(file_bytes);
      c.cold = false;  // O_DIRECT bypasses the page cache; CPU cache flushes change nothing
      c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "dd_direct"}, {"copy_bytes", i2s(bs)}}, "gbps"};
      c.note = dd ? "dd if=FILE of=/dev/null bs=copy_bytes iflag=direct, timed around the process (fork+exec included)"
                  : std::string("sequential pread(O_DIRECT) of the whole file in copy_bytes reads, queue depth 1, like dd; ") +
                        (huge ? "destination on 2 MiB huge pages (fewer pages to pin per read)"
                              : "destination on 4 KiB pages, like dd's buffer");
      c.est_seconds = est(double(file_bytes) / 1e9, double(file_bytes) / 1e9, 1);
      auto buf = std::make_shared<BufferHandle>();
      c.on_setup = [ensure, buf, bs, huge](Backend& be) {
        ensure();
        kvf::AllocOptions o;
        o.huge_pages = huge;
        *buf = BufferHandle(be, bs, MemKind::pageable_host, o);  // 2 MiB aligned either way: O_DIRECT-safe
      };
      c.on_run = [file, buf, bs, dd, file_bytes](Backend&) {
        const auto& f = **file;
        if (dd) {
          fr::run_dd_direct(f.path(), bs, file_bytes / bs);
          return;
        }
        for (std::size_t off = 0; off < file_bytes; off += bs) f.read(off, bs, (*buf)->ptr);
      };
      if (!dd)
        c.on_verify = [file, buf, bs, file_bytes](Backend&) {
          const auto& f = **file;
          for (std::size_t off = 0; off < file_bytes; off += bs) {
            f.read(off, bs, (*buf)->ptr);
            std::string why;
            if (!fr::check_pattern((*buf)->ptr, bs, f.seed(), off / 8, &why))
              throw kvf::VerifyError("file tier at offset " + i2s(off) + ": " + why);
          }
        };
      if (!dd)  // the disk's speed drifts (shared VM disk): also compare with dd interleaved, 3 rounds
        c.on_after = [file, buf, bs, file_bytes](Backend&, const kvf::Summary&, const std::string&) {
          std::vector<double> ratio;
          for (int round = 0; round < 3; ++round) {
            const double t_dd = fr::run_dd_direct((*file)->path(), bs, file_bytes / bs);
            const auto t0 = std::chrono::steady_clock::now();
            for (std::size_t off = 0; off < file_bytes; off += bs) (*file)->read(off, bs, (*buf)->ptr);
            const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ratio.push_back(t_dd / t);
          }
          std::sort(ratio.begin(), ratio.end());
          return "interleaved with dd (dd's own reported time), 3 rounds: rate / dd rate median " + str(ratio[1]) +
                 " (min " + str(ratio[0]) + ", max " + str(ratio[2]) + ")";
        };
      c.on_teardown = [buf](Backend&) { buf->reset(); };
    }
  }
  // One page from a random offset: the latency of a single fetch from the SSD tier, at the page sizes
  // of the recompute arms' token counts (the report interpolates fetch time at kv_bytes_per_page).
  for (int Tp : quick_ ? std::vector<int>{} : std::vector<int>{16, T, 512}) {
    const int T = Tp;
    const std::size_t page = std::size_t(fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token()));
    if (page > file_bytes || page % fr::kDirectAlign) continue;
    auto& c = add(out, "file_page/" + m.name + "/T" + i2s(T),
                  {{"arm", "file_page"}, {"model", m.name}, {"tokens", i2s(T)}, {"copy_bytes", i2s(page)},
                   {"file_bytes", i2s(file_bytes)}, {"link", "file_o_direct"}, {"resident_form", "kv_bf16"},
                   {"resident_bytes_per_page", i2s(page)}, {"kv_bytes_per_page", i2s(page)}});
    c.bytes = double(page);
    c.cold = false;
    c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "dd_direct"}, {"copy_bytes", i2s(page)}}, "gbps"};
    c.note = "one layer's K/V of one page read with O_DIRECT from a random page-aligned offset";
    c.est_seconds = est(double(page) / 1e9 + 100e-6, 0.1, 1);
    auto buf = std::make_shared<BufferHandle>();
    auto off = std::make_shared<std::size_t>(0);
    c.on_setup = [ensure, buf, page](Backend& be) {
      ensure();
      kvf::AllocOptions o;
      o.huge_pages = false;
      *buf = BufferHandle(be, page, MemKind::pageable_host, o);
    };
    c.on_before = [off, page, file_bytes](Backend&) {
      static std::mt19937_64 rng(kSeed);
      *off = (rng() % (file_bytes / page)) * page;
    };
    c.on_run = [file, buf, off, page](Backend&) { (*file)->read(*off, page, (*buf)->ptr); };
    c.on_verify = [file, buf, page](Backend&) {
      (*file)->read(page, page, (*buf)->ptr);
      if (!fr::check_pattern((*buf)->ptr, page, (*file)->seed(), page / 8))
        throw kvf::VerifyError("file page: pattern differs");
    };
    c.on_teardown = [buf](Backend&) { buf->reset(); };
  }
}

// ---------------------------------------------------------------- overlap: recompute part, fetch the rest
void FrontierStudy::add_overlap(Out& out, const md::ModelShape& m, int T, double f) {
  const int rr = int(std::lround(f * T / fr::kBlockTokens)) * fr::kBlockTokens;
  const std::size_t page = std::size_t(fr::resident_bytes(fr::Resident::kv_bf16, T, m.hidden, m.kv_values_per_token()));
  const std::size_t fetch = page / T * (T - rr);
  auto params = page_params(m, "overlap", T, 1, 1);
  params.push_back({"recompute_fraction", str(double(rr) / T)});
  params.push_back({"recompute_tokens", i2s(rr)});
  params.push_back({"copy_bytes", i2s(fetch)});
  params.push_back({"link", gpu_ ? "h2d_pinned" : "file_o_direct"});
  const std::string name = "overlap/" + m.name + "/T" + i2s(T) + "/f" + str(double(rr) / T);
  if (gpu_) {
#if defined(KVF_HAVE_CUDA)
    auto& c = add(out, name, std::move(params));
    c.flops = 2.0 * rr * m.hidden * 2 * m.kv_dim();
    c.bytes = double(fetch);
    c.note = "recompute " + i2s(rr) + " tokens from bf16 X (cuBLASLt) on the timed stream while the other " +
             i2s(T - rr) + " tokens' K/V cross PCIe (pinned H2D) on a second stream; compare with f=0 and f=1";
    c.est_seconds = est(c.flops / 300e12 + double(fetch) / 25e9 + 20e-6, 0.3);
    struct G {
      XState x;
      BufferHandle src, dst;
      std::unique_ptr<SideStream> side;
    };
    auto s = std::make_shared<G>();
    const md::ModelShape mm = m;
    c.on_setup = [s, mm, rr, page](Backend& be) {
      if (rr > 0) {
        x_setup_host(s->x, mm, rr, 1, 16, true);
        x_setup_gpu(s->x, be);
      }
      s->src = BufferHandle(be, page, MemKind::pinned_host);
      s->dst = BufferHandle(be, page, MemKind::device);
      be.fill(s->src.get(), kSeed + 50);
      s->side = SideStream::make();
    };
    c.on_run = [s, rr, fetch](Backend& be) {
      cudaStream_t st = kvf::cuda_stream(be);
      if (fetch > 0)
        KVF_CUDA_CHECK(cudaMemcpyAsync(s->dst->ptr, s->src->ptr, fetch, cudaMemcpyHostToDevice, s->side->fork(st)));
      if (rr > 0) x_run_gpu(s->x, st);
      if (fetch > 0) s->side->join(st);
    };
    c.on_verify = [s, rr, fetch, run = c.on_run](Backend& be) {
      run(be);
      be.synchronize();
      if (fetch > 0) {
        std::vector<unsigned char> h(fetch);
        be.copy(host_view(h.data(), fetch), s->dst.get(), fetch);
        if (!fr::check_pattern(h.data(), fetch, kSeed + 50, 0)) throw kvf::VerifyError("overlap: fetched part differs");
      }
      if (rr > 0) {
        download(be, s->x.cache.data(), s->x.dcache, s->x.cache.size() * 2);
        const auto st = x_check(s->x, s->x.x);
        if (st.bad) throw kvf::VerifyError("overlap: recomputed part: " + st.first_bad);
      }
    };
    c.on_teardown = [s](Backend&) {
      s->side.reset();  // drains the copy before its buffers go
      *s = G{};
    };
#endif
    return;
  }
  auto& c = add(out, name, std::move(params));
  c.flops = 2.0 * rr * m.hidden * 2 * m.kv_dim();
  c.bytes = double(fetch);
  c.cold = false;
  c.note = "recompute " + i2s(rr) + " tokens from bf16 X (OpenBLAS) while a thread reads the other " + i2s(T - rr) +
           " tokens' K/V with O_DIRECT; compare with f=0 (fetch alone) and f=1 (recompute alone): max vs sum";
  c.est_seconds = est(c.flops / 150e9 + double(fetch) / 1e9 + 1e-4, 0.3, 1);
  struct S {
    XState x;
    std::shared_ptr<fr::DirectFile> file;
    BufferHandle buf;
    std::size_t off = 0;
  };
  auto s = std::make_shared<S>();
  const std::string dir = file_dir_;
  const md::ModelShape mm = m;
  c.on_setup = [s, mm, rr, dir, page](Backend& be) {
    if (rr > 0) x_setup_host(s->x, mm, rr, 1, 16, false);
    s->file = std::make_shared<fr::DirectFile>(dir, std::size_t(64) << 20, kSeed + 31);
    s->buf = BufferHandle(be, page, MemKind::pageable_host);
  };
  c.on_before = [s, page](Backend&) {
    static std::mt19937_64 rng(kSeed + 1);
    s->off = (rng() % ((std::size_t(64) << 20) / page)) * page;
  };
  c.on_run = [s, rr, fetch](Backend&) {
    std::thread io;
    if (fetch > 0) {
      if (rr == 0) {
        s->file->read(s->off, fetch, s->buf->ptr);
        return;
      }
      io = std::thread([s, fetch] { s->file->read(s->off, fetch, s->buf->ptr); });
    }
    x_run_cpu(s->x);
    if (io.joinable()) io.join();
  };
  c.on_verify = [s, rr, fetch, run = c.on_run](Backend& be) {
    s->off = 0;
    run(be);
    if (fetch > 0 && !fr::check_pattern(s->buf->ptr, fetch, s->file->seed(), 0))
      throw kvf::VerifyError("overlap: fetched part differs from the file pattern");
    if (rr > 0) {
      const auto st = x_check(s->x, s->x.x);
      if (st.bad) throw kvf::VerifyError("overlap: recomputed part: " + st.first_bad);
    }
  };
  c.on_teardown = [s](Backend&) { *s = S{}; };
}

// ---------------------------------------------------------------- interference with a decode step
// CPU: one thread runs a decode step's attention (one layer, one sequence of N tokens, bf16 K/V) while
// one background thread recomputes pages (OpenBLAS on one thread), copies 512 KiB pages DRAM to DRAM,
// or reads pages from the O_DIRECT file tier, for the whole case. GPU: the decode step is a read of
// the layer's K/V of N tokens (its memory traffic), timed on the main stream while a second stream
// holds enough page recomputes or pinned H2D page copies to outlast it.
void FrontierStudy::add_interference(Out& out, const md::ModelShape& m, int N, const std::string& background) {
  const std::size_t kv_bytes = std::size_t(N) * m.kv_values_per_token() * 2;
#if defined(KVF_HAVE_CUDA)
  if (gpu_) {
    // The GPU decode step is the access study's split-KV kernel: its shapes only (head dim 64/128, GQA group a
    // power of two <= 16), and whole 16-token entries so the bytes and FLOPs below are what it reads.
    std::string why;
    if (N < 16 || N % 16) why = "decode tokens " + i2s(N) + ": the GPU decode step needs a positive multiple of 16";
    const int g = m.n_kv_heads > 0 ? m.n_heads / m.n_kv_heads : 0;
    if (m.head_dim != 64 && m.head_dim != 128) why = "head dim " + i2s(m.head_dim) + ": the decode kernel takes 64 or 128";
    else if (g < 1 || g > 16 || (g & (g - 1)) || m.n_heads % m.n_kv_heads)
      why = "GQA group " + i2s(m.n_heads) + "/" + i2s(m.n_kv_heads) + ": the decode kernel takes 1, 2, 4, 8 or 16";
    if (!why.empty()) {
      out.push_back(kvf::skipped_case("interference/" + m.name + "/N" + i2s(N) + "/" + background,
                                      {{"arm", "interference"}, {"model", m.name}, {"decode_tokens", i2s(N)},
                                       {"background", background}},
                                      why));
      return;
    }
  }
#endif
  auto& c = add(out, "interference/" + m.name + "/N" + i2s(N) + "/" + background,
                {{"arm", "interference"}, {"model", m.name}, {"decode_tokens", i2s(N)}, {"background", background},
                 {"tokens", "128"}, {"layers", "1"}});
  c.bytes = double(kv_bytes);
  c.flops = 4.0 * N * m.n_heads * m.head_dim;
  c.ceiling = kvf::CeilingRef{"frontier", {{"arm", "interference"}, {"background", "none"}, {"decode_tokens", i2s(N)}}, "gbps"};
  c.note = std::string(gpu_ ? "decode step = one layer's GQA attention over N tokens (the access study's split-KV "
                                   "kernel, bf16 HND, batch 1)"
                            : "decode step = one layer's GQA attention over N tokens on one thread") +
           "; background: " + background + "; pct_of_ceiling = 100 / slowdown against background none";
  c.est_seconds = est(double(kv_bytes) / (gpu_ ? 2e12 : 8e9), gpu_ ? 0.5 : 0.5);
  const md::ModelShape mm = m;
  const std::string dir = file_dir_;
  if (!gpu_) {
    struct S {
      std::vector<float> q, out, scratch;
      std::vector<std::uint16_t> k, v;
      std::thread bg;
      std::atomic<bool> stop{false};
      std::atomic<long> bg_iters{0};
      std::string bg_error;  // written by the background thread before it ends
    };
    auto s = std::make_shared<S>();
    c.on_setup = [s, mm, N, background, dir](Backend&) {
      const int D = mm.head_dim;
      s->q.resize(std::size_t(mm.n_heads) * D);
      fr::fill_f32_uniform(s->q.data(), s->q.size(), kSeed + 60, 1.f);
      s->k.resize(std::size_t(N) * mm.kv_dim());
      s->v.resize(s->k.size());
      fr::fill_bf16_uniform(s->k.data(), s->k.size(), kSeed + 61, 1.f);
      fr::fill_bf16_uniform(s->v.data(), s->v.size(), kSeed + 62, 1.f);
      s->out.resize(s->q.size());
      s->scratch.resize(std::size_t(mm.n_heads / mm.n_kv_heads) * N);
      s->stop = false;
      if (background == "none") return;
      s->bg = std::thread([s, mm, background, dir] {
       // One core: this thread's OpenMP team is itself (gemm_xwT's parallelism is the caller's team;
       // OpenBLAS is single-threaded everywhere, kernels/frontier/recompute.hpp).
       omp_set_num_threads(1);
       try {
        if (background == "recompute") {
          XState x;
          x_setup_host(x, mm, 128, 1, 16, false);
          while (!s->stop) { x_run_cpu(x); ++s->bg_iters; }
        } else if (background == "copy") {
          const std::size_t pool = std::size_t(128) << 20, page = std::size_t(512) << 10;
          std::vector<unsigned char> a(pool, 1), b(pool, 2);
          for (std::size_t off = 0; !s->stop; off = (off + page) % pool) { std::memcpy(b.data() + off, a.data() + off, page); ++s->bg_iters; }
        } else {
          fr::DirectFile f(dir, std::size_t(64) << 20, kSeed + 63);
          const std::size_t page = std::size_t(512) << 10;
          void* buf = std::aligned_alloc(fr::kDirectAlign, page);
          for (std::size_t off = 0; !s->stop; off = (off + page) % f.bytes()) { f.read(off, page, buf); ++s->bg_iters; }
          std::free(buf);
        }
       } catch (const std::exception& e) {
        s->bg_error = e.what();
       }
      });
    };
    c.on_run = [s, mm, N](Backend&) {
      fr::decode_attention_cpu(s->q.data(), s->k.data(), s->v.data(), N, mm.n_heads, mm.n_kv_heads, mm.head_dim,
                               s->out.data(), s->scratch.data());
    };
    c.on_verify = [s, mm, N](Backend&) {
      // Head 0 of the decode output against an fp64 softmax over the same bf16 K/V.
      fr::decode_attention_cpu(s->q.data(), s->k.data(), s->v.data(), N, mm.n_heads, mm.n_kv_heads, mm.head_dim,
                               s->out.data(), s->scratch.data());
      const int D = mm.head_dim, Hkv = mm.n_kv_heads;
      std::vector<double> sc(N), o(D, 0.0);
      double mx = -1e300, sum = 0;
      for (int n = 0; n < N; ++n) {
        double d = 0;
        for (int i = 0; i < D; ++i) d += double(s->q[i]) * fr::bf16_to_f32(s->k[std::size_t(n) * Hkv * D + i]);
        sc[n] = d / std::sqrt(double(D));
        mx = std::max(mx, sc[n]);
      }
      for (auto& x : sc) { x = std::exp(x - mx); sum += x; }
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < D; ++i) o[i] += sc[n] / sum * fr::bf16_to_f32(s->v[std::size_t(n) * Hkv * D + i]);
      for (int i = 0; i < D; ++i)
        if (std::fabs(o[i] - s->out[i]) > 1e-3 * (std::fabs(o[i]) + 0.05))
          throw kvf::VerifyError("decode attention dim " + i2s(i) + ": got " + str(s->out[i]) + " ref " + str(o[i]));
    };
    c.on_after = [s](Backend&, const kvf::Summary&, const std::string&) {
      if (!s->bg_error.empty() && s->bg.joinable()) s->bg.join();
      if (!s->bg_error.empty()) throw std::runtime_error("background thread failed: " + s->bg_error);
      return "background iterations so far: " + i2s(s->bg_iters.load());
    };
    c.on_teardown = [s](Backend&) {
      s->stop = true;
      if (s->bg.joinable()) s->bg.join();
      s->q.clear(); s->k.clear(); s->v.clear(); s->out.clear(); s->scratch.clear();
    };
    return;
  }
#if defined(KVF_HAVE_CUDA)
  struct G {
    BufferHandle q, k, v, idx, ws, out, src, dst;
    ka::AttnShape sh;
    ka::Selection sel;
    ka::gpu::AttnDims dims{};
    ka::gpu::AttnPlan plan{};
    XState x;
    std::unique_ptr<SideStream> side;  // the background's stream
    int reps = 1;
    long samples = 0, drained = 0;
  };
  auto s = std::make_shared<G>();
  auto bg_op = [s, background](cudaStream_t st) {
    if (background == "recompute") x_run_gpu(s->x, st);
    else KVF_CUDA_CHECK(cudaMemcpyAsync(s->dst->ptr, s->src->ptr, s->src->bytes, cudaMemcpyHostToDevice, st));
  };
  auto decode_op = [s](cudaStream_t st) {
    ka::gpu::attention(s->dims, s->q->ptr, s->k->ptr, s->v->ptr, s->sel.geom, s->idx->as<std::uint32_t>(), s->plan,
                       s->ws->as<float>(), s->out->as<float>(), st);
  };
  c.on_setup = [s, mm, N, background, bg_op, decode_op](Backend& be) {
    // The decode step: dense selection (entries of 16 tokens), bf16 HND K/V of one sequence, as in the idleness
    // study's decode layer.
    s->sh.batch = 1;
    s->sh.hq = std::uint32_t(mm.n_heads);
    s->sh.hkv = std::uint32_t(mm.n_kv_heads);
    s->sh.d = std::uint32_t(mm.head_dim);
    s->sh.ctx = std::uint32_t(N);
    s->sh.dtype = ka::DType::bf16;
    s->sh.layout = ka::Layout::HND;
    ka::validate_shape(s->sh);
    s->sel = ka::select_dense(s->sh, 16);
    s->dims = {1u, s->sh.hq, s->sh.hkv, s->sh.d, s->sh.ctx, ka::DType::bf16, ka::Layout::HND, s->sh.scale()};
    const std::size_t kv = std::size_t(N) * s->sh.hkv * s->sh.d * 2;
    s->q = BufferHandle(be, std::size_t(s->sh.hq) * s->sh.d * 2, MemKind::device);
    s->k = BufferHandle(be, kv, MemKind::device);
    s->v = BufferHandle(be, kv, MemKind::device);
    s->idx = BufferHandle(be, s->sel.idx.size() * 4, MemKind::device);
    // On the harness stream (non-blocking: a legacy-stream copy would not be ordered with it), then synchronized.
    KVF_CUDA_CHECK(cudaMemcpyAsync(s->idx->ptr, s->sel.idx.data(), s->sel.idx.size() * 4, cudaMemcpyHostToDevice,
                                   kvf::cuda_stream(be)));
    KVF_CUDA_CHECK(cudaStreamSynchronize(kvf::cuda_stream(be)));
    s->plan = ka::gpu::plan_attention(s->dims, s->sel.geom, kvf::cuda_props(be).multiProcessorCount);
    s->ws = BufferHandle(be, ka::gpu::attention_workspace_floats(s->dims, s->plan) * 4, MemKind::device);
    s->out = BufferHandle(be, std::size_t(s->sh.hq) * s->sh.d * 4, MemKind::device);
    ka::gpu::fill_qkv(s->dims, s->q->ptr, s->k->ptr, s->v->ptr, kSeed + 64, kvf::cuda_stream(be));
    decode_op(kvf::cuda_stream(be));  // loads the kernels before anything is timed
    KVF_CUDA_CHECK(cudaStreamSynchronize(kvf::cuda_stream(be)));
    s->side = SideStream::make();
    if (background == "none") return;
    if (background == "recompute") {
      x_setup_host(s->x, mm, 128, 1, 16, true);
      x_setup_gpu(s->x, be);
    } else {
      s->src = BufferHandle(be, std::size_t(512) << 10, MemKind::pinned_host);
      s->dst = BufferHandle(be, std::size_t(512) << 10, MemKind::device);
      be.fill(s->src.get(), kSeed + 65);
    }
    // Size the background so it outlasts a decode step several times over.
    cudaEvent_t a, b;
    KVF_CUDA_CHECK(cudaEventCreate(&a));
    KVF_CUDA_CHECK(cudaEventCreate(&b));
    cudaStream_t st = kvf::cuda_stream(be);
    float t_dec = 0, t_bg = 0;
    for (int i = 0; i < 2; ++i) {  // the second round is warm
      KVF_CUDA_CHECK(cudaEventRecord(a, st));
      decode_op(st);
      KVF_CUDA_CHECK(cudaEventRecord(b, st));
      KVF_CUDA_CHECK(cudaEventSynchronize(b));
      KVF_CUDA_CHECK(cudaEventElapsedTime(&t_dec, a, b));
      KVF_CUDA_CHECK(cudaEventRecord(a, st));
      bg_op(st);
      KVF_CUDA_CHECK(cudaEventRecord(b, st));
      KVF_CUDA_CHECK(cudaEventSynchronize(b));
      KVF_CUDA_CHECK(cudaEventElapsedTime(&t_bg, a, b));
    }
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
    s->reps = std::min(2000, int(std::ceil((4 * t_dec + 1.0f) / std::max(t_bg, 1e-3f))) + 2);
  };
  c.on_before = [s, background, bg_op](Backend&) {
    // Background still queued when the next sample begins: it outlasted the decode step it was meant
    // to run beside. Counted, so a drained background cannot pass for no interference.
    if (s->samples > 0 && background != "none") {
      const cudaError_t q = cudaStreamQuery(s->side->s);
      if (q == cudaSuccess) ++s->drained;
      else if (q != cudaErrorNotReady) kvf::cuda_check(q, "cudaStreamQuery(background)");
    }
    KVF_CUDA_CHECK(cudaStreamSynchronize(s->side->s));
    ++s->samples;
    if (background == "none") return;
    for (int i = 0; i < s->reps; ++i) bg_op(s->side->s);
  };
  c.on_run = [decode_op](Backend& be) { decode_op(kvf::cuda_stream(be)); };
  c.on_verify = [s, decode_op](Backend& be) {
    // The decode attention against the access study's fp64 reference over the same values (filled on the host).
    decode_op(kvf::cuda_stream(be));
    KVF_CUDA_CHECK(cudaStreamSynchronize(kvf::cuda_stream(be)));
    std::vector<float> got(std::size_t(s->sh.hq) * s->sh.d), ref(got.size());
    KVF_CUDA_CHECK(cudaMemcpy(got.data(), s->out->ptr, got.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<std::uint16_t> hq(std::size_t(s->sh.hq) * s->sh.d), hk(std::size_t(s->sh.ctx) * s->sh.hkv * s->sh.d),
        hv(hk.size());
    ka::fill_qkv(s->sh, hq.data(), hk.data(), hv.data(), kSeed + 64);
    ka::attention_ref(s->sh, hq.data(), hk.data(), hv.data(), s->sel, ref.data());
    const double err = ka::attention_rel_error(got.data(), ref.data(), got.size());
    if (!(err <= ka::kAttnTolerance))
      throw kvf::VerifyError("GPU decode attention vs reference: relative error " + str(err) + " > " +
                             str(ka::kAttnTolerance));
  };
  c.on_after = [s](Backend&, const kvf::Summary&, const std::string&) {
    return "background ops queued per sample: " + i2s(s->reps) + "; background drained before the decode ended in " +
           i2s(s->drained) + " of " + i2s(s->samples - 1) + " executions, warm-up included (0 expected)";
  };
  c.on_teardown = [s](Backend&) {
    s->side.reset();  // drains the background before its buffers go
    *s = G{};
  };
#endif
}

// ---------------------------------------------------------------- GPU link arms
void FrontierStudy::add_link(Out& out, const std::vector<std::size_t>& sizes) {
#if defined(KVF_HAVE_CUDA)
  struct Arm {
    const char* arm;
    MemKind src, dst;
    const char* stream_op;
    bool zero_copy, bidir;
  };
  const Arm arms[] = {{"h2d_pinned", MemKind::pinned_host, MemKind::device, "h2d_pinned", false, false},
                      {"h2d_pageable", MemKind::pageable_host, MemKind::device, "h2d_pageable", false, false},
                      {"d2h_pinned", MemKind::device, MemKind::pinned_host, "d2h_pinned", false, false},
                      {"d2h_pageable", MemKind::device, MemKind::pageable_host, "d2h_pageable", false, false},
                      {"zero_copy", MemKind::pinned_host, MemKind::device, "h2d_pinned", true, false},
                      {"bidir", MemKind::pinned_host, MemKind::device, "h2d_pinned", false, true}};
  for (std::size_t n : sizes) {
    for (const Arm& a : arms) {
      auto& c = add(out, std::string(a.arm) + "/" + kvf::format_bytes(double(n)),
                    {{"arm", a.arm}, {"copy_bytes", i2s(n)}, {"link", a.zero_copy ? "pcie_sm_zero_copy" : "pcie_copy_engine"},
                     {"src_mem", std::string(kvf::to_string(a.src))}, {"dst_mem", std::string(kvf::to_string(a.dst))}});
      c.bytes = double(n) * (a.bidir ? 2 : 1);
      c.ceiling = kvf::CeilingRef{"stream", {{"op", a.stream_op}}, "gbps"};
      c.note = a.bidir ? "H2D on the timed stream while D2H of the same size runs on a second stream; bytes = both"
                       : a.zero_copy ? "SM copy kernel reading mapped pinned host memory into device memory"
                                     : "cudaMemcpyAsync, copy engine";
      const bool pageable = a.src == MemKind::pageable_host || a.dst == MemKind::pageable_host;
      c.time_opts.hide_launch = !pageable;  // host-synchronous copies cannot wait behind the blocking kernel
      c.est_seconds = est(double(n) / 20e9 + 10e-6, 0.2);
      struct S {
        BufferHandle src, dst, src2, dst2;
        std::unique_ptr<SideStream> side;  // the D2H of bidir
      };
      auto s = std::make_shared<S>();
      c.on_setup = [s, n, a](Backend& be) {
        kvf::AllocOptions o;
        o.mapped = a.zero_copy;
        s->src = BufferHandle(be, n, a.src, o);
        s->dst = BufferHandle(be, n, a.dst);
        be.fill(s->src.get(), kSeed + 40);
        if (a.bidir) {
          s->src2 = BufferHandle(be, n, MemKind::device);
          s->dst2 = BufferHandle(be, n, MemKind::pinned_host);
          be.fill(s->src2.get(), kSeed + 41);
          s->side = SideStream::make();
        }
      };
      c.on_run = [s, n, a](Backend& be) {
        cudaStream_t st = kvf::cuda_stream(be);
        if (a.zero_copy) return fr::gpu::sm_copy(s->dst->ptr, s->src->device_alias, n, st);
        if (a.bidir)
          KVF_CUDA_CHECK(cudaMemcpyAsync(s->dst2->ptr, s->src2->ptr, n, cudaMemcpyDeviceToHost, s->side->fork(st)));
        KVF_CUDA_CHECK(cudaMemcpyAsync(s->dst->ptr, s->src->ptr, n, cudaMemcpyDefault, st));
        if (a.bidir) s->side->join(st);
      };
      c.on_verify = [s, n, a, run = c.on_run](Backend& be) {
        run(be);
        be.synchronize();
        std::vector<unsigned char> h(n);
        be.copy(host_view(h.data(), n), s->dst.get(), n);
        std::string why;
        if (!fr::check_pattern(h.data(), n, kSeed + 40, 0, &why)) throw kvf::VerifyError(std::string(a.arm) + ": " + why);
        if (a.bidir && !fr::check_pattern(s->dst2->ptr, n, kSeed + 41, 0, &why))
          throw kvf::VerifyError("bidir D2H: " + why);
      };
      c.on_teardown = [s](Backend&) {
        s->side.reset();  // drains the D2H before its buffers go
        *s = S{};
      };
    }
    // Peer to peer: a row in every run, skipped with its reason on a one-GPU box.
    std::vector<Param> pp = {{"arm", "p2p"}, {"copy_bytes", i2s(n)}, {"link", "peer"}, {"src_mem", "device"},
                             {"dst_mem", "device(peer)"}};
    int count = 0;
    (void)cudaGetDeviceCount(&count);
    int dev = 0;
    (void)cudaGetDevice(&dev);
    const int peer = count >= 2 ? (dev + 1) % count : -1;
    int can = 0;
    if (peer >= 0) (void)cudaDeviceCanAccessPeer(&can, dev, peer);
    const std::string pname = "p2p/" + kvf::format_bytes(double(n));
    if (count < 2) {
      out.push_back(kvf::skipped_case(pname, pp, "needs 2 GPUs"));
      continue;
    }
    pp.push_back({"peer_access", can ? "yes" : "no (staged through host)"});
    auto& c = add(out, pname, pp);
    c.bytes = double(n);
    c.note = "cudaMemcpyPeerAsync device " + i2s(dev) + " -> device " + i2s(peer) + (can ? " with peer access" : "");
    c.est_seconds = est(double(n) / 50e9 + 10e-6, 0.3);
    struct P {
      BufferHandle src;
      void* dst = nullptr;
    };
    auto s = std::make_shared<P>();
    c.on_setup = [s, n, dev, peer, can](Backend& be) {
      s->src = BufferHandle(be, n, MemKind::device);
      be.fill(s->src.get(), kSeed + 42);
      if (can) {
        const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) kvf::cuda_check(e, "cudaDeviceEnablePeerAccess");
        (void)cudaGetLastError();
      }
      KVF_CUDA_CHECK(cudaSetDevice(peer));
      const cudaError_t e = cudaMalloc(&s->dst, n);
      KVF_CUDA_CHECK(cudaSetDevice(dev));
      kvf::cuda_check(e, "cudaMalloc on the peer");
    };
    c.on_run = [s, n, dev, peer](Backend& be) {
      KVF_CUDA_CHECK(cudaMemcpyPeerAsync(s->dst, peer, s->src->ptr, dev, n, kvf::cuda_stream(be)));
    };
    c.on_verify = [s, n, run = c.on_run](Backend& be) {
      run(be);
      be.synchronize();
      std::vector<unsigned char> h(n);
      KVF_CUDA_CHECK(cudaMemcpy(h.data(), s->dst, n, cudaMemcpyDefault));
      std::string why;
      if (!fr::check_pattern(h.data(), n, kSeed + 42, 0, &why)) throw kvf::VerifyError("p2p: " + why);
    };
    c.on_teardown = [s](Backend& be) {
      be.synchronize();
      if (s->dst) (void)cudaFree(s->dst);
      *s = P{};
    };
  }
#else
  (void)out;
  (void)sizes;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  FrontierStudy study;
  return kvf::bench_main(argc, argv, study);
}
