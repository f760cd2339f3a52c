// The access study: is coalesced access why position-aware (block) KV selection beats similarity-aware
// (scattered token) selection at equal budget, and does the gap widen with context only because the
// working set leaves the L2/LLC?
//
// Run:   build/bin/bench_access [--quick] [--out DIR]   (state figures against `bench_stream` in the same DIR)
// Parts: gather   runs of R bytes (32 B .. 64 KiB) at random run-aligned offsets without replacement
//                 from a pool of >= 4x the LLC, plus a sequential arm; huge pages on/off (CPU).
//        attention split-KV sparse decode: dense / block (centroid top-k, sink + latest kept) / token
//                 (same budget, uniform or clustered scatter), NHD/HND, per-head or shared selection.
//        routing  block scores vs centroids + top-k, token scores vs keys + top-k: alone, attention over
//                 the routed lists alone, and end to end; the end_to_end rows note the per-step cost
//                 amortized over --reuse-steps S (attend + alone/S, derived from this run's medians);
//                 the token arm routed by every key and by a rank-r key proxy (--proxy-rank).
// Placement (--placement, --page-tokens): by default the KV of every sequence is paged (16 tokens per
//                 page) in a seeded random page order, so no arm reads logically adjacent tokens from
//                 adjacent memory unless they share a page; a page holds every kv head side by side
//                 (NHD, and HND as FlashInfer's paged [page][head][P][d]); `contiguous` keeps logical ==
//                 physical and the unpaged layout.
// Every case is verified before it is timed: gather checksums against the fill pattern, attention
// outputs against the fp32 reference (max |out - ref| / max |ref| < kAttnTolerance).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "access.hpp"
#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/study.hpp"
#include "kvf/units.hpp"

#if defined(KVF_HAVE_CUDA)
#include "access_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace {

namespace ka = kvf::access;
using kvf::Backend;
using kvf::BufferHandle;
using kvf::MemKind;

constexpr std::uint64_t kSeed = 0xacce55;

std::string fmt(double x, int prec = 3) {
  std::ostringstream o;
  o.precision(prec);
  o << x;
  return o.str();
}

bool is_cuda(const Backend& be) { return be.name() == "cuda"; }

// ------------------------------------------------------------------------------------------ shared state
// Owned by the cases (shared_ptr), so it is destroyed with them, before the backend goes away.
struct KvData {
  std::string key;
  ka::AttnShape s;
  BufferHandle q, k, v;                      // on the backend's "device"
  std::vector<unsigned char> hq, hk, hv;     // host copies for the reference (CUDA backend only)
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

struct Shared {
  std::unique_ptr<KvData> kv;
  std::string pool_key;
  BufferHandle pool;
  std::map<std::string, double> medians;  // "<key>|<mode>" -> median seconds
  std::uint64_t sink = 0;

  KvData& ensure_kv(Backend& be, const ka::AttnShape& s, bool huge) {
    const std::string key = std::to_string(s.batch) + "x" + std::to_string(s.hq) + "x" + std::to_string(s.hkv) + "x" +
                            std::to_string(s.d) + "x" + std::to_string(s.ctx) + ka::to_string(s.dtype) +
                            ka::to_string(s.layout) + (huge ? "h" : "n");
    if (kv && kv->key == key) return *kv;
    kv.reset();
    auto d = std::make_unique<KvData>();
    d->key = key;
    d->s = s;
    const kvf::AllocOptions ao{.huge_pages = huge};
    d->q = BufferHandle(be, s.q_bytes(), MemKind::device, ao);
    d->k = BufferHandle(be, s.kv_bytes(), MemKind::device, ao);
    d->v = BufferHandle(be, s.kv_bytes(), MemKind::device, ao);
    if (!is_cuda(be)) {
      ka::fill_qkv(s, d->q->ptr, d->k->ptr, d->v->ptr, kSeed);
    } else {
#if defined(KVF_HAVE_CUDA)
      const ka::gpu::AttnDims dims{s.batch, s.hq, s.hkv, s.d, s.ctx, s.dtype, s.layout, s.scale()};
      ka::gpu::fill_qkv(dims, d->q->ptr, d->k->ptr, d->v->ptr, kSeed, kvf::cuda_stream(be));
      be.synchronize();
      // The reference reads host copies of exactly the bytes the GPU holds.
      d->hq.resize(s.q_bytes());
      d->hk.resize(s.kv_bytes());
      d->hv.resize(s.kv_bytes());
      KVF_CUDA_CHECK(cudaMemcpy(d->hq.data(), d->q->ptr, s.q_bytes(), cudaMemcpyDeviceToHost));
      KVF_CUDA_CHECK(cudaMemcpy(d->hk.data(), d->k->ptr, s.kv_bytes(), cudaMemcpyDeviceToHost));
      KVF_CUDA_CHECK(cudaMemcpy(d->hv.data(), d->v->ptr, s.kv_bytes(), cudaMemcpyDeviceToHost));
#endif
    }
    kv = std::move(d);
    return *kv;
  }

  static std::uint64_t cent_key(std::uint32_t block, const ka::PageMap& pm) {
    return (std::uint64_t{pm.page} << 32) | block;
  }
  const std::vector<float>& centroids(KvData& d, std::uint32_t block, const ka::PageMap& pm) {
    const std::uint64_t key = cent_key(block, pm);
    auto it = d.centroids.find(key);
    if (it == d.centroids.end()) {
      std::vector<float> c;
      ka::AttnShape s = d.s;
      s.page = pm.page;  // one K buffer, read through each placement's layout
      ka::build_centroids(s, d.host_k(), block, c, pm);
      it = d.centroids.emplace(key, std::move(c)).first;
    }
    return it->second;
  }

  const ka::LowRank& lowrank(KvData& d, std::uint32_t r, const ka::PageMap& pm) {
    const std::uint64_t key = cent_key(r, pm);
    auto it = d.lowrank.find(key);
    if (it == d.lowrank.end()) {
      ka::LowRank lr;
      ka::AttnShape s = d.s;
      s.page = pm.page;
      ka::build_lowrank(s, d.host_k(), r, lr, pm);
      it = d.lowrank.emplace(key, std::move(lr)).first;
    }
    return it->second;
  }

  const kvf::Buffer& ensure_pool(Backend& be, std::uint64_t bytes, bool huge) {
    const std::string key = std::to_string(bytes) + (huge ? "h" : "n");
    if (pool_key != key) {
      pool.reset();
      pool = BufferHandle(be, bytes, MemKind::device, {.huge_pages = huge});
      be.fill(pool.get(), kSeed);
      pool_key = key;
    }
    return pool.get();
  }

  void record(const std::string& key, const std::string& mode, double med) { medians[key + "|" + mode] = med; }
  std::optional<double> median(const std::string& key, const std::string& mode) const {
    const auto it = medians.find(key + "|" + mode);
    if (it == medians.end()) return std::nullopt;
    return it->second;
  }
};

// ------------------------------------------------------------------------------------------------ gather
class GatherCase final : public kvf::Case {
 public:
  std::shared_ptr<Shared> sh;
  ka::GatherGeom g;
  bool huge = true, prefetch = true;
  std::string seq_key;  // sequential arm of the same pool/huge setting (for the vs_seq note)
  bool is_seq = false;
#if defined(KVF_HAVE_CUDA)
  BufferHandle dsum;
  int sms = 0;
#endif

