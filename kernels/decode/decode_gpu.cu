// GPU decode step: cuBLASLt GEMMs (frontier LtGemm), access split-KV attention, fused small kernels.
#include <cuda_runtime.h>
#include <library_types.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <string>

#include "access.hpp"
#include "access_gpu.hpp"
#include "decode_gpu.hpp"
#include "decode_math.hpp"
#include "prefill_attn_gpu.hpp"
#include "recompute.hpp"
#include "recompute_gpu.hpp"

namespace kvf::decode::gpu {
namespace {

namespace fr = kvf::frontier;
namespace ka = kvf::access;

constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define DC_CHECK(x) check((x), #x)

int grid_for(std::int64_t n) {
  return int(std::max<std::int64_t>(1, std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65536)));
}

// RAII device allocation.
struct Dev {
  void* p = nullptr;
  std::size_t bytes = 0;
  Dev() = default;
  explicit Dev(std::size_t n) : bytes(n) { DC_CHECK(cudaMalloc(&p, std::max<std::size_t>(n, 16))); }
  Dev(Dev&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  Dev& operator=(Dev&& o) noexcept {
    if (this != &o) { reset(); p = o.p; bytes = o.bytes; o.p = nullptr; }
    return *this;
  }
  ~Dev() { reset(); }
  void reset() { if (p) (void)cudaFree(p); p = nullptr; }
  template <class T> T* as() const { return static_cast<T*>(p); }
};
template <class T>
Dev upload(const std::vector<T>& v) {
  Dev d(v.size() * sizeof(T));
  if (!v.empty()) {
    DC_CHECK(cudaMemcpy(d.p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    // A pageable copy on the legacy stream may return before its DMA lands, and the timed streams are
    // non-blocking (not ordered with it): wait here, at setup, so no kernel reads a half-copied input.
    DC_CHECK(cudaDeviceSynchronize());
  }
  return d;
}
Dev upload_bf16(const std::vector<float>& v) {  // exact: the values are bf16 already
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = fr::f32_to_bf16(v[i]);
  return upload(h);
}

// ---------------------------------------------------------------- kernels
__global__ void fill_bf16_kernel(std::uint16_t* p, std::int64_t n, std::uint64_t seed, float scale) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    p[i] = elems::fill_bf16(seed, std::uint64_t(i), scale);
}

// One block per row: optionally h += add (written back), then xn = bf16(h / rms(h) * g).
__global__ void add_rmsnorm_kernel(float* h, const float* add, const float* g, float eps, int H, std::uint16_t* xn) {
  __shared__ float red[kThreads / 32];
  float* hr = h + std::int64_t(blockIdx.x) * H;
  const float* ar = add ? add + std::int64_t(blockIdx.x) * H : nullptr;
  float ss = 0;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float x = hr[i];
    if (ar) { x += ar[i]; hr[i] = x; }
    ss += x * x;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  const float inv = rsqrtf(red[0] / float(H) + eps);
  std::uint16_t* xr = xn + std::int64_t(blockIdx.x) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) xr[i] = elems::rms_elem(hr[i], inv, g[i]);
}

__global__ void qkv_post_kernel(std::int64_t n, const float* qkv, const float* bias, int Hq, int Hkv, int D, int C,
                                const float* cs, std::uint16_t* q, std::uint16_t* kc, std::uint16_t* vc) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    elems::qkv_post(i, qkv, bias, Hq, Hkv, D, C, cs, q, kc, vc);
}
__global__ void prefill_qkv_post_kernel(std::int64_t n, const float* qkv, const float* bias, int Hq, int Hkv, int D,
                                        int N, int cap, const float* cs, std::uint16_t* q, std::uint16_t* kc,
                                        std::uint16_t* vc) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    elems::prefill_qkv_post(i, qkv, bias, Hq, Hkv, D, N, cap, cs, q, kc, vc);
}
__global__ void cast_bf16_kernel(std::int64_t n, const float* in, std::uint16_t* out) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = fr::f32_to_bf16(in[i]);
}
__global__ void swiglu_kernel(std::int64_t n, const float* gu, int I, std::uint16_t* act) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    act[i] = elems::swiglu(i, gu, I);
}
__global__ void add_kernel(std::int64_t n, float* h, const float* d) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    h[i] += d[i];
}

}  // namespace

// ---------------------------------------------------------------- one layer's device state
// What DecodeGpu and PrefillGpu share: one decoder layer's weights on the device (bf16 matrices exactly as the
// twin's bf16-valued fp32 ones, fp32 norms and bias), h0 (fill_f32_uniform, as the twin), and the activations and
// GEMM plans of `rows` rows (a decode batch or a prefill chunk).
struct LayerBuffers {
  int H = 0, Hq = 0, Hkv = 0, D = 0, I = 0, qo = 0;
  float eps = 1e-5f;
  Dev wqkv, wo, wgu, wd, bqkv, g_attn, g_mlp;
  Dev h0, h, xn, qkv, q, attn_b, tmp, gu, act;
  std::vector<float> h0_host;
  fr::gpu::LtGemm g_qkv, g_o, g_gu, g_d;

