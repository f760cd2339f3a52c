// AttnSpec from a point's columns, and the names and shapes derived from it (attn_spec.hpp).
#include "attn_spec.hpp"

#include <algorithm>

namespace kvf::access_study {
namespace {

Routing parse_routing(const std::string& t) {
  return t == "alone" ? Routing::alone : t == "attend" ? Routing::attend : t == "end_to_end" ? Routing::end_to_end
                                                                                             : Routing::none;
}

ka::Arm parse_arm(const std::string& t) {
  return t == "block" ? ka::Arm::block : t == "token" ? ka::Arm::token : ka::Arm::dense;
}

std::vector<std::uint32_t> parse_steps(const std::string& t) {
  std::vector<std::uint32_t> out;
  for (std::size_t at = 0; at < t.size();) {
    const auto comma = std::min(t.find(',', at), t.size());
    out.push_back(static_cast<std::uint32_t>(std::stoul(t.substr(at, comma - at))));
    at = comma + 1;
  }
  return out;
}

// The GPU-only columns (--l2-prefetch-steps, --attn-splits, --attn-merge, --attn-loads): absent on CPU rows.
void read_gpu_variant(const Point& p, AttnSpec& sp) {
  sp.l2_prefetch_steps = p.has("l2_prefetch_steps") ? static_cast<std::uint32_t>(p.integer("l2_prefetch_steps")) : 0;
  sp.fixed_splits = p.has("splits") && p["splits"] != "auto" ? static_cast<std::uint32_t>(p.integer("splits")) : 0;
  sp.merge_kernel = p.has("merge") && p["merge"] == "kernel";
  if (p.has("loads") && !p["loads"].empty()) sp.loads = p["loads"];
}

}  // namespace

AttnSpec spec_of(const Point& p, const AccessEnv& env) {
  AttnSpec sp;
  sp.s.batch = static_cast<std::uint32_t>(p.integer("batch"));
  sp.s.hq = static_cast<std::uint32_t>(p.integer("hq"));
  sp.s.hkv = static_cast<std::uint32_t>(p.integer("hkv"));
  sp.s.d = static_cast<std::uint32_t>(p.integer("head_dim"));
  sp.s.ctx = static_cast<std::uint32_t>(p.integer("ctx"));
  sp.s.dtype = parse_dtype(p["dtype"]);
  sp.s.layout = parse_layout(p["layout"]);
  sp.arm = parse_arm(p["arm"]);
  sp.keep_text = p["keep"];
  sp.keep = keep_fraction(sp.keep_text);
  if (!p["block"].empty()) sp.block = static_cast<std::uint32_t>(p.integer("block"));
  sp.shared = p["select"] == "shared";
  sp.scatter = p["scatter"] == "clustered" ? ka::Scatter::clustered : ka::Scatter::uniform;
  sp.routing = parse_routing(p["routing"]);
  const std::string& router = p["router"];
  if (router.rfind("lowrank", 0) == 0) sp.proxy_rank = static_cast<std::uint32_t>(std::stoul(router.substr(7)));
  if (!p["reuse_steps"].empty()) sp.reuse_steps = parse_steps(p["reuse_steps"]);
  sp.huge = p["huge"] == "on";
  sp.page = p["page_tokens"].empty() ? 0 : static_cast<std::uint32_t>(p.integer("page_tokens"));
  sp.cluster_mean = env.cluster_mean;
  sp.graph = p.has("launch") && p["launch"] == "graph";
  read_gpu_variant(p, sp);
  sp.compute_control = p["arm"] == "compute";
  // The shuffled placement is a paged layout (paged HND: heads of a page adjacent).
  sp.s.page = sp.page;
  return sp;
}

std::string cfg_name(const AttnSpec& sp) {
  const auto& s = sp.s;
  return ctx_name(s.ctx) + "/" + ka::to_string(s.layout) + "/" + ka::to_string(s.dtype) + "/d" + std::to_string(s.d) +
         "/hq" + std::to_string(s.hq) + "hkv" + std::to_string(s.hkv) + "/b" + std::to_string(s.batch) +
         (sp.huge ? "" : "/nohuge") + (sp.page ? "/pg" + std::to_string(sp.page) : std::string("/contiguous")) +
         (sp.l2_prefetch_steps ? "/pf" + std::to_string(sp.l2_prefetch_steps) : std::string()) +
         (sp.fixed_splits ? "/s" + std::to_string(sp.fixed_splits) : std::string()) +
         (sp.merge_kernel ? "/merge_kernel" : "") +
         (sp.loads != "auto" ? "/" + sp.loads : std::string());
}

std::string keep_name(const AttnSpec& sp) {
  std::string kt = sp.keep_text;
  std::replace(kt.begin(), kt.end(), '/', ':');
  return kt;
}

std::string arm_name(const AttnSpec& sp) {
  std::string arm = ka::to_string(sp.arm);
  if (sp.arm == ka::Arm::token && sp.routing == Routing::none) arm += std::string("-") + ka::to_string(sp.scatter);
  if (sp.proxy_rank) arm += "-lowrank" + std::to_string(sp.proxy_rank);
  return arm;
}

ka::Selection shape_of(const AttnSpec& sp, std::uint64_t& ntok) {
  const auto& s = sp.s;
  const ka::PageMap pm = ka::make_page_map(s.ctx, sp.page, 0);
  ka::Selection shape;
  ntok = s.ctx;
  if (sp.arm != ka::Arm::dense) {
    const auto kb = kernel_check(kSweepFlags, [&] { return ka::sparse_blocks(s.ctx, sp.block, sp.keep); });
    ntok = std::uint64_t{kb} * sp.block;
    shape.geom.span = sp.arm == ka::Arm::block ? sp.block : 1;
    shape.geom.n_entries = static_cast<std::uint32_t>(ntok / shape.geom.span);
    shape.n_lists = sp.shared ? s.batch : s.batch * s.hkv;
  } else {
    shape.geom.span = 256;
    while (s.ctx % shape.geom.span) shape.geom.span /= 2;
    shape.geom.n_entries = s.ctx / shape.geom.span;
    shape.n_lists = s.batch;
  }
  shape.geom.shared = sp.shared;
  shape.geom.n_entries *= pm.entries_per(shape.geom.span);
  shape.geom.span = pm.entry_span(shape.geom.span);
  shape.idx.resize(std::uint64_t{shape.n_lists} * shape.geom.n_entries);
  return shape;
}

std::uint32_t fold_into_window(const ka::AttnShape& s, ka::Selection& sel) {
  const std::uint64_t token_bytes = 2ull * s.hkv * s.d * ka::dtype_bytes(s.dtype);
  const std::uint64_t tokens = std::max<std::uint64_t>(1, kComputeWindowBytes / token_bytes);
  const auto w = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, tokens / sel.geom.span));
  for (auto& e : sel.idx) e %= w;
  return w;
}

