// The decode arm: a decoder layer's decode step over L layers for B sequences at context C, verified against the
// reference of one layer, then timed; its idleness figures are stated against both ceilings of the run. The CPU
// case here also serves the co-run's steps (a background thread beside it, background.hpp); the GPU case is
// decode_gpu.cpp.
#include <algorithm>
#include <stdexcept>

#include "background.hpp"
#include "idleness.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/units.hpp"

namespace kvf::idleness {

kvf::Axis arm_axis(const std::string& arm, bool in_quick) {
  return {.name = "arm", .doc = "the arm", .cpu = {arm}, .quick = in_quick ? std::vector<std::string>{arm}
                                                                           : std::vector<std::string>{}};
}
kvf::Axis model_axis() {
  return {.name = "model", .doc = "model shape (data/models.json)", .cpu = {"Llama-3.1-8B"},
          .quick = {"Llama-3.1-8B"}, .flag = "--models"};
}
kvf::Axis batch_axis() {
  return {.name = "batch", .doc = "sequences B per step", .cpu = {"1", "4", "16", "64"},
          .gpu = {"1", "4", "16", "64", "256"}, .quick = {"1", "16"}, .flag = "--batches"};
}
kvf::Axis context_axis() {
  return {.name = "context", .doc = "tokens C of K/V each sequence attends over", .cpu = {"1024", "4096"},
          .gpu = {"1024", "8192", "32768", "131072"}, .quick = {"1024"}, .flag = "--contexts"};
}
kvf::Axis layers_axis() {
  return {.name = "layers", .doc = "layers L per step (one synthetic layer's weights re-read L times)", .cpu = {"1"},
          .gpu = {"4"}, .quick = {"1"}, .quick_gpu = {"4"}, .flag = "--layers"};
}

std::vector<kvf::Axis> launch_axes(std::vector<kvf::Axis> axes, bool gpu) {
  if (gpu) axes.push_back(kvf::study::launch_axis());
  return axes;
}

namespace {

// The CPU decode step; with a background (recompute, copy, file), a thread runs it beside the step (the co-run).
class DecodeCpu final : public kvf::Case {
 public:
  DecodeCpu(Env& env, const md::ModelShape& m, int B, int C, int L, Background bg)
      : env_(env), m_(m), B_(B), C_(C), L_(L), bg_kind_(bg) {}

  void setup(kvf::Backend&) override {
    w_ = env_.weights(m_);
    const std::size_t mem_cap = std::size_t(double(kvf::host_memory_bytes()) * 0.3);
    const double per = dc::kv_layer_bytes(m_, B_, C_);
    const int copies = std::max(1, std::min(L_, int(double(mem_cap) / std::max(per, 1.0))));
    st_ = dc::make_decode_state(m_, B_, C_, copies, kSeed);
    if (bg_kind_ == Background::none) return;
    // A case dropped after setup without its teardown (an error) stops its thread in the destructor.
    bg_ = std::make_unique<CpuBackground>(bg_kind_, m_, env_.file_dir, kSeed + 90);
    bg_->start();
  }
  bool has_verify() const override { return true; }
  void verify(kvf::Backend&) override {
    std::vector<int> rows = {0};
    if (B_ > 1) rows.push_back(B_ - 1);
    const auto r = dc::verify_cpu(*w_, st_, rows);
    if (!r.ok()) throw kvf::VerifyError("decode layer vs reference: " + r.text());
  }
  void run(kvf::Backend&) override {
    if (bg_) bg_->step_begin();
    dc::decode_step_cpu(*w_, st_, L_);
    if (bg_) bg_->step_end();
  }
  std::string after_measure(kvf::Backend&, const kvf::Summary& sm, const std::string& mode) override {
    std::string extra = cpu_after(env_, *this, sm, mode, [this] { dc::decode_step_cpu(*w_, st_, L_); });
    extra += "; K/V copies " + i2s(st_.copies()) + " for " + i2s(L_) + " layers";
    // The attention path the step took (ISA, QK instruction, the far prefetch its calibration in verify chose).
    if (!st_.ws.path_note.empty()) extra += "; attention: " + st_.ws.path_note;
    if (mode == "hot") extra += phase_split();
    if (bg_) extra += "; " + bg_->note();
    return extra;
  }
  void teardown(kvf::Backend&) override {
    bg_.reset();
    st_ = dc::DecodeState{};
    w_.reset();
  }