  // Dimensions, activations and GEMM plans of `rows` rows (no weights, no h).
  void init_shape(const md::ModelShape& m, int rows) {
    H = m.hidden; Hq = m.n_heads; Hkv = m.n_kv_heads; D = m.head_dim; I = m.intermediate;
    eps = float(m.rms_eps);
    const int qd = Hq * D;
    qo = qd + 2 * Hkv * D;
    const std::size_t r = std::size_t(rows);
    xn = Dev(r * H * 2);
    qkv = Dev(r * qo * 4);
    q = Dev(r * qd * 2);
    attn_b = Dev(r * qd * 2);
    tmp = Dev(r * H * 4);
    gu = Dev(r * 2 * I * 4);
    act = Dev(r * I * 2);
    g_qkv.plan(rows, qo, H);
    g_o.plan(rows, H, qd);
    g_gu.plan(rows, 2 * I, H);
    g_d.plan(rows, H, I);
  }
  void init_layer(const fr::LayerWeights& w, const md::ModelShape& m, int rows, std::uint64_t h0_seed) {
    init_shape(m, rows);
    wqkv = upload_bf16(w.wqkv);
    wo = upload_bf16(w.wo);
    wgu = upload_bf16(w.wgu);
    wd = upload_bf16(w.wd);
    if (!w.bqkv.empty()) bqkv = upload(w.bqkv);
    g_attn = upload(w.g_attn);
    g_mlp = upload(w.g_mlp);
    h0_host.resize(std::size_t(rows) * H);
    fr::fill_f32_uniform(h0_host.data(), h0_host.size(), h0_seed, 1.0f);
    h0 = upload(h0_host);
    h = Dev(h0_host.size() * 4);
  }

  // One prefill layer over dims.T rows of h at positions dims.N .. (PrefillGpu::layer, ModelPrefillGpu::layer_chunk):
  // their K/V appended to kc/vc, h updated in place.
  void prefill_layer(float* hr, const float* cs, std::uint16_t* kc, std::uint16_t* vc, float* ws,
                     const PrefillAttnDims& dims, const elems::PfPlan& plan, cudaStream_t s) {
    const int T = dims.T;
    add_rmsnorm_kernel<<<T, kThreads, 0, s>>>(hr, nullptr, g_attn.as<float>(), eps, H, xn.as<std::uint16_t>());
    DC_CHECK(cudaGetLastError());
    g_qkv.run(xn.p, wqkv.p, qkv.p, s);
    const std::int64_t nq = std::int64_t(T) * (Hq + 2 * Hkv) * (D / 2);
    prefill_qkv_post_kernel<<<grid_for(nq), kThreads, 0, s>>>(nq, qkv.as<float>(), bqkv.as<float>(), Hq, Hkv, D,
                                                               dims.N, dims.cap, cs, q.as<std::uint16_t>(), kc, vc);
    DC_CHECK(cudaGetLastError());
    prefill_attention(dims, plan, q.as<std::uint16_t>(), kc, vc, ws, attn_b.as<std::uint16_t>(), s);
    g_o.run(attn_b.p, wo.p, tmp.p, s);
    add_rmsnorm_kernel<<<T, kThreads, 0, s>>>(hr, tmp.as<float>(), g_mlp.as<float>(), eps, H, xn.as<std::uint16_t>());
    DC_CHECK(cudaGetLastError());
    g_gu.run(xn.p, wgu.p, gu.p, s);
    const std::int64_t ni = std::int64_t(T) * I;
    swiglu_kernel<<<grid_for(ni), kThreads, 0, s>>>(ni, gu.as<float>(), I, act.as<std::uint16_t>());
    DC_CHECK(cudaGetLastError());
    g_d.run(act.p, wd.p, tmp.p, s);
    const std::int64_t nh = std::int64_t(T) * H;
    add_kernel<<<grid_for(nh), kThreads, 0, s>>>(nh, hr, tmp.as<float>());
    DC_CHECK(cudaGetLastError());
  }
};

// ---------------------------------------------------------------- DecodeGpu
struct DecodeGpu::Impl : LayerBuffers {
  int B = 0, C = 0;
  RopeRow rope;
  Dev cs;
  std::vector<Dev> k, v;
  Dev attn, idx, ws;  // attn: the split-KV kernel's fp32 output
  ka::gpu::AttnDims dims{};
  ka::SelGeom sel{};
  ka::gpu::AttnPlan plan{};
};

std::size_t DecodeGpu::device_bytes(const md::ModelShape& m, int B, int C, int kv_copies) {
  return std::size_t(layer_params(m) * 2) + std::size_t(kv_copies) * std::size_t(kv_layer_bytes(m, B, C)) +
         std::size_t(B) * (std::size_t(m.hidden) * 16 + std::size_t(m.intermediate) * 12 + std::size_t(m.q_dim()) * 16);
}

