// The dense arm's control on the CPU (arm=read): the K and V bytes a dense row reads, in its order and placement,
// read once by a plain OpenMP loop and nothing computed. The stream read ceiling is a sequential read; a paged
// cache read in shuffled page order is not one (on the 2-core Zen 5 VM of 2026-11-27 this control read shuffled
// 16-token pages at 0.74-0.97 of the sequential rate, run to run). Measured in the same run, it splits a dense
// row's distance from the ceiling into what its access pattern costs (this row against the ceiling) and what its
// compute and overlap cost (the dense row against this one: vs_kv_read in its note).
#include "access_env.hpp"

namespace kvf::access_study {
namespace {

class KvReadCase final : public Case {
 public:
  std::shared_ptr<Shared> sh;
  ka::AttnShape s;
  ka::PageMap pm;
  bool huge = true;
  std::string median_key;

  void setup(Backend& be) override {
    if (is_cuda(be)) throw std::logic_error("access: the kv read control is a CPU row");
    data_ = &sh->ensure_kv(be, s, huge);
  }
  bool has_verify() const override { return true; }
  void verify(Backend&) override {
    const std::uint64_t got = read(), want = ka::kv_sum_ref(s, data_->k->ptr, data_->v->ptr);
    if (got != want)
      throw VerifyError("kv read checksum " + std::to_string(got) + " differs from the plain sum of K and V " +
                        std::to_string(want));
  }
  void run(Backend&) override { sh->sink += read(); }
  void teardown(Backend&) override { data_ = nullptr; }
  std::string after_measure(Backend&, const Summary& m, const std::string& mode) override {
    sh->record(median_key, mode, m.median);
    return "control: every K and V byte of the dense row, in its order and placement, read once by a plain "
           "OpenMP loop (no intrinsics, no software prefetch, no compute)";
  }

 private:
  std::uint64_t read() const { return ka::kv_read_cpu(s, pm, data_->k->ptr, data_->v->ptr); }
  KvData* data_ = nullptr;
};

}  // namespace

std::string kv_read_key(const std::string& config_key) { return config_key + "/kv_read"; }

std::unique_ptr<Case> make_kv_read_case(const AccessEnv& env, const ka::AttnShape& s, bool huge,
                                        const std::string& config_key, std::vector<Param> params) {
  auto c = std::make_unique<KvReadCase>();
  c->sh = env.shared;
  c->s = s;
  c->pm = ka::make_page_map(s.ctx, s.page, kPageMapKey);  // the dense row's placement (attn_case.cpp)
  c->huge = huge;
  c->median_key = kv_read_key(config_key);
  c->params = std::move(params);
  c->bytes = 2.0 * double(s.kv_bytes());
  c->ceiling = CeilingRef{"stream", {{"op", "read"}}, "gbps"};
  c->hot_in_cache = c->bytes < 4.0 * double(env.llc);
  const double t = c->bytes / 8e9, fill = c->bytes / 6e8;
  c->est_seconds = 0.05 + fill / 4 + 2 * std::min(0.6, std::max(0.25, 10 * t + 0.1));
  return c;  // make_attn_case has refused K and V that memory cannot hold
}

}  // namespace kvf::access_study