 private:
  // One extra step, instrumented: GEMMs (weights) vs attention (K/V) vs the rest, with their rates.
  std::string phase_split() {
    st_.t_gemm = st_.t_attn = st_.t_other = 0;
    st_.instrument = true;
    dc::decode_step_cpu(*w_, st_, L_);
    st_.instrument = false;
    const double wbytes = dc::layer_params(m_) * 4 * L_, kvb = dc::kv_layer_bytes(m_, B_, C_) * L_;
    const double gflop = 2.0 * B_ * dc::layer_params(m_) * L_ / 1e9;
    return "; phase split of one step: gemm " + num(st_.t_gemm, 3) + " s (" + num(wbytes / st_.t_gemm / 1e9, 3) +
           " GB/s of weights, " + num(gflop / st_.t_gemm, 3) + " GFLOP/s), attention " + num(st_.t_attn, 3) +
           " s (" + num(kvb / st_.t_attn / 1e9, 3) + " GB/s of K/V), other " + num(st_.t_other, 3) + " s";
  }

  Env& env_;
  const md::ModelShape m_;
  const int B_, C_, L_;
  const Background bg_kind_;
  std::shared_ptr<fr::LayerWeights> w_;
  dc::DecodeState st_;
  std::unique_ptr<CpuBackground> bg_;
};

// A step whose weights and one layer's K/V cannot fit: bad input when the user asked for both its batch and its
// context, a skipped row otherwise. Empty: it fits.
std::string does_not_fit(const md::ModelShape& m, int B, int C, const Env& env) {
  const double need = dc::layer_params(m) * (env.gpu ? 2 : 4) + dc::kv_layer_bytes(m, B, C);
  if (need <= env.usable_bytes) return {};
  const std::string msg = m.name + " B " + i2s(B) + " C " + i2s(C) + ": weights and one layer's K/V need " +
                          kvf::format_bytes(need) + ", more than the " + kvf::format_bytes(env.usable_bytes) +
                          " usable";
  if (env.user_shape) throw kvf::UsageError("--batches/--contexts " + msg);
  return msg;
}

}  // namespace

std::unique_ptr<kvf::Case> make_decode_case(const kvf::Point& p, Env& env, const std::string& background) {
  const md::ModelShape& m = env.shape(p["model"]);
  const int B = int(p.integer("batch")), C = int(p.integer("context")), L = int(p.integer("layers"));
  const bool corun = p["arm"] == "corun";
  const Background bg = background_of(background);
  std::unique_ptr<kvf::Case> c;
  const std::string launch = kvf::study::launch_of(p);  // "" on CPU targets (the axis is GPU only)
#if defined(KVF_HAVE_CUDA)
  if (env.gpu) c = make_decode_gpu_case(m, B, C, L, background, launch, env);
#endif
  if (!c) c = std::make_unique<DecodeCpu>(env, m, B, C, L, bg);
  const double wb = env.gpu ? 2 : 4;
  c->params.insert(c->params.begin(), {{"background", background}, {"weight_bytes", num(wb)}});
  c->flops = dc::decode_flops(m, B, C, L);
  c->bytes = dc::decode_bytes(m, B, C, L, wb);
  if (!c->ceiling)
    c->ceiling = corun ? kvf::CeilingRef{"idleness", {{"arm", "corun"}, {"background", "none"}}, "gbps"}
                       : read_ceiling_ref();
  if (corun) {
    // A co-run's slowdown is against decode alone of its own step (model, batch, context, layers, launch), not
    // against the fastest "none" row in the directory (with --models a,b: the other model's).
    std::vector<kvf::Param> step;
    for (const char* axis : kStepAxes)
      if (p.has(axis)) step.push_back({axis, p[axis]});
    const auto same_step = [&](kvf::CeilingRef& r) {
      if (r.study == "idleness") r.match.insert(r.match.begin() + 1, step.begin(), step.end());  // after arm
    };
    same_step(*c->ceiling);
    for (auto& u : c->uses) same_step(u);
  }
  const auto ceilings = idle_ceilings();
  c->uses.insert(c->uses.begin(), ceilings.begin(), ceilings.end());
  if (!env.gpu) c->uses.push_back(gemm_fp32_ceiling_ref());  // the fp32 twin's compute ceiling (cpu_after)
  const double t = env.gpu ? c->bytes / 2.5e12 + L * 60e-6 : c->bytes / 15e9 + c->flops / 150e9;
  // GPU: plus the counters phases after the hot samples (8 + 64 + 8 steps). CPU backgrounds: their pools (256 MiB
  // written) or tier file (64 MiB written and synced) at setup.
  const int modes = int(c->cold) + int(c->hot);
  const double bg_setup = env.gpu ? 0 : bg == Background::copy ? 0.1 : bg == Background::file ? 0.3 : 0;
  // A graph row collects no counters (its kernels are the eager row's).
  const double counters_s = launch == "graph" ? 0 : 80 * t;
  c->est_seconds = env.gpu ? est(env, t, 1.0 + counters_s + 0.5 * std::min(B, 2), modes)
                           : est(env, t, 0.4 + 0.25 * std::min(B, 2) + bg_setup, modes);
  if (c->note.empty())
    c->note = std::string("bytes = ") + (env.gpu ? "bf16" : "fp32 (bf16 values)") +
              " weights of L layers + bf16 K/V read; flops = GEMMs + attention; one synthetic layer's weights serve "
              "every layer (each exceeds the LLC/L2)" +
              (corun ? std::string("; pct_of_ceiling = 100 / slowdown against background none") : "") +
              (bg == Background::copy || bg == Background::file ? "; beside the step: " + unit_words(bg, env.gpu)
                                                                : std::string());
  return c;
}

Arm decode_arm(bool gpu) {
  return Arm{
      .name = "decode",
      .doc = "decode step of L layers for B sequences at context C (norms, QKV, RoPE, attention, O, MLP), verified",
      .axes = launch_axes({arm_axis("decode", true), model_axis(), batch_axis(), context_axis(), layers_axis()}, gpu),
      // A graph row beside the eager one where a layer's K/V is at most its weights: the shortest steps, where the
      // kernel boundaries (about 14 a layer) weigh most.
      .valid =
          [](const kvf::Point& p, const Env& env) {
            if (kvf::study::launch_of(p) != "graph") return true;
            if (env.quick) return false;
            const md::ModelShape& m = env.shape(p["model"]);
            return dc::kv_layer_bytes(m, int(p.integer("batch")), int(p.integer("context"))) <= dc::layer_params(m) * 2;
          },
      .case_name_fn =
          [](const kvf::Point& p) {
            return "decode/" + p["model"] + "/B" + p["batch"] + "/C" + ctx_name(p.integer("context")) + "/L" +
                   p["layers"] + kvf::study::launch_suffix(p);
          },
      .make =
          [](const kvf::Point& p, Env& env) -> std::unique_ptr<kvf::Case> {
            const std::string why =
                does_not_fit(env.shape(p["model"]), int(p.integer("batch")), int(p.integer("context")), env);
            if (!why.empty()) return kvf::skipped_case("", {}, why);
            return make_decode_case(p, env, "none");
          }};
}

}  // namespace kvf::idleness
