// Recompute a page's K/V from the resident layer input X: bf16 X (arm x) or group-quantized int8/int4 X
// (arm xq: a dequantize pass, then the same GEMM, not fused). K/V projection GEMM, RoPE, write into
// scattered 16-token blocks of the paged cache; checked against the fp64 reference before it is timed.
#include <cmath>

#include "frontier_math.hpp"
#include "kvf/errors.hpp"
#include "kvf/launch_axis.hpp"
#include "x_state.hpp"

namespace kvf::frontier_study {

// ---------------------------------------------------------------- the recompute from X
void x_setup_host(XState& s, const md::ModelShape& m, int T, int P, int bits, bool gpu) {
  s.rows = T * P;
  s.hidden = m.hidden;
  s.bits = bits;
  s.g = {m.n_kv_heads, m.head_dim};
  const int out = 2 * s.g.kv_dim();
  s.w.resize(std::size_t(out) * m.hidden);
  fr::fill_bf16_uniform(s.w.data(), s.w.size(), kSeed + 1, float(std::sqrt(3.0 / m.hidden)));
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
    if (bits != 16) s.xb.resize(s.x.size());
    s.y.resize(std::size_t(s.rows) * out);
    s.gemm_cpu = std::make_unique<fr::Bf16Gemm>(s.rows, out, m.hidden, s.w.data());
  }
}

