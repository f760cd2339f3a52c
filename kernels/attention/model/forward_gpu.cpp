// The Llama-family forward pass on a GPU (kvf/attention/forward.hpp: forward_gpu). Host code only: the layer runs
// through the idleness study's prefill kernels (kvf::decode::gpu::ModelPrefillGpu: cuBLASLt GEMMs, the fused small
// kernels, the causal prefill attention), checked against kvf::decode's fp64 reference on rows of layer 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "forward_detail.hpp"
#include "kvf/attention/forward.hpp"
#include "kvf/errors.hpp"

#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>

#include "decode.hpp"
#include "decode_gpu.hpp"
#include "layers.hpp"
#include "recompute.hpp"
#endif

namespace kvf::attention {

#if !defined(KVF_HAVE_CUDA)
bool forward_gpu_built() { return false; }
ForwardResult forward_gpu(const Checkpoint&, const std::vector<std::int32_t>&, const ForwardOptions&, int,
                          std::string*) {
  throw std::runtime_error("forward_gpu: not available: this build has no CUDA (configure with the CUDA toolkit)");
}
#else
bool forward_gpu_built() { return true; }

namespace {

namespace dg = kvf::decode::gpu;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("forward_gpu: ") + what + ": " + cudaGetErrorString(e));
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { (void)cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// One layer in host memory as ModelPrefillGpu takes it: the bf16 matrices stacked as the CPU pass stacks them,
// in one buffer that is pinned where cudaHostAlloc gives it (the upload then runs at the link's pinned rate,
// 55 GB/s on an H200 host against 7-9 GB/s pageable, and returns at once), and the fp32 norms and biases.
// Every layer of a model has the same sizes: the buffer is sized by the first and reused.
class LayerHost {
 public:
  LayerHost() = default;
  LayerHost(const LayerHost&) = delete;
  LayerHost& operator=(const LayerHost&) = delete;
  ~LayerHost() {
    if (pinned_) (void)cudaFreeHost(pinned_);
  }
  // Layer l's weights, read by every OpenMP thread (detail::stack_bf16).
  void fill(const Checkpoint& ck, int l) {
    const detail::LayerTensors t = detail::layer_tensors(ck, l);
    const std::vector<std::vector<TensorView>> mats{t.qkv, {t.o}, t.gu, {t.d}};
    std::size_t total = 0;
    for (std::size_t i = 0; i < mats.size(); ++i) {
      n_[i] = 0;
      for (const auto& p : mats[i]) n_[i] += std::size_t(p.info->numel());
      total += n_[i];
    }
    reserve(total);
    std::vector<TensorView> all;
    for (const auto& m : mats) all.insert(all.end(), m.begin(), m.end());
    detail::stack_bf16(all, base_);
    g_attn = detail::vec_f32(t.g_in);
    g_mlp = detail::vec_f32(t.g_post);
    bias = detail::vec_f32(t.bias);
  }
  // Matrix i of [wqkv, wo, wgu, wd] and its element count.
  const std::uint16_t* mat(int i) const {
    std::size_t at = 0;
    for (int j = 0; j < i; ++j) at += n_[j];
    return base_ + at;
  }
  std::size_t elems(int i) const { return n_[i]; }
  std::uint64_t bytes() const { return 2 * (n_[0] + n_[1] + n_[2] + n_[3]); }
  bool pinned() const { return pinned_ != nullptr; }
  dg::ModelLayerHost view() const {
    return {mat(0), mat(1), mat(2), mat(3), g_attn.data(), g_mlp.data(), bias.empty() ? nullptr : bias.data()};
  }
  std::vector<float> g_attn, g_mlp, bias;

 private:
  void reserve(std::size_t total) {
    if (total <= cap_) return;
    if (pinned_) (void)cudaFreeHost(pinned_);
    pinned_ = nullptr;
    void* p = nullptr;
    if (cudaHostAlloc(&p, total * 2, cudaHostAllocDefault) == cudaSuccess) {
      pinned_ = static_cast<std::uint16_t*>(p);
      base_ = pinned_;
      own_.clear();
    } else {
      (void)cudaGetLastError();  // pinned memory refused (a limit): pageable, the upload is slower, not wrong
      own_.resize(total);
      base_ = own_.data();
    }
    cap_ = total;
  }
  std::uint16_t* pinned_ = nullptr;
  std::vector<std::uint16_t> own_;
  std::uint16_t* base_ = nullptr;
  std::size_t cap_ = 0, n_[4] = {0, 0, 0, 0};
};

// The same layer as kvf::decode's reference reads it (fp32 arrays holding the bf16 values the GPU multiplies).
frontier::LayerWeights reference_weights(const LayerHost& w, const models::ModelShape& m) {
  frontier::LayerWeights r;
  r.hidden = m.hidden, r.n_heads = m.n_heads, r.n_kv_heads = m.n_kv_heads, r.head_dim = m.head_dim;
  r.intermediate = m.intermediate, r.eps = float(m.rms_eps);
  auto widen = [&](int i) {
    std::vector<float> f(w.elems(i));
    frontier::bf16_to_f32(w.mat(i), f.data(), f.size());
    return f;
  };
  r.wqkv = widen(0), r.wo = widen(1), r.wgu = widen(2), r.wd = widen(3);
  r.g_attn = w.g_attn, r.g_mlp = w.g_mlp, r.bqkv = w.bias;
  return r;
}

// Layer 0 of the pass at rows 0, C/2 and C-1: each row's h after the layer against decode::reference_layer over
// the pass's own K/V before it (the row's own computed by the reference, as check_prefill_rows does), and the K/V
// the pass wrote there against decode::reference_qkv. Throws std::runtime_error with the figures when either fails.
std::string check_layer0(const dg::ModelPrefillGpu& gpu, const LayerHost& w0, const models::ModelShape& m,
                         const std::vector<float>& h0, const std::vector<double>& inv_freq, int C, cudaStream_t s) {
  const frontier::LayerWeights rw = reference_weights(w0, m);
  std::vector<int> rows{0, C / 2, C - 1};
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const int H = m.hidden, kvd = m.kv_dim(), D = m.head_dim;
  std::vector<float> h_got, kv_got;
  std::vector<std::vector<double>> h_ref, kv_ref;
  std::vector<int> at;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const int r = rows[i];
    std::vector<std::uint16_t> kb, vb;
    gpu.kv(r + 1, kb, vb, s);  // [Hkv][r + 1][D]
    const auto hr = gpu.hidden_rows(r, 1, s);
    h_got.insert(h_got.end(), hr.begin(), hr.end());
    const auto rope = decode::rope_row(inv_freq, r);
    h_ref.emplace_back();
    decode::reference_layer(rw, h0.data() + std::size_t(r) * H, kb.data(), vb.data(), r + 1, rope, h_ref.back());
    std::vector<float> q, kn, vn;
    decode::reference_qkv(rw, h0.data() + std::size_t(r) * H, rope, q, kn, vn);
    kv_ref.emplace_back();
    for (const auto* ref : {&kn, &vn}) kv_ref.back().insert(kv_ref.back().end(), ref->begin(), ref->end());
    for (const auto* got : {&kb, &vb})
      for (int hk = 0; hk < m.n_kv_heads; ++hk)
        for (int d = 0; d < D; ++d)
          kv_got.push_back(frontier::bf16_to_f32((*got)[(std::size_t(hk) * (r + 1) + r) * D + d]));
    at.push_back(int(i));
  }
  const decode::VerifyResult hv = decode::compare_rows(h_got, H, at, h_ref);
  const decode::VerifyResult kv = decode::compare_rows(kv_got, 2 * kvd, at, kv_ref);
  const std::string text = "layer 0 at rows 0, C/2, C-1 against the fp64 reference: h " + hv.text() + "; K/V " + kv.text();
  if (!hv.ok() || !kv.ok()) throw std::runtime_error("forward_gpu: verify failed: " + text);
  return text;
}

}  // namespace

