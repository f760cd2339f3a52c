// H1 (sink + local window mass) and H3 (entropy, its layer boundary and stability) on planted fixtures.
// Tolerances: probabilities are stored as fp32 (relative rounding 6e-8 each), sums are double, so a mass is
// within 1e-6 of its closed form and an entropy within 1e-5 nats.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "planted.hpp"

using namespace kvf::attention::quality;
using namespace kvf::attention::quality::testing;

namespace {

constexpr double kMassTol = 1e-6, kEntropyTol = 1e-5;
constexpr float kOff = -10000.0f;  // a score whose exp is 0 in double: the key gets no probability

// Even query heads: sink tokens [0, 4) score 3, the last 8 tokens score 2, the rest 0. Odd heads: query 0,
// uniform attention.
Planted h1_plant(std::uint32_t rows, bool causal) {
  return plant(
      256, rows, causal, [](std::uint32_t, std::uint32_t t) { return t < 4 ? 3.0f : t >= 248 ? 2.0f : 0.0f; },
      [](std::uint32_t h) { return h % 2 ? 0.0f : 1.0f; });
}

const LocalityRow& find(const std::vector<LocalityRow>& rows, std::uint32_t h, std::uint32_t w, std::int32_t r) {
  for (const LocalityRow& x : rows)
    if (x.head == h && x.window == w && x.row == r) return x;
  throw std::runtime_error("no locality row");
}

}  // namespace

TEST(AttentionQualityH1, SinkAndWindowMassEqualThePlant) {
  const Planted p = h1_plant(2, false);
  const LayerAttention a = p.view(7);
  const std::vector<float> probs = true_probs(a);
  const std::vector<std::uint32_t> windows{0, 8, 16, 256};
  const auto rows = locality(a, probs, 4, windows);
  ASSERT_EQ(rows.size(), 4u * windows.size());  // one mean row per (head, window)
  const Weights peaked(256, [](std::uint32_t t) { return t < 4 ? 3.0 : t >= 248 ? 2.0 : 0.0; });
  for (const std::uint32_t w : windows) {
    const double want = peaked.mass([w](std::uint32_t t) { return t < 4 || t >= 256 - w; });
    for (std::uint32_t h = 0; h < 4; ++h) {
      const LocalityRow& r = find(rows, h, w, kMeanOfRows);
      EXPECT_EQ(r.layer, 7u);
      EXPECT_EQ(r.sink, 4u);
      const double uniform = (4.0 + (w > 252 ? 252 : w)) / 256.0;
      EXPECT_NEAR(r.mass, h % 2 ? uniform : want, kMassTol) << "head " << h << " window " << w;
    }
  }
  // The planted values themselves, so a formula slip in the closed form above cannot hide one in the library.
  EXPECT_NEAR(find(rows, 0, 8, kMeanOfRows).mass,
              (4 * std::exp(3.0) + 8 * std::exp(2.0)) / (4 * std::exp(3.0) + 8 * std::exp(2.0) + 244), kMassTol);
  EXPECT_NEAR(find(rows, 0, 256, kMeanOfRows).mass, 1.0, kMassTol);
}

TEST(AttentionQualityH1, CausalRowsCountTheirOwnWindowPerRow) {
  // Uniform heads, 4 causal rows: row r sees 253 + r keys, so the window [vis - W, vis) moves with the row.
  const Planted p = h1_plant(4, true);
  const LayerAttention a = p.view();
  const std::vector<float> probs = true_probs(a);
  const std::vector<std::uint32_t> windows{10};
  const auto rows = locality(a, probs, 4, windows, true);
  ASSERT_EQ(rows.size(), 4u * (4 + 1));
  double mean = 0;
  for (std::int32_t r = 0; r < 4; ++r) {
    const double vis = 253 + r;
    EXPECT_NEAR(find(rows, 1, 10, r).mass, 14.0 / vis, kMassTol) << "row " << r;
    mean += 14.0 / vis / 4;
  }
  EXPECT_NEAR(find(rows, 1, 10, kMeanOfRows).mass, mean, kMassTol);
  // Peaked head, row 0 sees keys [0, 253): the score-2 tail [248, 253) lies in its window of 10.
  const Weights w0(253, [](std::uint32_t t) { return t < 4 ? 3.0 : t >= 248 ? 2.0 : 0.0; });
  EXPECT_NEAR(find(rows, 0, 10, 0).mass, w0.mass([](std::uint32_t t) { return t < 4 || t >= 243; }), kMassTol);
}

namespace {

// A layer whose every head attends uniformly to the first n keys (the rest: no probability).
Planted uniform_over(std::uint32_t n) {
  return plant(256, 2, false, [n](std::uint32_t, std::uint32_t t) { return t < n ? 0.0f : kOff; },
               [](std::uint32_t) { return 1.0f; });
}

}  // namespace

TEST(AttentionQualityH3, EntropyOfUniformAndOneHotAttention) {
  for (const std::uint32_t n : {256u, 128u, 16u, 4u, 1u}) {
    const Planted p = uniform_over(n);
    const LayerAttention a = p.view();
    const auto rows = entropy(a, true_probs(a), true);
    ASSERT_EQ(rows.size(), 4u * 3);  // per head: 2 rows + the mean
    for (const EntropyRow& e : rows) {
      EXPECT_NEAR(e.nats, std::log(double(n)), kEntropyTol) << "n " << n;
      EXPECT_NEAR(e.normalized, std::log(double(n)) / std::log(256.0), kEntropyTol) << "n " << n;
    }
  }
}

