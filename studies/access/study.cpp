// The access study: is coalesced access why position-aware (block) KV selection beats similarity-aware
// (scattered token) selection at equal budget, and does the gap widen with context only because the
// working set leaves the L2/LLC? (README.md: its arms, flags and how to read its figures.)
//
// This file: the study's flags, their validation (every value checked before any case exists: one line
// naming the flag, the value and what is allowed; exit 2), the arm list, main().

#include <algorithm>
#include <charconv>
#include <cmath>

#include "access_env.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/study.hpp"
#include "kvf/units.hpp"

namespace kvf::access_study {
namespace {

// The parts of the study, in the order they run: --parts selects among them.
const ArmList<AccessEnv>& access_arms() {
  static const ArmList<AccessEnv> arms({gather_arm(), attention_arm(), routing_arm()});
  return arms;
}

// Every flag value is checked here, before any case exists: one line naming the flag, the value and what is
// allowed (exit 2). Numbers are plain decimal digits: a sign, a space, an exponent or a trailing letter is
// refused rather than read as something else, and nothing wraps around.


// Leading decimal digits of t as a number (false on none, or on overflow of 64 bits); `rest` is what follows.
bool leading_digits(const std::string& t, std::uint64_t& v, std::string& rest) {
  const char* b = t.data();
  const char* e = b + t.size();
  if (b == e || *b < '0' || *b > '9') return false;
  const auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc{}) return false;
  rest.assign(p, e);
  return true;
}

std::uint64_t parse_whole(const std::string& t, const std::string& flag, std::uint64_t lo, std::uint64_t hi) {
  std::uint64_t v = 0;
  std::string rest;
  if (!leading_digits(t, v, rest) || !rest.empty() || v < lo || v > hi)
    kvf::bad_flag(flag, t, "must be a whole number in " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

bool pow2(std::uint64_t x) { return x && !(x & (x - 1)); }

constexpr std::uint64_t kMaxCtx = 1ull << 26;  // 64M tokens: every index the kernels keep is 32-bit

std::uint32_t parse_ctx(const std::string& t) {
  const std::string allowed = "must be a whole number of tokens in 1 .. 64M, with an optional K or M (e.g. 4096, 4K, 1M)";
  std::uint64_t v = 0;
  std::string suf;
  if (!leading_digits(t, v, suf)) kvf::bad_flag("--contexts", t, allowed);
  std::uint64_t mul = 1;
  if (suf == "K" || suf == "k") mul = 1024;
  else if (suf == "M" || suf == "m") mul = 1024 * 1024;
  else if (!suf.empty()) kvf::bad_flag("--contexts", t, allowed);
  // Compared before multiplying: a huge count times K must not wrap into range.
  if (v == 0 || v > kMaxCtx / mul) kvf::bad_flag("--contexts", t, allowed);
  return static_cast<std::uint32_t>(v * mul);
}

// A decimal number, the whole text (no trailing characters; NaN and infinities are not numbers here).
bool parse_decimal(std::string_view t, double& v) {
  if (t.empty() || !((t[0] >= '0' && t[0] <= '9') || t[0] == '.')) return false;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::fixed);
  return ec == std::errc{} && p == t.data() + t.size() && std::isfinite(v);
}

double parse_keep(const std::string& t) {
  const std::string allowed = "must be a fraction in (0, 1] written as a/b or a decimal (e.g. 1/8 or 0.125)";
  double v = 0;
  const auto slash = t.find('/');
  if (slash != std::string::npos) {
    double a = 0, b = 0;
    if (!parse_decimal(std::string_view(t).substr(0, slash), a) || !parse_decimal(std::string_view(t).substr(slash + 1), b) ||
        b == 0)
      kvf::bad_flag("--keep", t, allowed);
    v = a / b;
  } else if (!parse_decimal(t, v)) {
    kvf::bad_flag("--keep", t, allowed);
  }
  if (!(v > 0.0 && v <= 1.0)) kvf::bad_flag("--keep", t, allowed);
  return v;
}

}  // namespace

ka::DType parse_dtype(const std::string& t) {
  if (t == "bf16") return ka::DType::bf16;
  if (t == "fp16") return ka::DType::fp16;
  if (t == "fp8" || t == "fp8_e4m3" || t == "e4m3") return ka::DType::fp8_e4m3;
  kvf::bad_flag("--dtypes", t, "unknown dtype (bf16, fp16, fp8_e4m3)");
}

ka::Layout parse_layout(const std::string& t) {
  if (t == "NHD" || t == "nhd") return ka::Layout::NHD;
  if (t == "HND" || t == "hnd") return ka::Layout::HND;
  kvf::bad_flag("--layouts", t, "unknown layout (NHD, HND)");
}

namespace {

// The defaults an arm declares for one of its axes: the values a flag that was not given stands for.
const std::vector<std::string>& declared(const char* arm, const char* axis, const Target& t) {
  for (const auto& a : access_arms().at(arm).axes)
    if (a.name == axis) return a.defaults(t);
  throw std::logic_error(std::string("access arm ") + arm + " declares no axis " + axis);
}

std::vector<std::uint32_t> declared_u32(const char* arm, const char* axis, const Target& t) {
  std::vector<std::uint32_t> out;
  for (const auto& v : declared(arm, axis, t)) out.push_back(static_cast<std::uint32_t>(std::stoul(v)));
  return out;
}

// "on" / "off" / "both" as the column values they stand for (empty: the declared defaults).
std::vector<std::string> on_off(const std::string& v, const std::vector<std::string>& dflt) {
  if (v == "on") return {"on"};
  if (v == "off") return {"off"};
  if (v == "both") return {"on", "off"};
  return dflt;
}

class AccessStudy final : public Study {
 public:
  std::string name() const override { return "access"; }

