// The per-thread bodies of the CUDA kernels (frontier_elems.hpp), run on the CPU over every index,
// give bit-identical output to the CPU twin: the GPU's indexing and rounding are checked here.
#include <gtest/gtest.h>

#include <cstring>

#include "frontier_elems.hpp"
#include "recompute.hpp"

using namespace kvf::frontier;

TEST(GpuElems, RopeWriteBodyMatchesTheTwinBitForBit) {
  for (bool bias : {false, true}) {
    const int rows = 48, nkv = 3, D = 64, kvd = nkv * D;
    std::vector<float> Y(std::size_t(rows) * 2 * kvd), b(2 * kvd);
    fill_f32_uniform(Y.data(), Y.size(), 1, 2.f);
    fill_f32_uniform(b.data(), b.size(), 2, 1.f);
    kvf::models::ModelShape m;
    m.rope_theta = 10000;
    const auto cs = rope_table(rope_inv_freq(m, D), 300);
    std::vector<std::int32_t> pos(rows);
    for (int r = 0; r < rows; ++r) pos[r] = (r * 7) % 300;
    const auto slot = scattered_slots(rows, 8, 5);
    const std::size_t n = std::size_t(8) * 2 * kBlockTokens * kvd;
    std::vector<std::uint16_t> twin(n, 0xdead), body(n, 0xdead);
    rope_write_cpu(Y.data(), bias ? b.data() : nullptr, rows, {nkv, D}, cs.data(), pos.data(), slot.data(), twin.data());
    for (std::int64_t idx = 0; idx < std::int64_t(rows) * nkv * (D / 2); ++idx)
      elems::rope_write(idx, Y.data(), bias ? b.data() : nullptr, nkv, D, cs.data(), pos.data(), slot.data(), body.data());
    EXPECT_EQ(twin, body);
  }
}

TEST(GpuElems, DequantBodiesMatchTheTwinBitForBit) {
  const int rows = 5, hidden = 384;
  std::vector<std::uint16_t> x(std::size_t(rows) * hidden);
  fill_bf16_uniform(x.data(), x.size(), 3, 3.f);
  const int groups = hidden / kQuantGroup;
  for (int bits : {8, 4}) {
    std::vector<std::uint8_t> q(std::size_t(rows) * hidden * bits / 8);
    std::vector<float> sc(std::size_t(rows) * groups);
    quantize_x(x.data(), rows, hidden, bits, q.data(), sc.data());
    std::vector<std::uint16_t> twin(x.size()), body(x.size());
    dequant_x_bf16(q.data(), sc.data(), rows, hidden, bits, twin.data());
    const auto* q32 = reinterpret_cast<const std::uint32_t*>(q.data());
    if (bits == 8) {
      for (std::int64_t t = 0; t < std::int64_t(x.size()) / 4; ++t) {
        const auto o = elems::dequant_int8_quad(t, q32[t], sc.data(), hidden);
        std::memcpy(&body[t * 4], &o.w0, 4);
        std::memcpy(&body[t * 4 + 2], &o.w1, 4);
      }
    } else {
      for (std::int64_t t = 0; t < std::int64_t(x.size()) / 8; ++t) {
        const auto o = elems::dequant_int4_oct(t, q32[t], sc.data(), hidden);
        std::memcpy(&body[t * 8], o.w, 16);
      }
    }
    EXPECT_EQ(twin, body) << "bits " << bits;
  }
}
