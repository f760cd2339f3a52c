// The decode step on the GPU (decode arm, and the co-run's steps): verified, timed, then its counters. With a
// background, recompute from X (or, bg_copy, pinned H2D/D2H page copies over the host link) runs on a second
// stream (or, green, recompute on its own SM partition) while the steps run.
#if defined(KVF_HAVE_CUDA)
#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include "background.hpp"
#include "decode_gpu.hpp"
#include "idleness.hpp"
#include "kvf/cuda_backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/green_ctx.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/stream_gate.hpp"

namespace kvf::idleness {
namespace {

// Events of the co-run: partition events are made, recorded, synchronized and timed through the split (the
// driver's calls for events of a green context); the plain co-run's through the runtime.
struct Events {
  kvf::GreenSplit* split = nullptr;
  std::vector<cudaEvent_t> own;  // runtime events of the plain co-run (the split owns its own)

  cudaEvent_t make(int part) {
    if (split) return split->make_event(part);
    cudaEvent_t e = nullptr;
    KVF_CUDA_CHECK(cudaEventCreate(&e));
    own.push_back(e);
    return e;
  }
  void record(cudaEvent_t e, cudaStream_t s, int part) {
    if (split) split->record(e, part);
    else KVF_CUDA_CHECK(cudaEventRecord(e, s));
  }
  void sync(cudaEvent_t e) {
    if (split) split->sync(e);
    else KVF_CUDA_CHECK(cudaEventSynchronize(e));
  }
  float elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    if (!split) {
      KVF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      return ms;
    }
    std::string err;
    if (!split->elapsed_ms(a, b, ms, err)) throw std::runtime_error("green-context event times: " + err);
    return ms;
  }
  void destroy_own() {
    for (auto& e : own) (void)cudaEventDestroy(e);
    own.clear();
  }
};

class DecodeGpu final : public kvf::Case {
 public:
  DecodeGpu(Env& env, const md::ModelShape& m, int B, int C, int L, const std::string& background,
            const std::string& launch)
      : env_(env), m_(m), B_(B), C_(C), L_(L), green_(background.rfind("green_", 0) == 0),
        bg_(background_of(background)), with_bg_(bg_ != Background::none), green_request_(env.green_request),
        launch_(launch) {}

  void setup(kvf::Backend& be) override {
    w_ = env_.weights(m_);
    const double free_b = double(be.info().memory_bytes) * 0.8 - dc::layer_params(m_) * 2;
    const int copies = std::max(1, std::min(L_, int(free_b / std::max(1.0, dc::kv_layer_bytes(m_, B_, C_)))));
    cudaStream_t st = kvf::cuda_stream(be);
    int sms = kvf::cuda_props(be).multiProcessorCount;
    if (green_) {
      int dev = 0;
      KVF_CUDA_CHECK(cudaGetDevice(&dev));
      split_ = std::make_unique<kvf::GreenSplit>(dev, green_request_);
      if (!split_->available()) throw std::runtime_error("green contexts: " + split_->reason());
      ev_.split = split_.get();
      ds_ = split_->stream(1);
      sms = split_->sm_count(1);
      KVF_CUDA_CHECK(cudaEventCreateWithFlags(&hop_in_, cudaEventDisableTiming));
      hop_out_ = split_->make_event(1);
      KVF_CUDA_CHECK(cudaStreamSynchronize(st));  // nothing of the backend's still queued behind the split
    }
    const cudaStream_t ds = green_ ? ds_ : st;
    // The attention's split-KV plan sees the SMs decode runs on; cuBLASLt picks its kernels for the whole device.
    dec_ = std::make_unique<dc::gpu::DecodeGpu>(*w_, m_, B_, C_, copies, kSeed, sms, ds);
    launch_.set([this](cudaStream_t s) { dec_->step(L_, s); }, ds, "the decode step");
    if (with_bg_) setup_background(be, ds);
  }
  bool has_verify() const override { return true; }
  void verify(kvf::Backend& be) override {
    std::vector<int> rows = {0};
    if (B_ > 1) rows.push_back(B_ - 1);
    // Green: on the decode partition's stream, so a partition that cannot run the step fails here, before timing.
    const cudaStream_t ds = split_ ? ds_ : kvf::cuda_stream(be);
    const auto r = dec_->verify(*w_, rows, ds);
    if (!r.ok())
      throw kvf::VerifyError(std::string("GPU decode layer") + (split_ ? " (green-context partition)" : "") +
                             " vs reference: " + r.text());
    launch_.verify_graph(
        ds, [&] { return kvf::study::Outputs{{"h after L layers", dec_->hidden(ds)}}; },
        [&] { dec_->poison_hidden(ds); });
  }
  void before_sample(kvf::Backend&) override;
  void run(kvf::Backend& be) override;
  std::string after_measure(kvf::Backend& be, const kvf::Summary& sm, const std::string& mode) override;
  void teardown(kvf::Backend& be) override;