  void add_options(StudyFlags& flags) override {
    flags_ = flags;
    std::string parts_help = "parts to run (default all):";
    for (const auto& a : access_arms().all()) parts_help += " " + a.name + " (" + a.doc + ");";
    parts_help.pop_back();
    flags.list("--parts", parts_, parts_help);
    flags.list("--contexts", contexts_, "context lengths in tokens, 1 .. 64M, e.g. 4K,16K,64K (default CPU 4K,16K,64K,128K)");
    flags.list("--keep", keeps_, "keep fractions in (0,1], e.g. 1/8,1/2 (default 1/8, plus 1/2 and 1/32 at one context)");
    flags.list("--block-sizes", blocks_, "block sizes of the block arm, powers of two 1..4096 dividing every context, "
               "e.g. 16,32,64,128,256 (default 32 CPU, 64 GPU; the others at one context)");
    flags.list("--dtypes", dtypes_, "bf16, fp16, fp8_e4m3 (GPU sm_89+ only) (default bf16)");
    flags.list("--layouts", layouts_, "NHD, HND (default HND, plus NHD at one context)");
    flags.list("--head-dims", head_dims_, "64, 128 (default 128)");
    flags.text("--hq", hq_text_, "query heads, 1..4096, a multiple of --hkv by 1, 2, 4, 8 or 16 (default 32)");
    flags.text("--hkv", hkv_text_, "KV heads, 1..1024 (default 8)");
    flags.text("--batch", batch_text_, "batch, 1..1024 (default 1)");
    flags.text("--select", select_, "per_head, shared or both (default per_head, plus shared at one context)");
    flags.text("--scatter", scatter_, "token arm scatter: uniform, clustered or both (default both)");
    flags.text("--cluster-mean", cluster_mean_text_, "mean run length of the clustered token arm, 1..65536 (default 8)");
    flags.list("--run-bytes", run_bytes_,
               "gather run sizes, powers of two from 32 B to 1 GiB (256, 4KiB, 1GiB) dividing the pool "
               "(default 32 .. 64Ki)");
    flags.list("--pool-mib", pool_mib_, "gather pool sizes in MiB, at most half the memory "
               "(default 4x LLC, within 128 MiB .. 1 GiB, on CPU)");
    flags.text("--gather-mib", gather_mib_text_, "MiB read per gather execution, 1 .. the pool "
               "(default min(64, pool/2))");
    flags.text("--huge-pages", huge_, "on, off or both (CPU; default both for gather, on for attention and routing, "
               "which take on or off: both needs the gather part)");
    flags.text("--prefetch", prefetch_, "how the CPU gather reads: auto (per case, one run at a time with software "
               "prefetch, without, and two runs at a time timed in a short calibration, the fastest taken, prefetch "
               "only when more than 3% faster, named in the note), on (prefetch), off (one run at a time, no "
               "prefetch), or both (on and off rows) (default auto)");
    flags.text("--placement", placement_,
               "KV placement of the attention and routing parts: shuffled (a paged cache: pages of --page-tokens "
               "tokens holding every kv head, in a seeded random page order), contiguous (unpaged, logical order "
               "== physical order) or both (default shuffled)");
    flags.text("--page-tokens", page_tokens_text_,
               "tokens per page of the shuffled placement: a power of two dividing every context (default 16)");
    flags.list("--proxy-rank", proxy_rank_, "routing part: ranks of the low-rank key proxy for the token arm, "
               "8, 16, 32, 64 (below the head dim), or 0 for none (default 16)");
    flags.list("--l2-prefetch-steps", l2_prefetch_, "GPU attention: L2 prefetch distance in token steps, 0 (off) "
               "to 8, regs and smem kernels only (rows that would run mma are skipped); a list gives a row per value, "
               "the note and case name say which (default 0)");
    flags.list("--attn-splits", attn_splits_, "GPU attention: splits per (batch, kv head) item, auto (the wave-aware "
               "policy) or 1 to 64 fixed, to read the fixed cost against the steps per CTA; a list gives a row per "
               "value (default auto)");
    flags.list("--attn-merge", attn_merge_, "GPU attention: how the splits merge, fused (the last CTA of an item) "
               "or kernel (a second kernel); a list gives a row per value (default fused)");
    flags.list("--attn-loads", attn_loads_, "GPU attention kernel: auto (mma: the fastest for "
               "bf16, fp16 and fp8 measured), mma (QK and PV on tensor cores, K/V through a warp ring; fp8 converted "
               "to f16 in registers), smem (CUDA-core math, cp.async into a ring of shared-memory "
               "stages) or regs (CUDA-core math, 16-byte loads straight into registers, one step in flight); a list "
               "gives a row per value, `/<value>` in the name except auto's (default auto)");
    flags.list("--reuse-steps", reuse_, "decode steps a routed selection is reused for, 1..1048576; the route "
               "end_to_end rows note attend + routing/S per S, derived from this run's medians (default 1,8,64)");
  }

