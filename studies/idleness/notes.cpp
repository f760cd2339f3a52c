// What the arms share: number formats, time estimates, the ceilings of this run, and the CPU idleness figures
// a CPU case adds to its note and to counters.csv after its timings.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "cpu_rows.hpp"
#include "idleness.hpp"
#include "kvf/perf_events.hpp"
#include "kvf/stats.hpp"

namespace kvf::idleness {

const md::ModelShape& Env::shape(const std::string& name) const { return md::find_model(shapes, name); }

std::shared_ptr<fr::LayerWeights> Env::weights(const md::ModelShape& m) {
  auto& w = weights_[m.name];
  if (!w) w = std::make_shared<fr::LayerWeights>(fr::make_layer_weights(m, kSeed));
  return w;
}

std::string ctx_name(long long c) { return c % 1024 == 0 ? i2s(c / 1024) + "K" : i2s(c); }

double est(const Env& env, double t, double setup_s, int modes) {
  const double sampling = env.quick ? kvf::kQuickBudgetS : kvf::StopRule{}.budget_s;
  return setup_s + modes * (2 * t + std::max(std::min(sampling, 1000 * t), 5 * t)) + 0.02;
}

double prefill_verify_s(const md::ModelShape& m, int T, int N) {
  return double(dc::prefill_check_rows(T).size()) *
         (dc::layer_params(m) + 2.0 * m.n_heads * m.head_dim * (N + T)) * 1e-9;
}

kvf::CeilingRef gemm_ceiling_ref() { return {"idleness", {{"arm", "gemm_ceiling"}}, "tflops"}; }
kvf::CeilingRef gemm_fp32_ceiling_ref() {
  return {"idleness", {{"arm", "gemm_ceiling"}, {"gemm_lib", "openblas_fp32"}}, "tflops"};
}
kvf::CeilingRef read_ceiling_ref() { return {"idleness", {{"arm", "read_ceiling"}}, "gbps"}; }
std::vector<kvf::CeilingRef> idle_ceilings() { return {gemm_ceiling_ref(), read_ceiling_ref()}; }

double ceiling_value(const Env& env, const kvf::CeilingRef& ref, const std::string& mode) {
  if (env.out_dir.empty()) return 0;
  // Of this backend and device only: a directory may hold a CPU run beside a CUDA one, or two GPUs' runs.
  const auto v = kvf::find_ceiling(env.out_dir, ref, mode, env.gpu ? "cuda" : "cpu", env.device_name);
  return v ? *v * (ref.metric == "tflops" ? 1e12 : 1e9) : 0;
}

std::string cpu_after(Env& env, const kvf::Case& c, const kvf::Summary& s, const std::string& mode,
                      const std::function<void()>& once) {
  // The twins compute in fp32 on fp32 weights: their compute ceiling is the fp32 GEMM row (OpenBLAS), not oneDNN's
  // bf16 matmul, which an AMX host runs several times faster (that figure is named beside, as what a bf16 engine
  // could use). The GEMM ceiling is a hot row; the read ceiling a cold one (larger than the LLC), the one the
  // decode rows' pct_of_ceiling is stated against.
  const double gemm = ceiling_value(env, gemm_fp32_ceiling_ref(), "hot");
  const double best_gemm = ceiling_value(env, gemm_ceiling_ref(), "hot");
  const double rd = ceiling_value(env, read_ceiling_ref(), "cold");
  const auto x = dc::cpu_idleness(c.flops, c.bytes, s.median, gemm, rd);
  auto rows = cpu_rows("idleness", c.name, mode, env.device_name, x);
  std::string perf = "perf counters: absent (" + env.perf_reason + ")";
  if (env.perf_ok && once) {
    const auto pc = kvf::perf_count(once);
    if (pc.ok) {
      const auto key = cpu_row_key("idleness", c.name, "perf", mode, env.device_name);
      rows.push_back(kvf::metric_row(key, "cycles", pc.cycles, "cycle"));
      rows.push_back(kvf::metric_row(key, "instructions", pc.instructions, "instruction"));
      perf = "perf (calling thread, one extra step): ipc=" + num(pc.instructions / std::max(pc.cycles, 1.0), 3);
    }
  }
  // The device's ridge point and the batch where the decode GEMMs turn compute bound (weights as the twin stores them).
  const double wb = 4, ridge = dc::ridge_flop_per_byte(gemm, rd), bound = dc::bound_batch(gemm, rd, wb);
  const auto model = cpu_row_key("idleness", c.name, "cpu_model", mode, env.device_name);
  rows.push_back(kvf::metric_row(model, "kvf:ridge_flop_per_byte", ridge, "FLOP/byte"));
  rows.push_back(kvf::metric_row(model, "kvf:bound_batch", bound, "sequences"));
  if (!env.out_dir.empty()) kvf::append_counters_csv(env.out_dir, rows);
  const std::string above = x.idle_compute_pct < 0 ? " (achieved above the GEMM ceiling: the ceiling case ran under "
                                                      "a different machine load; re-run on a quiet machine)"
                                                    : "";
  const std::string best = best_gemm > gemm * 1.001 ? " (fp32; the best GEMM row, oneDNN bf16, gives " +
                                                          num(best_gemm * 1e-9) + " GFLOP/s)"
                                                    : " (fp32)";
  return "ridge_flop_per_byte=" + num(ridge, 3) + " bound_batch=" + num(bound, 3) + " (fp32 weights); " +
         "cpu_idle_compute_pct=" + num(x.idle_compute_pct, 3) + " achieved_gflops=" + num(x.achieved_gflops) +
         " gemm_ceiling_gflops=" + num(x.ceiling_gflops) + best + " mem_use_pct=" + num(x.mem_use_pct, 3) +
         " achieved_gbps=" + num(x.achieved_gbps) + " read_ceiling_gbps=" + num(x.read_ceiling_gbps) + above + "; " +
         perf;
}

}  // namespace kvf::idleness
