// Bad parameters and captures: std::invalid_argument whose one-line message names the value and what is
// allowed.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "planted.hpp"

using namespace kvf::attention::quality;
using namespace kvf::attention::quality::testing;

namespace {

Planted flat(std::uint32_t rows = 2, bool causal = false) {
  return plant(256, rows, causal, [](std::uint32_t, std::uint32_t t) { return t % 3 ? 0.0f : 1.0f; },
               [](std::uint32_t) { return 1.0f; });
}

// The call throws std::invalid_argument whose message holds `needle` and is one line.
void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << "message: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "message: " << what;
    return;
  }
  ADD_FAILURE() << "no std::invalid_argument (wanted one saying \"" << needle << "\")";
}

SelectionFigures select(const Planted& p, const SelectionOptions& opt) {
  const LayerAttention a = p.view();
  return selection_quality(a, true_probs(a), opt);
}

}  // namespace

TEST(AttentionQualityBadInput, KeepOutsideZeroOne) {
  const Planted p = flat();
  for (const double keep : {0.0, -0.5, 1.5}) {
    SelectionOptions opt;
    opt.keeps = {keep};
    opt.blocks = {16};
    expect_invalid([&] { select(p, opt); }, "keep " + std::to_string(keep) + ": must be in (0, 1]");
  }
}

TEST(AttentionQualityBadInput, BlockNotDividingTheContext) {
  const Planted p = flat();
  SelectionOptions opt;
  opt.blocks = {16, 48};
  expect_invalid([&] { select(p, opt); }, "block 48: must divide the ctx (256)");
  opt.blocks = {0};
  expect_invalid([&] { select(p, opt); }, "block 0: must divide the ctx (256)");
  opt.blocks = {};
  expect_invalid([&] { select(p, opt); }, "without block sizes or keep fractions");
}

TEST(AttentionQualityBadInput, WindowLargerThanTheContextAndBadSink) {
  const Planted p = flat();
  const LayerAttention a = p.view();
  const std::vector<float> probs = true_probs(a);
  const std::vector<std::uint32_t> windows{64, 300};
  expect_invalid([&] { locality(a, probs, 16, windows); }, "local window of 300 tokens: must be <= ctx (256)");
  const std::vector<std::uint32_t> ok{64};
  expect_invalid([&] { locality(a, probs, 0, ok); }, "sink block of 0 tokens: must be in [1, ctx = 256]");
  expect_invalid([&] { locality(a, probs, 257, ok); }, "sink block of 257 tokens");
  QualityOptions opt;  // the default sweep reaches W = 4096, beyond this context
  expect_invalid([&] { layer_figures(a, opt); }, "local window of 1024 tokens");
}

TEST(AttentionQualityBadInput, NoQueryRows) {
  Planted p = flat();
  p.rows = 0;
  p.q.clear();
  expect_invalid([&] { true_probs(p.view()); }, "rows (M) 0: at least one query row is needed");
}

TEST(AttentionQualityBadInput, ShapesAndSpans) {
  {
    Planted p = flat();
    p.hq = 3;
    expect_invalid([&] { validate(p.view()); }, "hq 3, hkv 2: hq must be a non-zero multiple of hkv");
  }
  {
    Planted p = flat();
    p.d = 24;
    expect_invalid([&] { validate(p.view()); }, "head dim 24: must be a multiple of 16 in [16, 128]");
  }
  {
    Planted p = flat();
    p.v.pop_back();
    expect_invalid([&] { validate(p.view()); }, "v holds 8191 floats: hkv*ctx*d = 8192 expected");
  }
  {
    const Planted p = flat(300, true);  // 300 causal rows in 256 keys
    expect_invalid([&] { validate(p.view()); }, "rows (M) 300 at ctx 256");
  }
}

TEST(AttentionQualityBadInput, CausalTailBeyondTheSmallestBlock) {
  const Planted p = flat(32, true);  // 31 keys masked for the first row
  SelectionOptions opt;
  opt.blocks = {16, 32};
  expect_invalid([&] { select(p, opt); }, "rows (M) 32 with block 16");
  opt.blocks = {32, 64};
  EXPECT_NO_THROW(select(p, opt));
}

TEST(AttentionQualityBadInput, NeedleOutsideTheContext) {
  const Planted p = flat();
  SelectionOptions opt;
  opt.needles = {{250, 10}};
  expect_invalid([&] { select(p, opt); }, "needle [250, 260): must be a non-empty span of [0, ctx = 256)");
  opt.needles = {{5, 0}};
  expect_invalid([&] { select(p, opt); }, "needle [5, 5)");
  expect_invalid([] { needle_pos(256, 0, 50); }, "needle of 0 tokens");
  expect_invalid([] { needle_pos(256, 4, 101); }, "needle depth 101.000000%: must be in [0, 100]");
}

TEST(AttentionQualityBadInput, ProbabilitiesThatAreNotADistribution) {
  const Planted p = flat(2, true);
  LayerAttention a = p.view();
  std::vector<float> probs = true_probs(a);
  a.probs = probs;
  const float p3 = probs[3];
  EXPECT_NO_THROW(validate(a));
  probs[0] += 0.01f;  // head 0, row 0 now sums to 1.01
  expect_invalid([&] { validate(a); }, "probs of head 0, row 0 sum to 1.01");
  probs[0] -= 0.01f;
  probs[255] = 0.5f;  // row 0 sees keys [0, 255): key 255 is masked
  expect_invalid([&] { validate(a); }, "a causal row sees keys [0, 255) only");
  probs[255] = -0.0f;
  probs[3] = -1e-3f;
  expect_invalid([&] { validate(a); }, "must be finite and >= 0");
  probs[3] = std::numeric_limits<float>::quiet_NaN();
  expect_invalid([&] { validate(a); }, "probs of head 0, row 0, key 3 is nan: must be finite and >= 0");
  probs[3] = std::numeric_limits<float>::infinity();
  expect_invalid([&] { validate(a); }, "key 3 is inf");
  probs[3] = p3;
  EXPECT_NO_THROW(validate(a));
  // Rows are checked on every core: of several bad rows the lowest (head, row) is named, whichever thread met it.
  probs[probs.size() - 1] = 2.0f;                   // the last head's last row
  probs[std::size_t{a.rows} * a.ctx + 7] = -1.0f;   // head 1, row 0
  probs[std::size_t{a.rows + 1} * a.ctx] += 0.5f;  // head 1, row 1
  expect_invalid([&] { validate(a); }, "probs of head 1, row 0, key 7 is -1.0");
  // layer_figures checks them itself (its figures then read them unchecked).
  expect_invalid([&] { layer_figures(a, QualityOptions{}); }, "probs of head 1, row 0");
}

TEST(AttentionQualityBadInput, BoundaryParameters) {
  const std::vector<LayerEntropy> layers{{0, 1, 0.9}, {2, 1, 0.4}};
  expect_invalid([&] { entropy_boundary(layers, 1.0); }, "entropy threshold 1.000000: must be in (0, 1)");
  const std::vector<LayerEntropy> unordered{{2, 1, 0.9}, {2, 1, 0.4}};
  expect_invalid([&] { entropy_boundary(unordered, 0.5); }, "layer 2 after layer 2: layers must be strictly ascending");
  expect_invalid([] { boundary_stability({}); }, "boundary stability of no prompts");
  const std::vector<std::int32_t> bad{1, -3};
  expect_invalid([&] { boundary_stability(bad); }, "boundary layer -3");
}