void x_run_cpu(XState& s) {
  const std::uint16_t* x = s.x.data();
  if (s.bits != 16) {
    fr::dequant_x_bf16(s.xq.data(), s.scales.data(), s.rows, s.hidden, s.bits, s.xb.data());
    x = s.xb.data();
  }
  s.gemm_cpu->run(x, s.y.data());
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

namespace {

// ---------------------------------------------------------------- resident forms of X
int x_bits(const std::string& xdtype) { return xdtype == "int8" ? 8 : xdtype == "int4" ? 4 : 16; }
fr::Resident resident_of(const std::string& xdtype) {
  return xdtype == "int8" ? fr::Resident::x_int8 : xdtype == "int4" ? fr::Resident::x_int4 : fr::Resident::x_bf16;
}

class XCase final : public Case {
 public:
  XCase(const md::ModelShape& m, int T, int P, int bits, bool gpu, const std::string& launch)
      : m_(m), T_(T), P_(P), bits_(bits), gpu_(gpu)
#if defined(KVF_HAVE_CUDA)
        , launch_(launch)
#endif
  {
    (void)launch;
  }
  void setup(Backend& be) override {
    x_setup_host(s_, m_, T_, P_, bits_, gpu_);
    if (s_.gemm_cpu) set_gemm_column(*this, *s_.gemm_cpu, 2.0 * s_.g.kv_dim() * m_.hidden);
#if defined(KVF_HAVE_CUDA)
    if (gpu_) {
      x_setup_gpu(s_, be);
      launch_.set([this](cudaStream_t st) { x_run_gpu(s_, st); }, kvf::cuda_stream(be), "the recompute from X");
    }
#endif
    (void)be;
  }
  void run(Backend& be) override {
#if defined(KVF_HAVE_CUDA)
    if (gpu_) return launch_.run(kvf::cuda_stream(be));
#endif
    (void)be;
    x_run_cpu(s_);
  }
  bool has_verify() const override { return true; }
  void verify(Backend& be) override;
  std::string after_measure(Backend&, const Summary&, const std::string&) override {
    std::vector<std::string> parts;
    if (s_.gemm_cpu) parts.push_back(gemm_kernel_note(*s_.gemm_cpu));
    if (!quant_note_.empty()) parts.push_back(quant_note_);
#if defined(KVF_HAVE_CUDA)
    if (!launch_.note().empty()) parts.push_back(launch_.note());
#endif
    return kvf::join_names(parts, "; ");
  }
  void teardown(Backend&) override {
#if defined(KVF_HAVE_CUDA)
    launch_.reset();
#endif
    s_ = XState{};
  }

 private:
#if defined(KVF_HAVE_CUDA)
  void verify_graph(Backend& be);
#endif
  md::ModelShape m_;
  int T_, P_, bits_;
  bool gpu_;
  XState s_;
  std::string quant_note_;
#if defined(KVF_HAVE_CUDA)
  kvf::study::LaunchPath launch_;
#endif
};

void XCase::verify(Backend& be) {
  run(be);
  be.synchronize();
  std::vector<std::uint16_t> xin = s_.x;
  if (bits_ != 16) {
    xin.assign(s_.x.size(), 0);
    fr::dequant_x_bf16(s_.xq.data(), s_.scales.data(), s_.rows, s_.hidden, bits_, xin.data());
  }
#if defined(KVF_HAVE_CUDA)
  if (gpu_) {
    download(be, s_.cache.data(), s_.dcache, s_.cache.size() * 2);
    if (bits_ != 16) {
      std::vector<std::uint16_t> got(s_.x.size());
      download(be, got.data(), s_.dx, got.size() * 2);
      if (got != xin) throw kvf::VerifyError("GPU dequantized X differs from the CPU twin's bit for bit");
    }
  }
#endif
  const auto st = x_check(s_, xin);
  if (st.bad)
    throw kvf::VerifyError(i2s(st.bad) + " of " + i2s(st.checked) + " K/V values outside tolerance; first: " +
                           st.first_bad);
  if (bits_ != 16) {  // accuracy cost of quantizing X: against the reference of the original bf16 X
    const auto q = x_check(s_, s_.x);
    quant_note_ = "K/V error vs the bf16-X reference: rms " + str(q.rms_err / q.rms_ref * 100) + "%, max " +
                  str(q.max_rel_to_rms * 100) + "% of the K/V rms";
  }
#if defined(KVF_HAVE_CUDA)
  if (gpu_) verify_graph(be);
#endif
}

#if defined(KVF_HAVE_CUDA)
// The graph row's outputs against the eager row's: the paged cache and, for quantized X, the dequantized X.
void XCase::verify_graph(Backend& be) {
  const auto read = [&] {
    kvf::study::Outputs out;
    std::vector<std::uint16_t> v(s_.cache.size());
    download(be, v.data(), s_.dcache, v.size() * 2);
    out.push_back({"K/V cache", kvf::study::widen_bf16(v.data(), v.size())});
    if (bits_ != 16) {
      v.assign(s_.x.size(), 0);
      download(be, v.data(), s_.dx, v.size() * 2);
      out.push_back({"dequantized X", kvf::study::widen_bf16(v.data(), v.size())});
    }
    return out;
  };
  const cudaStream_t st = kvf::cuda_stream(be);
  launch_.verify_graph(st, read, [&] {
    kvf::study::poison(s_.dcache->ptr, s_.cache.size() * 2, st);
    if (bits_ != 16) kvf::study::poison(s_.dx->ptr, s_.x.size() * 2, st);  // bf16 X is the input: kept
  });
}
#endif

std::unique_ptr<Case> make_x(const kvf::Point& p, Env& env, const std::string& xdtype) {
  const md::ModelShape& m = env.model(p["model"]);
  const int T = int(p.integer("tokens")), P = int(p.integer("pages")), bits = x_bits(xdtype);
  auto c = std::make_unique<XCase>(m, T, P, bits, env.gpu, kvf::study::launch_of(p));
  const std::int64_t res = fr::resident_bytes(resident_of(xdtype), T, m.hidden, m.kv_values_per_token());
  c->params = page_columns(m, T, P, 1);
  c->params.insert(c->params.end(), {{"xdtype", xdtype},
                                     {"resident_form", "x_" + xdtype},
                                     {"resident_bytes_per_page", i2s(res)},
                                     {"fused", bits == 16 ? "n/a" : "no"},
                                     {"gemm", env.gpu ? "cublaslt_bf16_fp32out" : "onednn_bf16_fp32out"}});
  const double rows = double(T) * P, kvd = m.kv_dim();
  c->flops = 2.0 * rows * m.hidden * 2 * kvd;
  const double wbytes = 2 * kvd * m.hidden * 2;
  c->bytes = double(res) * P + wbytes + rows * 2 * kvd * 2;
  c->ceiling = kGemmCeiling;
  c->note = std::string("bytes = resident X read + K/V weights read + K/V written; pages at positions ") + i2s(kPos0) +
            "+; K/V written to scattered 16-token blocks" +
            (bits == 16 ? "" : "; dequantize pass (bf16 X) then the GEMM: not fused") +
            (env.gpu ? "" : "; CPU: oneDNN bf16 matmul with W packed once at setup, or OpenBLAS fp32 where this oneDNN "
                           "has none (the gemm column and the GEMM kernel below say which ran)");
  const double t = c->flops / (env.gpu ? 400e12 : 150e9) + (env.gpu ? 10e-6 : 0);
  c->est_seconds = est(env, t, env.gpu ? 0.3 : 0.05 + rows * m.hidden * 2e-9);
  return c;
}

// ---------------------------------------------------------------- declarations
const std::vector<std::string> kXGpuTokens = {"16", "32", "64", "128", "256", "512", "1024", "2048", "4096"};
const std::vector<std::string> kXGpuPages = {"1", "2", "4", "8", "16", "32", "64"};
const std::vector<std::string> kXqGpuTokens = {"16", "128", "1024", "4096"};
const std::vector<std::string> kXqGpuPages = {"1", "8", "64"};

// One product per T: the pages of that T whose rows (T x P) stay within 65536.
std::vector<kvf::Product> capped_rows(std::vector<std::pair<std::string, std::vector<std::string>>> head,
                                      const std::vector<std::string>& tokens, const std::vector<std::string>& pages) {
  std::vector<kvf::Product> out;
  for (const auto& T : tokens) {
    std::vector<std::string> ps;
    for (const auto& P : pages)
      if (std::stoll(T) * std::stoll(P) <= 65536) ps.push_back(P);
    kvf::Product prod{head};
    prod.lists.push_back({"tokens", {T}});
    prod.lists.push_back({"pages", ps});
    out.push_back(std::move(prod));
  }
  return out;
}

kvf::Axis model_axis(const Env& env) {
  const auto names = env.model_names(false);
  return {.name = "model", .doc = "GQA models of --models", .cpu = names, .quick = names, .fixed = names};
}
kvf::Axis tokens_axis(std::vector<std::string> cpu, std::vector<std::string> gpu, std::vector<std::string> quick) {
  return {.name = "tokens", .doc = "tokens per page T", .cpu = std::move(cpu), .gpu = std::move(gpu),
          .quick = std::move(quick), .flag = "--tokens", .fixed = {"128"}};
}
kvf::Axis pages_axis(std::vector<std::string> cpu, std::vector<std::string> gpu, std::vector<std::string> quick) {
  return {.name = "pages", .doc = "pages per recompute call P", .cpu = std::move(cpu), .gpu = std::move(gpu),
          .quick = std::move(quick), .flag = "--pages", .fixed = {"1"}};
}

}  // namespace

Arm x_arm(const Env& env) {
  return Arm{
      .name = "x",
      .doc = "recompute K/V from the resident bf16 layer input X (K/V GEMM, RoPE, paged write)",
      .axes = launch_axes({arm_axis({"x"}), model_axis(env), tokens_axis({"128", "16", "512"}, kXGpuTokens, {"128"}),
                           pages_axis({"1", "8", "4"}, kXGpuPages, {"1"})},
                          env),
      // CPU: five (T, P) points across the batch sizes a CPU serves; GPU: every T x P up to 65536 rows, a graph
      // row beside the launch-bound ones (launch_rows).
      .default_grid =
          [](const kvf::Target& t, const Env& e) {
            const std::vector<std::pair<std::string, std::vector<std::string>>> head = {
                {"arm", {"x"}}, {"model", e.model_names(false)}};
            if (t.quick) {
              const kvf::Grid g{kvf::Product{{head[0], head[1], {"tokens", {"128"}}, {"pages", {"1"}}}}};
              return t.gpu ? kvf::study::with_launch(g, {kvf::study::launch_values().front()}) : g;
            }
            if (t.gpu) return launch_rows(capped_rows(head, kXGpuTokens, kXGpuPages));
            kvf::Grid g;
            for (auto [T, P] : std::vector<std::pair<const char*, const char*>>{
                     {"128", "1"}, {"16", "8"}, {"128", "4"}, {"16", "1"}, {"512", "1"}})
              g.push_back(kvf::Product{{head[0], head[1], {"tokens", {T}}, {"pages", {P}}}});
            return g;
          },
      .case_name_fn = launch_named("x/{model}/bf16/T{tokens}/P{pages}"),
      .make = [](const kvf::Point& p, Env& env) { return make_x(p, env, "bf16"); }};
}

Arm xq_arm(const Env& env) {
  return Arm{
      .name = "xq",
      .doc = "recompute K/V from group-quantized int8/int4 X (dequantize pass, then the x arm's GEMM: not fused)",
      .axes = launch_axes({arm_axis({"xq"}), model_axis(env),
                           {.name = "xdtype", .doc = "X form (--xdtypes)", .cpu = env.xdtypes, .fixed = env.xdtypes},
                           tokens_axis({"128"}, kXqGpuTokens, {}), pages_axis({"1"}, kXqGpuPages, {})},
                          env),
      .default_grid =
          [](const kvf::Target& t, const Env& e) {
            kvf::Grid g;
            if (t.quick) return g;
            for (const auto& xd : e.xdtypes) {
              const std::vector<std::pair<std::string, std::vector<std::string>>> head = {
                  {"arm", {"xq"}}, {"model", e.model_names(false)}, {"xdtype", {xd}}};
              for (auto& prod : capped_rows(head, t.gpu ? kXqGpuTokens : std::vector<std::string>{"128"},
                                            t.gpu ? kXqGpuPages : std::vector<std::string>{"1"}))
                g.push_back(std::move(prod));
            }
            return t.gpu ? launch_rows(g) : g;
          },
      .case_name_fn = launch_named("xq/{model}/{xdtype}/T{tokens}/P{pages}"),
      .make = [](const kvf::Point& p, Env& env) { return make_x(p, env, p["xdtype"]); }};
}

}  // namespace kvf::frontier_study