  void setup(Backend& be) override {
    const auto& pool = sh->ensure_pool(be, g.pool_bytes, huge);
    if (!is_cuda(be) && huge && !pool.huge) note_ += "huge pages not granted; ";
#if defined(KVF_HAVE_CUDA)
    if (is_cuda(be)) {
      dsum = BufferHandle(be, 8, MemKind::device);
      sms = kvf::cuda_props(be).multiProcessorCount;
    }
#endif
  }
  bool has_verify() const override { return true; }
  std::uint64_t once(Backend& be) {
    if (!is_cuda(be)) return ka::gather_cpu(sh->pool->ptr, g, prefetch);
#if defined(KVF_HAVE_CUDA)
    KVF_CUDA_CHECK(cudaMemsetAsync(dsum->ptr, 0, 8, kvf::cuda_stream(be)));
    ka::gpu::gather(sh->pool->ptr, g, dsum.get().as<unsigned long long>(), sms, kvf::cuda_stream(be));
    be.synchronize();
    std::uint64_t r = 0;
    KVF_CUDA_CHECK(cudaMemcpy(&r, dsum->ptr, 8, cudaMemcpyDeviceToHost));
    return r;
#else
    return 0;
#endif
  }
  void verify(Backend& be) override {
    const std::uint64_t got = once(be), want = ka::gather_ref(kSeed, g);
    if (got != want)
      throw kvf::VerifyError("gather checksum " + std::to_string(got) + " differs from the reference " +
                             std::to_string(want) + " (run " + std::to_string(g.run_bytes) + " B)");
  }
  void run(Backend& be) override {
    if (!is_cuda(be)) {
      sh->sink += ka::gather_cpu(sh->pool->ptr, g, prefetch);
      return;
    }
#if defined(KVF_HAVE_CUDA)
    ka::gpu::gather(sh->pool->ptr, g, dsum.get().as<unsigned long long>(), sms, kvf::cuda_stream(be));
#endif
  }
  void teardown(Backend&) override {
#if defined(KVF_HAVE_CUDA)
    dsum.reset();
#endif
  }
  std::string after_measure(Backend&, const kvf::Summary& m, const std::string& mode) override {
    std::string n = note_;
    note_.clear();
    if (is_seq) sh->record(seq_key, mode, m.median);
    if (!is_seq)
      if (auto s = sh->median(seq_key, mode)) n += "vs_seq=" + fmt(*s / m.median);
    return n;
  }

 private:
  std::string note_;
};

// --------------------------------------------------------------------------------------------- attention
// Routing cases: alone (scores + top-k + translation to physical entries), attend (attention over the
// routed lists, routing untimed), end_to_end (both, one decode step).
enum class Routing { none, alone, attend, end_to_end };
const char* to_string(Routing r) {
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
  std::string placement_text() const { return page ? "shuffled" : "contiguous"; }
};

class AttnCase final : public kvf::Case {
 public:
  std::shared_ptr<Shared> sh;
  AttnSpec sp;
  std::string config_key;  // same shape/layout/dtype: where the dense median lives
  std::string pair_key;    // + keep/block/select: where the block median lives (for token cases)
  std::string route_key;   // routing cases: where the alone / attend medians live (per arm)