  std::vector<std::unique_ptr<Case>> cases(const StudyContext& ctx) override {
    AccessEnv env;
    Backend& be = *ctx.backend;
    env.target = Target{.gpu = is_cuda(be), .quick = ctx.quick};
    env.llc = be.info().llc_bytes ? be.info().llc_bytes : (std::uint64_t{32} << 20);
    // fp8 conversion instructions: sm_89 and newer (from the device description, so a planned run answers too).
    env.have_fp8 = env.target.gpu && compute_capability(be.info()) >= 89;
    check_choices(env);
    parse_shape(env);
    parse_sweep(env, be);
    parse_placement_and_routing(env);
    check_budgets(env);
    env.dev_mem = env.target.gpu ? be.info().memory_bytes : host_memory_bytes();
    parse_gather(env);
    env.shared = std::make_shared<Shared>();

    // No user lists for the registry: in this study a flag replaces its own axis only (the others keep their
    // defaults, as the study always did), not the whole grid, so the flags were resolved into the env and the
    // arms' default grids read them there.
    std::vector<std::unique_ptr<Case>> out;
    for (const auto& arm : access_arms().all())
      if (want(arm.name)) access_arms().add_cases(arm, env.target, {}, env, out);
    return out;
  }

 private:
  std::vector<std::string> parts_, contexts_, keeps_, blocks_, dtypes_, layouts_, head_dims_, run_bytes_, pool_mib_,
      reuse_, proxy_rank_, l2_prefetch_, attn_splits_, attn_merge_, attn_loads_;
  // Scalars are kept as text: parsed and range-checked in cases(), where an empty or malformed value is one clear line.
  std::string hq_text_, hkv_text_, batch_text_, cluster_mean_text_, gather_mib_text_, page_tokens_text_;
  std::string select_, scatter_, huge_, prefetch_, placement_;
  StudyFlags flags_;  // its command line outlives cases(): bench_main owns it
  bool want(const std::string& part) const {
    return parts_.empty() || std::find(parts_.begin(), parts_.end(), part) != parts_.end();
  }
  void choice(const char* flag, const std::string& v, std::initializer_list<const char*> allowed) const {
    if (!flags_.given(flag)) return;
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    bad_flag(flag, v, "allowed " + list);
  }

