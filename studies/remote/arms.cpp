// The remote study's arms and flags: the wire ceiling (one region, one operation), the granularity arm (one KV
// page as 1 .. thousands of descriptors, layer-first and page-first pools, random block tables on both sides),
// and GPU memory (a row that says why it is skipped where UCX cannot register CUDA memory).
#include <algorithm>
#include <cstring>

#include "kvf/errors.hpp"
#include "kvf/model_shapes.hpp"
#include "kvf/units.hpp"
#include "remote_study.hpp"

namespace kvf::remote {

namespace {

std::string size_label(std::int64_t b) { return exact_size_name(static_cast<unsigned long long>(b)); }

constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ull;
// FNV-1a of n bytes, continuing from h: the pool-shape seed of the block tables and the plan's digest.
std::uint64_t fnv1a(std::uint64_t h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

KvGeometry geometry(const models::ModelShape& m) {
  if (m.is_mla) return {m.layers, 1, std::int64_t(m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * 2};
  return {m.layers, 2 * m.n_kv_heads, std::int64_t(m.head_dim) * 2};
}

const models::ModelShape& model_of(const Env& env, const std::string& name) {
  return models::find_model(env.all_models, name, "--models");
}

std::unique_ptr<Case> ceiling_case(const Point& p, Env& env) {
  const std::int64_t bytes = p.integer("region_bytes");
  if (bytes > static_cast<std::int64_t>(env.pool_bytes))
    throw UsageError("--sizes " + size_label(bytes) + ": larger than the registered pool (--pool-mib " +
                     std::to_string(env.pool_bytes >> 20) + "); allowed: regions up to the pool");
  auto c = std::make_unique<TransferCase>(env, p["op"] == "read" ? Op::read : Op::write,
                                          std::vector<Descriptor>{{0, 0, bytes, 0}}, bytes);
  c->params = {{"descriptors", "1"}, {"descriptor_bytes", std::to_string(bytes)}};
  return c;
}

std::unique_ptr<Case> granularity_case(const Point& p, Env& env) {
  const auto& m = model_of(env, p["model"]);
  const int tokens = static_cast<int>(p.integer("tokens"));
  const Granularity g = parse_granularity(p["granularity"]);
  PoolShape pool{geometry(m), slot_tokens_for(g, tokens), 0, parse_layout(p["layout"])};
  const std::int64_t page = pool.geo.page_bytes(tokens);
  pool.slots = static_cast<std::int64_t>(env.pool_bytes) / (pool.geo.layers * pool.slot_layer_bytes());
  const std::int64_t per_page = tokens / pool.slot_tokens;
  if (pool.slots < per_page)
    throw UsageError("--tokens " + std::to_string(tokens) + ": a page of " + m.name + " is " +
                     format_bytes(static_cast<double>(page)) + ", larger than the registered pool (--pool-mib " +
                     std::to_string(env.pool_bytes >> 20) + "); allowed: pages up to the pool");
  // Both sides through their own random block table: neither the source nor the destination is contiguous
  // beyond one slot, as in a serving engine's paged cache. The tables depend on the pool's shape only, not on the
  // case: the page, per-layer and per-head rows of one pool move the same slots, so a ratio between them compares
  // descriptor counts, not addresses (each case had drawn its own).
  std::uint64_t shape = kFnvBasis;
  for (const std::string& part : {p["model"], p["tokens"], p["layout"], std::to_string(pool.slot_tokens)}) {
    const std::string field = part + "/";
    shape = fnv1a(shape, field.data(), field.size());
  }
  const auto src_table = random_block_table(pool.slots, per_page, 0x5eed0000u ^ shape);
  const auto dst_table = random_block_table(pool.slots, per_page, 0xd5700000u ^ (shape * 31));
  auto ds = page_descriptors(pool, pool, g, tokens, src_table, dst_table);
  const std::size_t n = ds.size();
  const std::int64_t run = ds.front().len;
  auto c = std::make_unique<TransferCase>(env, p["op"] == "read" ? Op::read : Op::write, std::move(ds), page);
  // Stated against one region of the page's bytes moved in one operation (build_cases plans that row): what the
  // descriptors and the scattered slots cost against the wire's own rate at that size.
  c->ceiling = CeilingRef{"remote", {{"op", p["op"]}, {"region_bytes", std::to_string(page)}}, "gbps"};
  c->params = {{"descriptors", std::to_string(n)},
               {"descriptor_bytes", std::to_string(run)},
               {"page_bytes", std::to_string(page)},
               {"pool_slots", std::to_string(pool.slots)}};
  return c;
}

// Many-to-one in lockstep: every reader (rank 0 and ranks 2..) reads its own slot of `bytes` at each go round;
// bytes 0 is the signalling alone. The holder serves readers x bytes per sample.
std::unique_ptr<Case> lockstep_case(std::int64_t bytes, Env& env) {
  const std::int64_t n = env.readers;
  const auto skip = [](const std::string& why) {
    auto c = skipped_case("", {}, why);
    c->cold = false;  // one row, as the measured ones (hot only)
    return c;
  };
  if (n < 2)
    return skip("needs 3 or more ranks (--ranks 3, kvf run --remote.ranks 3, or mpirun -np 3): rank 0 and ranks 2.. "
                "read at one go");
  if (n + 1 > UcpSession::kMaxLockRanks)
    return skip(std::to_string(n + 1) + " ranks: the holder's control words signal up to " +
                std::to_string(UcpSession::kMaxLockRanks) + " ranks");
  if (n * bytes > static_cast<std::int64_t>(env.pool_bytes))
    return skip(std::to_string(n) + " readers x " + size_label(bytes) + " exceed the registered pool (--pool-mib " +
                std::to_string(env.pool_bytes >> 20) + "): each reader reads its own slot");
  auto c = std::make_unique<TransferCase>(env, Op::read, std::vector<Descriptor>{lock_slot(0, bytes)}, n * bytes);
  c->lockstep = true;
  c->cold = false;  // the readers' slots on their own ranks stay warm: a holder flush alone would not make it cold
  c->est_seconds -= env.quick ? 0.1 : 0.5;
  c->lock_bytes = bytes;
  for (int slot = 0; slot < n; ++slot) c->lock_slots.push_back(lock_slot(slot, bytes));
  c->params = {{"descriptors", "1"},
               {"descriptor_bytes", std::to_string(bytes)},
               {"lockstep_bytes", std::to_string(bytes)}};
  return c;
}

// Without a peer (listing) the context alone is asked; with one, the session's context.
bool cuda_memory(const Env& env) {
  if (env.session) return env.session->has_cuda_memory();
  return ucx_has_cuda_memory();
}

}  // namespace

std::vector<Arm<Env>> remote_arms() {
  const Axis op{.name = "op",
                .doc = "read: rank 0 gets from the holder (decode pulls); write: rank 0 puts into it (prefill pushes)",
                .cpu = {"read", "write"}, .quick = {"read", "write"}, .flag = "--ops"};
  Arm<Env> ceiling{
      .name = "ceiling",
      .doc = "wire ceiling: one registered region moved in one operation, 32 KiB .. 64 MiB",
      .axes = {op,
               {.name = "region_bytes", .doc = "region size", .cpu = {"32768", "262144", "2097152", "16777216", "67108864"},
                .quick = {"262144", "67108864"}, .flag = "--sizes"}},
      .case_name_fn = [](const Point& p) { return "ceiling/" + p["op"] + "/" + size_label(p.integer("region_bytes")); },
      .make = ceiling_case};
  Arm<Env> granularity{
      .name = "granularity",
      .doc = "one KV page as 1 descriptor, one per layer, per layer and head, per (layer, 16-token block)",
      .axes = {op,
               {.name = "model", .cpu = {"Llama-3.1-8B"}, .quick = {"Llama-3.1-8B"}, .flag = "--models"},
               {.name = "tokens", .doc = "tokens per page", .cpu = {"16", "128"}, .quick = {"16"}, .flag = "--tokens"},
               {.name = "layout", .cpu = {"page_first", "layer_first"}, .quick = {"page_first"}, .flag = "--layouts"},
               {.name = "granularity", .cpu = {"page", "layer", "layer_head", "block16"},
                .quick = {"page", "layer", "layer_head"}, .flag = "--granularities"}},
      // A 16-token page cut into 16-token blocks is the per-layer case again: not run twice.
      .valid = [](const Point& p, const Env&) {
        const Granularity g = parse_granularity(p["granularity"]);
        return invalid_combination(g, parse_layout(p["layout"]), static_cast<int>(p.integer("tokens"))).empty() &&
               !(g == Granularity::block16 && p.integer("tokens") == kBlockTokens);
      },
      .case_name = "granularity/{op}/{model}/T{tokens}/{layout}/{granularity}",
      .make = granularity_case};
  Arm<Env> gpu{
      .name = "gpu_memory",
      .doc = "GPU memory on both sides (UCS_MEMORY_TYPE_CUDA), where this UCX registers it",
      .axes = {op},
      .case_name = "gpu_memory/{op}",
      .make = [](const Point& p, Env& env) -> std::unique_ptr<Case> {
        const std::string why = cuda_memory(env)
                                    ? "not built: this UCX registers CUDA memory, but the study's GPU-memory pool is "
                                      "not written yet (host rows only)"
                                    : "this UCX has no CUDA transport (ucp_context_query lists no CUDA memory type)";
        auto c = skipped_case("", {}, why);
        c->cold = false;  // one row per op, as the host rows (hot only)
        return c;
      }};
  Arm<Env> lockstep{
      .name = "lockstep",
      .doc = "many-to-one in lockstep: rank 0 and ranks 2.. each read their own region of the holder at one go "
             "signal; a sample is go -> all done (bytes = readers x region), after a signalling-only row",
      .axes = {{.name = "region_bytes", .doc = "each reader's region", .cpu = {"262144", "2097152", "16777216"},
                .quick = {"2097152"}, .flag = "--sizes"}},
      .case_name_fn = [](const Point& p) { return "lockstep/read/" + size_label(p.integer("region_bytes")); },
      .make = [](const Point& p, Env& env) { return lockstep_case(p.integer("region_bytes"), env); }};
  return {ceiling, granularity, gpu, lockstep};
}

void RemoteFlags::add_to(StudyFlags& f) {
  f.list("--arms", arms, "arms to run (default all): ceiling, granularity, gpu_memory, lockstep (3 or more ranks)");
  f.list("--ops", ops, "read (decode pulls), write (prefill pushes); default both");
  f.list("--sizes", sizes, "ceiling region sizes, e.g. 32KiB,64MiB (default 32KiB,256KiB,2MiB,16MiB,64MiB)");
  f.list("--models", models, "models of the granularity arm (data/models.json; default Llama-3.1-8B)");
  f.list("--tokens", tokens, "tokens per page, 16..4096, multiple of 16 (default 16,128; --quick 16)");
  f.list("--layouts", layouts, "page_first, layer_first (default both; --quick page_first)");
  f.list("--granularities", granularities,
         "page, layer, layer_head, block16 (default all; --quick page,layer,layer_head)");
  f.text("--pool-mib", pool_mib, "registered pool per rank in MiB, 16..65536 (default 256; --quick 128)");
  f.text("--pool-alloc", pool_alloc,
         "who allocates the pools: ucx (ucp_mem_map ALLOCATE: shared-memory peers map it, as ucx_perftest) or "
         "user (mmap, then registered: on one machine only cma reaches it); default ucx");
  f.flag("--no-perftest", no_perftest,
         "leave out ucx_perftest (run by default beside the largest ceiling region of each op)");
  f.text("--ranks", ranks,
         "ranks bench_remote starts itself with when no MPI launcher started it, 2..64 (default 2; 3 or more: "
         "many-to-one, the lockstep arm); under mpirun or srun it must match the launcher's count; with --list it "
         "plans for that many");
  f.text("--peer-timeout", peer_timeout,
         "seconds any wait on the other rank may take before the run says it is lost, 1..600 (default 10)");
}

UserLists check_flags(const RemoteFlags& f, Env& env) {
  check_arm_names("--arms", f.arms, ArmList<Env>(remote_arms()).names());
  UserLists user;
  auto check_words = [&](const char* flag, const std::vector<std::string>& given, const std::vector<std::string>& allowed) {
    for (const auto& v : given)
      if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) bad_flag(flag, v, "allowed: " + join_names(allowed));
    if (!given.empty()) user[flag] = given;
  };
  check_words("--ops", f.ops, {"read", "write"});
  check_words("--layouts", f.layouts, {"page_first", "layer_first"});
  check_words("--granularities", f.granularities, {"page", "layer", "layer_head", "block16"});
  env.pool_bytes = std::size_t(f.pool_mib.empty() ? (env.quick ? 128 : 256)
                                                  : flag_int(f.pool_mib, "--pool-mib", 16, 65536, 1,
                                                             "a whole number of MiB in 16..65536")) << 20;
  env.peer_timeout_s = f.peer_timeout.empty() ? 10
                                              : flag_int(f.peer_timeout, "--peer-timeout", 1, 600, 1,
                                                         "a whole number of seconds in 1..600");
  if (!f.ranks.empty()) {
    const int n = static_cast<int>(flag_int(f.ranks, "--ranks", 2, kMaxRanks, 1, "a whole number of ranks in 2..64"));
    if (env.launched_ranks == 0) env.readers = n - 1;  // listing: plan the cases a run with n ranks has
    else if (n != env.launched_ranks)
      bad_flag("--ranks", f.ranks,
               "this run has " + std::to_string(env.launched_ranks) + " ranks (started by an MPI launcher); allowed: " +
                   std::to_string(env.launched_ranks) + ", or leave --ranks out");
  }
  if (!f.pool_alloc.empty() && f.pool_alloc != "ucx" && f.pool_alloc != "user")
    bad_flag("--pool-alloc", f.pool_alloc, "allowed: ucx, user");
  env.pool_alloc = f.pool_alloc == "user" ? PoolAlloc::user : PoolAlloc::ucx;
  for (const auto& s : f.sizes) {
    const std::size_t b = parse_bytes(s, "--sizes");
    if (b % 8 != 0 || b < 8) bad_flag("--sizes", s, "a whole number of 8-byte words (e.g. 32KiB .. 64MiB)");
    user["--sizes"].push_back(std::to_string(b));
  }
  for (const auto& t : f.tokens)
    user["--tokens"].push_back(std::to_string(
        flag_int(t, "--tokens", 16, 4096, kBlockTokens, "tokens per page: a whole number in 16..4096, multiple of 16")));
  env.all_models = models::load_models(models::default_models_path());
  for (const auto& m : f.models) user["--models"].push_back(models::find_model(env.all_models, m, "--models").name);
  return user;
}

int ranks_to_launch(int argc, char** argv) {
  std::string v;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) v = argv[i + 1];
    else if (a.rfind("--ranks=", 0) == 0) v = a.substr(8);
  }
  if (v.empty() || v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos) return 2;
  const int n = std::stoi(v);
  return n >= 2 && n <= kMaxRanks ? n : 2;
}

