// Overlap: part of a page (recompute_fraction of its T tokens, whole 16-token blocks) recomputed from bf16
// X while the rest of its K/V is fetched. CPU: the fetch is an O_DIRECT read on a second thread; GPU: a
// pinned H2D copy on a second stream. Compare with f=0 (fetch alone) and f=1 (recompute alone): max vs sum.
// The CPU reads the study's tier file into a buffer on 4 KiB pages, as file_page does: f=0 is then file_page's
// read (on 2 MiB pages, as it was, the same 512 KiB O_DIRECT read took 241-308 us against file_page's 493-705 us:
// fewer pages to pin per read, file_direct_huge's gain).
#include <cmath>
#include <random>
#include <thread>

#include "frontier.hpp"
#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "side_stream.hpp"
#include "x_state.hpp"

namespace kvf::frontier_study {
namespace {

class OverlapCpu final : public Case {
 public:
  OverlapCpu(const md::ModelShape& m, int rr, std::size_t page, std::size_t fetch, Env& env)
      : m_(m), rr_(rr), page_(page), fetch_(fetch), env_(env) {}
  void setup(Backend& be) override {
    if (rr_ > 0) x_setup_host(x_, m_, rr_, 1, 16, false);
    file_ = &env_.file();
    kvf::AllocOptions o;
    o.huge_pages = false;
    buf_ = BufferHandle(be, page_, MemKind::pageable_host, o);
  }
  void before_sample(Backend&) override {
    static std::mt19937_64 rng(kSeed + 1);  // one stream for every overlap row, as before the move
    off_ = (rng() % (file_->bytes() / page_)) * page_;
  }
  void run(Backend&) override {
    std::thread io;
    if (fetch_ > 0) {
      if (rr_ == 0) {
        file_->read(off_, fetch_, buf_->ptr);
        return;
      }
      io = std::thread([this] { file_->read(off_, fetch_, buf_->ptr); });
    }
    x_run_cpu(x_);
    if (io.joinable()) io.join();
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    off_ = 0;
    run(be);
    if (fetch_ > 0 && !fr::check_pattern(buf_->ptr, fetch_, file_->seed(), 0))
      throw kvf::VerifyError("overlap: fetched part differs from the file pattern");
    if (rr_ > 0) {
      const auto st = x_check(x_, x_.x);
      if (st.bad) throw kvf::VerifyError("overlap: recomputed part: " + st.first_bad);
    }
  }
  void teardown(Backend&) override {
    x_ = XState{};
    file_ = nullptr;
    buf_.reset();
  }

 private:
  md::ModelShape m_;
  int rr_;
  std::size_t page_, fetch_, off_ = 0;
  Env& env_;
  XState x_;
  const fr::DirectFile* file_ = nullptr;
  BufferHandle buf_;
};

#if defined(KVF_HAVE_CUDA)
class OverlapGpu final : public Case {
 public:
  OverlapGpu(const md::ModelShape& m, int rr, std::size_t page, std::size_t fetch)
      : m_(m), rr_(rr), page_(page), fetch_(fetch) {}
  void setup(Backend& be) override {
    if (rr_ > 0) {
      x_setup_host(x_, m_, rr_, 1, 16, true);
      x_setup_gpu(x_, be);
    }
    src_ = BufferHandle(be, page_, MemKind::pinned_host);
    dst_ = BufferHandle(be, page_, MemKind::device);
    be.fill(src_.get(), kSeed + 50);
    side_ = SideStream::make();
  }
  void run(Backend& be) override {
    cudaStream_t st = kvf::cuda_stream(be);
    if (fetch_ > 0)
      KVF_CUDA_CHECK(cudaMemcpyAsync(dst_->ptr, src_->ptr, fetch_, cudaMemcpyHostToDevice, side_->fork(st)));
    if (rr_ > 0) x_run_gpu(x_, st);
    if (fetch_ > 0) side_->join(st);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    run(be);
    be.synchronize();
    if (fetch_ > 0) {
      std::vector<unsigned char> h(fetch_);
      be.copy(host_view(h.data(), fetch_), dst_.get(), fetch_);
      if (!fr::check_pattern(h.data(), fetch_, kSeed + 50, 0)) throw kvf::VerifyError("overlap: fetched part differs");
    }
    if (rr_ > 0) {
      download(be, x_.cache.data(), x_.dcache, x_.cache.size() * 2);
      const auto st = x_check(x_, x_.x);
      if (st.bad) throw kvf::VerifyError("overlap: recomputed part: " + st.first_bad);
    }
  }
  void teardown(Backend&) override {
    side_.reset();  // drains the copy before its buffers go
    x_ = XState{};
    src_.reset();
    dst_.reset();
  }

