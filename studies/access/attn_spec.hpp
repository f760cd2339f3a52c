// The attention and routing arms' case spec: a point's columns parsed back into what the case runs (AttnSpec),
// and the names and shapes derived from it (case and configuration names, the shape-only selection).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "access_env.hpp"

namespace kvf::access_study {

// Routing cases: alone (scores + top-k + translation to physical entries), attend (attention over the
// routed lists, routing untimed), end_to_end (both, one decode step).
enum class Routing { none, alone, attend, end_to_end };
inline const char* to_string(Routing r) {
  return r == Routing::none ? "none" : r == Routing::alone ? "alone" : r == Routing::attend ? "attend" : "end_to_end";
}

struct AttnSpec {
  ka::AttnShape s;
  ka::Arm arm = ka::Arm::dense;
  std::uint32_t block = 32;
  double keep = 1.0;
  std::string keep_text = "1";
  bool shared = false;
  ka::Scatter scatter = ka::Scatter::uniform;
  Routing routing = Routing::none;
  bool huge = true;
  std::uint32_t cluster_mean = 8;
  std::uint32_t page = 0;  // tokens per page of the shuffled placement; 0: contiguous
  std::uint32_t proxy_rank = 0;  // routed token arm: 0 scores every key, r > 0 the rank-r key proxy
  std::vector<std::uint32_t> reuse_steps;  // routing end_to_end: derived amortized times for these S
  bool graph = false;  // GPU launch "graph": run() replays one CUDA graph of what the eager row enqueues
  std::uint32_t l2_prefetch_steps = 0;  // GPU: AttnPlan::l2_prefetch_steps (--l2-prefetch-steps)
  std::uint32_t fixed_splits = 0;       // GPU: splits per item, 0 = the wave-aware policy (--attn-splits)
  bool merge_kernel = false;            // GPU: the merge as a second kernel, not fused (--attn-merge kernel)
  std::string loads = "auto";           // GPU: auto, mma, smem or regs (--attn-loads; ka::gpu::AttnLoads)
  // arm=compute (CPU): the dense row's loop with every list folded into a window of pages that stays in cache.
  bool compute_control = false;
  std::string placement_text() const { return page ? "shuffled" : "contiguous"; }
};

// The point's columns back to the spec the case runs; columns a row leaves empty (a dense row's block and
// selection) take the spec's defaults, which that arm does not read.
AttnSpec spec_of(const Point& p, const AccessEnv& env);
// The configuration part of a case name (context, layout, dtype, shape, placement, GPU variant): the key the
// dense row's median and its controls' medians are recorded under.
std::string cfg_name(const AttnSpec& sp);
std::string keep_name(const AttnSpec& sp);  // "1/8" -> "1:8"
std::string arm_name(const AttnSpec& sp);   // dense, block, token-uniform, token-lowrank16, ...
// Shape-only selection for the counts (physical entries x span per list), and the selected tokens.
ka::Selection shape_of(const AttnSpec& sp, std::uint64_t& ntok);

// The compute control's window: K and V bytes of all kv heads it folds every list into, under a core's L2 on
// every x86 server part of the last decade (512 KiB on AMD Zen, 1-2 MiB on Intel since Skylake-SP).
inline constexpr std::uint64_t kComputeWindowBytes = 256 << 10;
// Folds every list's entries into the first W physical entries (entry e -> e mod W), W = the entries whose K and V
// fit kComputeWindowBytes (at least one): the same tokens attended, read from cache. Returns W.
std::uint32_t fold_into_window(const ka::AttnShape& s, ka::Selection& sel);
// Where the compute control's median is recorded, for the dense row of that configuration (its vs_compute).
inline std::string compute_control_key(const std::string& config_key) { return config_key + "/compute"; }

}  // namespace kvf::access_study