 private:
  void setup_background(kvf::Backend& be, cudaStream_t ds);
  void bg_unit(cudaStream_t s);
  void account_overlap();
  bool steps_from_e0(float& t0, float& t1, std::string& err);
  std::string background_note();
  std::string green_slowdown_note(const kvf::Summary& s, const std::string& mode) const;

  Env& env_;
  const md::ModelShape m_;
  const int B_, C_, L_;
  const bool green_;
  const Background bg_;
  const bool with_bg_;
  const int green_request_;
  std::shared_ptr<fr::LayerWeights> w_;
  std::unique_ptr<dc::gpu::DecodeGpu> dec_;
  std::unique_ptr<dc::gpu::RecomputeGpu> rc_;  // bg_recompute
  kvf::BufferHandle host_, dev_;               // bg_copy: a pinned host page and a device page
  // Holds the background queue until the step starts on the device (see StreamGate): queued ahead from the
  // host, a recompute that runs about as fast as the host enqueues it had finished before the step began in
  // every sample on an H100 (the two-stream row measured no co-run).
  std::unique_ptr<kvf::StreamGate> gate_;
  cudaStream_t s2_ = nullptr;  // background stream (the recompute partition's stream when green)
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  // Overlap accounting: checkpoints on the background stream every `stride` recomputes, and the span of the
  // sample's decode steps on the main stream; pages/s while overlapped = pages between the first checkpoint
  // after the steps began and the last one before they ended, over that time.
  std::vector<cudaEvent_t> marks_;
  int stride_ = 1, reps_ = 1;
  cudaEvent_t step0_ = nullptr, step1_ = nullptr;
  bool first_run_ = true;
  bool counted_ = false;
  long samples_ = 0, drained_ = 0;  // background queues that had finished before the next sample began
  // Per mode: samples whose background queue [e0, e1] overlapped none / only part of their steps' span
  // [step0, step1] (account_overlap), and the mean fraction of the span it covered.
  bool pending_ = false;  // a sample's steps were queued and not yet accounted
  long cov_samples_ = 0, cov_none_ = 0, cov_partial_ = 0, cov_unknown_ = 0;
  double cov_sum_ = 0;
  // Green contexts: recompute on partition 0, decode on partition 1 (stream ds_); the timed step hops from the
  // backend's stream to ds_ (hop_in_, a primary-context event) and back (hop_out_, an event of partition 1).
  std::unique_ptr<kvf::GreenSplit> split_;
  cudaStream_t ds_ = nullptr;
  cudaEvent_t hop_in_ = nullptr, hop_out_ = nullptr;
  Events ev_;
  // The step's one enqueue function, launched as it is (eager) or as one CUDA graph (decode rows of launch graph).
  kvf::study::LaunchPath launch_;
};

void DecodeGpu::setup_background(kvf::Backend& be, cudaStream_t ds) {
  if (green_) {
    s2_ = split_->stream(0);
  } else {
    KVF_CUDA_CHECK(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking));
  }
  if (bg_ == Background::copy) {
    host_ = kvf::BufferHandle(be, kBgPageBytes, kvf::MemKind::pinned_host);
    dev_ = kvf::BufferHandle(be, kBgPageBytes, kvf::MemKind::device);
    be.fill(host_.get(), kSeed + 91);
  } else {
    rc_ = std::make_unique<dc::gpu::RecomputeGpu>(m_, kBgRecomputeTokens, 1, kSeed + 90, s2_);
  }
  e0_ = ev_.make(0);
  e1_ = ev_.make(0);
  cudaEvent_t d0 = ev_.make(1), d1 = ev_.make(1);
  // Size the background so it outlasts a step several times: time both alone once.
  float t_dec = 0, t_bg = 0;
  for (int i = 0; i < 2; ++i) {
    ev_.record(d0, ds, 1);
    dec_->step(L_, ds);
    ev_.record(d1, ds, 1);
    ev_.sync(d1);
    t_dec = ev_.elapsed(d0, d1);
    ev_.record(e0_, s2_, 0);
    bg_unit(s2_);
    ev_.record(e1_, s2_, 0);
    ev_.sync(e1_);
    t_bg = ev_.elapsed(e0_, e1_);
  }
  // 4 steps' worth: the queue is gated to start with the step (StreamGate), so it only has to outlast it.
  reps_ = std::min(20000, int(std::ceil(4 * t_dec / std::max(t_bg, 1e-3f))) + 2);
  // A gate that is never opened gives up after 50 steps' worth (at least 5 ms) and the row's note says so: on
  // the H100, in a process that had created green contexts (a --no-counters run), the two-stream gate timed
  // out although the same binary's gate opened in a run with counters and in the unit test (cause not settled).
  gate_ = std::make_unique<kvf::StreamGate>(std::max(0.005, 50.0 * t_dec * 1e-3));
  gate_->warm(s2_);  // both kernels loaded in both streams' contexts before any of them spins
  gate_->warm(ds);
  stride_ = std::max(1, (reps_ + 511) / 512);
  marks_.resize(static_cast<std::size_t>((reps_ + stride_ - 1) / stride_));
  for (auto& e : marks_) e = ev_.make(0);
  step0_ = ev_.make(1);
  step1_ = ev_.make(1);
}

