// What the quality figures cost for one layer of Llama-3.1-8B shapes (32 query heads, 8 kv heads, d 128,
// M = 16 causal rows) at 8K and 32K keys, with the default sweep (W 0..4096, blocks 16..256, keep 1/2..1/32)
// and one needle: the per-layer cost a real-model run multiplies by its layers and prompts.
// Run by hand: bench_attention_quality_cost [--benchmark_repetitions=3]. Each phase is timed alone and
// together (layer_figures): wall time (the figures use every core), and the counter process_cpu_s, the CPU
// seconds of every thread of the process, which a machine shared with other jobs inflates far less than the
// wall time (the Time column's CPU is the main thread's alone).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <vector>

#include "kvf/attention/quality.hpp"

using namespace kvf::attention::quality;

namespace {

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs body once per iteration and reports the process CPU seconds per iteration.
template <class F>
void timed(benchmark::State& st, F&& body) {
  double cpu = 0;
  for (auto _ : st) {
    const double c0 = process_cpu_s();
    body();
    cpu += process_cpu_s() - c0;
  }
  st.counters["process_cpu_s"] = cpu / static_cast<double>(st.iterations());
}

struct Layer {
  std::vector<float> q, k, v, probs;
  LayerAttention a;
};

// Deterministic q, k, v (xorshift, uniform in [-1, 1), q x2 so the softmax is not flat); one per context.
const Layer& layer_of(std::uint32_t ctx) {
  static std::map<std::uint32_t, std::unique_ptr<Layer>> cache;
  auto& slot = cache[ctx];
  if (slot) return *slot;
  slot = std::make_unique<Layer>();
  Layer& l = *slot;
  const std::uint32_t hq = 32, hkv = 8, d = 128, rows = 16;
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>(x >> 40) / 8388608.0f - 1.0f;
  };
  l.q.resize(std::size_t(hq) * rows * d);
  l.k.resize(std::size_t(hkv) * ctx * d);
  l.v.resize(l.k.size());
  for (float& f : l.q) f = 2.0f * next();
  for (float& f : l.k) f = next();
  for (float& f : l.v) f = next();
  l.a.hq = hq;
  l.a.hkv = hkv;
  l.a.d = d;
  l.a.ctx = ctx;
  l.a.rows = rows;
  l.a.causal = true;
  l.a.q = l.q;
  l.a.k = l.k;
  l.a.v = l.v;
  l.probs = true_probs(l.a);
  return l;
}

QualityOptions options(std::uint32_t ctx) {
  QualityOptions o;
  o.selection.needles = {{needle_pos(ctx, 32, 50.0), 32}};
  return o;
}

void BM_true_probs(benchmark::State& st) {
  const Layer& l = layer_of(static_cast<std::uint32_t>(st.range(0)));
  timed(st, [&] { benchmark::DoNotOptimize(true_probs(l.a)); });
}

void BM_locality_entropy(benchmark::State& st) {
  const Layer& l = layer_of(static_cast<std::uint32_t>(st.range(0)));
  const QualityOptions o = options(l.a.ctx);
  timed(st, [&] {
    benchmark::DoNotOptimize(locality(l.a, l.probs, o.sink, o.windows));
    benchmark::DoNotOptimize(entropy(l.a, l.probs));
  });
}

void BM_selection(benchmark::State& st) {
  const Layer& l = layer_of(static_cast<std::uint32_t>(st.range(0)));
  const QualityOptions o = options(l.a.ctx);
  std::size_t skipped = 0;
  timed(st, [&] {
    const SelectionFigures f = selection_quality(l.a, l.probs, o.selection);
    skipped = f.skipped.size();
    benchmark::DoNotOptimize(f.rows.data());
  });
  st.counters["skipped_budgets"] = static_cast<double>(skipped);
}

void BM_layer_figures(benchmark::State& st) {
  const Layer& l = layer_of(static_cast<std::uint32_t>(st.range(0)));
  const QualityOptions o = options(l.a.ctx);
  timed(st, [&] { benchmark::DoNotOptimize(layer_figures(l.a, o).layer_entropy); });
}

// The same with the probabilities given, as bench_attention passes its forward pass's capture (and a user's dump
// its hook's): they are checked, not computed.
void BM_layer_figures_captured(benchmark::State& st) {
  const Layer& l = layer_of(static_cast<std::uint32_t>(st.range(0)));
  LayerAttention a = l.a;
  a.probs = l.probs;
  const QualityOptions o = options(a.ctx);
  timed(st, [&] { benchmark::DoNotOptimize(layer_figures(a, o).layer_entropy); });
}

void contexts(benchmark::internal::Benchmark* b) {
  b->Arg(8192)->Arg(32768)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
}

}  // namespace

BENCHMARK(BM_true_probs)->Apply(contexts);
BENCHMARK(BM_locality_entropy)->Apply(contexts);
BENCHMARK(BM_selection)->Apply(contexts);
BENCHMARK(BM_layer_figures)->Apply(contexts);
BENCHMARK(BM_layer_figures_captured)->Apply(contexts);
BENCHMARK_MAIN();
