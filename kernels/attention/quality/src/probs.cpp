// The captured layer: its checks and its true attention probabilities.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kvf/attention/quality.hpp"

namespace kvf::attention::quality {

namespace {

std::string str(std::uint64_t v) { return std::to_string(v); }

void check_span(const char* name, std::span<const float> s, std::uint64_t want, const char* shape) {
  if (s.size() != want)
    throw std::invalid_argument(std::string(name) + " holds " + str(s.size()) + " floats: " + shape + " = " +
                                str(want) + " expected");
}

// What is wrong with row hr = h * rows + r of probabilities a hook wrote, or "" (finite, non-negative, a unit sum
// over the visible keys, nothing on the masked ones).
std::string probs_row_problem(const LayerAttention& a, std::uint64_t hr) {
  const float* p = a.probs.data() + hr * a.ctx;
  const std::uint32_t h = static_cast<std::uint32_t>(hr / a.rows), r = static_cast<std::uint32_t>(hr % a.rows);
  const std::uint32_t vis = a.visible(r);
  // One branch-free pass (the order of the sums is free: they are held to 1e-3 and 1e-6), the culprit found after.
  double sum = 0, masked = 0;
  bool bad = false;
#pragma omp simd reduction(+ : sum) reduction(| : bad)
  for (std::uint32_t t = 0; t < vis; ++t) {
    sum += p[t];
    bad |= !(p[t] >= 0.0f && p[t] <= std::numeric_limits<float>::max());
  }
#pragma omp simd reduction(+ : masked) reduction(| : bad)
  for (std::uint32_t t = vis; t < a.ctx; ++t) {
    masked += p[t];
    bad |= !(p[t] >= 0.0f && p[t] <= std::numeric_limits<float>::max());
  }
  if (bad)
    for (std::uint32_t t = 0; t < a.ctx; ++t)
      if (!std::isfinite(p[t]) || p[t] < 0.0f)
        return "probs of head " + str(h) + ", row " + str(r) + ", key " + str(t) + " is " + std::to_string(p[t]) +
               ": must be finite and >= 0";
  if (masked > 1e-6)
    return "probs of head " + str(h) + ", row " + str(r) + " put " + std::to_string(masked) + " on keys at or after " +
           str(vis) + ": a causal row sees keys [0, " + str(vis) + ") only";
  if (std::fabs(sum - 1.0) > 1e-3)
    return "probs of head " + str(h) + ", row " + str(r) + " sum to " + std::to_string(sum) + ": must be 1 within 1e-3";
  return {};
}

// Every row, on every core (64 MiB at 32K keys and Llama-3.1-8B's 32 heads x 16 rows: on one core it held a
// many-core host's figures back); the lowest failing row named, whichever thread found it.
void check_probs(const LayerAttention& a) {
  const std::uint64_t rows = std::uint64_t{a.hq} * a.rows;
  std::uint64_t first_bad = rows;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (std::uint64_t hr = 0; hr < rows; ++hr)
    if (hr < first_bad && !probs_row_problem(a, hr).empty()) first_bad = hr;
  if (first_bad < rows) throw std::invalid_argument(probs_row_problem(a, first_bad));
}

}  // namespace

float LayerAttention::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(d));
}