// One unit of the background on stream s: a recompute page, or a 512 KiB H2D copy then its D2H copy back (the
// pinned page and the device page; one stream orders the two).
void DecodeGpu::bg_unit(cudaStream_t s) {
  if (bg_ == Background::recompute) {
    rc_->run(s);
    return;
  }
  KVF_CUDA_CHECK(cudaMemcpyAsync(dev_->ptr, host_->ptr, kBgPageBytes, cudaMemcpyHostToDevice, s));
  KVF_CUDA_CHECK(cudaMemcpyAsync(host_->ptr, dev_->ptr, kBgPageBytes, cudaMemcpyDeviceToHost, s));
}

// The last sample's overlap, once its background queue and steps are done: the queue's span [e0, e1] against the
// steps' span [step0, step1], both timed from e0. A sample whose queue overlapped none of its steps measured no
// co-run (the H100 run of the frontier study's former interference arm had such a row: its background, queued
// ahead of the step without a gate, drained before the step in 6 of 6 executions).
void DecodeGpu::account_overlap() {
  pending_ = false;
  ev_.sync(e1_);
  float s0 = 0, s1 = 0;
  std::string err;
  if (!steps_from_e0(s0, s1, err)) {
    ++cov_unknown_;  // times between the two partitions' events not available: not judged
    return;
  }
  const double b1 = ev_.elapsed(e0_, e1_), span = double(s1) - s0;
  const double ov = std::min(b1, double(s1)) - std::max(0.0, double(s0));
  ++cov_samples_;
  if (ov <= 0) ++cov_none_;
  else if (ov < span) ++cov_partial_;
  cov_sum_ += span > 0 ? std::clamp(ov / span, 0.0, 1.0) : 0.0;
}

