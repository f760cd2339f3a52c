// The SSD tier of a CPU offload (CPU backend): sequential O_DIRECT reads of the whole tier file in
// copy_bytes reads, against dd iflag=direct on the same file (file); one page's K/V from a random offset,
// the latency of a single fetch at the page sizes of the recompute arms (file_page). O_DIRECT bypasses
// the page cache, so CPU cache flushes change nothing: hot rows only.
#include <algorithm>
#include <chrono>
#include <random>

#include "frontier.hpp"
#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "kvf/units.hpp"

namespace kvf::frontier_study {
namespace {

class FileRead final : public Case {
 public:
  FileRead(Env& env, std::size_t bs, bool dd, bool huge) : env_(env), bs_(bs), dd_(dd), huge_(huge) {}
  void setup(Backend& be) override {
    env_.file();
    kvf::AllocOptions o;
    o.huge_pages = huge_;
    buf_ = BufferHandle(be, bs_, MemKind::pageable_host, o);  // 2 MiB aligned either way: O_DIRECT-safe
  }
  void run(Backend&) override {
    const auto& f = env_.file();
    if (dd_) {
      fr::run_dd_direct(f.path(), bs_, f.bytes() / bs_);
      return;
    }
    for (std::size_t off = 0; off < f.bytes(); off += bs_) f.read(off, bs_, buf_->ptr);
  }
  bool has_verify() const override { return !dd_; }
  void verify(Backend&) override {
    const auto& f = env_.file();
    for (std::size_t off = 0; off < f.bytes(); off += bs_) {
      f.read(off, bs_, buf_->ptr);
      std::string why;
      if (!fr::check_pattern(buf_->ptr, bs_, f.seed(), off / 8, &why))
        throw kvf::VerifyError("file tier at offset " + i2s(off) + ": " + why);
    }
  }
  // The disk's speed drifts (shared VM disk): also compare with dd interleaved, 3 rounds.
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
    if (dd_) return {};
    const auto& f = env_.file();
    std::vector<double> ratio;
    for (int round = 0; round < 3; ++round) {
      const double t_dd = fr::run_dd_direct(f.path(), bs_, f.bytes() / bs_);
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t off = 0; off < f.bytes(); off += bs_) f.read(off, bs_, buf_->ptr);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ratio.push_back(t_dd / t);
    }
    std::sort(ratio.begin(), ratio.end());
    return "interleaved with dd (dd's own reported time), 3 rounds: rate / dd rate median " + str(ratio[1]) +
           " (min " + str(ratio[0]) + ", max " + str(ratio[2]) + ")";
  }
  void teardown(Backend&) override { buf_.reset(); }

 private:
  Env& env_;
  std::size_t bs_;
  bool dd_, huge_;
  BufferHandle buf_;
};

std::unique_ptr<Case> make_file(const kvf::Point& p, Env& env) {
  const std::size_t bs = std::size_t(p.integer("copy_bytes"));
  const bool dd = p["arm"] == "dd_direct", huge = p["arm"] == "file_direct_huge";
  auto c = std::make_unique<FileRead>(env, bs, dd, huge);
  c->params = {{"file_bytes", i2s(env.file_bytes)}, {"link", "file_o_direct"}, {"src_mem", "file"},
               {"dst_mem", "pageable_host"}, {"huge_buffer", huge ? "yes" : "no"}};
  c->bytes = double(env.file_bytes);
  c->cold = false;
  c->ceiling = kvf::CeilingRef{"frontier", {{"arm", "dd_direct"}, {"copy_bytes", i2s(bs)}}, "gbps"};
  c->note = dd ? "dd if=FILE of=/dev/null bs=copy_bytes iflag=direct, timed around the process (fork+exec included)"
               : std::string("sequential pread(O_DIRECT) of the whole file in copy_bytes reads, queue depth 1, like dd; ") +
                     (huge ? "destination on 2 MiB huge pages (fewer pages to pin per read)"
                           : "destination on 4 KiB pages, like dd's buffer");
  // Queue depth 1: each read pays a fixed ~0.1 ms beside its bytes (64 KiB reads ran at 0.35 GB/s, 2 MiB at 1.7).
  const double whole_file_s = double(env.file_bytes / bs) * (100e-6 + double(bs) / 1.5e9);
  c->est_seconds = est(env, whole_file_s, whole_file_s, 1);
  return c;
}