  // A flag only parts outside --parts read would be dropped in silence: refused, naming the parts that read it.
  void check_flags_have_parts() const {
    if (parts_.empty()) return;
    struct Reader {
      const char* flag;
      std::vector<std::string> parts;  // the parts that read it
      std::string value;               // as given, for the message
    };
    const Reader readers[] = {
        {"--run-bytes", {"gather"}, join_names(run_bytes_, ",")},
        {"--pool-mib", {"gather"}, join_names(pool_mib_, ",")},
        {"--gather-mib", {"gather"}, gather_mib_text_},
        {"--prefetch", {"gather"}, prefetch_},
        {"--proxy-rank", {"routing"}, join_names(proxy_rank_, ",")},
        {"--reuse-steps", {"routing"}, join_names(reuse_, ",")},
        {"--contexts", {"attention", "routing"}, join_names(contexts_, ",")},
        {"--keep", {"attention", "routing"}, join_names(keeps_, ",")},
        {"--block-sizes", {"attention", "routing"}, join_names(blocks_, ",")},
        {"--scatter", {"attention"}, scatter_},
        {"--cluster-mean", {"attention"}, cluster_mean_text_},
        {"--select", {"attention", "routing"}, select_},
        {"--placement", {"attention", "routing"}, placement_},
        {"--page-tokens", {"attention", "routing"}, page_tokens_text_}};
    for (const auto& r : readers) {
      if (!flags_.given(r.flag) || std::any_of(r.parts.begin(), r.parts.end(), [&](const auto& p) { return want(p); }))
        continue;
      throw UsageError(std::string(r.flag) + " " + shown_value(r.value) + ": read only by the " +
                       join_names(r.parts, " and ") + " part" + (r.parts.size() > 1 ? "s" : "") + ", which --parts " +
                       join_names(parts_, ",") + " leaves out (the run would ignore it)");
    }
    if (huge_ == "both" && !want("gather"))
      throw UsageError("--huge-pages both: only the gather part runs both; the attention and routing parts take one "
                       "setting, on or off");
  }

