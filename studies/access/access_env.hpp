// The access study's environment: its parsed flags resolved to the values the arms sweep, the backend facts
// the sweeps depend on, and the buffers the cases share; then the arm declarations (one file each).
// Flags are checked in study.cpp before any arm expands, so nothing below re-validates user text.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "access.hpp"
#include "kvf/arms.hpp"
#include "kvf/backend.hpp"
#include "kvf/errors.hpp"

namespace kvf::access_study {

namespace ka = kvf::access;

constexpr std::uint64_t kSeed = 0xacce55;
// Seed of the shuffled placement's page tables (ka::make_page_map): the attention rows and their kv read control.
constexpr std::uint64_t kPageMapKey = kSeed ^ 0x9a9e;
// The side sweeps (keep, block size, NHD, shared selection, dtype, head dim) and routing run at one context.
constexpr std::uint32_t kSideCtx = 65536, kSideCtxQuick = 16384;
// The flags that set a sparse budget (kvf::access::sparse_blocks), for kernel_check.
constexpr const char* kSweepFlags = "--contexts, --block-sizes, --keep";

// Owned by the cases (shared_ptr), so it is destroyed with them, before the backend goes away.
struct KvData {
  std::string key;
  ka::AttnShape s;
  BufferHandle q, k, v;                   // on the backend's "device"
  std::vector<unsigned char> hq, hk, hv;  // host copies for the reference (CUDA backend only)
  // Per (block size, page size; 0 = contiguous placement): centroids of the logical blocks, fp32.
  std::map<std::uint64_t, std::vector<float>> centroids;  // on the host
  std::map<std::uint64_t, BufferHandle> dcentroids;       // the same on the device (CUDA backend)
  // Low-rank key proxies per (rank, page size), host and device (basis, projected keys).
  std::map<std::uint64_t, ka::LowRank> lowrank;
  std::map<std::uint64_t, std::pair<BufferHandle, BufferHandle>> dlowrank;
  const void* host_q() const { return hq.empty() ? q->ptr : hq.data(); }
  const void* host_k() const { return hk.empty() ? k->ptr : hk.data(); }
  const void* host_v() const { return hv.empty() ? v->ptr : hv.data(); }
};

// One K/V set and one gather pool at a time: the arms are ordered so that cases of one configuration are
// adjacent, and a new configuration replaces the previous buffers instead of adding to them.
struct Shared {
  std::unique_ptr<KvData> kv;
  std::string pool_key;
  BufferHandle pool;
  std::map<std::string, double> medians;  // "<key>|<mode>" -> median seconds
  std::uint64_t sink = 0;

  KvData& ensure_kv(Backend& be, const ka::AttnShape& s, bool huge);
  static std::uint64_t cent_key(std::uint32_t block, const ka::PageMap& pm) {
    return (std::uint64_t{pm.page} << 32) | block;
  }
  const std::vector<float>& centroids(KvData& d, std::uint32_t block, const ka::PageMap& pm);
  const ka::LowRank& lowrank(KvData& d, std::uint32_t r, const ka::PageMap& pm);
  const Buffer& ensure_pool(Backend& be, std::uint64_t bytes, bool huge);
  // The CPU's fp32 FMA peak at the attention twin's vector width on `threads` threads, measured at the first
  // CPU attention case of the run (~0.1 s) and kept: the arithmetic floor of every attention row.
  std::optional<ka::FmaPeak> fma_measured;
  // A CPU attention row's floor as its parameters fma_peak_gflops, fma_floor_s (what its QK and PV products alone
  // would take with every FMA pipe busy; near the row's time, the row is bound by arithmetic, not memory),
  // fma_peak_isa and fma_floor_basis. qk_flops_per_lane2: the part of `flops` the kernel issues as vdpbf16ps,
  // two products per fp32 lane, so half the instructions of fp32 FMAs (0 where everything is fp32 FMA).
  void add_fma_floor(std::vector<Param>& params, double flops, double qk_flops_per_lane2, int threads);
  void record(const std::string& key, const std::string& mode, double med) { medians[key + "|" + mode] = med; }
  std::optional<double> median(const std::string& key, const std::string& mode) const;
};

// Every list is what the arms sweep: the user's values, else the defaults the arms' axes declare for this
// target (study.cpp resolves them), as numbers or as the text of their parameter column.
struct AccessEnv {
  Target target;
  bool have_fp8 = false;      // the GPU converts fp8 e4m3 (sm_89+)
  std::uint64_t llc = 0;      // LLC bytes (32 MiB where the backend does not say)
  std::uint64_t dev_mem = 0;  // memory of the device the buffers live on
  bool parts_given = false;   // --parts given: the routing part also runs under --quick

