// The launch axis shared by the multi-kernel GPU arms (studies/common kvf/launch_axis.hpp): the graph row's check
// against the eager path's outputs (its teeth: a value the graph left poisoned fails, one neither path wrote does
// not), and the axis's names (the eager row keeps its name, CPU points have no launch column).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kvf/errors.hpp"
#include "kvf/launch_axis.hpp"

namespace ks = kvf::study;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
ks::Outputs one(std::vector<float> v) { return {{"y", std::move(v)}}; }
}  // namespace

TEST(LaunchAxis, IdenticalOutputsSayBitIdentical) {
  const auto e = one({1.f, -2.f, 0.5f});
  EXPECT_EQ(ks::compare_outputs(e, e), "outputs vs eager: bit-identical (3 values)");
}

TEST(LaunchAxis, LastBitsMayDifferAndAreCounted) {
  const float up = std::nextafter(2.f, 3.f);
  const std::string note = ks::compare_outputs(one({1.f, 2.f, 3.f}), one({1.f, up, 3.f}));
  EXPECT_NE(note.find("1 of 3 values differ"), std::string::npos) << note;
}

TEST(LaunchAxis, PoisonLeftByTheGraphFails) {
  EXPECT_THROW(ks::compare_outputs(one({1.f, 2.f}), one({1.f, kNaN})), kvf::VerifyError);
}

TEST(LaunchAxis, PoisonNeitherPathOverwroteIsNoOutput) {
  // The unused slots of a paged cache: NaN in both, and no NaN in the rms the tolerance scales with.
  const float up = std::nextafter(2.f, 3.f);
  EXPECT_NO_THROW(ks::compare_outputs(one({kNaN, 2.f, kNaN}), one({kNaN, up, kNaN})));
}

TEST(LaunchAxis, AWrongValueFails) {
  EXPECT_THROW(ks::compare_outputs(one({1.f, 2.f, 3.f}), one({1.f, 2.2f, 3.f})), kvf::VerifyError);
  EXPECT_THROW(ks::compare_outputs(one({1.f, kNaN}), one({1.f, 0.f})), kvf::VerifyError);  // written by the graph only
}

kvf::Point point(std::vector<kvf::Param> v) { return kvf::Point(std::move(v)); }

TEST(LaunchAxis, NamesAndColumns) {
  const kvf::Point cpu = point({{"model", "m"}});
  EXPECT_EQ(ks::launch_of(cpu), "eager");
  EXPECT_EQ(ks::launch_suffix(cpu), "");
  EXPECT_EQ(ks::launch_suffix(point({{"model", "m"}, {"launch", "eager"}})), "");
  EXPECT_EQ(ks::launch_suffix(point({{"model", "m"}, {"launch", "graph"}})), "/graph");
  const auto g = ks::with_launch({kvf::Product{{{"model", {"m"}}}}}, {"eager", "graph"});
  const auto pts = kvf::expand(g);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[1][ks::kLaunchAxis], "graph");
}