  void check_choices(AccessEnv& env) const {
    check_flags_have_parts();
    choice("--huge-pages", huge_, {"on", "off", "both"});
    choice("--prefetch", prefetch_, {"auto", "on", "off", "both"});
    choice("--select", select_, {"per_head", "shared", "both"});
    choice("--scatter", scatter_, {"uniform", "clustered", "both"});
    choice("--placement", placement_, {"shuffled", "contiguous", "both"});
    // The parts are the arms: --parts is this study's --arms, with its own wording ("unknown part").
    const auto names = access_arms().names();
    for (const auto& p : parts_)
      if (std::find(names.begin(), names.end(), p) == names.end())
        bad_flag("--parts", p, "unknown part; allowed " + join_names(names));
    env.parts_given = !parts_.empty();
    const Target& t = env.target;
    // The GPU has no huge-page or prefetch knob: one row each, whatever was asked.
    env.gather_huge = t.gpu ? std::vector<std::string>{"on"} : on_off(huge_, declared("gather", "huge", t));
    env.prefetch = t.gpu || prefetch_.empty() || prefetch_ == "auto" ? declared("gather", "prefetch", t)
                                                                     : on_off(prefetch_, declared("gather", "prefetch", t));
    env.attn_huge = t.gpu || huge_ != "off" ? "on" : "off";
    if (select_ == "per_head") env.selects = {"per_head"};
    else if (select_ == "shared") env.selects = {"shared"};
    else if (select_ == "both") env.selects = {"per_head", "shared"};
    if (scatter_ == "uniform") env.scatters = {"uniform"};
    else if (scatter_ == "clustered") env.scatters = {"clustered"};
    else if (scatter_ == "both") env.scatters = {"uniform", "clustered"};
    else env.scatters = declared("attention", "scatter", t);
    if (flags_.given("--cluster-mean") && scatter_ == "uniform")
      throw UsageError("--cluster-mean " + cluster_mean_text_ +
                       ": the mean run length of the clustered scatter, which --scatter uniform leaves out");
  }

  void parse_shape(AccessEnv& env) const {
    // Grid y and z of the kernels are kv heads and batch (< 65536); lists are batch x kv heads in 32 bits.
    if (flags_.given("--hq")) env.hq = static_cast<std::uint32_t>(parse_whole(hq_text_, "--hq", 1, 4096));
    if (flags_.given("--hkv")) env.hkv = static_cast<std::uint32_t>(parse_whole(hkv_text_, "--hkv", 1, 1024));
    if (flags_.given("--batch")) env.batch = static_cast<std::uint32_t>(parse_whole(batch_text_, "--batch", 1, 1024));
    else env.batch_sweep = declared_u32("attention", "batch", env.target);
    if (env.hq % env.hkv || !pow2(env.hq / env.hkv) || env.hq / env.hkv > 16)
      throw UsageError("--hq " + std::to_string(env.hq) + " --hkv " + std::to_string(env.hkv) +
                       ": hq must be hkv times 1, 2, 4, 8 or 16 (the query heads of one KV head)");
    // The clustered arm draws run lengths up to 2 x the mean in 32 bits.
    if (flags_.given("--cluster-mean"))
      env.cluster_mean = static_cast<std::uint32_t>(parse_whole(cluster_mean_text_, "--cluster-mean", 1, 65536));
  }