// The last sample's steps' span [step0, step1] in ms from e0, once the steps are done. Green: e0 is an event of the
// recompute partition, the steps' of the decode partition, and the driver may give no time between them (false,
// the reason in err).
bool DecodeGpu::steps_from_e0(float& t0, float& t1, std::string& err) {
  ev_.sync(step1_);
  if (split_) return split_->elapsed_ms(e0_, step0_, t0, err) && split_->elapsed_ms(e0_, step1_, t1, err);
  t0 = ev_.elapsed(e0_, step0_);
  t1 = ev_.elapsed(e0_, step1_);
  return true;
}

void DecodeGpu::before_sample(kvf::Backend&) {
  if (!with_bg_) return;
  // Background already finished when the next sample begins: it did not outlast the step it ran beside.
  // Counted and stated, so a drained background cannot pass for no interference.
  if (samples_ > 0) {
    const cudaError_t q = cudaStreamQuery(s2_);
    if (q == cudaSuccess) ++drained_;
    else if (q != cudaErrorNotReady) kvf::cuda_check(q, "cudaStreamQuery(background)");
  }
  ++samples_;
  // The background queue of the previous sample must be drained (its overlap is accounted then); then queue reps
  // units, timed by events.
  KVF_CUDA_CHECK(cudaStreamSynchronize(s2_));
  if (pending_) account_overlap();
  gate_->close(s2_);  // the queue below starts when the step does (open() in run)
  ev_.record(e0_, s2_, 0);
  for (int i = 0; i < reps_; ++i) {
    bg_unit(s2_);
    if ((i + 1) % stride_ == 0 || i + 1 == reps_) ev_.record(marks_[static_cast<std::size_t>(i / stride_)], s2_, 0);
  }
  ev_.record(e1_, s2_, 0);
  first_run_ = true;
}

void DecodeGpu::run(kvf::Backend& be) {
  const cudaStream_t st = kvf::cuda_stream(be);
  if (split_) {
    // Hop to the decode partition behind everything queued on the backend's stream (its start event and the
    // blocking kernel), and back, so the backend's events bracket the partition's work.
    KVF_CUDA_CHECK(cudaEventRecord(hop_in_, st));
    split_->wait(ds_, hop_in_);
  }
  const cudaStream_t ds = split_ ? ds_ : st;
  if (gate_) gate_->open(ds);  // behind the backend's blocking kernel: the background starts with the step
  // Event records cost no GPU time; they mark the span of this sample's steps for the overlap accounting.
  if (with_bg_ && first_run_) ev_.record(step0_, ds, 1);
  launch_.run(ds);
  if (with_bg_) {
    ev_.record(step1_, ds, 1);
    first_run_ = false;
    pending_ = true;
  }
  if (split_) {
    split_->record(hop_out_, 1);
    split_->wait(st, hop_out_);
  }
}

std::string DecodeGpu::after_measure(kvf::Backend& be, const kvf::Summary& sm, const std::string& mode) {
  const double gemm = ceiling_value(env_, gemm_ceiling_ref(), mode);
  const double rd = ceiling_value(env_, read_ceiling_ref(), mode);
  std::string note = "ridge_flop_per_byte=" + num(dc::ridge_flop_per_byte(gemm, rd), 3) +
                     " bound_batch=" + num(dc::bound_batch(gemm, rd, 2), 3) + " (bf16 weights); K/V copies " +
                     i2s(dec_->copies()) + " for " + i2s(L_) + " layers";
  if (green_) note += "; " + green_slowdown_note(sm, mode);
  if (with_bg_) note += background_note();
  if (launch_.graph()) {
    note += "; " + launch_.note();
    // The same kernels as the eager row's: their counters are that row's.
    if (mode == "hot") note += "; counters: collected on the eager row";
  } else if (green_) {
    // The range profiler and PM sampling configure one context; the partitions are other contexts. Not collected
    // rather than attributed to the wrong context.
    if (mode == "hot") note += "; counters: not collected for green-context rows (CUPTI collects per context)";
  } else {
    note += counters_note(env_, counted_, name, mode, be, [this](cudaStream_t st) { dec_->step(L_, st); });
  }
  return note;
}