 private:
  md::ModelShape m_;
  int rr_;
  std::size_t page_, fetch_;
  XState x_;
  BufferHandle src_, dst_;
  std::unique_ptr<SideStream> side_;
};
#endif

std::unique_ptr<Case> make_overlap(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.model(p["model"]);
  const int T = int(p.integer("tokens"));
  const int rr = int(std::lround(p.number("recompute_fraction") * T / fr::kBlockTokens)) * fr::kBlockTokens;
  const std::size_t page = kv_page_bytes(m, T);
  const std::size_t fetch = page / T * (T - rr);
  std::unique_ptr<Case> c;
  if (env.gpu) {
#if defined(KVF_HAVE_CUDA)
    c = std::make_unique<OverlapGpu>(m, rr, page, fetch);
    c->note = "recompute " + i2s(rr) + " tokens from bf16 X (cuBLASLt) on the timed stream while the other " +
              i2s(T - rr) + " tokens' K/V cross PCIe (pinned H2D) on a second stream; compare with f=0 and f=1";
#endif
  } else {
    c = std::make_unique<OverlapCpu>(m, rr, page, fetch, env);
    c->cold = false;
    c->note = "recompute " + i2s(rr) + " tokens from bf16 X (OpenBLAS) while a thread reads the other " + i2s(T - rr) +
              " tokens' K/V with O_DIRECT; compare with f=0 (fetch alone) and f=1 (recompute alone): max vs sum";
  }
  c->params = page_columns(m, T, 1, 1);
  c->params.insert(c->params.end(), {{"recompute_fraction", str(double(rr) / T)},
                                     {"recompute_tokens", i2s(rr)},
                                     {"copy_bytes", i2s(fetch)},
                                     {"link", env.gpu ? "h2d_pinned" : "file_o_direct"}});
  c->flops = 2.0 * rr * m.hidden * 2 * m.kv_dim();
  c->bytes = double(fetch);
  c->est_seconds = env.gpu ? est(env, c->flops / 300e12 + double(fetch) / 25e9 + 20e-6, 0.3)
                           : est(env, c->flops / 150e9 + double(fetch) / 1e9 + 1e-4, 0.3, 1);
  return c;
}

}  // namespace

Arm overlap_arm(const Env& env) {
  const md::ModelShape* m = env.first_gqa();
  return Arm{
      .name = "overlap",
      .doc = "recompute part of a page while the rest is fetched (CPU: O_DIRECT read; GPU: pinned H2D)",
      .axes = {arm_axis({"overlap"}),
               {.name = "model", .doc = "the first GQA model of --models",
                .cpu = m ? std::vector<std::string>{m->name} : std::vector<std::string>{}},
               {.name = "tokens", .doc = "tokens per page T", .cpu = {"128"}, .gpu = {"128", "1024"}},
               {.name = "recompute_fraction", .doc = "share of the page recomputed (whole 16-token blocks)",
                .cpu = {"0", "0.5", "1"}, .gpu = {"0", "0.25", "0.5", "0.75", "1"}}},
      .valid =
          [](const kvf::Point& p, const Env& e) {  // the CPU reads its page from the tier file (--file-size)
            return e.gpu || kv_page_bytes(e.model(p["model"]), int(p.integer("tokens"))) <= e.file_bytes;
          },
      .case_name = "overlap/{model}/T{tokens}/f{recompute_fraction}",
      .make = make_overlap};
}

}  // namespace kvf::frontier_study
