// Busy time vs idle gaps between kernels over a window (pure arithmetic on kernel records).
#include <gtest/gtest.h>

#include "kvf/cupti/activity.hpp"

namespace kc = kvf::cupti;

namespace {
kc::KernelRecord K(std::uint64_t start, std::uint64_t end) {
  kc::KernelRecord k;
  k.start_ns = start;
  k.end_ns = end;
  return k;
}
}  // namespace

TEST(Window, GapsBetweenKernels) {
  std::vector<kc::KernelRecord> ks = {K(100, 200), K(250, 400), K(400, 450)};
  const auto s = kc::summarize_window(ks, 0, 500);
  EXPECT_EQ(s.kernels, 3u);
  EXPECT_DOUBLE_EQ(s.window_ns, 500);
  EXPECT_DOUBLE_EQ(s.busy_ns, 300);   // 100 + 150 + 50
  EXPECT_DOUBLE_EQ(s.span_ns, 350);   // 100 .. 450
  EXPECT_DOUBLE_EQ(s.gap_ns, 50);     // 200 .. 250
  EXPECT_DOUBLE_EQ(s.edge_ns, 150);   // 0..100 and 450..500
  EXPECT_EQ(s.gaps, 1u);              // back-to-back kernels are no gap
  EXPECT_DOUBLE_EQ(s.max_gap_ns, 50);
  EXPECT_NEAR(s.idle_between_kernels_pct(), 100.0 * 50 / 350, 1e-12);
  EXPECT_DOUBLE_EQ(s.busy_pct(), 60);
}

TEST(Window, ConcurrentKernelsCountOnce) {
  std::vector<kc::KernelRecord> ks = {K(100, 300), K(150, 250), K(200, 400)};
  const auto s = kc::summarize_window(ks, 100, 400);
  EXPECT_DOUBLE_EQ(s.busy_ns, 300);
  EXPECT_DOUBLE_EQ(s.gap_ns, 0);
  EXPECT_EQ(s.gaps, 0u);
}

TEST(Window, KernelsClippedToWindow) {
  std::vector<kc::KernelRecord> ks = {K(0, 150), K(180, 220), K(290, 1000), K(2000, 3000)};
  const auto s = kc::summarize_window(ks, 100, 300);
  EXPECT_EQ(s.kernels, 3u);
  EXPECT_DOUBLE_EQ(s.busy_ns, 50 + 40 + 10);
  EXPECT_DOUBLE_EQ(s.span_ns, 200);
  EXPECT_DOUBLE_EQ(s.gap_ns, 100);
  EXPECT_EQ(s.gaps, 2u);
  EXPECT_DOUBLE_EQ(s.max_gap_ns, 70);
}

TEST(Window, EmptyWindowIsAllEdge) {
  const auto s = kc::summarize_window({}, 10, 110);
  EXPECT_EQ(s.kernels, 0u);
  EXPECT_DOUBLE_EQ(s.edge_ns, 100);
  EXPECT_DOUBLE_EQ(s.busy_pct(), 0);
  EXPECT_DOUBLE_EQ(s.idle_between_kernels_pct(), 0);
}

TEST(Window, RowsNameEveryFigure) {
  kc::CounterRow key;
  key.study = "idleness";
  const auto rows = kc::window_rows(kc::summarize_window({}, 0, 10), key);
  EXPECT_EQ(rows.size(), 10u);
  for (const auto& r : rows) EXPECT_EQ(r.metric.rfind("kvf:", 0), 0u);
}
