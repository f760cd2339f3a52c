// The case of the attention and routing parts: split-KV sparse decode over a selection (dense, block,
// token), optionally routed first (scores + top-k + translation to physical entries). Its parameter
// columns come from the arm declarations (attention.cpp, routing.cpp); this file derives the rest.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>

#include "attn_spec.hpp"
#include "kvf/errors.hpp"
#include "kvf/units.hpp"

#if defined(KVF_HAVE_CUDA)
#include "access_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/cuda_graph.hpp"
#endif

namespace kvf::access_study {
namespace {
#if defined(KVF_HAVE_CUDA)
// --attn-loads' value as the kernel's (auto: best, which the library resolves per K/V type).
ka::gpu::AttnLoads loads_of(const std::string& v) {
  using L = ka::gpu::AttnLoads;
  return v == "regs" ? L::regs : v == "mma" ? L::mma : v == "smem" ? L::smem : L::best;
}
#endif

using kvf::Backend;
using kvf::BufferHandle;
using kvf::MemKind;

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
    pm_ = ka::make_page_map(sp.s.ctx, sp.page, kPageMapKey);
    kb_ = sp.arm == ka::Arm::dense ? 0 : ka::sparse_blocks(sp.s.ctx, sp.block, sp.keep);
    sel_ = make_selection();
    if (sp.compute_control) window_entries_ = fold_into_window(sp.s, sel_);
    if (sp.routing != Routing::none) {
      if (sp.arm == ka::Arm::block) sh->centroids(d, sp.block, pm_);
      if (sp.proxy_rank) recall_ = proxy_recall();
    }
    gpu_ = is_cuda(be);
    if (!gpu_) {
      ka::plan_cpu(sp.s, sel_, ws_);
      // The far prefetch is timed per mode in before_measure; verify runs with it on.
      far_timed_ = ka::attention_cpu_has_far_prefetch(sp.s, ws_) && sp.routing != Routing::alone;
      if (far_timed_) ka::take_far_prefetch(ws_, 0, 1, "not yet");
      out_.assign(sp.s.q_elems(), 0.0f);
      const double qk_dot_flops = ka::attention_cpu_qk_dot(sp.s, ws_) ? attention_flops_ / 2 : 0;  // QK = PV
      if (flops > 0) sh->add_fma_floor(params, flops, qk_dot_flops, ws_.threads);
    } else {
#if defined(KVF_HAVE_CUDA)
      if (gpu_launch_modes() != kvf::launch_modes())
        throw std::logic_error("access: gpu_launch_modes() and kvf::launch_modes() differ");
      dims_ = {sp.s.batch, sp.s.hq, sp.s.hkv, sp.s.d, sp.s.ctx, sp.s.dtype, sp.s.layout, sp.s.scale(), sp.s.page};
      const int sms = kvf::cuda_props(be).multiProcessorCount;
      plan_ = ka::gpu::plan_attention(dims_, sel_.geom, sms,
                                      sp.merge_kernel ? ka::gpu::AttnMerge::kernel : ka::gpu::AttnMerge::fused,
                                      sp.fixed_splits, loads_of(sp.loads));
      plan_.l2_prefetch_steps = sp.l2_prefetch_steps;
      didx_ = BufferHandle(be, sel_.idx.size() * 4, MemKind::device);
      KVF_CUDA_CHECK(cudaMemcpy(didx_->ptr, sel_.idx.data(), sel_.idx.size() * 4, cudaMemcpyHostToDevice));
      // The fused merge's tickets start at zero once; every call leaves them zero.
      const std::size_t wsb = ka::gpu::attention_workspace_floats(dims_, plan_) * 4;
      dws_ = BufferHandle(be, wsb, MemKind::device);
      KVF_CUDA_CHECK(cudaMemsetAsync(dws_->ptr, 0, wsb, kvf::cuda_stream(be)));  // ordered before attention
      dout_ = BufferHandle(be, sp.s.q_elems() * 4, MemKind::device);
      sms_ = sms;
      if (sp.routing != Routing::none) {
        const std::uint64_t n = sp.arm == ka::Arm::block ? sp.s.ctx / sp.block : sp.s.ctx;
        dscores_ = BufferHandle(be, std::uint64_t{sel_.n_lists} * n * 4, MemKind::device);
        dridx_ = BufferHandle(be, sel_.idx.size() * 4, MemKind::device);
        // Top-k scratch, sized on the host and zeroed once (every routing call leaves it reusable).
        const std::size_t tb = ka::gpu::topk_scratch_bytes(sel_.n_lists, sms);
        dtopk_ = BufferHandle(be, tb, MemKind::device);
        KVF_CUDA_CHECK(cudaMemsetAsync(dtopk_->ptr, 0, tb, kvf::cuda_stream(be)));  // ordered before routing
        const std::uint32_t lo = sp.arm == ka::Arm::block ? 1 : sp.block, kp = kb_ * (sp.arm == ka::Arm::block ? 1 : sp.block) - 2 * lo;
        topk_ctas_ = ka::gpu::topk_grid(lo, static_cast<std::uint32_t>(n) - lo, kp, sel_.n_lists, sms).ctas;
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
      if (sp.graph) {
        be.synchronize();  // capture needs an idle stream (the memsets above are queued on it)
        cgraph_ = std::make_unique<kvf::CudaGraph>([this, &be](cudaStream_t) { enqueue(be); }, kvf::cuda_stream(be),
                                                   "access " + config_key);
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
    double err = ka::attention_rel_error(out.data(), ref.data(), out.size());
#if defined(KVF_HAVE_CUDA)
    if (cgraph_) {  // the graph row times the graph: its output must match too (NaN where it writes nothing)
      KVF_CUDA_CHECK(cudaMemsetAsync(dout_->ptr, 0xFF, out.size() * 4, kvf::cuda_stream(be)));
      cgraph_->launch(kvf::cuda_stream(be));
      be.synchronize();
      KVF_CUDA_CHECK(cudaMemcpy(out.data(), dout_->ptr, out.size() * 4, cudaMemcpyDeviceToHost));
      err = std::max(err, ka::attention_rel_error(out.data(), ref.data(), out.size()));
    }
#endif
    err_ = err;
    if (!(err < ka::kAttnTolerance))
      throw kvf::VerifyError("attention output differs from the fp32 reference: max|out-ref|/max|ref| = " +
                             fmt(err) + " >= " + fmt(ka::kAttnTolerance) + " (arm " + ka::to_string(sp.arm) + ")");
  }

  // CPU: the far prefetch (prefetcht1 a block ahead, beside the L1 one) on or off, timed on this case's data in
  // the mode about to be measured, caches flushed before each cold run as before a cold sample: which one wins
  // moves with the core and with where the K/V sit (AMD EPYC Zen 3, 2 threads: on ~10% faster from DRAM at 64K,
  // off ~10% faster with 2K in L3), and the kernel's own calibration (back to back) sees only the hot case.
  void before_measure(Backend& be, const std::string& mode) override {
    if (!far_timed_) return;
    const bool cold = mode == "cold";
    FarTimes& f = far_[cold];
    if (!f.timed) {
      std::tie(f.on_s, f.off_s) = ka::time_far_prefetch(sp.s, data_->q->ptr, data_->k->ptr, data_->v->ptr, sel_, ws_,
                                                        out_.data(), [&] {
                                                          if (cold) be.flush_caches();
                                                        });
      f.timed = true;
    }
    ka::take_far_prefetch(ws_, f.on_s, f.off_s, cold ? "cold, caches flushed, best of 3" : "hot, best of 3");
  }

  void run(Backend& be) override {
#if defined(KVF_HAVE_CUDA)
    if (cgraph_) return cgraph_->launch(kvf::cuda_stream(be));
#endif
    enqueue(be);
  }

  // What one eager execution enqueues (and what the graph row captures).
  void enqueue(Backend& be) {
    if (sp.routing == Routing::alone || sp.routing == Routing::end_to_end) route(be);
    if (sp.routing != Routing::alone) attend(be);
  }

  void teardown(Backend&) override {
    ws_ = {};
    out_ = {};
#if defined(KVF_HAVE_CUDA)
    cgraph_.reset();
    didx_.reset();
    dws_.reset();
    dout_.reset();
#endif
  }

  std::string after_measure(Backend&, const kvf::Summary& m, const std::string& mode) override {
    std::string n = "verify_err=" + fmt(err_, 2);
    if (sp.compute_control) {
      sh->record(compute_control_key(config_key), mode, m.median);
      return n + "; control: the dense row's loop over the same tokens, every list folded into its first " +
             std::to_string(window_entries_) + (window_entries_ == 1 ? " entry of " : " entries of ") +
             std::to_string(sel_.geom.span) + " tokens (" +
             format_bytes(double(window_entries_) * sel_.geom.span * 2.0 * sp.s.hkv * sp.s.d *
                          ka::dtype_bytes(sp.s.dtype)) +
             " of K and V, in cache): its arithmetic and instructions without DRAM" +
             (ws_.path_note.empty() ? std::string() : "; " + ws_.path_note);
    }
    if (sp.proxy_rank) n += "; recall_vs_key_topk=" + fmt(recall_, 3);
    if (sp.routing == Routing::alone || sp.routing == Routing::end_to_end) {
#if defined(KVF_HAVE_CUDA)
      if (gpu_)
        n += "; topk=radix_select 11/11/10-bit, " + std::to_string(topk_ctas_) + " CTAs/list, 5 launches";
#endif
      if (!gpu_) n += "; topk=nth_element of (score, index) keys per list";
    }
#if defined(KVF_HAVE_CUDA)
    if (cgraph_) {
      n += "; launch=graph of " + std::to_string(cgraph_->kernel_nodes()) + " kernels";
      // The eager row of the same case ran just before (launch is the last axis of the product).
      const std::string eager = sp.routing == Routing::none ? config_key : route_key + to_string(sp.routing);
      if (auto em = sh->median(eager, mode)) n += "; eager_over_graph=" + fmt(*em / m.median);
      return n;
    }
#endif
    if (sp.routing != Routing::none) sh->record(route_key + to_string(sp.routing), mode, m.median);
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
    if (!gpu_ && !ws_.path_note.empty()) n += "; " + ws_.path_note;  // the CPU path chosen at run time
#if defined(KVF_HAVE_CUDA)
    // The grid the split policy chose (ka::gpu_attn_splits), so a row's time can be read against it.
    if (gpu_)
      n += "; grid=" + std::to_string(plan_.split.n_splits) + " splits x " +
           std::to_string(std::uint64_t{sp.s.batch} * sp.s.hkv * plan_.head_groups) + " items, " +
           std::to_string(plan_.split.chunk) + " tokens per split, " + std::to_string(sms_) + " SMs" +
           (sp.fixed_splits ? " (fixed by --attn-splits)" : " (wave-aware policy)") +
           "; merge=" + (plan_.merge == ka::gpu::AttnMerge::fused ? "fused" : "kernel") +
           "; loads=" + ka::gpu::to_string(plan_.loads) +
           (plan_.ring_stages ? " (" + std::to_string(plan_.ring_stages) + " stages)" : std::string()) + ", " +
           std::to_string(plan_.ctas_per_sm) + " CTAs/SM" +
           "; l2_prefetch_steps=" + std::to_string(plan_.l2_prefetch_steps);
#endif
    if (sp.routing != Routing::none) return n;
    if (sp.arm == ka::Arm::dense) {
      sh->record(config_key, mode, m.median);
      if (auto rm = sh->median(kv_read_key(config_key), mode)) n += "; vs_kv_read=" + fmt(*rm / m.median);
      // The loop in cache (hot only) over this row: 1 is a row bound by its own compute, below 1 the reads cost.
      if (auto cm = sh->median(compute_control_key(config_key), "hot")) n += "; vs_compute=" + fmt(*cm / m.median);
    }
    if (sp.arm == ka::Arm::block) sh->record(pair_key, mode, m.median);
    if (sp.arm != ka::Arm::dense)
      if (auto dm = sh->median(config_key, mode)) n += "; speedup_vs_dense=" + fmt(*dm / m.median);
    if (sp.arm == ka::Arm::token)
      if (auto bm = sh->median(pair_key, mode)) n += "; token_over_block=" + fmt(m.median / *bm);  // as the report
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
    // The compute control loads the dense row's count of bytes, but from cache: no memory bytes, so no GB/s that
    // reads as a memory rate (its note names the bytes it keeps in cache).
    bytes = sp.compute_control ? 0 : (sp.routing == Routing::alone ? 0 : att_b) + rb;
    attention_flops_ = sp.routing == Routing::alone ? 0 : att_f;
    flops = attention_flops_ + rf;
  }

 private:
  double attention_flops_ = 0;  // of `flops`: QK and PV (the rest is routing)
  KvData* data_ = nullptr;
  ka::PageMap pm_{};
  std::uint32_t kb_ = 0;
  ka::Selection sel_, routed_;
  ka::AttnWorkspace ws_;
  std::vector<float> out_, scores_;
  bool gpu_ = false;
  double err_ = 0, recall_ = 0;
  struct FarTimes {
    bool timed = false;
    double on_s = 0, off_s = 0;
  };
  bool far_timed_ = false;  // the CPU kernel has a far prefetch, and this case attends
  std::uint32_t window_entries_ = 0;  // arm=compute: the entries every list is folded into
  FarTimes far_[2];         // per mode: hot, cold
#if defined(KVF_HAVE_CUDA)
  ka::gpu::AttnDims dims_{};
  ka::gpu::AttnPlan plan_{};
  BufferHandle didx_, dws_, dout_, dscores_, dridx_, dtopk_;
  std::unique_ptr<kvf::CudaGraph> cgraph_;
  int sms_ = 0;
  std::uint32_t topk_ctas_ = 0;
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
    // Exact: the lists are the CPU top-k (topk_by_key) of the GPU's own scores, entry for entry.
    {
      std::vector<float> gs(std::uint64_t{g.n_lists} * n);
      KVF_CUDA_CHECK(cudaMemcpy(gs.data(), dscores_->ptr, gs.size() * 4, cudaMemcpyDeviceToHost));
      const std::uint32_t ne = g.geom.n_entries;
      for (std::uint32_t l = 0; l < g.n_lists; ++l) {
        const auto ref = ka::topk_by_key(gs.data() + std::uint64_t{l} * n, n, nlo, n - nhi, ne - nlo - nhi);
        if (!std::equal(ref.begin(), ref.end(), g.idx.begin() + std::uint64_t{l} * ne))
          throw kvf::VerifyError("GPU routing: list " + std::to_string(l) +
                                 " differs from the CPU top-k of the GPU's own scores");
      }
    }
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
                              dtopk_.get().as<std::uint32_t>(), sms_, kvf::cuda_stream(be));
      else if (sp.proxy_rank) {
        const auto& lr = data_->dlowrank.at(Shared::cent_key(sp.proxy_rank, pm_));
        ka::gpu::route_tokens_lowrank(dims_, data_->q->ptr, lr.first.get().as<float>(), lr.second.get().as<float>(),
                                      sp.proxy_rank, sp.block, kb_, sp.shared, pm_, dscores_.get().as<float>(),
                                      dridx_.get().as<std::uint32_t>(), dtopk_.get().as<std::uint32_t>(), sms_,
                                      kvf::cuda_stream(be));
      } else
        ka::gpu::route_tokens(dims_, data_->q->ptr, data_->k->ptr, sp.block, kb_, sp.shared, pm_,
                              dscores_.get().as<float>(), dridx_.get().as<std::uint32_t>(),
                              dtopk_.get().as<std::uint32_t>(), sms_, kvf::cuda_stream(be));
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

}  // namespace

std::unique_ptr<Case> make_attn_case(const Point& p, AccessEnv& env) {
  const bool gpu = env.target.gpu;
  const AttnSpec sp = spec_of(p, env);
  const auto& s = sp.s;
  auto c = std::make_unique<AttnCase>();
  c->sh = env.shared;
  c->config_key = cfg_name(sp);
  c->pair_key = c->config_key + "/k" + keep_name(sp) + "/B" + std::to_string(sp.block) + "/" +
                (sp.shared ? "shared" : "per_head");
  c->route_key = c->pair_key + "/" + arm_name(sp) + "/route-";
  std::uint64_t ntok = 0;
  const ka::Selection shape = shape_of(sp, ntok);
  c->sp = sp;
  c->account(shape);
  const double ws = 2.0 * s.batch * s.hkv * double(ntok) * s.d * ka::dtype_bytes(s.dtype);
  c->params = {{"working_set_bytes", fmt(ws, 12)},
               {"llc_bytes", std::to_string(env.llc)},
               {"working_set_vs_llc", fmt(ws / double(env.llc))},
               {"kv_bytes", fmt(2.0 * double(s.kv_bytes()), 12)}};
  if (env.dev_mem && 2.0 * double(s.kv_bytes()) > 0.6 * double(env.dev_mem))
    return skipped_case("", c->params, "K and V need " + format_bytes(2.0 * s.kv_bytes()) + ", more than 60% of memory");
  if (p["arm"] == "read") return make_kv_read_case(env, s, sp.huge, c->config_key, c->params);
#if defined(KVF_HAVE_CUDA)
  if (gpu && sp.l2_prefetch_steps && ka::gpu::resolve_loads(loads_of(sp.loads), s.dtype) == ka::gpu::AttnLoads::mma)
    return skipped_case("", c->params, "--l2-prefetch-steps: the mma kernel has none (--attn-loads regs or smem)");
#endif
  if (sp.compute_control) {
    // In cache by construction: hot only, and no memory ceiling bounds it.
    c->cold = false;
  } else {
    c->ceiling = CeilingRef{"stream", {{"op", "read"}}, "gbps"};
  }
  c->hot_in_cache = ws < 4.0 * double(env.llc);  // as the stream study: under 4x the LLC, partly cache
  const double rate = gpu ? 2e12 : 8e9;
  // The compute control runs the dense row's loop (from cache): time it as the bytes it loads.
  const double loaded = sp.compute_control ? ka::attention_bytes(s, shape) : c->bytes;
  const double t = loaded / rate + (sp.routing != Routing::none && !gpu ? 0.002 : 0);
  const double fill = 2.0 * double(s.kv_bytes()) / (gpu ? 1e11 : 6e8);  // amortized over the cases sharing it
  const double ref = 4.0 * s.batch * s.hq * double(ntok) * s.d / (gpu ? 8e9 : 2e9);
  // Per mode: warm-up + samples until 1% error or the 0.5 s budget (cold samples add a flush each).
  c->est_seconds = 0.05 + fill / 4 + ref + 2 * std::min(0.6, std::max(0.25, 10 * t + 0.1));
  // The CPU far prefetch timed on and off, 3 rounds per mode, a flush before each cold run (before_measure).
  if (!gpu && sp.routing != Routing::alone) c->est_seconds += 12 * t + 6 * 2.0 * double(env.llc) / 10e9;
  return c;
}

}  // namespace kvf::access_study
