// Planted-structure fixtures: only dimension 0 of q and k is non-zero and the softmax scale is 1, so the score
// of key t for query head h is qmul(h) * key0(kv head, t) exactly, and every probability, mass and entropy has a
// closed form the tests compute from the plant (not from the library).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "kvf/attention/quality.hpp"

namespace kvf::attention::quality::testing {

struct Planted {
  std::uint32_t hq = 4, hkv = 2, d = 16, ctx = 256, rows = 2;
  bool causal = false;
  std::vector<float> q, k, v;

  LayerAttention view(std::uint32_t layer = 0) const {
    LayerAttention a;
    a.layer = layer;
    a.hq = hq;
    a.hkv = hkv;
    a.d = d;
    a.ctx = ctx;
    a.rows = rows;
    a.scale = 1.0f;
    a.causal = causal;
    a.q = q;
    a.k = k;
    a.v = v;
    return a;
  }
};

// key0(kv head, token): the score of the token for a query of 1; qmul(query head): that head's query.
// Values are small integers (exact in bf16, so the access study's bf16 routing ranks exactly these scores).
inline Planted plant(std::uint32_t ctx, std::uint32_t rows, bool causal,
                     const std::function<float(std::uint32_t, std::uint32_t)>& key0,
                     const std::function<float(std::uint32_t)>& qmul, std::uint32_t hq = 4, std::uint32_t hkv = 2) {
  Planted p;
  p.hq = hq;
  p.hkv = hkv;
  p.ctx = ctx;
  p.rows = rows;
  p.causal = causal;
  p.q.assign(std::size_t(hq) * rows * p.d, 0.0f);
  p.k.assign(std::size_t(hkv) * ctx * p.d, 0.0f);
  p.v.assign(std::size_t(hkv) * ctx * p.d, 0.0f);
  for (std::uint32_t h = 0; h < hq; ++h)
    for (std::uint32_t r = 0; r < rows; ++r) p.q[(std::size_t(h) * rows + r) * p.d] = qmul(h);
  for (std::uint32_t kh = 0; kh < hkv; ++kh)
    for (std::uint32_t t = 0; t < ctx; ++t) {
      p.k[(std::size_t(kh) * ctx + t) * p.d] = key0(kh, t);
      for (std::uint32_t j = 0; j < p.d; ++j)  // values that differ per token, head and dim
        p.v[(std::size_t(kh) * ctx + t) * p.d + j] = static_cast<float>((t * 7 + j * 3 + kh * 5) % 11) - 5.0f;
    }
  return p;
}

// Closed forms over one row's weights w_t = exp(score_t) (double).
struct Weights {
  std::vector<double> w;
  double z = 0;
  Weights(std::uint32_t n, const std::function<double(std::uint32_t)>& score) : w(n) {
    for (std::uint32_t t = 0; t < n; ++t) z += (w[t] = std::exp(score(t)));
  }
  double mass(const std::function<bool(std::uint32_t)>& in) const {
    double m = 0;
    for (std::uint32_t t = 0; t < w.size(); ++t)
      if (in(t)) m += w[t];
    return m / z;
  }
};

}  // namespace kvf::attention::quality::testing