  void parse_sweep(AccessEnv& env, Backend& be) const {
    for (const auto& t : dtypes_) env.dtypes.push_back(parse_dtype(t));
    for (const auto& t : layouts_) env.layouts.push_back(parse_layout(t));
    for (const auto& t : contexts_) env.ctxs.push_back(parse_ctx(t));
    // One case per fraction: 1/8 and 0.125 are the same keep (the first spelling names its cases), as 4096 and 4K
    // are one context.
    std::vector<double> keep_values;
    for (const auto& t : keeps_) {
      const double v = parse_keep(t);
      if (std::find(keep_values.begin(), keep_values.end(), v) != keep_values.end()) continue;
      keep_values.push_back(v);
      env.keeps.push_back(t);
    }
    for (const auto& t : blocks_) {
      const auto b = parse_whole(t, "--block-sizes", 1, 4096);
      if (!pow2(b)) bad_flag("--block-sizes", t, "must be a power of two from 1 to 4096");
      env.blocks.push_back(static_cast<std::uint32_t>(b));
    }
    for (const auto& t : head_dims_) {
      const auto d = parse_whole(t, "--head-dims", 1, 1024);
      if (d != 64 && d != 128) bad_flag("--head-dims", t, "allowed 64, 128");
      env.head_dims.push_back(static_cast<std::uint32_t>(d));
    }
    for (const auto& t : run_bytes_) {
      const std::string allowed = "must be a power of two from 32 B to 1 GiB (e.g. 256, 4KiB, 64KiB, 1GiB)";
      std::size_t r = 0;
      try {
        r = kvf::parse_bytes(t, "--run-bytes");  // as --size and --pool-mib's siblings: 64KiB, 1GiB
      } catch (const UsageError&) {
        bad_flag("--run-bytes", t, allowed);
      }
      if (r < 32 || r > (1ull << 30) || !pow2(r)) bad_flag("--run-bytes", t, allowed);
      env.runs.push_back(r);
    }
    for (auto d : env.dtypes) {
      if (d != ka::DType::fp8_e4m3) continue;
      if (!env.target.gpu) throw UsageError("--dtypes fp8_e4m3: not available on the cpu backend (bf16, fp16)");
      if (!env.have_fp8)
        throw UsageError("--dtypes fp8_e4m3: this GPU (" + be.info().arch +
                         ") has no fp8 conversion instructions (needs sm_89 or newer; use bf16, fp16)");
      if (want("routing") && !parts_.empty())
        throw UsageError("--dtypes fp8_e4m3 with --parts routing: routing supports bf16, fp16");
    }
    env.user_sweep = !contexts_.empty() || !keeps_.empty() || !blocks_.empty() || !dtypes_.empty() ||
                     !layouts_.empty() || !head_dims_.empty() || !select_.empty();
    const Target& t = env.target;
    if (env.dtypes.empty())
      for (const auto& v : declared("attention", "dtype", t)) env.dtypes.push_back(parse_dtype(v));
    if (env.layouts.empty())
      for (const auto& v : declared("attention", "layout", t)) env.layouts.push_back(parse_layout(v));
    if (env.head_dims.empty()) env.head_dims = declared_u32("attention", "head_dim", t);
    if (env.blocks.empty()) env.blocks = declared_u32("attention", "block", t);
    if (env.keeps.empty()) env.keeps = declared("attention", "keep", t);
    if (env.selects.empty()) env.selects = declared("attention", "select", t);
    env.routing_ctxs = contexts_.empty() ? declared_u32("routing", "ctx", t) : env.ctxs;
    if (!l2_prefetch_.empty()) {
      env.l2_prefetch_steps.clear();
      for (const auto& v : l2_prefetch_)
        env.l2_prefetch_steps.push_back(std::to_string(parse_whole(v, "--l2-prefetch-steps", 0, ka::kAttnMaxPrefetchSteps)));
      if (!t.gpu)
        bad_flag("--l2-prefetch-steps", l2_prefetch_.front(), "GPU attention only (the CPU gather has --prefetch)");
    }
    if (!attn_splits_.empty()) {
      env.attn_splits.clear();
      for (const auto& v : attn_splits_) {
        std::uint64_t n = 0;
        std::string rest;
        if (v != "auto" && (!leading_digits(v, n, rest) || !rest.empty() || n < 1 || n > ka::kAttnMaxSplits))
          bad_flag("--attn-splits", v, "auto or a whole number in 1.." + std::to_string(ka::kAttnMaxSplits));
        env.attn_splits.push_back(v == "auto" ? v : std::to_string(n));
      }
      if (!t.gpu) bad_flag("--attn-splits", attn_splits_.front(), "GPU attention only (the CPU kernel splits by threads)");
    }
    if (!attn_merge_.empty()) {
      env.attn_merge.clear();
      for (const auto& v : attn_merge_) {
        if (v != "fused" && v != "kernel") bad_flag("--attn-merge", v, "allowed fused, kernel");
        env.attn_merge.push_back(v);
      }
      if (!t.gpu) bad_flag("--attn-merge", attn_merge_.front(), "GPU attention only");
    }
    if (!attn_loads_.empty()) {
      env.attn_loads.clear();
      for (const auto& v : attn_loads_) {
        if (v != "auto" && v != "regs" && v != "smem" && v != "mma")
          bad_flag("--attn-loads", v, "allowed auto, regs, smem, mma");
        env.attn_loads.push_back(v);
      }
      if (!t.gpu) bad_flag("--attn-loads", attn_loads_.front(), "GPU attention only");
    }
    if (env.ctxs.empty()) env.ctxs = declared_u32("attention", "ctx", t);
  }