// The background's rates over the last sample: its whole queue, and while overlapped with the steps.
std::string DecodeGpu::background_note() {
  KVF_CUDA_CHECK(cudaStreamSynchronize(s2_));
  if (pending_) account_overlap();
  const bool rec = bg_ == Background::recompute;
  const std::string units = rec ? "pages" : "copies";
  std::string note;
  if (gate_->timed_out()) note += "; background gate timed out: some queue started before its step";
  const float ms = ev_.elapsed(e0_, e1_);
  note += "; background drained before the step ended in " + std::to_string(drained_) + " of " +
          std::to_string(std::max(0L, samples_ - 1)) + " executions (warm-up included; 0 expected)";
  note += "; background " + (rec ? std::string("recompute") : unit_words(bg_, true)) +
          " over the last sample's whole queue: " + num(reps_ / (ms * 1e-3)) + " " + units + "/s (" + i2s(reps_) +
          " " + units + (rec ? ", T=128" : "") +
          "; the queue starts with the step, so this includes its time after the steps)";
  // The mode's overlap verdict: every sample's queue against its steps (account_overlap).
  note += "; the background queue overlapped the steps in " + i2s(cov_samples_ - cov_none_) + " of " +
          i2s(cov_samples_) + " samples this mode, warm-up included (all of their span in " +
          i2s(cov_samples_ - cov_none_ - cov_partial_) + ", mean " +
          num(cov_samples_ > 0 ? 100 * cov_sum_ / cov_samples_ : 0, 3) + "% of the span)";
  if (cov_unknown_ > 0) note += ", " + i2s(cov_unknown_) + " samples not judged (no times between the partitions)";
  if (cov_none_ > 0)
    note += "; " + std::string(kNoCorun) + ": in " + i2s(cov_none_) + " samples the background overlapped none of the steps";
  cov_samples_ = cov_none_ = cov_partial_ = cov_unknown_ = 0;
  cov_sum_ = 0;
  // While overlapped: checkpoints inside [first step start, last step end] of the same sample. Every time is
  // taken from e0, recorded on the background stream before this sample's steps and checkpoints. Green: e0
  // and the checkpoints are events of the recompute partition, the steps' of the decode partition.
  float t0 = 0, t1 = 0;
  std::string err;
  if (!steps_from_e0(t0, t1, err)) return note + "; while overlapped with the steps: not stated (times between the two partitions' events: " +
                    err + ")";
  const float span_ms = t1 - t0;
  std::vector<double> t_marks;
  for (const auto& e : marks_) t_marks.push_back(ev_.elapsed(e0_, e));
  const auto ov = dc::overlap_rate(t_marks, stride_, reps_, t0, t1);
  return note + (ov.pages > 0 ? "; while overlapped with the steps: " + num(ov.per_s()) + " " + units + "/s (" +
                                    std::to_string(ov.pages) + " " + units + " over " + num(ov.ms, 3) + " ms of the steps' " +
                                    num(span_ms, 3) + " ms)"
                              : "; while overlapped with the steps: too few background checkpoints inside the steps' " +
                                    num(span_ms, 3) + " ms to state a rate");
}

// Slowdown of a green-context decode row against decode alone on the whole device (bg_none) and, for the co-run,
// against decode alone on its partition (bg_green_none): rows of the same run and mode, same bytes.
std::string DecodeGpu::green_slowdown_note(const kvf::Summary& s, const std::string& mode) const {
  std::vector<kvf::Param> match;
  for (const auto& p : params)
    if (p.name == "arm" || std::find(std::begin(kStepAxes), std::end(kStepAxes), p.name) != std::end(kStepAxes))
      match.push_back(p);
  const double gbps = s.median > 0 ? bytes / s.median / 1e9 : 0;
  auto against = [&](const std::string& bg, const std::string& what) {
    auto m = match;
    if (bg == "green_none")  // a partition of the same size (--green-sms may differ between runs in one directory)
      for (const auto& p : params)
        if (p.name == "decode_sms") m.push_back(p);
    m.push_back({"background", bg});
    const auto ref = env_.out_dir.empty()
                         ? std::nullopt
                         : kvf::find_ceiling(env_.out_dir, kvf::CeilingRef{"idleness", m, "gbps"}, mode, "cuda",
                                             env_.device_name);
    if (!ref || gbps <= 0) return "slowdown vs " + what + ": no row of this run";
    return "slowdown vs " + what + " " + num(*ref / gbps, 4) + "x";
  };
  std::string note = against("none", "decode alone on the whole device");
  if (with_bg_) note += ", " + against("green_none", "decode alone on its partition");
  return note;
}