DecodeGpu::DecodeGpu(const fr::LayerWeights& w, const md::ModelShape& m, int B, int C, int kv_copies,
                     std::uint64_t seed, int sm_count, cudaStream_t s)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.B = B; d.C = C;
  d.init_layer(w, m, B, seed + 1);
  const int qd = d.Hq * d.D;
  d.attn = Dev(std::size_t(B) * qd * 4);
  d.rope = rope_row(m, C - 1);
  d.cs = upload(d.rope.cs);
  const std::int64_t kvn = std::int64_t(B) * d.Hkv * C * d.D;
  for (int c = 0; c < kv_copies; ++c) {
    d.k.emplace_back(std::size_t(kvn) * 2);
    d.v.emplace_back(std::size_t(kvn) * 2);
    fill_bf16_kernel<<<grid_for(kvn), kThreads, 0, s>>>(d.k.back().as<std::uint16_t>(), kvn, seed + 10 + 2 * c, 1.0f);
    fill_bf16_kernel<<<grid_for(kvn), kThreads, 0, s>>>(d.v.back().as<std::uint16_t>(), kvn, seed + 11 + 2 * c, 1.0f);
    DC_CHECK(cudaGetLastError());
  }
  // Dense selection (every token, entries of 16) and the access study's split-KV plan.
  ka::AttnShape sh;
  sh.batch = B; sh.hq = d.Hq; sh.hkv = d.Hkv; sh.d = d.D; sh.ctx = C; sh.dtype = ka::DType::bf16;
  sh.layout = ka::Layout::HND;
  ka::validate_shape(sh);
  const auto sel = ka::select_dense(sh, 16);
  d.sel = sel.geom;
  d.idx = upload(sel.idx);
  d.dims = {std::uint32_t(B), std::uint32_t(d.Hq), std::uint32_t(d.Hkv), std::uint32_t(d.D), std::uint32_t(C),
            ka::DType::bf16, ka::Layout::HND, sh.scale()};
  // Fused merge (one attention kernel per layer): its tickets live in the workspace, zeroed once here; every call
  // leaves them zero, and the layers of a step use the workspace one after another on one stream.
  d.plan = ka::gpu::plan_attention(d.dims, d.sel, sm_count, ka::gpu::AttnMerge::fused);
  d.ws = Dev(ka::gpu::attention_workspace_floats(d.dims, d.plan) * 4);
  DC_CHECK(cudaMemsetAsync(d.ws.p, 0, d.ws.bytes, s));
  // Load every kernel module once before anything is timed (lazy loading under a blocking kernel deadlocks).
  step(1, s);
  DC_CHECK(cudaStreamSynchronize(s));
}

DecodeGpu::~DecodeGpu() = default;
int DecodeGpu::copies() const { return int(impl_->k.size()); }