  // gather
  std::vector<std::uint64_t> pools, runs;       // bytes
  std::optional<std::uint64_t> gather_bytes;    // --gather-mib, else min(default, pool / 2)
  std::vector<std::string> gather_huge, prefetch;  // "on"/"off"; prefetch "" on the GPU (no such knob)

  // attention and routing
  std::uint32_t hq = 32, hkv = 8, batch = 1, cluster_mean = 8;
  std::vector<std::uint32_t> batch_sweep;  // declared batches of the default grid (none when --batch is given)
  std::vector<std::uint32_t> ctxs, blocks, head_dims, pages;  // pages: tokens per page, 0 = contiguous
  std::vector<std::string> keeps;                             // as given: the keep column
  std::vector<ka::DType> dtypes;
  std::vector<ka::Layout> layouts;
  std::vector<std::string> selects, scatters;
  std::string attn_huge = "on";
  std::vector<std::uint32_t> reuse_steps, proxy_ranks;
  std::vector<std::string> l2_prefetch_steps = {"0"};  // GPU attention rows: --l2-prefetch-steps
  std::vector<std::string> attn_splits = {"auto"};     // GPU attention rows: --attn-splits ("auto": the policy)
  std::vector<std::string> attn_merge = {"fused"};     // GPU attention rows: --attn-merge
  std::vector<std::string> attn_loads = {"auto"};      // GPU attention rows: --attn-loads
  std::vector<std::uint32_t> routing_ctxs;  // --contexts, else the side context
  // A list of the attention sweep was given: the side sweeps at one context give way to it.
  bool user_sweep = false;
  std::uint32_t side_ctx() const { return target.quick ? kSideCtxQuick : kSideCtx; }

  std::shared_ptr<Shared> shared;
};

// The launch column of GPU rows: kvf::launch_modes() (kvf/cuda_graph.hpp, CUDA builds only), spelled here
// so that GPU case lists planned without CUDA (--plan-device) are the same; attn_case.cpp checks that the
// two agree. "eager": the kernels launched one by one; "graph": the same enqueue captured as one graph.
inline const std::vector<std::string>& gpu_launch_modes() {
  static const std::vector<std::string> modes{"eager", "graph"};
  return modes;
}

// The arms, one per part (what --parts selects), in the order they run.
Arm<AccessEnv> gather_arm();
Arm<AccessEnv> attention_arm();
Arm<AccessEnv> routing_arm();

// Bytes one gather execution reads from a pool: --gather-mib, else a default that fills a sample without
// outgrowing the pool.
std::uint64_t gather_total(const AccessEnv& env, std::uint64_t pool_bytes);

// The attention and routing parts make the same case (routing is attention with its lists routed first).
std::unique_ptr<Case> make_attn_case(const Point& p, AccessEnv& env);
std::string attn_case_name(const Point& p);
// The dense arm's control on the CPU (arm=read, kv_read.cpp): the dense row's K and V read by a plain loop in its
// order. Its median is recorded under kv_read_key(the dense row's config key), for the dense row's vs_kv_read.
std::unique_ptr<Case> make_kv_read_case(const AccessEnv& env, const ka::AttnShape& s, bool huge,
                                        const std::string& config_key, std::vector<Param> params);
std::string kv_read_key(const std::string& config_key);
// Tokens a row attends to (the budget_tokens column): the context for dense rows (block empty), else
// round(ctx / block * keep) blocks. An axis the grids fill, so that it keeps its column beside ctx and keep.
std::string budget_tokens(std::uint32_t ctx, const std::string& block, const std::string& keep);

// Text helpers shared by the arms.
std::string fmt(double x, int prec = 3);
std::string ctx_name(std::uint32_t ctx);               // 4096 -> "4K"
double keep_fraction(const std::string& keep_text);    // "1/8" or "0.125" (checked by the study)
// The values of --dtypes and --layouts, also the dtype and layout columns of a point (UsageError naming the flag).
ka::DType parse_dtype(const std::string& text);
ka::Layout parse_layout(const std::string& text);
std::string join_u32(const std::vector<std::uint32_t>& v);  // "1,8,64"
std::vector<std::string> to_text(const std::vector<std::uint32_t>& v);
bool is_cuda(const Backend& be);

// The kernels check their own inputs (std::invalid_argument, in kernel terms) behind the study's flag checks.
// Should one refuse what the flags let through, it is still bad input: one line naming the flags that set
// it, exit 2. Returns what check() returns.
template <class Check>
auto kernel_check(const char* flags, Check&& check) -> decltype(check()) {
  try {
    return check();
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(flags) + ": " + e.what());
  }
}

}  // namespace kvf::access_study