TEST(AttentionQualityH3, NormalizedByEachCausalRowsOwnLength) {
  // Uniform over every visible key: normalized entropy 1 on every row, nats ln(visible).
  const Planted p = plant(64, 4, true, [](std::uint32_t, std::uint32_t) { return 0.0f; }, [](std::uint32_t) { return 1.0f; });
  const LayerAttention a = p.view();
  for (const EntropyRow& e : entropy(a, true_probs(a), true)) {
    EXPECT_NEAR(e.normalized, 1.0, kEntropyTol);
    if (e.row != kMeanOfRows) {
      EXPECT_NEAR(e.nats, std::log(61.0 + e.row), kEntropyTol);
    }
  }
}

TEST(AttentionQualityH3, LayerBoundaryAtTheLargestDropAndBelowTheThreshold) {
  // Layers 0..4 attend uniformly to 256, 128, 16, 4, 1 keys of 256: normalized entropy 1, 7/8, 1/2, 1/4, 0.
  std::vector<LayerEntropy> layers;
  const std::uint32_t ns[] = {256, 128, 16, 4, 1};
  for (std::uint32_t l = 0; l < 5; ++l) {
    const Planted p = uniform_over(ns[l]);
    const LayerAttention a = p.view(l);
    layers.push_back(layer_entropy(entropy(a, true_probs(a), true)));
    EXPECT_EQ(layers.back().layer, l);
  }
  EXPECT_NEAR(layers[1].normalized, 7.0 / 8, kEntropyTol);
  EXPECT_NEAR(layers[2].normalized, 0.5, kEntropyTol);
  EXPECT_NEAR(layers[2].nats, std::log(16.0), kEntropyTol);
  const EntropyBoundary b = entropy_boundary(layers, 0.6);
  EXPECT_EQ(b.first_below, 2);
  EXPECT_EQ(b.largest_drop, 2);  // 7/8 -> 1/2, larger than the later drops of 1/4
  EXPECT_NEAR(b.drop, 0.375, kEntropyTol);
  EXPECT_EQ(entropy_boundary(layers, 0.3).first_below, 3);
  EXPECT_EQ(entropy_boundary(std::vector<LayerEntropy>(layers.begin(), layers.begin() + 1), 0.6).largest_drop, -1);
  // Equal drops: the earliest layer.
  const std::vector<LayerEntropy> steps{{0, 0, 1.0}, {1, 0, 0.5}, {2, 0, 0.0}};
  EXPECT_EQ(entropy_boundary(steps, 0.1).largest_drop, 1);
  // Rising entropy has no drop; a threshold nothing falls below has no first_below.
  const std::vector<LayerEntropy> rising{{0, 0, 0.2}, {1, 0, 0.4}};
  EXPECT_EQ(entropy_boundary(rising, 0.1).largest_drop, -1);
  EXPECT_EQ(entropy_boundary(rising, 0.1).first_below, -1);
}

TEST(AttentionQualityH3, BoundaryStabilityAcrossPrompts) {
  const std::vector<std::int32_t> per_prompt{3, 2, -1, 2, 5};
  const BoundaryStability s = boundary_stability(per_prompt);
  EXPECT_EQ(s.prompts, 5u);
  EXPECT_EQ(s.none, 1u);
  EXPECT_EQ(s.min, 2);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(s.spread, 3);
  EXPECT_DOUBLE_EQ(s.median, 2.5);  // of 2, 2, 3, 5
  EXPECT_EQ(s.mode, 2);
  EXPECT_DOUBLE_EQ(s.mode_share, 0.4);
  const std::vector<std::int32_t> agree{4, 4, 4};
  EXPECT_EQ(boundary_stability(agree).spread, 0);
  EXPECT_DOUBLE_EQ(boundary_stability(agree).mode_share, 1.0);
  const std::vector<std::int32_t> tie{6, 1};  // a tie goes to the lower layer
  EXPECT_EQ(boundary_stability(tie).mode, 1);
  const std::vector<std::int32_t> none{-1, -1};
  EXPECT_EQ(boundary_stability(none).min, -1);
  EXPECT_EQ(boundary_stability(none).none, 2u);
}

TEST(AttentionQualityProbs, GivenProbabilitiesGiveTheSameFigures) {
  // A hook's probabilities in place of q and k: the same figures as the probabilities true_probs computes.
  const Planted p = h1_plant(4, true);
  const LayerAttention a = p.view();
  const std::vector<float> probs = true_probs(a);
  LayerAttention b = a;
  b.probs = probs;
  const std::vector<float> again = true_probs(b);
  ASSERT_EQ(again, probs);
  QualityOptions opt;
  opt.windows = {0, 16};
  opt.selection.blocks = {16, 32};
  opt.selection.keeps = {0.5, 0.25};
  const LayerFigures fa = layer_figures(a, opt), fb = layer_figures(b, opt);
  ASSERT_EQ(fa.locality.size(), fb.locality.size());
  for (std::size_t i = 0; i < fa.locality.size(); ++i) EXPECT_EQ(fa.locality[i].mass, fb.locality[i].mass);
  EXPECT_EQ(fa.layer_entropy.nats, fb.layer_entropy.nats);
  ASSERT_EQ(fa.selection.rows.size(), fb.selection.rows.size());
  for (std::size_t i = 0; i < fa.selection.rows.size(); ++i)
    EXPECT_EQ(fa.selection.rows[i].recall, fb.selection.rows[i].recall);
}