namespace {
// A granularity or layout named in its flag that no case kept (every combination invalid) is refused with the
// reason, as kvf refuses a named arm with no case: it had been left out in silence ("no cases to run", or exit 0).
void refuse_named_without_cases(const Arm<Env>& arm, const std::vector<Point>& points, const UserLists& user,
                                const Target& target) {
  const auto tokens_of = [&]() -> const std::vector<std::string>& {
    if (const auto it = user.find("--tokens"); it != user.end()) return it->second;
    for (const auto& a : arm.axes)
      if (a.name == "tokens") return a.defaults(target);
    throw std::logic_error("the granularity arm declares no tokens axis");
  };
  for (const auto& [flag, axis] : {std::pair<std::string, std::string>{"--granularities", "granularity"},
                                   {"--layouts", "layout"}}) {
    const auto it = user.find(flag);
    if (it == user.end()) continue;
    for (const auto& v : it->second) {
      if (std::any_of(points.begin(), points.end(), [&, &axis = axis](const Point& p) { return p[axis] == v; }))
        continue;  // (the binding named in the capture: clang 14 refuses a structured binding captured by [&])
      std::string why = "every combination of the other axes is invalid";
      if (axis == "granularity" && v == "block16") why = "a 16-token page in 16-token blocks is the per-layer case";
      for (const auto& t : tokens_of())
        for (const char* l : {"page_first", "layer_first"}) {
          const std::string w = axis == "granularity"
                                    ? invalid_combination(parse_granularity(v), parse_layout(l), std::stoi(t))
                                    : invalid_combination(Granularity::page, parse_layout(v), std::stoi(t));
          if (!w.empty()) why = w;
        }
      bad_flag(flag, v, "no case left: " + why);
    }
  }
}
}  // namespace

