// H1 (sink + local window mass) and H3 (entropy per head, per layer, the boundary and its stability).
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "kvf/attention/quality.hpp"

namespace kvf::attention::quality {

namespace {

void check_probs_size(const LayerAttention& a, std::span<const float> probs) {
  if (probs.size() != std::uint64_t{a.hq} * a.rows * a.ctx)
    throw std::invalid_argument("probabilities hold " + std::to_string(probs.size()) +
                                " floats: hq*rows*ctx = " + std::to_string(std::uint64_t{a.hq} * a.rows * a.ctx) +
                                " expected (true_probs of the same layer)");
}

const float* row_of(const LayerAttention& a, std::span<const float> probs, std::uint32_t h, std::uint32_t r) {
  return probs.data() + (std::uint64_t{h} * a.rows + r) * a.ctx;
}

}  // namespace

std::vector<LocalityRow> locality(const LayerAttention& a, std::span<const float> probs, std::uint32_t sink,
                                  std::span<const std::uint32_t> windows, bool per_row) {
  validate(a);
  check_probs_size(a, probs);
  if (sink == 0 || sink > a.ctx)
    throw std::invalid_argument("sink block of " + std::to_string(sink) + " tokens: must be in [1, ctx = " +
                                std::to_string(a.ctx) + "]");
  for (const std::uint32_t w : windows)
    if (w > a.ctx)
      throw std::invalid_argument("local window of " + std::to_string(w) + " tokens: must be <= ctx (" +
                                  std::to_string(a.ctx) + ")");
  // Every (head, window, row) sum on every core, then the rows in order: the same sums in the same order as one
  // thread (on one core the figures' serial parts held a many-core host back).
  const std::uint32_t R = a.rows;
  const std::uint64_t nw = windows.size(), n = std::uint64_t{a.hq} * nw * R;
  std::vector<double> mass(n);
#pragma omp parallel for schedule(static)
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t r = static_cast<std::uint32_t>(i % R), h = static_cast<std::uint32_t>(i / R / nw);
    const std::uint32_t w = windows[i / R % nw];
    const float* p = row_of(a, probs, h, r);
    const std::uint32_t vis = a.visible(r);
    // Union of [0, sink) and [vis - w, vis), both clipped to the visible keys: the window starts where
    // the sink ends at the latest, so no key counts twice.
    const std::uint32_t s_end = std::min(sink, vis);
    const std::uint32_t w_begin = std::max(s_end, vis - std::min(w, vis));
    double m = 0;
    for (std::uint32_t t = 0; t < s_end; ++t) m += p[t];
    for (std::uint32_t t = w_begin; t < vis; ++t) m += p[t];
    mass[i] = m;
  }
  std::vector<LocalityRow> out;
  for (std::uint32_t h = 0; h < a.hq; ++h)
    for (std::uint64_t wi = 0; wi < nw; ++wi) {
      LocalityRow mean{a.layer, h, kMeanOfRows, sink, windows[wi], 0.0};
      for (std::uint32_t r = 0; r < R; ++r) {
        const double m = mass[(std::uint64_t{h} * nw + wi) * R + r];
        mean.mass += m;
        if (per_row) out.push_back({a.layer, h, static_cast<std::int32_t>(r), sink, windows[wi], m});
      }
      mean.mass /= R;
      out.push_back(mean);
    }
  return out;
}

