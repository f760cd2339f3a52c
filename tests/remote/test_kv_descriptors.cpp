// The remote study's descriptor math (kernels/remote): every byte of a page lands where the destination's
// layout and block table say, at each granularity and layout; descriptor counts; block tables; the pattern
// verify catches a single wrong word.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <stdexcept>

#include "kv_descriptors.hpp"

namespace kvf::remote {
namespace {

// A small GQA-like geometry: 3 layers, 4 pieces (2 KV heads x K/V), 16 bytes per piece and token.
constexpr KvGeometry kGeo{3, 4, 16};

PoolShape pool(Granularity g, int page_tokens, Layout l, std::int64_t slots) {
  return PoolShape{kGeo, slot_tokens_for(g, page_tokens), slots, l};
}

// The value a source byte holds: which (layer, piece, token, byte) of the page it is.
std::uint8_t tag(int layer, int piece, int token, int b) { return static_cast<std::uint8_t>(layer * 61 + piece * 17 + token * 5 + b); }

struct Param {
  Granularity g;
  Layout layout;
  int tokens;
};

class Moves : public ::testing::TestWithParam<Param> {};

TEST_P(Moves, EveryByteOfThePageLandsInPlace) {
  const auto [g, layout, T] = GetParam();
  if (!invalid_combination(g, layout, T).empty()) GTEST_SKIP() << invalid_combination(g, layout, T);
  const PoolShape src = pool(g, T, layout, 7 * T / slot_tokens_for(g, T));
  const PoolShape dst = pool(g, T, layout, 5 * T / slot_tokens_for(g, T));
  const std::int64_t per_page = T / src.slot_tokens;
  const auto st = random_block_table(src.slots, per_page, 11), dt = random_block_table(dst.slots, per_page, 12);
  const auto ds = page_descriptors(src, dst, g, T, st, dt);

  std::vector<std::uint8_t> a(static_cast<std::size_t>(src.bytes()), 0xEE), b(static_cast<std::size_t>(dst.bytes()), 0xEE);
  auto at = [&](const PoolShape& p, const std::vector<std::int64_t>& table, int l, int piece, int t) {
    return p.offset(table[static_cast<std::size_t>(t / p.slot_tokens)], l, piece, t % p.slot_tokens);
  };
  for (int l = 0; l < kGeo.layers; ++l)
    for (int piece = 0; piece < kGeo.pieces; ++piece)
      for (int t = 0; t < T; ++t)
        for (int by = 0; by < kGeo.piece_bytes; ++by) a[static_cast<std::size_t>(at(src, st, l, piece, t) + by)] = tag(l, piece, t, by);
  std::int64_t moved = 0, stream = 0;
  for (const auto& d : ds) {
    std::memcpy(b.data() + d.dst_off, a.data() + d.src_off, static_cast<std::size_t>(d.len));
    EXPECT_EQ(d.stream_off, stream);
    stream += d.len;
    moved += d.len;
  }
  EXPECT_EQ(moved, kGeo.page_bytes(T));
  for (int l = 0; l < kGeo.layers; ++l)
    for (int piece = 0; piece < kGeo.pieces; ++piece)
      for (int t = 0; t < T; ++t)
        for (int by = 0; by < kGeo.piece_bytes; ++by)
          ASSERT_EQ(b[static_cast<std::size_t>(at(dst, dt, l, piece, t) + by)], tag(l, piece, t, by))
              << "layer " << l << " piece " << piece << " token " << t;

  const std::size_t want = g == Granularity::page         ? 1
                           : g == Granularity::layer      ? kGeo.layers
                           : g == Granularity::layer_head ? kGeo.layers * kGeo.pieces
                                                          : kGeo.layers * per_page;
  EXPECT_EQ(ds.size(), want);
}

INSTANTIATE_TEST_SUITE_P(
    Remote, Moves,
    ::testing::Values(Param{Granularity::page, Layout::page_first, 16}, Param{Granularity::page, Layout::page_first, 64},
                      Param{Granularity::layer, Layout::page_first, 32}, Param{Granularity::layer, Layout::layer_first, 32},
                      Param{Granularity::layer_head, Layout::page_first, 16},
                      Param{Granularity::layer_head, Layout::layer_first, 48},
                      Param{Granularity::block16, Layout::page_first, 64},
                      Param{Granularity::block16, Layout::layer_first, 64}));

TEST(RemoteDescriptors, PageNeedsPageFirst) {
  EXPECT_FALSE(invalid_combination(Granularity::page, Layout::layer_first, 16).empty());
  EXPECT_FALSE(invalid_combination(Granularity::layer, Layout::page_first, 24).empty());  // not a multiple of 16
  const PoolShape p = pool(Granularity::page, 16, Layout::layer_first, 4);
  EXPECT_THROW(page_descriptors(p, p, Granularity::page, 16, {0}, {1}), std::invalid_argument);
}

TEST(RemoteDescriptors, TablesMustFitTheirPools) {
  const PoolShape p = pool(Granularity::block16, 32, Layout::page_first, 4);
  EXPECT_THROW(page_descriptors(p, p, Granularity::block16, 32, {0}, {1, 2}), std::invalid_argument);   // 1 of 2 slots
  EXPECT_THROW(page_descriptors(p, p, Granularity::block16, 32, {0, 4}, {1, 2}), std::invalid_argument);  // slot 4 of 4
  EXPECT_THROW(random_block_table(3, 4, 1), std::invalid_argument);
}

TEST(RemoteDescriptors, BlockTablesAreDistinctSeededAndSpread) {
  const auto t = random_block_table(1000, 200, 7);
  EXPECT_EQ(std::set<std::int64_t>(t.begin(), t.end()).size(), 200u);
  for (auto s : t) EXPECT_TRUE(s >= 0 && s < 1000);
  EXPECT_EQ(t, random_block_table(1000, 200, 7));  // both ranks derive the same table
  EXPECT_NE(t, random_block_table(1000, 200, 8));
  int in_order = 0;  // not the identity: a contiguous table would measure indirection, not scatter
  for (std::size_t i = 1; i < t.size(); ++i) in_order += t[i] == t[i - 1] + 1;
  EXPECT_LT(in_order, 20);
}

TEST(RemoteDescriptors, CompareFindsOneWrongWord) {
  const PoolShape p = pool(Granularity::layer, 16, Layout::layer_first, 3);
  const auto ds = page_descriptors(p, p, Granularity::layer, 16, {2}, {0});
  std::vector<std::byte> buf(static_cast<std::size_t>(p.bytes()));
  fill_runs(buf.data(), ds, true, 5);
  for (const auto& d : ds) std::memcpy(buf.data() + d.dst_off, buf.data() + d.src_off, static_cast<std::size_t>(d.len));
  EXPECT_EQ(compare_runs(buf.data(), ds, false, 5), "");
  EXPECT_NE(compare_runs(buf.data(), ds, false, 6), "");  // another transfer's pattern is not this one's
  buf[static_cast<std::size_t>(ds[1].dst_off + 8)] ^= std::byte{1};
  EXPECT_NE(compare_runs(buf.data(), ds, false, 5).find("descriptor 1 of 3"), std::string::npos);
}

}  // namespace
}  // namespace kvf::remote