std::vector<std::unique_ptr<Case>> build_cases(const RemoteFlags& f, Env& env) {
  const UserLists user = check_flags(f, env);
  const ArmList<Env> arms(remote_arms());
  std::vector<std::unique_ptr<Case>> out;
  const auto add = [&](std::unique_ptr<Case> c) {
    if (auto* t = dynamic_cast<TransferCase*>(c.get())) {
      t->index = env.next_index;
      t->params.push_back({"readers", std::to_string(env.readers)});
      // Who allocated the pools decides which transport can reach them on one machine (UCX's shared-memory
      // transports map only memory UCX allocated; cma reaches any): the transport label alone does not say.
      t->params.push_back({"pool_alloc", env.pool_alloc == PoolAlloc::user ? "user" : "ucx"});
    }
    ++env.next_index;
    out.push_back(std::move(c));
  };
  const auto chosen = [&](const std::string& arm) {
    return f.arms.empty() || std::find(f.arms.begin(), f.arms.end(), arm) != f.arms.end();
  };
  // A flag replaces its own axis only: the arm's other axes keep their defaults (the harness's rule fixed them at
  // their first, and `--ops read` silently ran the page granularity alone, so claim 6 read "not measured").
  const Target target{false, env.quick};
  const auto points_of = [&](const Arm<Env>& arm) {
    UserLists own = user;
    const bool any = std::any_of(arm.axes.begin(), arm.axes.end(),
                                 [&](const Axis& a) { return !a.flag.empty() && user.count(a.flag) > 0; });
    if (any)
      for (const auto& a : arm.axes)
        if (!a.flag.empty() && user.count(a.flag) == 0) own[a.flag] = a.defaults(target);
    return arms.points(arm, target, own, env);
  };
  // The page sizes the granularity rows move, per op: each gets a ceiling row of its own size (unless --sizes
  // chose the regions), so a page's rows have a matched ceiling (the quick sizes, 256 KiB and 64 MiB, had none).
  std::vector<std::pair<std::string, std::int64_t>> pages;
  if (chosen("granularity") && chosen("ceiling") && f.sizes.empty())
    for (const auto& p : points_of(arms.at("granularity"))) {
      const std::pair<std::string, std::int64_t> page{
          p["op"], geometry(model_of(env, p["model"])).page_bytes(static_cast<int>(p.integer("tokens")))};
      if (std::find(pages.begin(), pages.end(), page) == pages.end()) pages.push_back(page);
    }
  for (const auto& arm : arms.all()) {
    if (!chosen(arm.name)) continue;
    auto points = points_of(arm);
    if (arm.name == "granularity") refuse_named_without_cases(arm, points, user, target);
    if (arm.name == "ceiling")
      for (const auto& [op, bytes] : pages) {
        const Point page(std::vector<Param>{{"op", op}, {"region_bytes", std::to_string(bytes)}});
        const bool fits = bytes <= static_cast<std::int64_t>(env.pool_bytes);
        if (fits && std::find(points.begin(), points.end(), page) == points.end()) points.push_back(page);
      }
    // The lockstep rows state the signalling's own cost, measured first: its row has no region to sweep.
    if (arm.name == "lockstep" && !points.empty()) {
      auto c = lockstep_case(0, env);
      finish_case(*c, Point(std::vector<Param>{{"region_bytes", "0"}}), "lockstep/read/signal");
      add(std::move(c));
    }
    for (const auto& p : points) add(arms.make_case(arm, p, env));
  }
  return out;
}

std::uint64_t plan_digest(const std::vector<std::unique_ptr<Case>>& cases, const Env& env) {
  std::uint64_t h = kFnvBasis;
  auto mix = [&h](const void* p, std::size_t n) { h = fnv1a(h, p, n); };
  mix(&env.pool_bytes, sizeof env.pool_bytes);
  mix(&env.pool_alloc, sizeof env.pool_alloc);
  for (const auto& c : cases) {
    mix(c->name.data(), c->name.size());
    if (const auto* t = dynamic_cast<const TransferCase*>(c.get()))
      for (const auto& d : t->descriptors) mix(&d, sizeof d);
  }
  return h;
}

}  // namespace kvf::remote
