// The routing part: block scores vs centroids + top-k, token scores vs every key (or a rank-r key proxy)
// + top-k, each timed alone, as attention over the routed lists alone, and end to end (one decode step).
// The end_to_end rows note the per-step cost amortized over --reuse-steps S, derived from this run's medians.
#include "access_env.hpp"

namespace kvf::access_study {
namespace {

Grid routing_grid(const Target& t, const AccessEnv& env) {
  // Not part of the quick subset unless asked for by name.
  if (t.quick && !env.parts_given) return {};
  // One configuration: the first of each attention list (routing has no fp8 path).
  const ka::DType dt = env.dtypes[0] == ka::DType::fp8_e4m3 ? ka::DType::bf16 : env.dtypes[0];
  std::vector<std::string> token_routers = {"keys"};
  for (auto r : env.proxy_ranks) token_routers.push_back("lowrank" + std::to_string(r));
  Grid grid;
  for (auto c : env.routing_ctxs)
    for (auto pg : env.pages)
      for (const char* routing : {"alone", "attend", "end_to_end"}) {
        const std::string reuse = std::string(routing) == "end_to_end" ? join_u32(env.reuse_steps) : "";
        const auto prod = [&](const char* arm, std::vector<std::string> routers) {
          Product p{{{"part", {"routing"}},
                          {"arm", {arm}},
                          {"ctx", {std::to_string(c)}},
                          {"keep", {env.keeps[0]}},
                          {"block", {std::to_string(env.blocks[0])}},
                          {"budget_tokens", {budget_tokens(c, std::to_string(env.blocks[0]), env.keeps[0])}},
                          {"dtype", {ka::to_string(dt)}},
                          {"layout", {ka::to_string(env.layouts[0])}},
                          {"head_dim", {std::to_string(env.head_dims[0])}},
                          {"hq", {std::to_string(env.hq)}},
                          {"hkv", {std::to_string(env.hkv)}},
                          {"batch", {std::to_string(env.batch)}},
                          {"select", {env.selects[0]}},
                          {"scatter", {""}},
                          {"routing", {routing}},
                          {"router", std::move(routers)},
                          {"reuse_steps", {reuse}},
                          {"placement", {pg ? "shuffled" : "contiguous"}},
                          {"page_tokens", {pg ? std::to_string(pg) : ""}},
                          {"huge", {env.attn_huge}}}};
          // GPU: one decode step (routing kernels, the top-k's 5 launches, attention) also as one CUDA graph.
          if (t.gpu)
            p.lists.push_back({"launch", std::string(routing) == "end_to_end" ? gpu_launch_modes()
                                                                             : std::vector<std::string>{"eager"}});
          return p;
        };
        grid.push_back(prod("block", {"centroids"}));
        grid.push_back(prod("token", token_routers));
      }
  return grid;
}

}  // namespace

Arm<AccessEnv> routing_arm() {
  return Arm<AccessEnv>{
      .name = "routing",
      .doc = "block (centroids) vs token (keys, low-rank key proxy) routing: alone, attention over the routed "
             "lists, end to end",
      .axes = {everywhere_axis("part", {"routing"}),
               everywhere_axis("arm", {"block", "token"}, "block or token"),
               {.name = "ctx", .doc = "context in tokens", .cpu = {std::to_string(kSideCtx)},
                .quick = {std::to_string(kSideCtxQuick)}, .flag = "--contexts"},
               {.name = "keep", .doc = "the first --keep", .cpu = {"1/8"}, .quick = {"1/8"}, .flag = "--keep"},
               {.name = "block", .doc = "the first --block-sizes", .cpu = {"32"}, .gpu = {"64"}, .quick = {"32"},
                .quick_gpu = {"64"}, .flag = "--block-sizes"},
               {.name = "budget_tokens", .doc = "round(ctx / block * keep) blocks"},
               {.name = "dtype", .doc = "the first --dtypes (bf16 for fp8_e4m3)", .cpu = {"bf16"}, .quick = {"bf16"},
                .flag = "--dtypes"},
               {.name = "layout", .doc = "the first --layouts", .cpu = {"HND"}, .quick = {"HND"}, .flag = "--layouts"},
               {.name = "head_dim", .doc = "the first --head-dims", .cpu = {"128"}, .quick = {"128"},
                .flag = "--head-dims"},
               {.name = "hq", .cpu = {"32"}, .quick = {"32"}, .flag = "--hq"},
               {.name = "hkv", .cpu = {"8"}, .quick = {"8"}, .flag = "--hkv"},
               {.name = "batch", .cpu = {"1"}, .quick = {"1"}, .flag = "--batch"},
               {.name = "select", .doc = "the first --select", .cpu = {"per_head"}, .quick = {"per_head"},
                .flag = "--select"},
               everywhere_axis("scatter", {""}, "empty: the lists are routed"),
               {.name = "routing", .doc = "alone (scores + top-k + translation), attend (attention over the routed "
                                          "lists), end_to_end (both)",
                .cpu = {"alone", "attend", "end_to_end"}, .quick = {"alone", "attend", "end_to_end"}},
               {.name = "router", .doc = "centroids (block arm), keys or lowrank<r> (token arm)",
                .cpu = {"centroids", "keys", "lowrank16"}, .quick = {"centroids", "keys", "lowrank16"},
                .flag = "--proxy-rank"},
               {.name = "reuse_steps", .doc = "decode steps one routing serves (end_to_end rows)", .cpu = {"1,8,64"},
                .quick = {"1,8,64"}, .flag = "--reuse-steps"},
               {.name = "placement", .cpu = {"shuffled"}, .quick = {"shuffled"}, .flag = "--placement"},
               {.name = "page_tokens", .cpu = {"16"}, .quick = {"16"}, .flag = "--page-tokens"},
               {.name = "huge", .cpu = {"on"}, .quick = {"on"}, .flag = "--huge-pages"}},
      .default_grid = routing_grid,
      .case_name_fn = attn_case_name,
      .make = make_attn_case};
}

}  // namespace kvf::access_study