  void setup(Backend& be) override {
    KvData& d = sh->ensure_kv(be, sp.s, sp.huge);
    data_ = &d;
    pm_ = ka::make_page_map(sp.s.ctx, sp.page, kSeed ^ 0x9a9e);
    kb_ = sp.arm == ka::Arm::dense ? 0 : ka::sparse_blocks(sp.s.ctx, sp.block, sp.keep);
    sel_ = make_selection();
    if (sp.routing != Routing::none) {
      if (sp.arm == ka::Arm::block) sh->centroids(d, sp.block, pm_);
      if (sp.proxy_rank) recall_ = proxy_recall();
    }
    gpu_ = is_cuda(be);
    if (!gpu_) {
      ka::plan_cpu(sp.s, sel_, ws_);
      out_.assign(sp.s.q_elems(), 0.0f);
    } else {
#if defined(KVF_HAVE_CUDA)
      dims_ = {sp.s.batch, sp.s.hq, sp.s.hkv, sp.s.d, sp.s.ctx, sp.s.dtype, sp.s.layout, sp.s.scale(), sp.s.page};
      const int sms = kvf::cuda_props(be).multiProcessorCount;
      plan_ = ka::gpu::plan_attention(dims_, sel_.geom, sms);
      didx_ = BufferHandle(be, sel_.idx.size() * 4, MemKind::device);
      KVF_CUDA_CHECK(cudaMemcpy(didx_->ptr, sel_.idx.data(), sel_.idx.size() * 4, cudaMemcpyHostToDevice));
      dws_ = BufferHandle(be, ka::gpu::attention_workspace_floats(dims_, plan_) * 4, MemKind::device);
      dout_ = BufferHandle(be, sp.s.q_elems() * 4, MemKind::device);
      sms_ = sms;
      if (sp.routing != Routing::none) {
        const std::uint64_t n = sp.arm == ka::Arm::block ? sp.s.ctx / sp.block : sp.s.ctx;
        dscores_ = BufferHandle(be, std::uint64_t{sel_.n_lists} * n * 4, MemKind::device);
        dridx_ = BufferHandle(be, sel_.idx.size() * 4, MemKind::device);
        const std::uint64_t ck = Shared::cent_key(sp.block, pm_);
        if (sp.arm == ka::Arm::block && !d.dcentroids.count(ck)) {
          const auto& c = d.centroids.at(ck);
          BufferHandle dc(be, c.size() * 4, MemKind::device);
          KVF_CUDA_CHECK(cudaMemcpy(dc->ptr, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
          d.dcentroids.emplace(ck, std::move(dc));
        }
        const std::uint64_t lk = Shared::cent_key(sp.proxy_rank, pm_);
        if (sp.proxy_rank && !d.dlowrank.count(lk)) {
          const auto& lr = d.lowrank.at(lk);
          BufferHandle db(be, lr.basis.size() * 4, MemKind::device), dk(be, lr.keys.size() * 4, MemKind::device);
          KVF_CUDA_CHECK(cudaMemcpy(db->ptr, lr.basis.data(), lr.basis.size() * 4, cudaMemcpyHostToDevice));
          KVF_CUDA_CHECK(cudaMemcpy(dk->ptr, lr.keys.data(), lr.keys.size() * 4, cudaMemcpyHostToDevice));
          d.dlowrank.emplace(lk, std::make_pair(std::move(db), std::move(dk)));
        }
      }
#endif
    }
  }

  bool has_verify() const override { return true; }
  void verify(Backend& be) override {
    // Routing on the CPU: the routed selection must equal the one prepared at setup (same scores, same
    // top-k). On the GPU: the routed lists must be well formed and a true top-k of the CPU-recomputed
    // scores (up to fp32 summation order), and attention then runs on the GPU's own lists.
    if (sp.routing != Routing::none) {
      route(be);
      if (!gpu_) {
        if (routed_.idx != sel_.idx) throw kvf::VerifyError("routed selection differs from the setup selection");
      } else {
        be.synchronize();
        check_gpu_routing();
      }
    }
    std::vector<float> out(sp.s.q_elems()), ref(sp.s.q_elems());
    attend(be);
    be.synchronize();
    if (!gpu_) {
      out = out_;
    } else {
#if defined(KVF_HAVE_CUDA)
      KVF_CUDA_CHECK(cudaMemcpy(out.data(), dout_->ptr, out.size() * 4, cudaMemcpyDeviceToHost));
#endif
    }
    ka::attention_ref(sp.s, data_->host_q(), data_->host_k(), data_->host_v(), sel_, ref.data());
    const double err = ka::attention_rel_error(out.data(), ref.data(), out.size());
    err_ = err;
    if (!(err < ka::kAttnTolerance))
      throw kvf::VerifyError("attention output differs from the fp32 reference: max|out-ref|/max|ref| = " +
                             fmt(err) + " >= " + fmt(ka::kAttnTolerance) + " (arm " + ka::to_string(sp.arm) + ")");
  }

  void run(Backend& be) override {
    if (sp.routing == Routing::alone || sp.routing == Routing::end_to_end) route(be);
    if (sp.routing != Routing::alone) attend(be);
  }

  void teardown(Backend&) override {
    ws_ = {};
    out_ = {};
#if defined(KVF_HAVE_CUDA)
    didx_.reset();
    dws_.reset();
    dout_.reset();
#endif
  }

  std::string after_measure(Backend&, const kvf::Summary& m, const std::string& mode) override {
    std::string n = "verify_err=" + fmt(err_, 2);
    if (sp.proxy_rank) n += "; recall_vs_key_topk=" + fmt(recall_, 3);
    if (sp.routing == Routing::alone || sp.routing == Routing::attend) sh->record(route_key + to_string(sp.routing), mode, m.median);
    if (sp.routing == Routing::end_to_end) {
      // Derived, not separately timed: one routing reused for S decode steps costs, per step,
      // attend + alone / S, from the medians of this run's route-alone and route-attend cases (same
      // lists, same mode).
      const auto r = sh->median(route_key + "alone", mode), a = sh->median(route_key + "attend", mode);
      if (r && a && *a > 0) {
        n += "; derived (attend + alone/S, from this run's medians, not timed): route_alone_s=" + fmt(*r, 4) +
             " attend_s=" + fmt(*a, 4) + " per_step_s(S=1)=" + fmt(*a + *r, 4);
        for (auto S : sp.reuse_steps)
          n += " amortized_s(S=" + std::to_string(S) + ")=" + fmt(*a + *r / S, 4) + " route_share(S=" +
               std::to_string(S) + ")=" + fmt(*r / S / (*a + *r / S), 3);
        // Routing under 10% of the amortized step from S >= 9 * alone / attend.
        n += " reuse_for_route_below_10pct=" + std::to_string(static_cast<long long>(std::ceil(9.0 * *r / *a)));
      }
    }
    if (sp.routing != Routing::none) return n;
    if (sp.arm == ka::Arm::dense) sh->record(config_key, mode, m.median);
    if (sp.arm == ka::Arm::block) sh->record(pair_key, mode, m.median);
    if (sp.arm != ka::Arm::dense)
      if (auto dm = sh->median(config_key, mode)) n += "; speedup_vs_dense=" + fmt(*dm / m.median);
    if (sp.arm == ka::Arm::token)
      if (auto bm = sh->median(pair_key, mode)) n += "; block_over_token=" + fmt(*bm / m.median);
    return n;
  }

  // Bytes and FLOPs before measuring (also used by --list).
  void account(const ka::Selection& sel_shape_only) {
    const double att_b = ka::attention_bytes(sp.s, sel_shape_only), att_f = ka::attention_flops(sp.s, sel_shape_only);
    const double eb = ka::dtype_bytes(sp.s.dtype);
    const double lists = sp.shared ? sp.s.batch : double(sp.s.batch) * sp.s.hkv;
    double rb = 0, rf = 0;
    if (sp.routing == Routing::alone || sp.routing == Routing::end_to_end) {
      if (sp.arm == ka::Arm::block) {
        const double nb = sp.s.ctx / sp.block;
        rb = double(sp.s.batch) * sp.s.hkv * nb * sp.s.d * 4 + lists * nb * 4;
        rf = 2.0 * sp.s.batch * sp.s.hkv * nb * sp.s.d;
      } else if (sp.proxy_rank) {
        const double r = sp.proxy_rank;
        rb = double(sp.s.batch) * sp.s.hkv * (double(sp.s.ctx) * r + double(sp.s.d) * r) * 4 + lists * sp.s.ctx * 4;
        rf = 2.0 * sp.s.batch * sp.s.hkv * (double(sp.s.ctx) + sp.s.d) * r;
      } else {
        rb = double(sp.s.batch) * sp.s.hkv * sp.s.ctx * sp.s.d * eb + lists * sp.s.ctx * 4;
        rf = 2.0 * sp.s.batch * sp.s.hkv * double(sp.s.ctx) * sp.s.d;
      }
    }
    bytes = (sp.routing == Routing::alone ? 0 : att_b) + rb;
    flops = (sp.routing == Routing::alone ? 0 : att_f) + rf;
  }

 private:
  KvData* data_ = nullptr;
  ka::PageMap pm_{};
  std::uint32_t kb_ = 0;
  ka::Selection sel_, routed_;
  ka::AttnWorkspace ws_;
  std::vector<float> out_, scores_;
  bool gpu_ = false;
  double err_ = 0, recall_ = 0;
#if defined(KVF_HAVE_CUDA)
  ka::gpu::AttnDims dims_{};
  ka::gpu::AttnPlan plan_{};
  BufferHandle didx_, dws_, dout_, dscores_, dridx_;
  int sms_ = 0;
#endif

  // GPU routing check: download the lists; structure (sorted, sink + latest, budget) and top-k
  // quality: no unselected candidate may outscore a selected one by more than the fp32 summation
  // tolerance of the CPU-recomputed scores. The reference then uses the GPU's own lists.
  void check_gpu_routing() {
#if defined(KVF_HAVE_CUDA)
    ka::Selection phys = sel_;
    KVF_CUDA_CHECK(cudaMemcpy(phys.idx.data(), dridx_->ptr, phys.idx.size() * 4, cudaMemcpyDeviceToHost));
    const auto& s = sp.s;
    const bool blk = sp.arm == ka::Arm::block;
    // The GPU emits physical entries: back to logical blocks/tokens (fails if the translation is not
    // the host's place()), then the checks below run in logical order.
    ka::Selection g;
    if (!ka::unplace(s, pm_, phys, blk ? sp.block : 1, g))
      throw kvf::VerifyError("GPU routing: the lists are not a placement (page table) of logical entries");
    const std::uint32_t n = blk ? s.ctx / sp.block : s.ctx;
    const std::uint32_t nlo = blk ? 1 : sp.block, nhi = nlo;  // forced entries at each end
    std::vector<float> sc;
    if (blk) ka::score_blocks(s, data_->host_q(), data_->centroids.at(Shared::cent_key(sp.block, pm_)), sp.block, sp.shared, sc);
    else if (sp.proxy_rank)
      ka::score_tokens_lowrank(s, data_->host_q(), data_->lowrank.at(Shared::cent_key(sp.proxy_rank, pm_)), sp.shared, sc);
    else ka::score_tokens(s, data_->host_q(), data_->host_k(), sp.shared, sc, pm_);
    const std::uint32_t ne = g.geom.n_entries;
    for (std::uint32_t l = 0; l < g.n_lists; ++l) {
      const std::uint32_t* e = g.idx.data() + std::uint64_t{l} * ne;
      const float* x = sc.data() + std::uint64_t{l} * n;
      std::vector<char> picked(n, 0);
      float amax = 0;
      for (std::uint32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (std::uint32_t i = 0; i < ne; ++i) {
        if (e[i] >= n || (i && e[i] <= e[i - 1]))
          throw kvf::VerifyError("GPU routing: list " + std::to_string(l) + " not sorted/unique or out of range");
        picked[e[i]] = 1;
      }
      for (std::uint32_t i = 0; i < nlo; ++i)
        if (!picked[i] || !picked[n - 1 - i])
          throw kvf::VerifyError("GPU routing: sink or latest entry missing in list " + std::to_string(l));
      float min_in = INFINITY, max_out = -INFINITY;
      for (std::uint32_t i = nlo; i < n - nhi; ++i) {
        if (picked[i]) min_in = std::min(min_in, x[i]);
        else max_out = std::max(max_out, x[i]);
      }
      if (max_out > min_in + 1e-4f * std::max(1.0f, amax))
        throw kvf::VerifyError("GPU routing: not a top-k: an unselected score " + fmt(max_out) +
                               " exceeds a selected " + fmt(min_in) + " in list " + std::to_string(l));
    }
    sel_ = std::move(phys);
#endif
  }

  // Physical selection: chosen in logical order, then placed through the page map.
  ka::Selection make_selection() { return ka::place(sp.s, pm_, logical_selection()); }
  ka::Selection logical_selection() {
    const auto& s = sp.s;
    switch (sp.arm) {
      case ka::Arm::dense: {
        std::uint32_t span = 256;
        while (s.ctx % span) span /= 2;
        return ka::select_dense(s, span);
      }
      case ka::Arm::block: {
        std::vector<float> sc;
        ka::score_blocks(s, data_->host_q(), sh->centroids(*data_, sp.block, pm_), sp.block, sp.shared, sc);
        return ka::select_blocks_by_score(s, sp.block, kb_, sp.shared, sc);
      }
      case ka::Arm::token:
        if (sp.routing != Routing::none) {
          std::vector<float> sc;
          if (sp.proxy_rank)
            ka::score_tokens_lowrank(s, data_->host_q(), sh->lowrank(*data_, sp.proxy_rank, pm_), sp.shared, sc);
          else
            ka::score_tokens(s, data_->host_q(), data_->host_k(), sp.shared, sc, pm_);
          return ka::select_tokens_by_score(s, sp.block, kb_, sp.shared, sc);
        }
        return ka::select_tokens_random(s, sp.block, kb_, sp.shared, sp.scatter, sp.cluster_mean, kSeed + s.ctx);
    }
    return {};
  }

  // Share of the proxy's routed middle tokens (sink and latest excluded) that the exact key top-k
  // also picks (both in logical order, same budget).
  double proxy_recall() {
    const auto& s = sp.s;
    std::vector<float> sc;
    ka::score_tokens(s, data_->host_q(), data_->host_k(), sp.shared, sc, pm_);
    const ka::Selection exact = ka::select_tokens_by_score(s, sp.block, kb_, sp.shared, sc);
    ka::score_tokens_lowrank(s, data_->host_q(), sh->lowrank(*data_, sp.proxy_rank, pm_), sp.shared, sc);
    const ka::Selection proxy = ka::select_tokens_by_score(s, sp.block, kb_, sp.shared, sc);
    const std::uint32_t ne = exact.geom.n_entries;
    std::uint64_t both = 0, mid = 0;
    for (std::uint32_t l = 0; l < exact.n_lists; ++l) {
      const std::uint32_t* a = exact.idx.data() + std::uint64_t{l} * ne;
      const std::uint32_t* p = proxy.idx.data() + std::uint64_t{l} * ne;
      std::vector<std::uint32_t> x(a + sp.block, a + ne - sp.block), y(p + sp.block, p + ne - sp.block), z;
      std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(z));
      both += z.size();
      mid += x.size();
    }
    return mid ? double(both) / double(mid) : 1.0;
  }

  void route(Backend& be) {
    const auto& s = sp.s;
    if (gpu_) {
#if defined(KVF_HAVE_CUDA)
      if (sp.arm == ka::Arm::block)
        ka::gpu::route_blocks(dims_, data_->q->ptr,
                              data_->dcentroids.at(Shared::cent_key(sp.block, pm_)).get().as<float>(), sp.block, kb_,
                              sp.shared, pm_, dscores_.get().as<float>(), dridx_.get().as<std::uint32_t>(),
                              kvf::cuda_stream(be));
      else if (sp.proxy_rank) {
        const auto& lr = data_->dlowrank.at(Shared::cent_key(sp.proxy_rank, pm_));
        ka::gpu::route_tokens_lowrank(dims_, data_->q->ptr, lr.first.get().as<float>(), lr.second.get().as<float>(),
                                      sp.proxy_rank, sp.block, kb_, sp.shared, pm_, dscores_.get().as<float>(),
                                      dridx_.get().as<std::uint32_t>(), sms_, kvf::cuda_stream(be));
      } else
        ka::gpu::route_tokens(dims_, data_->q->ptr, data_->k->ptr, sp.block, kb_, sp.shared, pm_,
                              dscores_.get().as<float>(), dridx_.get().as<std::uint32_t>(), sms_, kvf::cuda_stream(be));
#endif
      return;
    }
    if (sp.arm == ka::Arm::block) {
      ka::score_blocks(s, data_->host_q(), data_->centroids.at(Shared::cent_key(sp.block, pm_)), sp.block, sp.shared,
                       scores_);
      routed_ = ka::place(s, pm_, ka::select_blocks_by_score(s, sp.block, kb_, sp.shared, scores_));
    } else {
      if (sp.proxy_rank)
        ka::score_tokens_lowrank(s, data_->host_q(), data_->lowrank.at(Shared::cent_key(sp.proxy_rank, pm_)), sp.shared,
                                 scores_);
      else
        ka::score_tokens(s, data_->host_q(), data_->host_k(), sp.shared, scores_, pm_);
      routed_ = ka::place(s, pm_, ka::select_tokens_by_score(s, sp.block, kb_, sp.shared, scores_));
    }
  }

  void attend(Backend& be) {
    if (!gpu_) {
      ka::attention_cpu(sp.s, data_->q->ptr, data_->k->ptr, data_->v->ptr, sel_, ws_, out_.data());
      return;
    }
#if defined(KVF_HAVE_CUDA)
    // End to end on the GPU: attention reads the lists the routing kernels just wrote.
    const BufferHandle& lists = sp.routing != Routing::none ? dridx_ : didx_;
    ka::gpu::attention(dims_, data_->q->ptr, data_->k->ptr, data_->v->ptr, sel_.geom, lists.get().as<std::uint32_t>(),
                       plan_, dws_.get().as<float>(), dout_.get().as<float>(), kvf::cuda_stream(be));
#else
    (void)be;
#endif
  }
};

// ------------------------------------------------------------------------------------------------ parsing
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

std::string reuse_text(const std::vector<std::uint32_t>& v) {
  std::string r;
  for (auto x : v) r += (r.empty() ? "" : ",") + std::to_string(x);
  return r;
}

std::string ctx_name(std::uint32_t c) {
  return (c % 1024 == 0) ? std::to_string(c / 1024) + "K" : std::to_string(c);
}

// ------------------------------------------------------------------------------------------------- study
class AccessStudy final : public kvf::Study {
 public:
  std::string name() const override { return "access"; }

  void add_options(CLI::App& app) override {
    app_ = &app;
    app.add_option("--parts", parts_, "gather, attention, routing (default all)")->delimiter(',');
    app.add_option("--contexts", contexts_, "context lengths in tokens, 1 .. 64M, e.g. 4K,16K,64K (default CPU 4K,16K,64K,128K)")
        ->delimiter(',');
    app.add_option("--keep", keeps_, "keep fractions in (0,1], e.g. 1/8,1/2 (default 1/8, plus 1/2 and 1/32 at one context)")
        ->delimiter(',');
    app.add_option("--block-sizes", blocks_, "block sizes of the block arm, powers of two 1..4096 dividing every context, "
                   "e.g. 16,32,64,128,256 (default 32 CPU, 64 GPU; the others at one context)")
        ->delimiter(',');
    app.add_option("--dtypes", dtypes_, "bf16, fp16, fp8_e4m3 (GPU sm_89+ only) (default bf16)")->delimiter(',');
    app.add_option("--layouts", layouts_, "NHD, HND (default HND, plus NHD at one context)")->delimiter(',');
    app.add_option("--head-dims", head_dims_, "64, 128 (default 128)")->delimiter(',');
    app.add_option("--hq", hq_text_, "query heads, 1..4096, a multiple of --hkv by 1, 2, 4, 8 or 16 (default 32)");
    app.add_option("--hkv", hkv_text_, "KV heads, 1..1024 (default 8)");
    app.add_option("--batch", batch_text_, "batch, 1..1024 (default 1)");
    app.add_option("--select", select_, "per_head, shared or both (default per_head, plus shared at one context)");
    app.add_option("--scatter", scatter_, "token arm scatter: uniform, clustered or both (default both)");
    app.add_option("--cluster-mean", cluster_mean_text_, "mean run length of the clustered token arm, 1..65536 (default 8)");
    app.add_option("--run-bytes", run_bytes_, "gather run sizes, powers of two from 32 to 1 GiB dividing the pool "
                   "(default 32 .. 64Ki)")
        ->delimiter(',');
    app.add_option("--pool-mib", pool_mib_, "gather pool sizes in MiB, at most half the memory "
                   "(default max(4x LLC, 128 MiB) on CPU)")
        ->delimiter(',');
    app.add_option("--gather-mib", gather_mib_text_, "MiB read per gather execution, 1 .. the pool "
                   "(default min(64, pool/2))");
    app.add_option("--huge-pages", huge_, "on, off or both (CPU; default both for gather, on for attention)");
    app.add_option("--prefetch", prefetch_, "CPU gather software prefetch: on, off or both (default on)");
    app.add_option("--placement", placement_,
                   "KV placement of the attention and routing parts: shuffled (a paged cache: pages of --page-tokens "
                   "tokens holding every kv head, in a seeded random page order), contiguous (unpaged, logical order "
                   "== physical order) or both (default shuffled)");
    app.add_option("--page-tokens", page_tokens_text_,
                   "tokens per page of the shuffled placement: a power of two dividing every context (default 16)");
    app.add_option("--proxy-rank", proxy_rank_, "routing part: ranks of the low-rank key proxy for the token arm, "
                   "8, 16, 32, 64 (below the head dim), or 0 for none (default 16)")
        ->delimiter(',');
    app.add_option("--reuse-steps", reuse_, "decode steps a routed selection is reused for, 1..1048576; the route "
                   "end_to_end rows note attend + routing/S per S, derived from this run's medians (default 1,8,64)")
        ->delimiter(',');
  }

  std::vector<std::unique_ptr<kvf::Case>> cases(const kvf::StudyContext& ctx) override {
    Backend& be = *ctx.backend;
    const bool gpu = is_cuda(be);
    const bool quick = ctx.quick;
    const std::size_t llc = be.info().llc_bytes ? be.info().llc_bytes : (std::size_t{32} << 20);
    auto sh = std::make_shared<Shared>();
    std::vector<std::unique_ptr<kvf::Case>> out;

    // ---- validate every flag first (one clear line, exit 2)
    // A flag given with an empty value is refused, never taken for "not given".
    const auto given = [&](const char* flag) { return app_ && app_->count(flag) > 0; };
    const auto choice = [&](const char* flag, const std::string& v, std::initializer_list<const char*> allowed) {
      if (!given(flag)) return;
      std::string list;
      for (const char* a : allowed) {
        if (v == a) return;
        list += (list.empty() ? "" : ", ") + std::string(a);
      }
      kvf::bad_flag(flag, v, "allowed " + list);
    };
    choice("--huge-pages", huge_, {"on", "off", "both"});
    choice("--prefetch", prefetch_, {"on", "off", "both"});
    choice("--select", select_, {"per_head", "shared", "both"});
    choice("--scatter", scatter_, {"uniform", "clustered", "both"});
    choice("--placement", placement_, {"shuffled", "contiguous", "both"});
    for (const auto& p : parts_)
      if (p != "gather" && p != "attention" && p != "routing") kvf::bad_flag("--parts", p, "unknown part; allowed gather, attention, routing");
    auto want = [&](const char* p) { return parts_.empty() || std::find(parts_.begin(), parts_.end(), p) != parts_.end(); };
    std::vector<bool> huges;
    if (huge_ == "on") huges = {true};
    else if (huge_ == "off") huges = {false};
    else huges = {true, false};
    if (gpu || (quick && huge_.empty())) huges = {true};
    std::vector<bool> prefetches;
    if (prefetch_ == "on" || prefetch_.empty() || gpu) prefetches = {true};
    else if (prefetch_ == "off") prefetches = {false};
    else prefetches = {true, false};
    std::vector<bool> selects;
    if (select_ == "per_head") selects = {false};
    else if (select_ == "shared") selects = {true};
    else if (select_ == "both") selects = {false, true};
    std::vector<ka::Scatter> scatters;
    if (scatter_ == "uniform" || (quick && scatter_.empty())) scatters = {ka::Scatter::uniform};
    else if (scatter_ == "clustered") scatters = {ka::Scatter::clustered};
    else scatters = {ka::Scatter::uniform, ka::Scatter::clustered};
    // Grid y and z of the kernels are kv heads and batch (< 65536); lists are batch x kv heads in 32 bits.
    const auto hq = given("--hq") ? static_cast<std::uint32_t>(parse_whole(hq_text_, "--hq", 1, 4096)) : 32u;
    const auto hkv = given("--hkv") ? static_cast<std::uint32_t>(parse_whole(hkv_text_, "--hkv", 1, 1024)) : 8u;
    const auto batch = given("--batch") ? static_cast<std::uint32_t>(parse_whole(batch_text_, "--batch", 1, 1024)) : 1u;
    if (hq % hkv || !pow2(hq / hkv) || hq / hkv > 16)
      throw kvf::UsageError("--hq " + std::to_string(hq) + " --hkv " + std::to_string(hkv) +
                            ": hq must be hkv times 1, 2, 4, 8 or 16 (the query heads of one KV head)");
    // The clustered arm draws run lengths up to 2 x the mean in 32 bits.
    const auto cluster_mean = given("--cluster-mean")
                                  ? static_cast<std::uint32_t>(parse_whole(cluster_mean_text_, "--cluster-mean", 1, 65536))
                                  : 8u;
    std::vector<ka::DType> dtypes;
    for (const auto& t : dtypes_) dtypes.push_back(ka::parse_dtype(t));
    std::vector<ka::Layout> layouts;
    for (const auto& t : layouts_) layouts.push_back(ka::parse_layout(t));
    std::vector<std::uint32_t> ctxs, blocks, dims, runs;
    std::vector<double> keeps;
    std::vector<std::string> keep_texts;
    for (const auto& t : contexts_) ctxs.push_back(parse_ctx(t));
    for (const auto& t : keeps_) { keeps.push_back(parse_keep(t)); keep_texts.push_back(t); }
    for (const auto& t : blocks_) {
      const auto b = parse_whole(t, "--block-sizes", 1, 4096);
      if (!pow2(b)) kvf::bad_flag("--block-sizes", t, "must be a power of two from 1 to 4096");
      blocks.push_back(static_cast<std::uint32_t>(b));
    }
    for (const auto& t : head_dims_) {
      const auto d = parse_whole(t, "--head-dims", 1, 1024);
      if (d != 64 && d != 128) kvf::bad_flag("--head-dims", t, "allowed 64, 128");
      dims.push_back(static_cast<std::uint32_t>(d));
    }
    for (const auto& t : run_bytes_) {
      const auto r = parse_whole(t, "--run-bytes", 32, 1ull << 30);
      if (!pow2(r)) kvf::bad_flag("--run-bytes", t, "must be a power of two from 32 to 1 GiB (1073741824)");
      runs.push_back(static_cast<std::uint32_t>(r));
    }
    bool have_fp8 = false;
#if defined(KVF_HAVE_CUDA)
    if (gpu) {
      const auto& pr = kvf::cuda_props(be);
      have_fp8 = pr.major * 10 + pr.minor >= 89;
    }
#endif
    for (auto d : dtypes) {
      if (d == ka::DType::fp8_e4m3) {
        if (!gpu) throw kvf::UsageError("--dtypes fp8_e4m3: not available on the cpu backend (bf16, fp16)");
        if (!have_fp8)
          throw kvf::UsageError("--dtypes fp8_e4m3: this GPU (" + be.info().arch +
                                ") has no fp8 conversion instructions (needs sm_89 or newer; use bf16, fp16)");
        if (want("routing") && !parts_.empty())
          throw kvf::UsageError("--dtypes fp8_e4m3 with --parts routing: routing supports bf16, fp16");
      }
    }
    const bool user_sweep = !contexts_.empty() || !keeps_.empty() || !blocks_.empty() || !dtypes_.empty() ||
                            !layouts_.empty() || !head_dims_.empty() || !select_.empty();

    // ---- defaults
    if (dtypes.empty()) dtypes = {ka::DType::bf16};
    if (layouts.empty()) layouts = {ka::Layout::HND};
    if (dims.empty()) dims = {128};
    if (blocks.empty()) blocks = {gpu ? 64u : 32u};
    if (keeps.empty()) { keeps = {0.125}; keep_texts = {"1/8"}; }
    if (selects.empty()) selects = {false};
    if (ctxs.empty()) {
      if (quick) ctxs = {16384};
      else if (gpu) ctxs = {4096, 8192, 16384, 32768, 65536, 131072, 262144};
      else ctxs = {4096, 16384, 65536, 131072};
    }
    const std::uint32_t side_ctx = quick ? 16384 : 65536;  // where the side sweeps run by default

    auto base_shape = [&]() {
      ka::AttnShape s;
      s.batch = batch;
      s.hq = hq;
      s.hkv = hkv;
      return s;
    };
    // Placement: page sizes per case (0 = contiguous); the page size must divide every context.
    std::uint32_t page_tokens = 16;
    if (given("--page-tokens")) {
      if (placement_ == "contiguous")
        kvf::bad_flag("--page-tokens", page_tokens_text_, "--placement contiguous has no pages (give shuffled or both)");
      page_tokens = static_cast<std::uint32_t>(parse_whole(page_tokens_text_, "--page-tokens", 1, kMaxCtx));
    }
    std::vector<std::uint32_t> pages;
    if (placement_ == "contiguous") pages = {0};
    else if (placement_ == "both") pages = {page_tokens, 0};
    else pages = {page_tokens};
    if (placement_ != "contiguous") {
      std::vector<std::uint32_t> all_ctx = ctxs;
      if (contexts_.empty()) all_ctx.push_back(side_ctx);
      for (auto c : all_ctx) ka::validate_page_tokens(page_tokens, c);
    }
    std::vector<std::uint32_t> reuse;
    for (const auto& t : reuse_) reuse.push_back(static_cast<std::uint32_t>(parse_whole(t, "--reuse-steps", 1, 1u << 20)));
    if (reuse.empty()) reuse = {1, 8, 64};
    std::vector<std::uint32_t> proxy_ranks;
    for (const auto& t : proxy_rank_) {
      const auto v = parse_whole(t, "--proxy-rank", 0, 64);
      if (v == 0) continue;
      if (!(v == 8 || v == 16 || v == 32 || v == 64) || v >= dims[0])
        kvf::bad_flag("--proxy-rank", t, "allowed 0 (none), 8, 16, 32, 64 (below the head dim " + std::to_string(dims[0]) + ")");
      proxy_ranks.push_back(static_cast<std::uint32_t>(v));
    }
    if (proxy_rank_.empty()) proxy_ranks = {16};
    // Budgets: every (context, block, keep) the sweep makes must keep the sink and latest blocks. Checked here,
    // where the flags are known, so the message names them.
    {
      std::vector<std::uint32_t> all_ctx = ctxs;
      if (contexts_.empty() && !quick) all_ctx.push_back(side_ctx);
      for (auto c : all_ctx)
        for (auto b : blocks) {
          if (c % b)
            throw kvf::UsageError("--block-sizes " + std::to_string(b) + ": must divide the context (" +
                                  std::to_string(c) + ", --contexts)");
          for (std::size_t ki = 0; ki < keeps.size(); ++ki) {
            const double kb = std::round(double(c / b) * keeps[ki]);
            if (c / b < 2 || kb < 2)
              throw kvf::UsageError("--keep " + kvf::shown_value(keep_texts[ki]) + " --block-sizes " + std::to_string(b) +
                                    " at context " + std::to_string(c) + ": a budget of " + fmt(kb) +
                                    " block(s), smaller than sink + latest block (2 blocks)");
          }
        }
    }
    // The kernels' own checks, as a last line (the flags above keep them from firing).
    for (auto d : dims)
      for (auto dt : dtypes) {
        ka::AttnShape s = base_shape();
        s.d = d;
        s.dtype = dt;
        ka::validate_shape(s);
        for (auto c : ctxs) {
          s.ctx = c;
          for (auto b : blocks)
            for (double k : keeps) (void)ka::sparse_blocks(c, b, k);
        }
      }
    const std::uint64_t host_mem = kvf::host_memory_bytes();
    const std::uint64_t dev_mem = gpu ? be.info().memory_bytes : host_mem;

    // ---- gather
    std::vector<std::uint64_t> pools;
    for (const auto& t : pool_mib_) {
      const auto m = parse_whole(t, "--pool-mib", 1, 1u << 20);
      if (dev_mem && (m << 20) > dev_mem / 2)
        kvf::bad_flag("--pool-mib", t, "more than half of the memory (" + kvf::format_bytes(double(dev_mem)) + ")");
      pools.push_back(m << 20);
    }
    std::optional<std::uint64_t> gather_bytes;
    if (given("--gather-mib")) gather_bytes = parse_whole(gather_mib_text_, "--gather-mib", 1, 1u << 20) << 20;
    if (want("gather")) {
      if (pools.empty()) pools = {std::max<std::uint64_t>(4 * llc, quick ? 64ull << 20 : 128ull << 20)};
      if (runs.empty()) {
        if (quick) runs = {256};
        else runs = {32, 64, 128, 256, 512, 1024, 4096, 16384, 65536};
      }
      const auto total_for = [&](std::uint64_t p) {
        return gather_bytes ? *gather_bytes
                            : std::min<std::uint64_t>(gpu ? 256ull << 20 : (quick ? 16ull << 20 : 64ull << 20), p / 2);
      };
      for (auto p : pools) {
        const std::uint64_t total = total_for(p);
        if (gather_bytes && *gather_bytes > p)
          kvf::bad_flag("--gather-mib", gather_mib_text_, "more than the pool (" + kvf::format_bytes(double(p)) + ", --pool-mib)");
        for (std::uint64_t R : runs) {
          if (p % R)
            throw kvf::UsageError("--run-bytes " + std::to_string(R) + ": must divide the pool (" +
                                  kvf::format_bytes(double(p)) + ", --pool-mib)");
          if (R > total)
            throw kvf::UsageError("--run-bytes " + std::to_string(R) + ": more than the bytes read per execution (" +
                                  kvf::format_bytes(double(total)) + ", --gather-mib)");
        }
      }
      for (auto p : pools)
        for (bool huge : huges) {
          const std::uint64_t total = total_for(p);
          const std::string seq_key0 = "seq" + std::to_string(p) + (huge ? "h" : "n");
          auto add = [&](std::uint64_t R, bool seq, bool pf) {
            ka::GatherGeom g{p, R, total / R * R, kSeed, seq};
            ka::validate_gather(g);
            auto c = std::make_unique<GatherCase>();
            c->sh = sh;
            c->g = g;
            c->huge = huge;
            c->prefetch = pf;
            c->is_seq = seq;
            c->seq_key = seq_key0 + (pf ? "p" : "n");
            c->name = std::string("gather/") + (seq ? "seq" : "R" + std::to_string(R)) + "/pool" +
                      std::to_string(p >> 20) + "MiB/" + (huge ? "huge" : "nohuge") + (pf ? "" : "/noprefetch");
            c->params = {{"part", "gather"},
                         {"arm", seq ? "sequential" : "gather"},
                         {"run_bytes", std::to_string(R)},
                         {"pool_mib", std::to_string(p >> 20)},
                         {"huge", huge ? "on" : "off"},
                         {"prefetch", gpu ? "" : (pf ? "on" : "off")},
                         {"working_set_bytes", std::to_string(g.total_bytes)},
                         {"llc_bytes", std::to_string(llc)},
                         {"working_set_vs_llc", fmt(double(g.total_bytes) / double(llc))}};
            c->bytes = double(g.total_bytes);
            c->ceiling = kvf::CeilingRef{"stream", {{"op", "read"}}, "gbps"};
            // Hot samples only where the gathered bytes fit the cache (else hot = cold, and time is short).
            c->hot = g.total_bytes < llc;
            const double t = double(g.total_bytes) / (gpu ? 1e12 : (R < 256 ? 2e9 : 8e9));
            c->est_seconds = 0.05 + double(p) / (gpu ? 5e11 : 3e9) + (c->hot ? 2 : 1) * std::min(0.6, std::max(0.2, 10 * t + 0.05)) +
                             double(g.total_bytes) / 1e9;
            out.push_back(std::move(c));
          };
          for (bool pf : prefetches) {
            add(65536, true, pf);
            for (auto R : runs) add(R, false, pf);
          }
        }
    }

    // ---- attention
    auto add_attn = [&](AttnSpec sp) {
      sp.s.page = sp.page;  // the shuffled placement is a paged layout (paged HND: heads of a page adjacent)
      auto c = std::make_unique<AttnCase>();
      c->sh = sh;
      const auto& s = sp.s;
      const std::string cfg = ctx_name(s.ctx) + "/" + ka::to_string(s.layout) + "/" + ka::to_string(s.dtype) + "/d" +
                              std::to_string(s.d) + "/hq" + std::to_string(s.hq) + "hkv" + std::to_string(s.hkv) +
                              "/b" + std::to_string(s.batch) + (sp.huge ? "" : "/nohuge") +
                              (sp.page ? "/pg" + std::to_string(sp.page) : std::string("/contiguous"));
      c->config_key = cfg;
      const std::string sel_txt = sp.shared ? "shared" : "per_head";
      std::string kt = sp.keep_text;
      std::replace(kt.begin(), kt.end(), '/', ':');
      c->pair_key = cfg + "/k" + kt + "/B" + std::to_string(sp.block) + "/" + sel_txt;
      std::string arm = ka::to_string(sp.arm);
      if (sp.arm == ka::Arm::token && sp.routing == Routing::none) arm += std::string("-") + ka::to_string(sp.scatter);
      if (sp.proxy_rank) arm += "-lowrank" + std::to_string(sp.proxy_rank);
      c->route_key = c->pair_key + "/" + arm + "/route-";
      std::string nm = (sp.routing == Routing::none ? "attn/" : std::string("route-") + to_string(sp.routing) + "/") +
                       arm + "/" + cfg;
      if (sp.arm != ka::Arm::dense) nm += "/keep" + kt + "/B" + std::to_string(sp.block) + "/" + sel_txt;
      c->name = nm;
      // Shape-only selection for the counts (physical entries x span per list).
      const ka::PageMap pm = ka::make_page_map(s.ctx, sp.page, 0);
      ka::Selection shape;
      std::uint64_t ntok = s.ctx;
      if (sp.arm != ka::Arm::dense) {
        const auto kb = ka::sparse_blocks(s.ctx, sp.block, sp.keep);
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
      c->sp = sp;
      c->account(shape);
      const double ws = 2.0 * s.batch * s.hkv * double(ntok) * s.d * ka::dtype_bytes(s.dtype);
      c->params = {{"part", sp.routing == Routing::none ? "attention" : "routing"},
                   {"arm", ka::to_string(sp.arm)},
                   {"ctx", std::to_string(s.ctx)},
                   {"keep", sp.arm == ka::Arm::dense ? "1" : sp.keep_text},
                   {"block", sp.arm == ka::Arm::dense ? "" : std::to_string(sp.block)},
                   {"budget_tokens", std::to_string(ntok)},
                   {"dtype", ka::to_string(s.dtype)},
                   {"layout", ka::to_string(s.layout)},
                   {"head_dim", std::to_string(s.d)},
                   {"hq", std::to_string(s.hq)},
                   {"hkv", std::to_string(s.hkv)},
                   {"batch", std::to_string(s.batch)},
                   {"select", sp.arm == ka::Arm::dense ? "" : (sp.shared ? "shared" : "per_head")},
                   {"scatter", sp.arm == ka::Arm::token && sp.routing == Routing::none ? ka::to_string(sp.scatter) : ""},
                   {"routing", to_string(sp.routing)},
                   {"router", sp.routing == Routing::none ? ""
                              : sp.arm == ka::Arm::block ? "centroids"
                              : sp.proxy_rank ? "lowrank" + std::to_string(sp.proxy_rank) : "keys"},
                   {"reuse_steps", sp.routing == Routing::end_to_end ? reuse_text(sp.reuse_steps) : ""},
                   {"placement", sp.placement_text()},
                   {"page_tokens", sp.page ? std::to_string(sp.page) : ""},
                   {"huge", sp.huge ? "on" : "off"},
                   {"working_set_bytes", fmt(ws, 12)},
                   {"llc_bytes", std::to_string(llc)},
                   {"working_set_vs_llc", fmt(ws / double(llc))},
                   {"kv_bytes", fmt(2.0 * double(s.kv_bytes()), 12)}};
      c->ceiling = kvf::CeilingRef{"stream", {{"op", "read"}}, "gbps"};
      const double rate = gpu ? 2e12 : 8e9;
      const double t = c->bytes / rate + (sp.routing != Routing::none && !gpu ? 0.002 : 0);
      const double fill = 2.0 * double(s.kv_bytes()) / (gpu ? 1e11 : 6e8);  // amortized over the cases sharing it
      const double ref = 4.0 * s.batch * s.hq * double(ntok) * s.d / (gpu ? 8e9 : 2e9);
      // Per mode: warm-up + samples until 1% error or the 0.5 s budget (cold samples add a flush each).
      c->est_seconds = 0.05 + fill / 4 + ref + 2 * std::min(0.6, std::max(0.25, 10 * t + 0.1));
      if (dev_mem && 2.0 * double(s.kv_bytes()) > 0.6 * double(dev_mem)) {
        out.push_back(kvf::skipped_case(c->name, c->params, "K and V need " + kvf::format_bytes(2.0 * s.kv_bytes()) +
                                                             ", more than 60% of memory"));
        return;
      }
      out.push_back(std::move(c));
    };

    // Every placement of one configuration: dense, block, then the token scatters (each placement's
    // token cases pair with its own block case).
    auto arms_for = [&](const AttnSpec& base0, bool with_dense, const std::vector<ka::Scatter>& scs) {
      for (auto pg : pages) {
        AttnSpec base = base0;
        base.page = pg;
        if (with_dense) {
          AttnSpec d = base;
          d.arm = ka::Arm::dense;
          add_attn(d);
        }
        AttnSpec b = base;
        b.arm = ka::Arm::block;
        add_attn(b);
        for (auto sc : scs) {
          AttnSpec t = base;
          t.arm = ka::Arm::token;
          t.scatter = sc;
          add_attn(t);
        }
      }
    };

    if (want("attention")) {
      const bool huge_attn = gpu || huge_ != "off";
      for (auto dt : dtypes)
        for (auto d : dims)
          for (auto lay : layouts)
            for (auto c : ctxs) {
              AttnSpec base;
              base.s = base_shape();
              base.s.d = d;
              base.s.dtype = dt;
              base.s.layout = lay;
              base.s.ctx = c;
              base.huge = huge_attn;
              base.cluster_mean = cluster_mean;
              bool first = true;
              for (std::size_t ki = 0; ki < keeps.size(); ++ki)
                for (auto b : blocks)
                  for (bool shs : selects) {
                    AttnSpec sp = base;
                    sp.keep = keeps[ki];
                    sp.keep_text = keep_texts[ki];
                    sp.block = b;
                    sp.shared = shs;
                    arms_for(sp, first, scatters);
                    first = false;
                  }
              if (!user_sweep && c == side_ctx && !quick) {
                // Side sweeps at one context: keep fraction and block size.
                for (const char* kt : {"1/2", "1/32"}) {
                  AttnSpec sp = base;
                  sp.keep = parse_keep(kt);
                  sp.keep_text = kt;
                  sp.block = blocks[0];
                  arms_for(sp, false, {ka::Scatter::uniform});
                }
                for (std::uint32_t b : {16u, 32u, 64u, 128u, 256u})
                  if (b != blocks[0]) {
                    AttnSpec sp = base;
                    sp.keep = 0.125;
                    sp.keep_text = "1/8";
                    sp.block = b;
                    arms_for(sp, false, {ka::Scatter::uniform});
                  }
              }
            }
      if (!user_sweep && !quick) {
        // NHD (runs of one head's row) and shared selection (NHD: runs of hkv rows) at the side context.
        for (bool shs : {false, true}) {
          AttnSpec sp;
          sp.s = base_shape();
          sp.s.layout = ka::Layout::NHD;
          sp.s.ctx = side_ctx;
          sp.keep = 0.125;
          sp.keep_text = "1/8";
          sp.block = blocks[0];
          sp.shared = shs;
          sp.huge = gpu || huge_ != "off";
          arms_for(sp, !shs, {ka::Scatter::uniform});
        }
        {
          // fp16 and head dim 64 (and fp8 where the device has it) at the side context.
          std::vector<std::pair<ka::DType, std::uint32_t>> extra = {{ka::DType::fp16, 128u}, {ka::DType::bf16, 64u}};
          if (have_fp8) extra.push_back({ka::DType::fp8_e4m3, 128u});
          for (auto [dt, d] : extra) {
            AttnSpec sp;
            sp.s = base_shape();
            sp.s.dtype = dt;
            sp.s.d = d;
            sp.s.ctx = side_ctx;
            sp.keep = 0.125;
            sp.keep_text = "1/8";
            sp.block = blocks[0];
            arms_for(sp, true, {ka::Scatter::uniform});
          }
        }
      }
    }

    // ---- routing: alone and end to end, block (centroids) vs token (keys), at the side context
    if (want("routing") && !(quick && parts_.empty())) {
      std::vector<std::uint32_t> rctx = contexts_.empty() ? std::vector<std::uint32_t>{side_ctx} : ctxs;
      for (auto c : rctx)
        for (auto pg : pages)
          for (Routing r : {Routing::alone, Routing::attend, Routing::end_to_end})
            for (std::uint32_t ai = 0; ai < 2 + proxy_ranks.size(); ++ai) {
            const ka::Arm arm = ai == 0 ? ka::Arm::block : ka::Arm::token;
            AttnSpec sp;
            sp.s = base_shape();
            sp.s.d = dims[0];
            sp.s.dtype = dtypes[0] == ka::DType::fp8_e4m3 ? ka::DType::bf16 : dtypes[0];
            sp.s.layout = layouts[0];
            sp.s.ctx = c;
            sp.keep = keeps[0];
            sp.keep_text = keep_texts[0];
            sp.block = blocks[0];
            sp.shared = selects[0];
            sp.arm = arm;
            sp.proxy_rank = ai >= 2 ? proxy_ranks[ai - 2] : 0;
            sp.routing = r;
            sp.huge = gpu || huge_ != "off";
            sp.page = pg;
            sp.reuse_steps = reuse;
            add_attn(sp);
          }
    }
    return out;
  }

 private:
  std::vector<std::string> parts_, contexts_, keeps_, blocks_, dtypes_, layouts_, head_dims_, run_bytes_, pool_mib_,
      reuse_, proxy_rank_;
  // Scalars are kept as text: parsed and range-checked in cases(), where an empty or malformed value is one clear line.
  std::string hq_text_, hkv_text_, batch_text_, cluster_mean_text_, gather_mib_text_, page_tokens_text_;
  std::string select_, scatter_, huge_, prefetch_, placement_;
  CLI::App* app_ = nullptr;  // outlives cases(): bench_main owns it
};

}  // namespace

int main(int argc, char** argv) {
  AccessStudy study;
  return kvf::bench_main(argc, argv, study);
}
