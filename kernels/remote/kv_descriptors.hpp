// Where a KV page's bytes lie in a paged pool and which descriptors move it: the remote study's pure math.
//
// A pool is `slots` slots of `slot_tokens` tokens. Within one layer of a slot the bytes are
// [piece][token][piece_bytes] (a piece is one K or V head of a GQA model, or the one latent row of MLA), so a
// (layer, piece) run of a slot is contiguous. The two layouts place the slots:
//   page_first:  [slot][layer][piece][token]   (a page-sized slot is one contiguous object: Mooncake, LMCache)
//   layer_first: [layer][slot][piece][token]   (one tensor per layer, as vLLM's paged cache)
// A transfer moves one page (page_tokens tokens of every layer) from slots of the source pool to slots of the
// destination pool, each side through its own random block table. The granularity decides how many
// descriptors (one contiguous run each) it takes:
//   page:        1 descriptor                 (page_first, slot_tokens == page_tokens)
//   layer:       one per layer                (slot_tokens == page_tokens)
//   layer_head:  one per (layer, piece)       (slot_tokens == page_tokens)
//   block16:     one per (layer, 16-token block) (slot_tokens == 16)
// Verification: descriptor k's bytes are stream bytes [stream_off, stream_off + len) of the transfer; the
// sender fills them with pattern words of their stream offsets and the receiver compares the same words.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvf::remote {

inline constexpr int kBlockTokens = 16;

enum class Layout { page_first, layer_first };
enum class Granularity { page, layer, layer_head, block16 };

// std::invalid_argument naming the text and the allowed values.
Layout parse_layout(std::string_view s);
Granularity parse_granularity(std::string_view s);
const char* to_string(Layout l);
const char* to_string(Granularity g);

// The K/V bytes of one token of one layer, split into the pieces a per-head descriptor moves.
struct KvGeometry {
  int layers = 0;
  int pieces = 0;                 // 2 * kv_heads (GQA), 1 (MLA latent + rope key)
  std::int64_t piece_bytes = 0;   // per token: head_dim * 2 (bf16), or (kv_lora_rank + rope dim) * 2
  std::int64_t token_layer_bytes() const { return pieces * piece_bytes; }
  std::int64_t page_bytes(int page_tokens) const { return std::int64_t(layers) * page_tokens * token_layer_bytes(); }
};

struct PoolShape {
  KvGeometry geo;
  int slot_tokens = 0;
  std::int64_t slots = 0;
  Layout layout = Layout::page_first;
  std::int64_t slot_layer_bytes() const { return slot_tokens * geo.token_layer_bytes(); }
  std::int64_t bytes() const { return slots * geo.layers * slot_layer_bytes(); }
  // Byte offset of (slot, layer, piece, token within the slot).
  std::int64_t offset(std::int64_t slot, int layer, int piece, int token) const;
};

// One contiguous run: `len` bytes from src_off of the source pool to dst_off of the destination pool.
struct Descriptor {
  std::int64_t src_off = 0, dst_off = 0, len = 0;
  std::int64_t stream_off = 0;  // where these bytes sit in the transfer's byte stream (the pattern index)
};

// The slot size a granularity needs for a page: 16 tokens for block16, the page otherwise.
int slot_tokens_for(Granularity g, int page_tokens);
// Empty when the combination is valid, else why not (e.g. "granularity page needs layout page_first").
std::string invalid_combination(Granularity g, Layout l, int page_tokens);

// A block table: `count` distinct slots of `slots`, in random order (a seeded Fisher-Yates over splitmix64,
// the same on every rank and compiler). std::invalid_argument when count > slots.
std::vector<std::int64_t> random_block_table(std::int64_t slots, std::int64_t count, std::uint64_t seed);

// The descriptors of one page from `src_table` slots of `src` to `dst_table` slots of `dst` (each table holds
// page_tokens / slot_tokens slots). Both pools must share the geometry and slot size.
std::vector<Descriptor> page_descriptors(const PoolShape& src, const PoolShape& dst, Granularity g, int page_tokens,
                                         const std::vector<std::int64_t>& src_table,
                                         const std::vector<std::int64_t>& dst_table);

// Pattern fill and compare of descriptor runs: the source side fills src_off runs, the receiver compares dst_off
// runs. Runs are multiples of 8 bytes at 8-byte aligned offsets (checked: std::invalid_argument).
void fill_runs(std::byte* pool, const std::vector<Descriptor>& d, bool at_src, std::uint64_t seed);
// Zeroes the runs (the receiver's side before a transfer: one that moves nothing then fails the compare).
void zero_runs(std::byte* pool, const std::vector<Descriptor>& d, bool at_src);
// Empty when every run matches; else the first mismatch ("descriptor 3 byte 4096: ...").
std::string compare_runs(const std::byte* pool, const std::vector<Descriptor>& d, bool at_src, std::uint64_t seed);

}  // namespace kvf::remote