ForwardResult forward_gpu(const Checkpoint& ck, const std::vector<std::int32_t>& tokens, const ForwardOptions& opt,
                          int device, std::string* gpu_note) {
  const auto t_start = std::chrono::steady_clock::now();
  const auto& cfg = ck.config();
  const auto& m = cfg.shape;
  detail::validate_forward(cfg, tokens, opt);
  if (opt.mask)
    throw UsageError("forward_gpu: a selection mask is not built on the GPU (the needle decode runs on the CPU, cached)");
  if (const std::string why = decode::unsupported_reason(m); !why.empty())
    throw UsageError(cfg.source + ": the GPU forward does not support this model (" + why + "); --backend cpu runs it");
  int count = 0;
  cuda_ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw UsageError("forward_gpu: device " + std::to_string(device) + ": " + std::to_string(count) + " GPU(s) visible");
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const Stream stream;
  const cudaStream_t s = stream.s;

  const int C = int(tokens.size()), M = opt.queries, H = m.hidden, D = m.head_dim;
  const int T = std::min({opt.chunk, C, decode::kMaxPrefillTokens});
  const int cap = (C + T - 1) / T * T;
  std::size_t free_b = 0, total_b = 0;
  cuda_ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const std::size_t need = dg::ModelPrefillGpu::device_bytes(m, T, cap, prop.multiProcessorCount);
  if (need > free_b)
    throw UsageError("forward_gpu: " + std::to_string(C) + " tokens in chunks of " + std::to_string(T) + " need " +
                     std::to_string(need >> 20) + " MiB of device memory; " + prop.name + " has " +
                     std::to_string(free_b >> 20) + " MiB free (a shorter prompt or --chunk, or --backend cpu)");

  const auto inv_freq = hf_inv_freq(m);
  std::vector<float> h(std::size_t(cap) * H, 0.0f);
  detail::embed_rows(ck, tokens, h.data());
  dg::ModelPrefillGpu gpu(m, T, cap, frontier::rope_table(inv_freq, cap), prop.multiProcessorCount);
  gpu.set_hidden(h, s);

  ForwardResult r;
  auto& cap_ = r.capture;
  detail::init_capture(m, C, opt, cap_);
  std::string check;
  std::uint64_t layer_bytes = 0;
  // Phase clock: each tick charges the time since the last one to a phase (the GPU's after a stream sync).
  // setup: the device, its buffers, the embeddings and the capture's arrays, before the clock starts.
  auto last = std::chrono::steady_clock::now();
  r.phase_s = {{"weights_host", 0.0}, {"upload", 0.0}, {"layers_gpu", 0.0}, {"capture", 0.0}, {"check", 0.0},
               {"logits", 0.0}, {"setup", std::chrono::duration<double>(last - t_start).count()}};
  auto tick = [&](std::size_t phase, bool sync) {
    if (sync) cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const auto now = std::chrono::steady_clock::now();
    r.phase_s[phase].second += std::chrono::duration<double>(now - last).count();
    last = now;
  };
  // Two host stages: layer l + 1 is read into one while the GPU runs layer l from the other (its upload was
  // synchronized with before the stage is filled again).
  LayerHost stage[2];
  stage[0].fill(ck, 0);
  // A captured layer's K/V come back into these (bf16, 128 MiB at 32K for an 8B model), kept across layers so their
  // pages are faulted in once, not once per layer.
  std::vector<std::uint16_t> kb, vb;
  tick(0, false);
  for (int l = 0; l < m.layers; ++l) {
    const LayerHost& w = stage[l % 2];
    layer_bytes = std::max<std::uint64_t>(layer_bytes, w.bytes());
    gpu.upload_layer(w.view(), s);  // pinned: enqueued (the transfer counts in layers_gpu); pageable: staged
    tick(1, false);
    bool next_read = false;
    auto read_next = [&] {  // once per layer, while the GPU works: the next layer into the other stage
      if (!next_read && l + 1 < m.layers) stage[(l + 1) % 2].fill(ck, l + 1);
      next_read = true;
      tick(0, false);
    };
    const auto it = std::find(cap_.layer_ids.begin(), cap_.layer_ids.end(), l);
    const int c = opt.capture && it != cap_.layer_ids.end() ? int(it - cap_.layer_ids.begin()) : -1;
    for (int t0 = 0; t0 < C; t0 += T) {
      gpu.layer_chunk(t0, s);
      const int i0 = std::max(C - M, t0), i1 = std::min(t0 + T, C);  // captured query rows in this chunk
      if (c >= 0 && i0 < i1) {
        read_next();
        tick(2, true);
        const auto qb = gpu.q_rows(i0 - t0, i1 - i0, s);  // [n][Hq][D]
        for (int i = i0; i < i1; ++i)
          for (int hq = 0; hq < m.n_heads; ++hq)
            frontier::bf16_to_f32(qb.data() + (std::size_t(i - i0) * m.n_heads + hq) * D,
                                  cap_.q.data() + ((std::size_t(c) * m.n_heads + hq) * M + (i - (C - M))) * D, D);
        tick(3, false);
      }
    }
    read_next();
    tick(2, true);
    if (c >= 0) {
      gpu.kv(C, kb, vb, s);
      const std::size_t n = kb.size(), at = std::size_t(c) * n;
      frontier::bf16_to_f32(kb.data(), cap_.k.data() + at, n);
      frontier::bf16_to_f32(vb.data(), cap_.v.data() + at, n);
      fill_probs_from_qk(cap_, c);
      tick(3, false);
    }
    if (l == 0) check = check_layer0(gpu, w, m, h, inv_freq, C, s);
    tick(4, false);
    if (c >= 0 && opt.on_captured) opt.on_captured(cap_, c);
  }
  const auto last_rows = gpu.hidden_rows(C - M, M, s);
  detail::logits_of_rows(ck, last_rows.data(), M, r);
  tick(5, true);
  r.gemm = std::string("cuBLASLt bf16 x bf16 -> fp32 on ") + prop.name;
  r.allocated_bytes += 2 * layer_bytes + 4 * h.size() + 4 * (cap_.probs.size() + cap_.q.size() + cap_.k.size() + cap_.v.size());
  if (gpu_note)
    *gpu_note = std::string(prop.name) + " (device " + std::to_string(device) + "), chunks of " + std::to_string(T) +
                " rows, weights staged in " + (stage[0].pinned() ? "pinned" : "pageable (cudaHostAlloc refused)") +
                " host memory, causal attention on " + gpu.attention_kernel() + "; " + check;
  return r;
}
#endif

}  // namespace kvf::attention