  void parse_placement_and_routing(AccessEnv& env) const {
    const Target& t = env.target;
    // Placement: page sizes per case (0 = contiguous); the page size must divide every context.
    std::uint32_t page_tokens = declared_u32("attention", "page_tokens", t).front();
    if (flags_.given("--page-tokens")) {
      if (placement_ == "contiguous")
        bad_flag("--page-tokens", page_tokens_text_, "--placement contiguous has no pages (give shuffled or both)");
      page_tokens = static_cast<std::uint32_t>(parse_whole(page_tokens_text_, "--page-tokens", 1, kMaxCtx));
    }
    if (placement_ == "contiguous") env.pages = {0};
    else if (placement_ == "both") env.pages = {page_tokens, 0};
    else env.pages = {page_tokens};
    if (placement_ != "contiguous") {
      std::vector<std::uint32_t> all_ctx = env.ctxs;
      if (contexts_.empty()) all_ctx.push_back(env.side_ctx());
      for (auto c : all_ctx) {
        // A power-of-two page that the user did not pick and a context it does not divide: the context is the bad
        // value (--contexts 100 with the default 16-token pages).
        if (!flags_.given("--page-tokens") && page_tokens && !(page_tokens & (page_tokens - 1)) &&
            c % page_tokens)
          bad_flag("--contexts", std::to_string(c), "must be a multiple of the " + std::to_string(page_tokens) +
                   "-token pages of the shuffled placement (--page-tokens, or --placement contiguous)");
        if (!ka::valid_page_tokens(page_tokens, c))
          bad_flag("--page-tokens", std::to_string(page_tokens),
                   "must be a power of two from 1 to the context that divides it (context " + std::to_string(c) +
                       "); blocks and pages then nest (B/P pages per block or P/B blocks per page)");
      }
    }
    for (const auto& s : reuse_)
      env.reuse_steps.push_back(static_cast<std::uint32_t>(parse_whole(s, "--reuse-steps", 1, 1u << 20)));
    if (env.reuse_steps.empty()) {
      const std::string& d = declared("routing", "reuse_steps", t).front();
      for (std::size_t at = 0; at < d.size();) {
        const auto comma = std::min(d.find(',', at), d.size());
        env.reuse_steps.push_back(static_cast<std::uint32_t>(std::stoul(d.substr(at, comma - at))));
        at = comma + 1;
      }
    }
    for (const auto& s : proxy_rank_) {
      const auto v = parse_whole(s, "--proxy-rank", 0, 64);
      if (v == 0) continue;
      if (!ka::valid_proxy_rank(static_cast<std::uint32_t>(v), env.head_dims[0]))
        bad_flag("--proxy-rank", s,
                 "allowed 0 (none), 8, 16, 32, 64 (below the head dim " + std::to_string(env.head_dims[0]) + ")");
      env.proxy_ranks.push_back(static_cast<std::uint32_t>(v));
    }
    if (proxy_rank_.empty())
      for (const auto& r : declared("routing", "router", t))
        if (r.rfind("lowrank", 0) == 0) env.proxy_ranks.push_back(static_cast<std::uint32_t>(std::stoul(r.substr(7))));
  }

