#include "kv_descriptors.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

#include "kvf/pattern.hpp"

namespace kvf::remote {

Layout parse_layout(std::string_view s) {
  if (s == "page_first") return Layout::page_first;
  if (s == "layer_first") return Layout::layer_first;
  throw std::invalid_argument("layout '" + std::string(s) + "': allowed page_first, layer_first");
}

Granularity parse_granularity(std::string_view s) {
  if (s == "page") return Granularity::page;
  if (s == "layer") return Granularity::layer;
  if (s == "layer_head") return Granularity::layer_head;
  if (s == "block16") return Granularity::block16;
  throw std::invalid_argument("granularity '" + std::string(s) + "': allowed page, layer, layer_head, block16");
}

const char* to_string(Layout l) { return l == Layout::page_first ? "page_first" : "layer_first"; }

const char* to_string(Granularity g) {
  switch (g) {
    case Granularity::page: return "page";
    case Granularity::layer: return "layer";
    case Granularity::layer_head: return "layer_head";
    case Granularity::block16: return "block16";
  }
  return "?";
}

std::int64_t PoolShape::offset(std::int64_t slot, int layer, int piece, int token) const {
  const std::int64_t in_slot = std::int64_t(piece) * slot_tokens * geo.piece_bytes + std::int64_t(token) * geo.piece_bytes;
  if (layout == Layout::page_first) return (slot * geo.layers + layer) * slot_layer_bytes() + in_slot;
  return (std::int64_t(layer) * slots + slot) * slot_layer_bytes() + in_slot;
}

int slot_tokens_for(Granularity g, int page_tokens) { return g == Granularity::block16 ? kBlockTokens : page_tokens; }

std::string invalid_combination(Granularity g, Layout l, int page_tokens) {
  if (page_tokens <= 0 || page_tokens % kBlockTokens != 0)
    return "page of " + std::to_string(page_tokens) + " tokens: a positive multiple of 16 is needed";
  if (g == Granularity::page && l != Layout::page_first)
    return "granularity page needs layout page_first (a page of a layer_first pool is one run per layer)";
  return {};
}

std::vector<std::int64_t> random_block_table(std::int64_t slots, std::int64_t count, std::uint64_t seed) {
  if (count < 0 || count > slots)
    throw std::invalid_argument("block table of " + std::to_string(count) + " slots from a pool of " +
                                std::to_string(slots));
  std::vector<std::int64_t> perm(static_cast<std::size_t>(slots));
  for (std::int64_t i = 0; i < slots; ++i) perm[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint64_t r = pattern_word(seed, static_cast<std::uint64_t>(i)) % static_cast<std::uint64_t>(slots - i);
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(i + static_cast<std::int64_t>(r))]);
  }
  std::vector<std::int64_t> out(perm.begin(), perm.begin() + count);
  return out;
}

