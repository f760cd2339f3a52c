// The attention part: split-KV sparse decode over a selection made before timing: dense (every token),
// block (centroid top-k, sink + latest block kept) and token (the same budget, uniform or clustered scatter),
// per placement; then side sweeps at one context (keep, block size, NHD, shared selection, dtype, head dim).
#include "access_env.hpp"

namespace kvf::access_study {
namespace {

// The columns of one attention row, in the axes' order; a dense row leaves block and selection empty.
struct Row {
  std::uint32_t ctx = 0, batch = 0;  // batch 0: --batch (env.batch)
  std::string arm, keep = "1", block, dtype = "bf16", layout = "HND", head_dim = "128", select;
  std::vector<std::string> scatters = {""};
  std::string placement, page_tokens, huge = "on";
  std::vector<std::string> launch = {"eager"};  // GPU rows only (no column on the CPU)
};

Product product(const Row& r, const AccessEnv& env) {
  Product p{{{"part", {"attention"}},
                  {"arm", {r.arm}},
                  {"ctx", {std::to_string(r.ctx)}},
                  {"keep", {r.keep}},
                  {"block", {r.block}},
                  {"budget_tokens", {budget_tokens(r.ctx, r.block, r.keep)}},
                  {"dtype", {r.dtype}},
                  {"layout", {r.layout}},
                  {"head_dim", {r.head_dim}},
                  {"hq", {std::to_string(env.hq)}},
                  {"hkv", {std::to_string(env.hkv)}},
                  {"batch", {std::to_string(r.batch ? r.batch : env.batch)}},
                  {"select", {r.select}},
                  {"scatter", r.scatters},
                  {"routing", {"none"}},
                  {"router", {""}},
                  {"reuse_steps", {""}},
                  {"placement", {r.placement}},
                  {"page_tokens", {r.page_tokens}},
                  {"huge", {r.huge}}}};
  if (env.target.gpu) {
    p.lists.push_back({"l2_prefetch_steps", env.l2_prefetch_steps});
    p.lists.push_back({"splits", env.attn_splits});
    p.lists.push_back({"merge", env.attn_merge});
    p.lists.push_back({"loads", env.attn_loads});
    p.lists.push_back({"launch", r.launch});  // last: a graph row runs right after its eager row
  }
  return p;
}

// Every placement of one configuration: dense (when asked), block, then the token scatters, so that each
// placement's token rows find the medians of its own dense and block rows.
void add_arms(Grid& grid, Row base, bool with_dense, const std::vector<std::string>& scatters, const AccessEnv& env) {
  for (auto pg : env.pages) {
    base.placement = pg ? "shuffled" : "contiguous";
    base.page_tokens = pg ? std::to_string(pg) : "";
    if (with_dense) {
      Row d = base;
      d.arm = "dense";
      d.keep = "1";
      d.block = d.select = "";
      if (!env.target.gpu) {  // the dense row's controls first, so the dense row finds their medians
        for (const char* control : {"read", "compute"}) {
          Row r = d;
          r.arm = control;
          grid.push_back(product(r, env));
        }
      }
      grid.push_back(product(d, env));
    }
    Row b = base;
    b.arm = "block";
    b.launch = {"eager"};
    grid.push_back(product(b, env));
    Row t = base;
    t.arm = "token";
    t.launch = {"eager"};
    t.scatters = scatters;
    grid.push_back(product(t, env));
  }
}

// At the side context: keep 1/2 and 1/32, and the other block sizes at keep 1/8 (uniform scatter, no dense).
void add_side_sweeps(Grid& grid, const Row& base, const AccessEnv& env) {
  for (const char* kt : {"1/2", "1/32"}) {
    Row r = base;
    r.keep = kt;
    r.block = std::to_string(env.blocks[0]);
    r.select = "per_head";
    add_arms(grid, r, false, {"uniform"}, env);
  }
  for (std::uint32_t b : {16u, 32u, 64u, 128u, 256u})
    if (b != env.blocks[0]) {
      Row r = base;
      r.keep = "1/8";
      r.block = std::to_string(b);
      r.select = "per_head";
      add_arms(grid, r, false, {"uniform"}, env);
    }
}

// NHD (runs of one head's row) and shared selection (NHD: runs of hkv rows), then fp16, head dim 64 and,
// where the device has it, fp8 at the side context.
void add_shape_sweeps(Grid& grid, const AccessEnv& env) {
  Row base;
  base.ctx = env.side_ctx();
  base.keep = "1/8";
  base.block = std::to_string(env.blocks[0]);
  for (const char* sel : {"per_head", "shared"}) {
    Row r = base;
    r.layout = "NHD";
    r.select = sel;
    r.huge = env.attn_huge;
    add_arms(grid, r, r.select == "per_head", {"uniform"}, env);
  }
  // These rows keep huge pages on whatever --huge-pages says, as the study always ran them.
  std::vector<std::pair<const char*, const char*>> extra = {{"fp16", "128"}, {"bf16", "64"}};
  if (env.have_fp8) extra.push_back({"fp8_e4m3", "128"});
  for (auto [dt, d] : extra) {
    Row r = base;
    r.dtype = dt;
    r.head_dim = d;
    r.select = "per_head";
    add_arms(grid, r, true, {"uniform"}, env);
  }
}

// The other decode batches of the declared list (GPU: 8, 32, 64 beside 1): dense, block and token
// (uniform) at keep 1/8 at 4K, 16K and 64K, up to 1M tokens of batch x context (the host keeps a copy of
// K and V and computes the fp32 reference before timing).
void add_batch_sweep(Grid& grid, const AccessEnv& env) {
  for (auto b : env.batch_sweep) {
    if (b == env.batch) continue;
    for (std::uint32_t c : {4096u, 16384u, 65536u}) {
      if (std::uint64_t{b} * c > (std::uint64_t{1} << 20)) continue;
      Row r;
      r.ctx = c;
      r.batch = b;
      r.keep = "1/8";
      r.block = std::to_string(env.blocks[0]);
      r.select = "per_head";
      r.huge = env.attn_huge;
      add_arms(grid, r, true, {"uniform"}, env);
    }
  }
}

Grid attention_grid(const Target& t, const AccessEnv& env) {
  Grid grid;
  const bool side = !env.user_sweep && !t.quick;
  for (auto dt : env.dtypes)
    for (auto d : env.head_dims)
      for (auto lay : env.layouts)
        for (auto c : env.ctxs) {
          Row base;
          base.ctx = c;
          base.dtype = ka::to_string(dt);
          base.layout = ka::to_string(lay);
          base.head_dim = std::to_string(d);
          base.huge = env.attn_huge;
          // Dense rows of the main sweep also as one CUDA graph launch (eager_over_graph in the note).
          if (side && t.gpu) base.launch = gpu_launch_modes();
          bool first = true;  // one dense row per configuration
          for (const auto& keep : env.keeps)
            for (auto b : env.blocks)
              for (const auto& sel : env.selects) {
                Row r = base;
                r.keep = keep;
                r.block = std::to_string(b);
                r.select = sel;
                add_arms(grid, r, first, env.scatters, env);
                first = false;
              }
          if (side && c == env.side_ctx()) add_side_sweeps(grid, base, env);
        }
  if (side) {
    add_shape_sweeps(grid, env);
    add_batch_sweep(grid, env);
  }
  return grid;
}

}  // namespace

Arm<AccessEnv> attention_arm() {
  return Arm<AccessEnv>{
      .name = "attention",
      .doc = "split-KV sparse decode: dense, block (centroid top-k, sink + latest kept) and token (same budget, "
             "uniform or clustered scatter), selection made before timing",
      .axes = {everywhere_axis("part", {"attention"}),
               everywhere_axis("arm", {"dense", "block", "token", "read", "compute"},
                               "dense, block or token; read (CPU, before each dense row: its K and V read by a plain "
                               "loop in its order, no compute: what its access pattern costs a plain read); compute "
                               "(CPU, hot, before each dense row: its loop over the same tokens folded into 256 KiB of "
                               "K and V that stay in cache: what its arithmetic costs without DRAM)"),
               {.name = "ctx", .doc = "context in tokens", .cpu = {"4096", "16384", "65536", "131072"},
                .gpu = {"4096", "8192", "16384", "32768", "65536", "131072", "262144"}, .quick = {"16384"},
                .flag = "--contexts"},
               {.name = "keep", .doc = "kept fraction of the context (dense rows: 1); side sweep 1/2, 1/32",
                .cpu = {"1/8"}, .quick = {"1/8"}, .flag = "--keep"},
               {.name = "block", .doc = "tokens per block (empty on dense rows); side sweep 16..256",
                .cpu = {"32"}, .gpu = {"64"}, .quick = {"32"}, .quick_gpu = {"64"}, .flag = "--block-sizes"},
               {.name = "budget_tokens", .doc = "tokens attended to: ctx (dense), round(ctx / block * keep) blocks"},
               {.name = "dtype", .doc = "of K and V; side sweep fp16 (and fp8_e4m3 on sm_89+)", .cpu = {"bf16"},
                .quick = {"bf16"}, .flag = "--dtypes"},
               {.name = "layout", .doc = "HND or NHD; side sweep NHD", .cpu = {"HND"}, .quick = {"HND"},
                .flag = "--layouts"},
               {.name = "head_dim", .doc = "side sweep 64", .cpu = {"128"}, .quick = {"128"}, .flag = "--head-dims"},
               {.name = "hq", .doc = "query heads", .cpu = {"32"}, .quick = {"32"}, .flag = "--hq"},
               {.name = "hkv", .doc = "KV heads", .cpu = {"8"}, .quick = {"8"}, .flag = "--hkv"},
               {.name = "batch", .doc = "decode batch; GPU sweep 8, 32, 64 at 4K..64K (batch x context <= 1M tokens)",
                .cpu = {"1"}, .gpu = {"1", "8", "32", "64"}, .quick = {"1"}, .flag = "--batch"},
               {.name = "select", .doc = "per_head or shared (empty on dense rows); side sweep shared",
                .cpu = {"per_head"}, .quick = {"per_head"}, .flag = "--select"},
               {.name = "scatter", .doc = "of the token arm (empty on other rows)", .cpu = {"uniform", "clustered"},
                .quick = {"uniform"}, .flag = "--scatter"},
               everywhere_axis("routing", {"none"}),
               everywhere_axis("router", {""}),
               everywhere_axis("reuse_steps", {""}),
               {.name = "placement", .doc = "shuffled (paged, pages in a seeded random order) or contiguous",
                .cpu = {"shuffled"}, .quick = {"shuffled"}, .flag = "--placement"},
               {.name = "page_tokens", .doc = "tokens per page (empty when contiguous)", .cpu = {"16"},
                .quick = {"16"}, .flag = "--page-tokens"},
               {.name = "huge", .doc = "huge pages for K and V (CPU)", .cpu = {"on"}, .quick = {"on"},
                .flag = "--huge-pages"}},
      .default_grid = attention_grid,
      .case_name_fn = attn_case_name,
      .make = make_attn_case};
}

}  // namespace kvf::access_study