void DecodeGpu::teardown(kvf::Backend& be) {
  if (gate_) {  // a queue closed by before_sample whose step never ran (an error): let it go instead of timing out
    try {
      gate_->open(kvf::cuda_stream(be));
    } catch (...) {
    }
  }
  if (split_) split_->synchronize();
  if (s2_) (void)cudaStreamSynchronize(s2_);
  if (s2_ && !split_) (void)cudaStreamDestroy(s2_);
  host_.reset();  // after the background stream drained
  dev_.reset();
  pending_ = false;
  cov_samples_ = cov_none_ = cov_partial_ = cov_unknown_ = 0;
  cov_sum_ = 0;
  ev_.destroy_own();
  if (hop_in_) (void)cudaEventDestroy(hop_in_);
  hop_in_ = hop_out_ = nullptr;
  marks_.clear();
  step0_ = step1_ = nullptr;
  s2_ = nullptr;
  e0_ = e1_ = nullptr;
  ds_ = nullptr;
  rc_.reset();
  gate_.reset();
  launch_.reset();
  dec_.reset();
  ev_.split = nullptr;
  split_.reset();  // its events, streams and green contexts, after the work using them
  w_.reset();
}

}  // namespace

std::unique_ptr<kvf::Case> make_decode_gpu_case(const md::ModelShape& m, int B, int C, int L,
                                                 const std::string& background, const std::string& launch, Env& env) {
  // A co-run step is bracketed by host calls (event records, the stream gate, partition hops) that order it against
  // its background; a graph of the step alone would not be the same experiment.
  if (launch == "graph" && background != "none")
    return kvf::skipped_case("", {}, "graph: not available: the co-run's step is ordered against its background by "
                                     "event records and a stream gate around each launch");
  auto c = std::make_unique<DecodeGpu>(env, m, B, C, L, background, launch);
  // bg_copy is a hot row only: a cold sample differs from a hot one by the L2 flush before it, and the co-run's
  // step reads its L layers' weights and K/V (gigabytes) through an L2 of tens of MiB, so a cold row would repeat
  // the hot one; the copies themselves go host <-> HBM. (The recompute rows keep both modes, as in the results
  // already committed.)
  if (background == "copy") c->cold = false;
  if (background.rfind("green_", 0) != 0) return c;
  // SM partitions (green contexts): decode on the rest of the device, recompute on its partition.
  const std::string dec_sms = i2s(env.green_decode_sms), bg_sms = i2s(env.green_bg_sms);
  c->params = {{"sm_partition", "decode " + dec_sms + " SMs / recompute " + bg_sms + " SMs"},
               {"decode_sms", dec_sms},
               {"background_sms", bg_sms}};
  const kvf::CeilingRef full{"idleness", {{"arm", "corun"}, {"background", "none"}}, "gbps"};
  const kvf::CeilingRef part{
      "idleness", {{"arm", "corun"}, {"decode_sms", dec_sms}, {"background", "green_none"}}, "gbps"};
  const bool alone = background == "green_none";
  c->ceiling = alone ? full : part;
  c->uses.push_back(full);
  if (!alone) c->uses.push_back(part);
  c->note = "decode step on a green-context partition of " + dec_sms + " SMs" +
            (background == "green_recompute" ? "; recompute on the other partition of " + bg_sms + " SMs"
                                             : std::string(" alone")) +
            "; bf16 weights of L layers + bf16 K/V read; the figure includes the cross-context event hops (backend "
            "stream -> partition stream -> backend stream); pct_of_ceiling = 100 / slowdown against " +
            (alone ? "decode alone on the whole device (bg_none)" : "decode alone on its partition (bg_green_none)");
  return c;
}

}  // namespace kvf::idleness
#endif