std::vector<Descriptor> page_descriptors(const PoolShape& src, const PoolShape& dst, Granularity g, int page_tokens,
                                         const std::vector<std::int64_t>& src_table,
                                         const std::vector<std::int64_t>& dst_table) {
  if (src.slot_tokens != dst.slot_tokens || src.geo.layers != dst.geo.layers || src.geo.pieces != dst.geo.pieces ||
      src.geo.piece_bytes != dst.geo.piece_bytes)
    throw std::invalid_argument("source and destination pools differ in geometry or slot size");
  if (const auto why = invalid_combination(g, src.layout, page_tokens); !why.empty()) throw std::invalid_argument(why);
  if (slot_tokens_for(g, page_tokens) != src.slot_tokens)
    throw std::invalid_argument("granularity " + std::string(to_string(g)) + " of a " + std::to_string(page_tokens) +
                                "-token page needs " + std::to_string(slot_tokens_for(g, page_tokens)) +
                                "-token slots, the pools have " + std::to_string(src.slot_tokens));
  const std::size_t per_page = static_cast<std::size_t>(page_tokens / src.slot_tokens);
  if (src_table.size() != per_page || dst_table.size() != per_page)
    throw std::invalid_argument("a page of " + std::to_string(page_tokens) + " tokens takes " + std::to_string(per_page) +
                                " slots on each side");
  for (auto s : src_table)
    if (s < 0 || s >= src.slots) throw std::invalid_argument("source slot " + std::to_string(s) + " outside the pool");
  for (auto s : dst_table)
    if (s < 0 || s >= dst.slots) throw std::invalid_argument("destination slot " + std::to_string(s) + " outside the pool");

  std::vector<Descriptor> out;
  std::int64_t stream = 0;
  auto add = [&](std::int64_t s_off, std::int64_t d_off, std::int64_t len) {
    out.push_back({s_off, d_off, len, stream});
    stream += len;
  };
  const KvGeometry& geo = src.geo;
  switch (g) {
    case Granularity::page:
      add(src.offset(src_table[0], 0, 0, 0), dst.offset(dst_table[0], 0, 0, 0), geo.page_bytes(page_tokens));
      break;
    case Granularity::layer:
      for (int l = 0; l < geo.layers; ++l)
        add(src.offset(src_table[0], l, 0, 0), dst.offset(dst_table[0], l, 0, 0), src.slot_layer_bytes());
      break;
    case Granularity::layer_head:
      for (int l = 0; l < geo.layers; ++l)
        for (int p = 0; p < geo.pieces; ++p)
          add(src.offset(src_table[0], l, p, 0), dst.offset(dst_table[0], l, p, 0), page_tokens * geo.piece_bytes);
      break;
    case Granularity::block16:
      for (int l = 0; l < geo.layers; ++l)
        for (std::size_t b = 0; b < per_page; ++b)
          add(src.offset(src_table[b], l, 0, 0), dst.offset(dst_table[b], l, 0, 0), src.slot_layer_bytes());
      break;
  }
  return out;
}

namespace {

void check_run(const Descriptor& d, std::int64_t off) {
  if (off % 8 != 0 || d.len % 8 != 0 || d.stream_off % 8 != 0)
    throw std::invalid_argument("descriptor runs must be whole 8-byte words at 8-byte offsets");
}

}  // namespace

void fill_runs(std::byte* pool, const std::vector<Descriptor>& ds, bool at_src, std::uint64_t seed) {
  for (const auto& d : ds) {
    const std::int64_t off = at_src ? d.src_off : d.dst_off;
    check_run(d, off);
    auto* w = reinterpret_cast<std::uint64_t*>(pool + off);
    const std::uint64_t first = static_cast<std::uint64_t>(d.stream_off / 8);
    for (std::int64_t i = 0; i < d.len / 8; ++i) w[i] = pattern_word(seed, first + static_cast<std::uint64_t>(i));
  }
}

void zero_runs(std::byte* pool, const std::vector<Descriptor>& ds, bool at_src) {
  for (const auto& d : ds) std::memset(pool + (at_src ? d.src_off : d.dst_off), 0, static_cast<std::size_t>(d.len));
}

std::string compare_runs(const std::byte* pool, const std::vector<Descriptor>& ds, bool at_src, std::uint64_t seed) {
  for (std::size_t k = 0; k < ds.size(); ++k) {
    const auto& d = ds[k];
    const std::int64_t off = at_src ? d.src_off : d.dst_off;
    check_run(d, off);
    const auto* w = reinterpret_cast<const std::uint64_t*>(pool + off);
    const std::uint64_t first = static_cast<std::uint64_t>(d.stream_off / 8);
    for (std::int64_t i = 0; i < d.len / 8; ++i) {
      const std::uint64_t want = pattern_word(seed, first + static_cast<std::uint64_t>(i));
      if (w[i] != want)
        return "descriptor " + std::to_string(k) + " of " + std::to_string(ds.size()) + ", byte " +
               std::to_string(i * 8) + " of " + std::to_string(d.len) + ": pattern word differs";
    }
  }
  return {};
}

}  // namespace kvf::remote