  // Every (context, block, keep) the sweep makes must keep the sink and latest blocks. Checked here, where
  // the flags are known, so the message names them; then the kernels' own checks, as a last line.
  void check_budgets(const AccessEnv& env) const {
    std::vector<std::uint32_t> all_ctx = env.ctxs;
    if (contexts_.empty() && !env.target.quick) all_ctx.push_back(env.side_ctx());
    for (auto c : all_ctx)
      for (auto b : env.blocks) {
        if (c % b)
          throw UsageError("--block-sizes " + std::to_string(b) + ": must divide the context (" + std::to_string(c) +
                           ", --contexts)");
        for (const auto& keep : env.keeps) {
          const double kb = std::round(double(c / b) * parse_keep(keep));
          if (c / b < 2 || kb < 2)
            throw UsageError("--keep " + shown_value(keep) + " --block-sizes " + std::to_string(b) + " at context " +
                             std::to_string(c) + ": a budget of " + fmt(kb) +
                             " block(s), smaller than sink + latest block (2 blocks)");
        }
      }
    for (auto d : env.head_dims)
      for (auto dt : env.dtypes) {
        ka::AttnShape s;
        s.batch = env.batch;
        s.hq = env.hq;
        s.hkv = env.hkv;
        s.d = d;
        s.dtype = dt;
        kernel_check("--hq, --hkv, --head-dims, --batch", [&] { ka::validate_shape(s); });
        for (auto c : env.ctxs)
          for (auto b : env.blocks)
            for (const auto& keep : env.keeps)
              kernel_check(kSweepFlags, [&] { return ka::sparse_blocks(c, b, parse_keep(keep)); });
      }
  }

  void parse_gather(AccessEnv& env) const {
    const std::uint64_t dev_mem = env.dev_mem;
    for (const auto& t : pool_mib_) {
      const auto m = parse_whole(t, "--pool-mib", 1, 1u << 20);
      if (dev_mem && (m << 20) > dev_mem / 2)
        bad_flag("--pool-mib", t, "more than half of the memory (" + format_bytes(double(dev_mem)) + ")");
      env.pools.push_back(m << 20);
    }
    if (flags_.given("--gather-mib")) env.gather_bytes = parse_whole(gather_mib_text_, "--gather-mib", 1, 1u << 20) << 20;
    if (!want("gather")) return;
    const Target& t = env.target;
    // The pool holds 4x the LLC (at most kPoolCapBytes), so that a gather reads memory, not cache.
    if (env.pools.empty()) env.pools = {past_llc_bytes(env.llc, 4, t.quick ? 64ull << 20 : 128ull << 20, kPoolCapBytes)};
    if (env.runs.empty())
      for (const auto& r : declared("gather", "run_bytes", t)) env.runs.push_back(std::stoull(r));
    for (auto p : env.pools) {
      const std::uint64_t total = gather_total(env, p);
      if (env.gather_bytes && *env.gather_bytes > p)
        bad_flag("--gather-mib", gather_mib_text_, "more than the pool (" + format_bytes(double(p)) + ", --pool-mib)");
      for (std::uint64_t R : env.runs) {
        if (p % R)
          throw UsageError("--run-bytes " + std::to_string(R) + ": must divide the pool (" + format_bytes(double(p)) +
                           ", --pool-mib)");
        if (R > total)
          throw UsageError("--run-bytes " + std::to_string(R) + ": more than the bytes read per execution (" +
                           format_bytes(double(total)) + ", --gather-mib)");
      }
    }
  }
};

}  // namespace

double keep_fraction(const std::string& keep_text) { return parse_keep(keep_text); }

}  // namespace kvf::access_study

int main(int argc, char** argv) {
  kvf::access_study::AccessStudy study;
  return kvf::bench_main(argc, argv, study);
}