std::vector<EntropyRow> entropy(const LayerAttention& a, std::span<const float> probs, bool per_row) {
  validate(a);
  check_probs_size(a, probs);
  // A log per key: every row on every core, then the rows in order (the same sums as one thread).
  const std::uint32_t R = a.rows;
  const std::uint64_t n = std::uint64_t{a.hq} * R;
  std::vector<double> nats(n);
#pragma omp parallel for schedule(dynamic)
  for (std::uint64_t hr = 0; hr < n; ++hr) {
    const float* p = row_of(a, probs, static_cast<std::uint32_t>(hr / R), static_cast<std::uint32_t>(hr % R));
    const std::uint32_t vis = a.visible(static_cast<std::uint32_t>(hr % R));
    double e = 0;
    for (std::uint32_t t = 0; t < vis; ++t)
      if (p[t] > 0.0f) e -= static_cast<double>(p[t]) * std::log(static_cast<double>(p[t]));
    nats[hr] = e;
  }
  std::vector<EntropyRow> out;
  for (std::uint32_t h = 0; h < a.hq; ++h) {
    EntropyRow mean{a.layer, h, kMeanOfRows, 0.0, 0.0};
    for (std::uint32_t r = 0; r < R; ++r) {
      const std::uint32_t vis = a.visible(r);
      const double e = nats[std::uint64_t{h} * R + r];
      const double norm = vis > 1 ? e / std::log(static_cast<double>(vis)) : 0.0;
      mean.nats += e;
      mean.normalized += norm;
      if (per_row) out.push_back({a.layer, h, static_cast<std::int32_t>(r), e, norm});
    }
    mean.nats /= R;
    mean.normalized /= R;
    out.push_back(mean);
  }
  return out;
}

LayerEntropy layer_entropy(std::span<const EntropyRow> rows) {
  LayerEntropy le;
  std::uint32_t n = 0;
  for (const EntropyRow& e : rows) {
    if (n == 0 && e.row == kMeanOfRows) le.layer = e.layer;
    if (e.row != kMeanOfRows) continue;
    if (e.layer != le.layer)
      throw std::invalid_argument("entropy rows of layers " + std::to_string(le.layer) + " and " +
                                  std::to_string(e.layer) + ": layer_entropy takes one layer's rows");
    le.nats += e.nats;
    le.normalized += e.normalized;
    ++n;
  }
  if (n == 0) throw std::invalid_argument("no mean-of-rows entropy row: layer_entropy needs entropy()'s rows of one layer");
  le.nats /= n;
  le.normalized /= n;
  return le;
}

EntropyBoundary entropy_boundary(std::span<const LayerEntropy> layers, double threshold) {
  if (!(threshold > 0.0 && threshold < 1.0))
    throw std::invalid_argument("entropy threshold " + std::to_string(threshold) + ": must be in (0, 1)");
  for (std::size_t i = 1; i < layers.size(); ++i)
    if (layers[i].layer <= layers[i - 1].layer)
      throw std::invalid_argument("layer " + std::to_string(layers[i].layer) + " after layer " +
                                  std::to_string(layers[i - 1].layer) + ": layers must be strictly ascending");
  EntropyBoundary b;
  for (const LayerEntropy& l : layers)
    if (l.normalized < threshold) {
      b.first_below = static_cast<std::int32_t>(l.layer);
      break;
    }
  for (std::size_t i = 1; i < layers.size(); ++i) {
    const double drop = layers[i - 1].normalized - layers[i].normalized;
    if (drop > 0.0 && drop > b.drop) {
      b.drop = drop;
      b.largest_drop = static_cast<std::int32_t>(layers[i].layer);
    }
  }
  return b;
}

BoundaryStability boundary_stability(std::span<const std::int32_t> per_prompt) {
  if (per_prompt.empty()) throw std::invalid_argument("boundary stability of no prompts: at least one is needed");
  BoundaryStability s;
  s.prompts = static_cast<std::uint32_t>(per_prompt.size());
  std::vector<std::int32_t> b;
  for (const std::int32_t x : per_prompt) {
    if (x < -1) throw std::invalid_argument("boundary layer " + std::to_string(x) + ": must be >= 0, or -1 for none");
    if (x == -1) ++s.none;
    else b.push_back(x);
  }
  if (b.empty()) return s;
  std::sort(b.begin(), b.end());
  s.min = b.front();
  s.max = b.back();
  s.spread = s.max - s.min;
  const std::size_t n = b.size();
  s.median = n % 2 ? b[n / 2] : 0.5 * (b[n / 2 - 1] + b[n / 2]);
  std::map<std::int32_t, std::uint32_t> count;  // ascending: the first strict maximum is the lowest layer
  for (const std::int32_t x : b) ++count[x];
  std::uint32_t best = 0;
  for (const auto& [layer, c] : count)
    if (c > best) {
      best = c;
      s.mode = layer;
    }
  s.mode_share = static_cast<double>(best) / s.prompts;
  return s;
}

}  // namespace kvf::attention::quality