std::string attn_case_name(const Point& p) {
  AttnSpec sp;
  sp.s.ctx = static_cast<std::uint32_t>(p.integer("ctx"));
  sp.s.layout = parse_layout(p["layout"]);
  sp.s.dtype = parse_dtype(p["dtype"]);
  sp.s.d = static_cast<std::uint32_t>(p.integer("head_dim"));
  sp.s.hq = static_cast<std::uint32_t>(p.integer("hq"));
  sp.s.hkv = static_cast<std::uint32_t>(p.integer("hkv"));
  sp.s.batch = static_cast<std::uint32_t>(p.integer("batch"));
  sp.huge = p["huge"] == "on";
  sp.page = p["page_tokens"].empty() ? 0 : static_cast<std::uint32_t>(p.integer("page_tokens"));
  read_gpu_variant(p, sp);
  sp.arm = parse_arm(p["arm"]);
  sp.routing = parse_routing(p["routing"]);
  sp.scatter = p["scatter"] == "clustered" ? ka::Scatter::clustered : ka::Scatter::uniform;
  const std::string& router = p["router"];
  if (router.rfind("lowrank", 0) == 0) sp.proxy_rank = static_cast<std::uint32_t>(std::stoul(router.substr(7)));
  sp.keep_text = p["keep"];
  // The dense row's controls: its bytes read by a plain loop (read, kv_read.cpp), its loop in cache (compute).
  const bool control = p["arm"] == "read" || p["arm"] == "compute";
  std::string nm = (sp.routing == Routing::none ? "attn/" : std::string("route-") + to_string(sp.routing) + "/") +
                   (control ? p["arm"] : arm_name(sp)) + "/" + cfg_name(sp);
  if (sp.arm != ka::Arm::dense) nm += "/keep" + keep_name(sp) + "/B" + p["block"] + "/" + p["select"];
  if (p.has("launch") && p["launch"] == "graph") nm += "/graph";
  return nm;
}

std::string budget_tokens(std::uint32_t ctx, const std::string& block, const std::string& keep) {
  if (block.empty()) return std::to_string(ctx);
  const auto b = static_cast<std::uint32_t>(std::stoul(block));
  const auto kb = kernel_check(kSweepFlags, [&] { return ka::sparse_blocks(ctx, b, keep_fraction(keep)); });
  return std::to_string(std::uint64_t{kb} * b);
}

}  // namespace kvf::access_study