class FilePage final : public Case {
 public:
  FilePage(Env& env, std::size_t page) : env_(env), page_(page) {}
  void setup(Backend& be) override {
    env_.file();
    kvf::AllocOptions o;
    o.huge_pages = false;
    buf_ = BufferHandle(be, page_, MemKind::pageable_host, o);
  }
  void before_sample(Backend&) override {
    static std::mt19937_64 rng(kSeed);  // one stream for every file_page row, as before the move
    off_ = (rng() % (env_.file().bytes() / page_)) * page_;
  }
  void run(Backend&) override { env_.file().read(off_, page_, buf_->ptr); }
  bool has_verify() const override { return true; }
  void verify(Backend&) override {
    const auto& f = env_.file();
    f.read(page_, page_, buf_->ptr);
    if (!fr::check_pattern(buf_->ptr, page_, f.seed(), page_ / 8)) throw kvf::VerifyError("file page: pattern differs");
  }
  void teardown(Backend&) override { buf_.reset(); }

 private:
  Env& env_;
  std::size_t page_, off_ = 0;
  BufferHandle buf_;
};

std::unique_ptr<Case> make_file_page(const kvf::Point& p, Env& env) {
  const md::ModelShape& m = env.model(p["model"]);
  const std::size_t page = kv_page_bytes(m, int(p.integer("tokens")));
  auto c = std::make_unique<FilePage>(env, page);
  c->params = {{"copy_bytes", i2s(page)}, {"file_bytes", i2s(env.file_bytes)}, {"link", "file_o_direct"},
               {"resident_form", "kv_bf16"}, {"resident_bytes_per_page", i2s(page)}, {"kv_bytes_per_page", i2s(page)}};
  c->bytes = double(page);
  c->cold = false;
  c->ceiling = kvf::CeilingRef{"frontier", {{"arm", "dd_direct"}, {"copy_bytes", i2s(page)}}, "gbps"};
  c->note = "one layer's K/V of one page read with O_DIRECT from a random page-aligned offset";
  c->est_seconds = est(env, double(page) / 1e9 + 100e-6, 0.1, 1);
  return c;
}

}  // namespace

Arm file_arm(const Env&) {
  return Arm{
      .name = "file",
      .doc = "O_DIRECT file tier: whole-file sequential reads (file_direct, file_direct_huge) against dd iflag=direct "
             "(dd_direct); CPU only",
      .on_gpu = false,
      // 64 KiB too: the file_page row of 16-token pages (Llama-3.1-8B) is stated against dd at its own size.
      .axes = {{.name = "copy_bytes",
                .doc = "bytes per read",
                .cpu = {"65536", "524288", "2097152"},
                .quick = {"524288"},
                .flag = "--copy-sizes"},
               arm_axis({"dd_direct", "file_direct", "file_direct_huge"}, "dd_direct first, the reference of the others")},
      .valid =
          [](const kvf::Point& p, const Env& e) {
            if (e.quick && p["arm"] == "file_direct_huge") return false;  // --quick: one destination kind
            return e.file_bytes % std::size_t(p.integer("copy_bytes")) == 0;
          },
      .case_name_fn = [](const kvf::Point& p) { return p["arm"] + "/" + kvf::format_bytes(p.number("copy_bytes")); },
      .make = make_file};
}

// Named "file" too: --arms file runs both declarations.
Arm file_page_arm(const Env& env) {
  const md::ModelShape* m = env.first_gqa() ? env.first_gqa() : env.models.empty() ? nullptr : env.models.front();
  return Arm{
      .name = "file",
      .doc = "one page's K/V from a random offset of the tier file (file_page: one fetch's latency)",
      .on_gpu = false,
      .axes = {arm_axis({"file_page"}),
               {.name = "model", .doc = "the first GQA model of --models (else the first model)",
                .cpu = m ? std::vector<std::string>{m->name} : std::vector<std::string>{}},
               {.name = "tokens", .doc = "tokens per page, the recompute arms' page sizes", .cpu = {"16", "128", "512"}}},
      .valid =
          [](const kvf::Point& p, const Env& e) {
            const auto page = kv_page_bytes(e.model(p["model"]), int(p.integer("tokens")));
            return page <= e.file_bytes && page % fr::kDirectAlign == 0;
          },
      .case_name = "file_page/{model}/T{tokens}",
      .make = make_file_page};
}

}  // namespace kvf::frontier_study
