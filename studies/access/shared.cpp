// The buffers the access cases share (K/V, centroids, low-rank proxies, the gather pool) and the text
// helpers of the arms.
#include <sstream>

#include "access_env.hpp"

#if defined(KVF_HAVE_CUDA)
#include "access_gpu.hpp"
#include "kvf/cuda_backend.hpp"
#endif

namespace kvf::access_study {

std::string fmt(double x, int prec) {
  std::ostringstream o;
  o.precision(prec);
  o << x;
  return o.str();
}

void Shared::add_fma_floor(std::vector<Param>& params, double flops, double qk_flops_per_lane2, int threads) {
  if (!fma_measured || fma_measured->threads != threads) fma_measured = ka::cpu_fma_peak(threads);
  const ka::FmaPeak& f = *fma_measured;
  // A vdpbf16ps issues no faster than a vfmadd (AMD Zen 4/5, Intel) and does two products per lane: its share
  // of the flops counts half at the fp32 FMA peak, so the floor stays a lower bound on that path.
  const double fma_flops = flops - qk_flops_per_lane2 / 2;
  set_param(params, "fma_peak_gflops", fmt(f.flops_per_s / 1e9, 6));
  set_param(params, "fma_floor_s", fmt(fma_flops / f.flops_per_s, 6));
  set_param(params, "fma_peak_isa", f.isa + ", " + std::to_string(f.threads) + " threads");
  set_param(params, "fma_floor_basis", qk_flops_per_lane2 > 0 ? "qk vdpbf16ps (2 products per fp32 lane), rest fp32 fma"
                                                               : "fp32 fma");
}

std::string ctx_name(std::uint32_t c) { return (c % 1024 == 0) ? std::to_string(c / 1024) + "K" : std::to_string(c); }

std::string join_u32(const std::vector<std::uint32_t>& v) {
  std::string r;
  for (auto x : v) {
    if (!r.empty()) r += ',';
    r += std::to_string(x);
  }
  return r;
}

std::vector<std::string> to_text(const std::vector<std::uint32_t>& v) {
  std::vector<std::string> out;
  for (auto x : v) out.push_back(std::to_string(x));
  return out;
}

bool is_cuda(const Backend& be) { return be.name() == "cuda"; }

KvData& Shared::ensure_kv(Backend& be, const ka::AttnShape& s, bool huge) {
  const std::string key = std::to_string(s.batch) + "x" + std::to_string(s.hq) + "x" + std::to_string(s.hkv) + "x" +
                          std::to_string(s.d) + "x" + std::to_string(s.ctx) + ka::to_string(s.dtype) +
                          ka::to_string(s.layout) + (huge ? "h" : "n");
  if (kv && kv->key == key) return *kv;
  kv.reset();
  auto d = std::make_unique<KvData>();
  d->key = key;
  d->s = s;
  const AllocOptions ao{.huge_pages = huge};
  d->q = BufferHandle(be, s.q_bytes(), MemKind::device, ao);
  d->k = BufferHandle(be, s.kv_bytes(), MemKind::device, ao);
  d->v = BufferHandle(be, s.kv_bytes(), MemKind::device, ao);
  if (!is_cuda(be)) {
    ka::fill_qkv(s, d->q->ptr, d->k->ptr, d->v->ptr, kSeed);
  } else {
#if defined(KVF_HAVE_CUDA)
    const ka::gpu::AttnDims dims{s.batch, s.hq, s.hkv, s.d, s.ctx, s.dtype, s.layout, s.scale()};
    ka::gpu::fill_qkv(dims, d->q->ptr, d->k->ptr, d->v->ptr, kSeed, cuda_stream(be));
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

const std::vector<float>& Shared::centroids(KvData& d, std::uint32_t block, const ka::PageMap& pm) {
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

const ka::LowRank& Shared::lowrank(KvData& d, std::uint32_t r, const ka::PageMap& pm) {
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

const Buffer& Shared::ensure_pool(Backend& be, std::uint64_t bytes, bool huge) {
  const std::string key = std::to_string(bytes) + (huge ? "h" : "n");
  if (pool_key != key) {
    pool.reset();
    pool = BufferHandle(be, bytes, MemKind::device, {.huge_pages = huge});
    be.fill(pool.get(), kSeed);
    pool_key = key;
  }
  return pool.get();
}

std::optional<double> Shared::median(const std::string& key, const std::string& mode) const {
  const auto it = medians.find(key + "|" + mode);
  if (it == medians.end()) return std::nullopt;
  return it->second;
}

}  // namespace kvf::access_study