std::vector<float> DecodeGpu::hidden(cudaStream_t s) const {
  std::vector<float> h(impl_->h0_host.size());
  DC_CHECK(cudaMemcpyAsync(h.data(), impl_->h.p, h.size() * 4, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return h;
}

void DecodeGpu::poison_hidden(cudaStream_t s) { DC_CHECK(cudaMemsetAsync(impl_->h.p, 0xFF, impl_->h.bytes, s)); }

void DecodeGpu::layer(int copy, cudaStream_t s) {
  Impl& d = *impl_;
  const int B = d.B, qd = d.Hq * d.D;
  add_rmsnorm_kernel<<<B, kThreads, 0, s>>>(d.h.as<float>(), nullptr, d.g_attn.as<float>(), d.eps, d.H,
                                            d.xn.as<std::uint16_t>());
  d.g_qkv.run(d.xn.p, d.wqkv.p, d.qkv.p, s);
  const std::int64_t nq = std::int64_t(B) * (d.Hq + 2 * d.Hkv) * (d.D / 2);
  qkv_post_kernel<<<grid_for(nq), kThreads, 0, s>>>(nq, d.qkv.as<float>(), d.bqkv.as<float>(), d.Hq, d.Hkv, d.D, d.C,
                                                     d.cs.as<float>(), d.q.as<std::uint16_t>(),
                                                     d.k[copy].as<std::uint16_t>(), d.v[copy].as<std::uint16_t>());
  ka::gpu::attention(d.dims, d.q.p, d.k[copy].p, d.v[copy].p, d.sel, d.idx.as<std::uint32_t>(), d.plan,
                     d.ws.as<float>(), d.attn.as<float>(), s);
  const std::int64_t na = std::int64_t(B) * qd;
  cast_bf16_kernel<<<grid_for(na), kThreads, 0, s>>>(na, d.attn.as<float>(), d.attn_b.as<std::uint16_t>());
  d.g_o.run(d.attn_b.p, d.wo.p, d.tmp.p, s);
  add_rmsnorm_kernel<<<B, kThreads, 0, s>>>(d.h.as<float>(), d.tmp.as<float>(), d.g_mlp.as<float>(), d.eps, d.H,
                                            d.xn.as<std::uint16_t>());
  d.g_gu.run(d.xn.p, d.wgu.p, d.gu.p, s);
  const std::int64_t ni = std::int64_t(B) * d.I;
  swiglu_kernel<<<grid_for(ni), kThreads, 0, s>>>(ni, d.gu.as<float>(), d.I, d.act.as<std::uint16_t>());
  d.g_d.run(d.act.p, d.wd.p, d.tmp.p, s);
  const std::int64_t nh = std::int64_t(B) * d.H;
  add_kernel<<<grid_for(nh), kThreads, 0, s>>>(nh, d.h.as<float>(), d.tmp.as<float>());
  DC_CHECK(cudaGetLastError());  // a failed launch above stays the thread's last error until read here
}

void DecodeGpu::step(int L, cudaStream_t s) {
  Impl& d = *impl_;
  DC_CHECK(cudaMemcpyAsync(d.h.p, d.h0.p, d.h0.bytes, cudaMemcpyDeviceToDevice, s));
  for (int l = 0; l < L; ++l) layer(l % copies(), s);
}

VerifyResult DecodeGpu::verify(const fr::LayerWeights& w, const std::vector<int>& rows, cudaStream_t s) {
  Impl& d = *impl_;
  DC_CHECK(cudaStreamSynchronize(s));
  const std::size_t kvs = std::size_t(d.Hkv) * d.C * d.D;
  std::vector<std::vector<double>> refs(rows.size());
  std::vector<std::uint16_t> kh(kvs), vh(kvs);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::size_t off = std::size_t(rows[r]) * kvs * 2;
    DC_CHECK(cudaMemcpy(kh.data(), d.k[0].as<char>() + off, kvs * 2, cudaMemcpyDeviceToHost));
    DC_CHECK(cudaMemcpy(vh.data(), d.v[0].as<char>() + off, kvs * 2, cudaMemcpyDeviceToHost));
    reference_layer(w, d.h0_host.data() + std::size_t(rows[r]) * d.H, kh.data(), vh.data(), d.C, d.rope, refs[r]);
  }
  DC_CHECK(cudaMemcpyAsync(d.h.p, d.h0.p, d.h0.bytes, cudaMemcpyDeviceToDevice, s));
  layer(0, s);
  std::vector<float> h(d.h0_host.size());
  DC_CHECK(cudaMemcpyAsync(h.data(), d.h.p, h.size() * 4, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return compare_rows(h, d.H, rows, refs);
}

// ---------------------------------------------------------------- prefill chunk
struct PrefillGpu::Impl : LayerBuffers {
  int T = 0, N = 0, cap = 0;
  md::ModelShape m;
  Dev cs;
  Dev k, v;  // bf16 [Hkv][cap][D]
  Dev ws;
  fr::gpu::LtGemm g_kv;  // the K/V rows of Wqkv alone (step_kv)
  elems::PfPlan plan{};
  PrefillAttnDims dims{};
};

std::size_t PrefillGpu::device_bytes(const md::ModelShape& m, int T, int N) {
  const std::size_t t = std::size_t(T), qd = std::size_t(m.q_dim()), qo = qd + 2 * std::size_t(m.kv_dim());
  return std::size_t(layer_params(m) * 2) + std::size_t(kv_layer_bytes(m, 1, N + T)) +
         t * (std::size_t(m.hidden) * (4 * 3 + 2 + 4) + qo * 4 + qd * 2 * 2 + std::size_t(m.intermediate) * (8 + 2)) +
         std::size_t(elems::pf_workspace_floats(elems::pf_plan(T, N, m.n_kv_heads, m.n_heads / std::max(1, m.n_kv_heads),
                                                               1024),
                                                T, m.n_heads, m.head_dim)) * 4 +
         std::size_t(5) * (std::size_t(32) << 20) +                         // five LtGemm workspaces of 32 MiB
         std::size_t(N + T) * std::size_t(m.head_dim) * 4;                  // the RoPE table (cos, sin per pair)
}

PrefillGpu::PrefillGpu(const fr::LayerWeights& w, const md::ModelShape& m, int T, int N, std::uint64_t seed,
                       int sm_count, cudaStream_t s, bool mma_attention)
    : impl_(std::make_unique<Impl>()) {
  if (T < kMinPrefillTokens || T > kMaxPrefillTokens)
    throw std::invalid_argument("PrefillGpu: T " + std::to_string(T) + ": chunk tokens must be 1..4096");
  if (N < 0 || N > kMaxContext)
    throw std::invalid_argument("PrefillGpu: N " + std::to_string(N) + ": prefix must be 0..131072 tokens");
  if (const std::string why = unsupported_reason(m); !why.empty())
    throw std::invalid_argument("PrefillGpu: " + m.name + ": " + why);
  Impl& d = *impl_;
  d.T = T; d.N = N; d.cap = N + T; d.m = m;
  d.init_layer(w, m, T, seed + 21);
  const int kvd = d.Hkv * d.D;
  d.cs = upload(fr::rope_table(fr::rope_inv_freq(m, m.head_dim), d.cap));
  {
    // The twin's prefix (make_prefill_state): bf16(fill_f32_uniform) over the whole [Hkv][cap][D] array.
    const std::size_t n = std::size_t(d.Hkv) * d.cap * d.D;
    std::vector<float> f(n);
    std::vector<std::uint16_t> b(n);
    fr::fill_f32_uniform(f.data(), n, seed + 20, 1.0f);
    fr::f32_to_bf16(f.data(), b.data(), n);
    d.k = upload(b);
    fr::fill_f32_uniform(f.data(), n, seed + 21, 1.0f);
    fr::f32_to_bf16(f.data(), b.data(), n);
    d.v = upload(b);
  }
  d.g_kv.plan(T, 2 * kvd, d.H);
  d.plan = elems::pf_plan(T, N, d.Hkv, d.Hq / d.Hkv, sm_count,
                          mma_attention ? elems::PfKernel::mma : elems::PfKernel::cuda_core);
  d.dims = {T, N, d.cap, d.Hq, d.Hkv, d.D};
  d.ws = Dev(std::size_t(elems::pf_workspace_floats(d.plan, T, d.Hq, d.D)) * 4);
  // Load every kernel module once before anything is timed.
  step(1, s);
  DC_CHECK(cudaStreamSynchronize(s));
}

PrefillGpu::~PrefillGpu() = default;
int PrefillGpu::attention_splits() const { return impl_->plan.splits; }
const char* PrefillGpu::attention_kernel() const { return prefill_attention_kernel_name(impl_->plan.kernel); }

void PrefillGpu::layer(cudaStream_t s) {
  Impl& d = *impl_;
  d.prefill_layer(d.h.as<float>(), d.cs.as<float>(), d.k.as<std::uint16_t>(), d.v.as<std::uint16_t>(), d.ws.as<float>(),
                  d.dims, d.plan, s);
}

void PrefillGpu::step(int L, cudaStream_t s) {
  Impl& d = *impl_;
  DC_CHECK(cudaMemcpyAsync(d.h.p, d.h0.p, d.h0.bytes, cudaMemcpyDeviceToDevice, s));
  for (int l = 0; l < L; ++l) layer(s);
}

void PrefillGpu::step_kv(int L, cudaStream_t s) {
  if (L < 1) throw std::invalid_argument("PrefillGpu::step_kv: L " + std::to_string(L) + ": must be 1 or more");
  Impl& d = *impl_;
  step(L - 1, s);
  const int T = d.T, qd = d.Hq * d.D;
  add_rmsnorm_kernel<<<T, kThreads, 0, s>>>(d.h.as<float>(), nullptr, d.g_attn.as<float>(), d.eps, d.H,
                                            d.xn.as<std::uint16_t>());
  DC_CHECK(cudaGetLastError());
  d.g_kv.run(d.xn.p, d.wqkv.as<std::uint16_t>() + std::size_t(qd) * d.H, d.qkv.p, s);
  // Rows of [K | V]: the post body with no query heads.
  const std::int64_t nkv = std::int64_t(T) * 2 * d.Hkv * (d.D / 2);
  prefill_qkv_post_kernel<<<grid_for(nkv), kThreads, 0, s>>>(nkv, d.qkv.as<float>(),
                                                              d.bqkv.p ? d.bqkv.as<float>() + qd : nullptr, 0, d.Hkv,
                                                              d.D, d.N, d.cap, d.cs.as<float>(), nullptr,
                                                              d.k.as<std::uint16_t>(), d.v.as<std::uint16_t>());
  DC_CHECK(cudaGetLastError());
}

PrefillVerifyResult PrefillGpu::verify(const fr::LayerWeights& w, const std::vector<int>& rows, cudaStream_t s) {
  Impl& d = *impl_;
  DC_CHECK(cudaStreamSynchronize(s));
  DC_CHECK(cudaMemcpyAsync(d.h.p, d.h0.p, d.h0.bytes, cudaMemcpyDeviceToDevice, s));
  layer(s);
  std::vector<float> h(d.h0_host.size());
  std::vector<std::uint16_t> kc(std::size_t(d.Hkv) * d.cap * d.D), vc(kc.size());
  DC_CHECK(cudaMemcpyAsync(h.data(), d.h.p, h.size() * 4, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaMemcpyAsync(kc.data(), d.k.p, kc.size() * 2, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaMemcpyAsync(vc.data(), d.v.p, vc.size() * 2, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return check_prefill_rows(w, d.m, d.T, d.N, d.h0_host.data(), h, kc.data(), vc.data(), rows);
}

std::vector<float> PrefillGpu::hidden(cudaStream_t s) const {
  std::vector<float> h(impl_->h0_host.size());
  DC_CHECK(cudaMemcpyAsync(h.data(), impl_->h.p, h.size() * 4, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return h;
}

std::vector<float> PrefillGpu::appended_kv(cudaStream_t s) const {
  const Impl& d = *impl_;
  const std::size_t per_head = std::size_t(d.T) * d.D;
  std::vector<std::uint16_t> b(2 * d.Hkv * per_head);
  for (int kv = 0; kv < 2; ++kv)
    for (int hk = 0; hk < d.Hkv; ++hk) {
      const std::uint16_t* src = (kv ? d.v : d.k).as<std::uint16_t>() + (std::size_t(hk) * d.cap + d.N) * d.D;
      DC_CHECK(cudaMemcpyAsync(b.data() + (std::size_t(kv) * d.Hkv + hk) * per_head, src, per_head * 2,
                               cudaMemcpyDeviceToHost, s));
    }
  DC_CHECK(cudaStreamSynchronize(s));
  std::vector<float> f(b.size());
  fr::bf16_to_f32(b.data(), f.data(), b.size());
  return f;
}

void PrefillGpu::poison_appended(cudaStream_t s) {
  Impl& d = *impl_;
  for (int hk = 0; hk < d.Hkv; ++hk) {
    const std::size_t at = (std::size_t(hk) * d.cap + d.N) * d.D, n = std::size_t(d.T) * d.D * 2;
    DC_CHECK(cudaMemsetAsync(d.k.as<std::uint16_t>() + at, 0xFF, n, s));
    DC_CHECK(cudaMemsetAsync(d.v.as<std::uint16_t>() + at, 0xFF, n, s));
  }
}

void PrefillGpu::poison_outputs(cudaStream_t s) {
  DC_CHECK(cudaMemsetAsync(impl_->h.p, 0xFF, impl_->h.bytes, s));
  poison_appended(s);
}

VerifyResult PrefillGpu::verify_kv(const fr::LayerWeights& w, const std::vector<int>& rows, cudaStream_t s) {
  Impl& d = *impl_;
  DC_CHECK(cudaStreamSynchronize(s));
  // 0xFF bytes are bf16 NaNs: rows the K/V path fails to write cannot pass as the previous verify's values.
  poison_appended(s);
  step_kv(1, s);
  std::vector<std::uint16_t> kc(std::size_t(d.Hkv) * d.cap * d.D), vc(kc.size());
  DC_CHECK(cudaMemcpyAsync(kc.data(), d.k.p, kc.size() * 2, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaMemcpyAsync(vc.data(), d.v.p, vc.size() * 2, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return check_appended_kv(w, d.m, d.T, d.N, d.h0_host.data(), kc.data(), vc.data(), rows);
}

// ---------------------------------------------------------------- a checkpoint's prefill
struct ModelPrefillGpu::Impl : LayerBuffers {
  int T = 0, cap = 0, sm_count = 0;
  Dev cs, h_all, k, v, ws;  // h_all [cap][H] fp32; k, v bf16 [Hkv][cap][D]
};

namespace {
// The largest split workspace of the chunks t0 = 0, T, .. cap - T (the plan splits more as the prefix grows).
std::int64_t model_prefill_ws_floats(const md::ModelShape& m, int T, int cap, int sm_count) {
  std::int64_t most = 0;
  for (int t0 = 0; t0 + T <= cap; t0 += T)
    most = std::max(most, elems::pf_workspace_floats(
                              elems::pf_plan(T, t0, m.n_kv_heads, m.n_heads / m.n_kv_heads, sm_count), T, m.n_heads,
                              m.head_dim));
  return most;
}
}  // namespace

std::size_t ModelPrefillGpu::device_bytes(const md::ModelShape& m, int T, int cap, int sm_count) {
  const std::size_t t = std::size_t(T), c = std::size_t(cap), H = std::size_t(m.hidden), I = std::size_t(m.intermediate);
  const std::size_t qd = std::size_t(m.q_dim()), qo = qd + 2 * std::size_t(m.kv_dim());
  return std::size_t(layer_params(m) * 2) + (qo + 2 * H) * 4 +                  // one layer's weights
         t * (H * 2 + qo * 4 + qd * 2 * 2 + H * 4 + 2 * I * 4 + I * 2) +       // a chunk's activations
         c * H * 4 + 2 * c * std::size_t(m.kv_dim()) * 2 +                   // h, the K/V cache
         c * std::size_t(m.head_dim) * 4 +                                    // the RoPE table
         std::size_t(model_prefill_ws_floats(m, T, cap, sm_count)) * 4 +
         std::size_t(4) * (std::size_t(32) << 20);                            // four LtGemm workspaces of 32 MiB
}

ModelPrefillGpu::ModelPrefillGpu(const md::ModelShape& m, int T, int cap, const std::vector<float>& cos_sin,
                                 int sm_count)
    : impl_(std::make_unique<Impl>()) {
  if (T < kMinPrefillTokens || T > kMaxPrefillTokens)
    throw std::invalid_argument("ModelPrefillGpu: T " + std::to_string(T) + ": chunk tokens must be 1..4096");
  if (cap < T || cap % T != 0)
    throw std::invalid_argument("ModelPrefillGpu: cap " + std::to_string(cap) + ": a positive multiple of T " +
                                std::to_string(T));
  if (const std::string why = unsupported_reason(m); !why.empty())
    throw std::invalid_argument("ModelPrefillGpu: " + m.name + ": " + why);
  if (cos_sin.size() != std::size_t(cap) * m.head_dim)
    throw std::invalid_argument("ModelPrefillGpu: the RoPE table holds " + std::to_string(cos_sin.size()) +
                                " values, not cap x head dim = " + std::to_string(std::size_t(cap) * m.head_dim));
  Impl& d = *impl_;
  d.T = T; d.cap = cap; d.sm_count = sm_count;
  d.init_shape(m, T);
  const std::size_t H = std::size_t(d.H), qd = std::size_t(d.Hq) * d.D;
  d.wqkv = Dev(std::size_t(d.qo) * H * 2);
  d.wo = Dev(H * qd * 2);
  d.wgu = Dev(2 * std::size_t(d.I) * H * 2);
  d.wd = Dev(H * std::size_t(d.I) * 2);
  d.g_attn = Dev(H * 4);
  d.g_mlp = Dev(H * 4);
  if (m.qkv_bias) d.bqkv = Dev(std::size_t(d.qo) * 4);
  d.cs = upload(cos_sin);
  d.h_all = Dev(std::size_t(cap) * H * 4);
  d.k = Dev(std::size_t(d.Hkv) * cap * d.D * 2);
  d.v = Dev(d.k.bytes);
  d.ws = Dev(std::size_t(model_prefill_ws_floats(m, T, cap, sm_count)) * 4);
}

ModelPrefillGpu::~ModelPrefillGpu() = default;

void ModelPrefillGpu::set_hidden(const std::vector<float>& h, cudaStream_t s) {
  const Impl& d = *impl_;
  if (h.size() * 4 != d.h_all.bytes)
    throw std::invalid_argument("ModelPrefillGpu::set_hidden: " + std::to_string(h.size()) + " values, not cap x hidden");
  DC_CHECK(cudaMemcpyAsync(d.h_all.p, h.data(), d.h_all.bytes, cudaMemcpyHostToDevice, s));
}

void ModelPrefillGpu::upload_layer(const ModelLayerHost& w, cudaStream_t s) {
  Impl& d = *impl_;
  if (!w.wqkv || !w.wo || !w.wgu || !w.wd || !w.g_attn || !w.g_mlp || (w.bqkv != nullptr) != (d.bqkv.p != nullptr))
    throw std::invalid_argument("ModelPrefillGpu::upload_layer: a weight is missing (or a bias the model has not)");
  // Pageable sources: each call returns once its bytes are staged, so the host arrays may be reused.
  DC_CHECK(cudaMemcpyAsync(d.wqkv.p, w.wqkv, d.wqkv.bytes, cudaMemcpyHostToDevice, s));
  DC_CHECK(cudaMemcpyAsync(d.wo.p, w.wo, d.wo.bytes, cudaMemcpyHostToDevice, s));
  DC_CHECK(cudaMemcpyAsync(d.wgu.p, w.wgu, d.wgu.bytes, cudaMemcpyHostToDevice, s));
  DC_CHECK(cudaMemcpyAsync(d.wd.p, w.wd, d.wd.bytes, cudaMemcpyHostToDevice, s));
  DC_CHECK(cudaMemcpyAsync(d.g_attn.p, w.g_attn, d.g_attn.bytes, cudaMemcpyHostToDevice, s));
  DC_CHECK(cudaMemcpyAsync(d.g_mlp.p, w.g_mlp, d.g_mlp.bytes, cudaMemcpyHostToDevice, s));
  if (w.bqkv) DC_CHECK(cudaMemcpyAsync(d.bqkv.p, w.bqkv, d.bqkv.bytes, cudaMemcpyHostToDevice, s));
}

const char* ModelPrefillGpu::attention_kernel() const {
  return prefill_attention_kernel_name(elems::kPfDefaultKernel);  // layer_chunk's plans take the default
}

void ModelPrefillGpu::layer_chunk(int t0, cudaStream_t s) {
  Impl& d = *impl_;
  if (t0 < 0 || t0 % d.T != 0 || t0 + d.T > d.cap)
    throw std::invalid_argument("ModelPrefillGpu::layer_chunk: t0 " + std::to_string(t0) + ": a multiple of T below cap");
  const PrefillAttnDims dims{d.T, t0, d.cap, d.Hq, d.Hkv, d.D};
  const elems::PfPlan plan = elems::pf_plan(d.T, t0, d.Hkv, d.Hq / d.Hkv, d.sm_count);
  d.prefill_layer(d.h_all.as<float>() + std::size_t(t0) * d.H, d.cs.as<float>(), d.k.as<std::uint16_t>(),
                  d.v.as<std::uint16_t>(), d.ws.as<float>(), dims, plan, s);
}

std::vector<float> ModelPrefillGpu::hidden_rows(int r0, int n, cudaStream_t s) const {
  const Impl& d = *impl_;
  if (r0 < 0 || n < 0 || r0 + n > d.cap) throw std::invalid_argument("ModelPrefillGpu::hidden_rows: rows past cap");
  std::vector<float> h(std::size_t(n) * d.H);
  DC_CHECK(cudaMemcpyAsync(h.data(), d.h_all.as<float>() + std::size_t(r0) * d.H, h.size() * 4, cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return h;
}

void ModelPrefillGpu::kv(int n, std::vector<std::uint16_t>& k, std::vector<std::uint16_t>& v, cudaStream_t s) const {
  const Impl& d = *impl_;
  if (n < 0 || n > d.cap) throw std::invalid_argument("ModelPrefillGpu::kv: positions past cap");
  const std::size_t per_head = std::size_t(n) * d.D;
  k.resize(std::size_t(d.Hkv) * per_head);
  v.resize(k.size());
  // One 2D copy each: Hkv rows of n * D values, cap * D apart on the device, packed on the host.
  DC_CHECK(cudaMemcpy2DAsync(k.data(), per_head * 2, d.k.p, std::size_t(d.cap) * d.D * 2, per_head * 2, d.Hkv,
                             cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaMemcpy2DAsync(v.data(), per_head * 2, d.v.p, std::size_t(d.cap) * d.D * 2, per_head * 2, d.Hkv,
                             cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
}

std::vector<std::uint16_t> ModelPrefillGpu::q_rows(int i0, int n, cudaStream_t s) const {
  const Impl& d = *impl_;
  if (i0 < 0 || n < 0 || i0 + n > d.T) throw std::invalid_argument("ModelPrefillGpu::q_rows: rows past the chunk");
  const std::size_t qd = std::size_t(d.Hq) * d.D;
  std::vector<std::uint16_t> q(std::size_t(n) * qd);
  DC_CHECK(cudaMemcpyAsync(q.data(), d.q.as<std::uint16_t>() + std::size_t(i0) * qd, q.size() * 2,
                           cudaMemcpyDeviceToHost, s));
  DC_CHECK(cudaStreamSynchronize(s));
  return q;
}

// ---------------------------------------------------------------- recompute from X
struct RecomputeGpu::Impl {
  int rows = 0, hidden = 0, nkv = 0, D = 0;
  Dev w, x, y, cs, pos, slot, cache;
  fr::gpu::LtGemm gemm;
};
RecomputeGpu::RecomputeGpu(const md::ModelShape& m, int T, int P, std::uint64_t seed, cudaStream_t s)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.rows = T * P;
  d.hidden = m.hidden;
  d.nkv = m.n_kv_heads;
  d.D = m.head_dim;
  const int out = 2 * m.kv_dim();
  std::vector<std::uint16_t> w(std::size_t(out) * m.hidden), x(std::size_t(d.rows) * m.hidden);
  fr::fill_bf16_uniform(w.data(), w.size(), seed + 1, float(std::sqrt(3.0 / m.hidden)));
  fr::fill_bf16_uniform(x.data(), x.size(), seed + 2, 1.0f);
  d.w = upload(w);
  d.x = upload(x);
  d.y = Dev(std::size_t(d.rows) * out * 4);
  const int pos0 = 4096;
  d.cs = upload(fr::rope_table(fr::rope_inv_freq(m, m.head_dim), pos0 + T));
  std::vector<std::int32_t> pos(d.rows);
  for (int r = 0; r < d.rows; ++r) pos[r] = pos0 + r % T;
  d.pos = upload(pos);
  const std::int64_t n_blocks = 2 * ((d.rows + fr::kBlockTokens - 1) / fr::kBlockTokens);
  d.slot = upload(fr::scattered_slots(d.rows, n_blocks, seed + 4));
  d.cache = Dev(std::size_t(n_blocks) * 2 * fr::kBlockTokens * m.kv_dim() * 2);
  d.gemm.plan(d.rows, out, m.hidden);
  run(s);
  DC_CHECK(cudaStreamSynchronize(s));
}
RecomputeGpu::~RecomputeGpu() = default;
void RecomputeGpu::run(cudaStream_t s) {
  Impl& d = *impl_;
  d.gemm.run(d.x.p, d.w.p, d.y.p, s);
  fr::gpu::rope_write(d.y.as<float>(), nullptr, d.rows, d.nkv, d.D, d.cs.as<float>(), d.pos.as<std::int32_t>(),
                      d.slot.as<std::int64_t>(), d.cache.as<std::uint16_t>(), s);
}

// ---------------------------------------------------------------- ceilings
struct GemmCeiling::Impl {
  Dev a, b, y;
  fr::gpu::LtGemm g;
};
GemmCeiling::GemmCeiling(int n, cudaStream_t s) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  const std::int64_t nn = std::int64_t(n) * n;
  d.a = Dev(std::size_t(nn) * 2);
  d.b = Dev(std::size_t(nn) * 2);
  d.y = Dev(std::size_t(nn) * 4);
  fill_bf16_kernel<<<grid_for(nn), kThreads, 0, s>>>(d.a.as<std::uint16_t>(), nn, 1, 1.0f);
  fill_bf16_kernel<<<grid_for(nn), kThreads, 0, s>>>(d.b.as<std::uint16_t>(), nn, 2, 1.0f);
  d.g.plan(n, n, n);
  run(s);
  DC_CHECK(cudaStreamSynchronize(s));
}
GemmCeiling::~GemmCeiling() = default;
void GemmCeiling::run(cudaStream_t s) { impl_->g.run(impl_->a.p, impl_->b.p, impl_->y.p, s); }

ReadCeiling::ReadCeiling(std::size_t bytes, cudaStream_t s) : bytes_(bytes) {
  DC_CHECK(cudaMalloc(&buf_, bytes));
  DC_CHECK(cudaMalloc(reinterpret_cast<void**>(&sum_), 16));
  DC_CHECK(cudaMemsetAsync(buf_, 1, bytes, s));
  run(s);
  DC_CHECK(cudaStreamSynchronize(s));
}
ReadCeiling::~ReadCeiling() {
  if (buf_) (void)cudaFree(buf_);
  if (sum_) (void)cudaFree(sum_);
}
void ReadCeiling::run(cudaStream_t s) { fr::gpu::read_xor(buf_, bytes_, sum_, s); }

}  // namespace kvf::decode::gpu