void validate(const LayerAttention& a) {
  if (a.hq == 0 || a.hkv == 0 || a.hq % a.hkv)
    throw std::invalid_argument("hq " + str(a.hq) + ", hkv " + str(a.hkv) + ": hq must be a non-zero multiple of hkv");
  if (a.d < 16 || a.d > 128 || a.d % 16)
    throw std::invalid_argument("head dim " + str(a.d) + ": must be a multiple of 16 in [16, 128] (the access study's routing)");
  if (a.rows == 0) throw std::invalid_argument("rows (M) 0: at least one query row is needed");
  if (a.ctx < 2) throw std::invalid_argument("ctx " + str(a.ctx) + ": at least 2 keys are needed");
  if (a.causal && a.rows > a.ctx)
    throw std::invalid_argument("rows (M) " + str(a.rows) + " at ctx " + str(a.ctx) +
                                ": causal rows are the last M of the context, so M <= ctx");
  if (!std::isfinite(a.scale) || a.scale < 0.0f)
    throw std::invalid_argument("scale " + std::to_string(a.scale) + ": must be > 0 (or 0 for 1/sqrt(d))");
  const std::uint64_t qn = std::uint64_t{a.hq} * a.rows * a.d, kn = std::uint64_t{a.hkv} * a.ctx * a.d;
  check_span("q", a.q, qn, "hq*rows*d");
  check_span("k", a.k, kn, "hkv*ctx*d");
  check_span("v", a.v, kn, "hkv*ctx*d");
  if (!a.probs.empty()) {
    check_span("probs", a.probs, std::uint64_t{a.hq} * a.rows * a.ctx, "hq*rows*ctx");
    check_probs(a);
  }
}

// Two passes. First every q . k of a kv head's G x M query rows, a tile of keys at a time (each key row read
// once for all of them, not once per query row: at 32K keys and M = 16 that was 8 GiB of K per layer, the pass
// bound by memory), written as the fp32 dot into the output. Then per query row, as before: scale, max, exp and
// normalize in double. The same dot products in the same order: the probabilities are bit-identical.
std::vector<float> true_probs(const LayerAttention& a) {
  validate(a);
  if (!a.probs.empty()) return {a.probs.begin(), a.probs.end()};
  const std::uint32_t G = a.group(), D = a.d, R = a.rows, N = a.ctx;
  const double scale = a.softmax_scale();
  std::vector<float> p(std::uint64_t{a.hq} * R * N, 0.0f);
  constexpr std::uint32_t kTile = 64;  // keys per tile: 32 KiB of fp32 rows at d 128
  const std::uint64_t tiles = (N + kTile - 1) / kTile;
#pragma omp parallel for schedule(dynamic)
  for (std::uint64_t lt = 0; lt < std::uint64_t{a.hkv} * tiles; ++lt) {
    const std::uint32_t l = static_cast<std::uint32_t>(lt / tiles);
    const std::uint32_t t0 = static_cast<std::uint32_t>(lt % tiles) * kTile, t1 = std::min(N, t0 + kTile);
    const float* k = a.k.data() + std::uint64_t{l} * N * D;
    for (std::uint64_t hr = std::uint64_t{l} * G * R; hr < std::uint64_t{l + 1} * G * R; ++hr) {
      const float* q = a.q.data() + hr * D;
      const std::uint32_t vis = std::min(t1, a.visible(static_cast<std::uint32_t>(hr % R)));
      float* out = p.data() + hr * N;
      for (std::uint32_t t = t0; t < vis; ++t) {
        const float* kr = k + std::uint64_t{t} * D;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (std::uint32_t j = 0; j < D; ++j) dot += q[j] * kr[j];
        out[t] = dot;
      }
    }
  }
#pragma omp parallel
  {
    std::vector<double> s(N);
#pragma omp for schedule(dynamic)
    for (std::uint64_t hr = 0; hr < std::uint64_t{a.hq} * R; ++hr) {
      const std::uint32_t vis = a.visible(static_cast<std::uint32_t>(hr % R));
      float* out = p.data() + hr * N;
      double mx = -INFINITY;
      for (std::uint32_t t = 0; t < vis; ++t) {
        s[t] = scale * out[t];
        mx = std::max(mx, s[t]);
      }
      double l = 0;
      for (std::uint32_t t = 0; t < vis; ++t) l += (s[t] = std::exp(s[t] - mx));
      for (std::uint32_t t = 0; t < vis; ++t) out[t] = static_cast<float>(s[t] / l);
    }
  }
  return p;
}

}  // namespace kvf::attention::quality
