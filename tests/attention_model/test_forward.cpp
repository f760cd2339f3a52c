// The forward pass on tiny checkpoints written by the test (tiny_checkpoint.hpp), loaded by the real loader,
// against the fp64 reference (issue 19).
//
// Two references, two tolerances (bf16 weights):
// - kTight, against the reference that rounds the GEMM inputs to bf16 where the pass does: what is left is fp32
//   against fp64 arithmetic, ~1e-6 of the RMS, except where the two fall on either side of a bf16 rounding
//   boundary and one element's rounding flips (one bf16 step, 2^-8 relative): measured up to 8.4e-4 of the RMS
//   for K, so 4e-3 (about 2^-8) for Q, K and V, 1e-3 for probabilities. Asserted on the first layer only: a flip
//   is carried into every later layer's inputs, where the shifted values flip more of their neighbours' roundings.
//   How far that goes depends on the GEMM's summation order: with OpenBLAS sgemm (an AVX2 host, no oneDNN bf16)
//   one flip in layer 0's attention output of the mask test grew to 7.2e-4 of the RMS in layer 1's K and 6.8e-3
//   in layer 2's Q (2026-11-28, AMD EPYC Zen 3 VM), where oneDNN's bf16 matmul (Zen 5) stayed under 4e-3. The
//   whole pass's tight figures are printed; the later layers and the logits are held to the bf16 tolerances.
// - kProbTol / kRelTol, against the unrounded model: the bf16 rounding of every GEMM input (2^-9 relative per
//   element) through three layers. Measured on these tiny models: probabilities up to 0.013, logits/Q/K/V up
//   to 2.8% of their RMS; stated: 0.02 and 5%.
// The f32 checkpoint, whose pass rounds nothing, meets 1e-4 against the unrounded reference (measured 3e-6), and
// a pass with the wrong RoPE scaling misses even the bf16 tolerances by tens of times: they can fail.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>

#include "kvf/attention/forward.hpp"
#include "kvf/attention/run_estimate.hpp"
#include "kvf/errors.hpp"
#include "tiny_checkpoint.hpp"

namespace kvf::attention {
namespace {

namespace fs = std::filesystem;

constexpr double kProbTol = 0.02, kRelTol = 0.05, kTightProb = 1e-3, kTightRel = 4e-3;

std::vector<std::int32_t> prompt(int n, int vocab, std::uint32_t seed = 3) {
  std::vector<std::int32_t> t(n);
  std::uint32_t x = seed;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = std::int32_t((x >> 8) % std::uint32_t(vocab));
  }
  return t;
}

struct Err {
  double max_abs = 0, rms_ref = 0;
  double rel() const { return rms_ref > 0 ? max_abs / rms_ref : max_abs; }
};
template <class Ref>
Err compare(std::span<const float> got, const Ref& ref) {
  Err e;
  EXPECT_EQ(got.size(), ref.size());
  double ss = 0;
  for (std::size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    e.max_abs = std::max(e.max_abs, std::abs(double(got[i]) - double(ref[i])));
    ss += double(ref[i]) * double(ref[i]);
  }
  e.rms_ref = std::sqrt(ss / std::max<std::size_t>(1, ref.size()));
  return e;
}

struct Errors {
  Err probs, logits, q, k, v;
};
Errors errors(const ForwardResult& r, const ReferenceResult& ref) {
  Errors e{compare(r.capture.probs, ref.probs), compare(r.logits, ref.logits), compare(r.capture.q, ref.q),
           compare(r.capture.k, ref.k), compare(r.capture.v, ref.v)};
  std::printf("max |err|: probs %.2e, logits %.2e (rms %.3f), q %.2e, k %.2e, v %.2e of rms\n", e.probs.max_abs,
              e.logits.max_abs, e.logits.rms_ref, e.q.rel(), e.k.rel(), e.v.rel());
  return e;
}
// The first captured layer's probs, q, k and v (no logits): the layer no earlier rounding flip reaches.
Errors errors_first_layer(const ForwardResult& r, const ReferenceResult& ref) {
  const auto& c = r.capture;
  const std::size_t probs = std::size_t(c.q_heads) * c.queries * c.context;
  const std::size_t q = std::size_t(c.q_heads) * c.queries * c.head_dim;
  const std::size_t kv = std::size_t(c.kv_heads) * c.context * c.head_dim;
  auto first = [](const auto& v, std::size_t n) { return std::span(v.data(), std::min(n, v.size())); };
  Errors e{compare(first(c.probs, probs), first(ref.probs, probs)), {}, compare(first(c.q, q), first(ref.q, q)),
           compare(first(c.k, kv), first(ref.k, kv)), compare(first(c.v, kv), first(ref.v, kv))};
  std::printf("layer %d: max |err|: probs %.2e, q %.2e, k %.2e, v %.2e of rms\n", c.layer_ids.at(0), e.probs.max_abs,
              e.q.rel(), e.k.rel(), e.v.rel());
  return e;
}
void expect_within(const Errors& e, double prob_tol, double rel_tol) {
  EXPECT_LE(e.probs.max_abs, prob_tol);
  EXPECT_LE(e.logits.rel(), rel_tol);
  EXPECT_LE(e.q.rel(), rel_tol);
  EXPECT_LE(e.k.rel(), rel_tol);
  EXPECT_LE(e.v.rel(), rel_tol);
}

ForwardResult run(const Checkpoint& ck, const std::vector<std::int32_t>& t, int chunk, int m,
                  const SelectionMask* mask = nullptr) {
  ForwardOptions o;
  o.chunk = chunk;
  o.queries = m;
  o.mask = mask;
  return forward_cpu(ck, t, o);
}

// The pass against both references: the one that rounds the GEMM inputs to bf16 where the pass does (only fp32
// against fp64 arithmetic left: kTight, on the first layer), and the unrounded model (the bf16 tolerances).
ForwardResult check_both(const Checkpoint& ck, const std::vector<std::int32_t>& t, int chunk, int m,
                         const SelectionMask* mask = nullptr) {
  auto r = run(ck, t, chunk, m, mask);
  const auto rounded = forward_reference(ck, t, m, mask, true);
  std::printf("against the reference rounding as the pass does, whole pass (printed): ");
  errors(r, rounded);
  std::printf("against the reference rounding as the pass does, ");
  expect_within(errors_first_layer(r, rounded), kTightProb, kTightRel);
  std::printf("against the unrounded reference: ");
  expect_within(errors(r, forward_reference(ck, t, m, mask)), kProbTol, kRelTol);
  return r;
}

TEST(AttentionForward, MatchesTheFp64ReferenceLlama3Gqa) {
  const fs::path d = test::fresh_dir("llama");
  test::TinySpec s;
  test::write_tiny_checkpoint(d, s);
  const Checkpoint ck(d);
  const auto t = prompt(40, s.vocab);
  const auto r = check_both(ck, t, 16, 8);  // chunks of 16: 16, 16, 8 (padded)
  const auto ref = forward_reference(ck, t, 8);
  ASSERT_EQ(r.capture.layer_ids, (std::vector<int>{0, 1, 2}));
  std::printf("GEMM: %s\n", r.gemm.c_str());
  // Peaked, as trained models' attention is: an absolute tolerance of 0.02 means something only when some
  // probabilities are far above 1/C.
  const double peak = *std::max_element(ref.probs.begin(), ref.probs.end());
  std::printf("largest captured probability %.3f (uniform: %.3f)\n", peak, 1.0 / 40);
  EXPECT_GT(peak, 0.3);
  // Causality: query m (position 32 + m) gives nothing to later positions; each row sums to 1.
  for (int hq = 0; hq < 4; ++hq)
    for (int m = 0; m < 8; ++m) {
      const float* p = r.capture.probs_at(2, hq, m);
      double sum = 0;
      for (int j = 0; j < 40; ++j) {
        if (j > 32 + m) {
          EXPECT_EQ(p[j], 0.0f);
        }
        sum += p[j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  // The greedy token is the reference's best, or within the logit tolerance of it.
  const double* last = ref.logits.data() + 7 * 64;
  EXPECT_GE(last[r.next_token], *std::max_element(last, last + 64) - kRelTol * compare(r.logits, ref.logits).rms_ref);
}

TEST(AttentionForward, ChunkSizeAndShardingDoNotChangeTheResult) {
  const fs::path d1 = test::fresh_dir("one"), d2 = test::fresh_dir("two");
  test::TinySpec s;
  test::write_tiny_checkpoint(d1, s);
  s.shards = 2;
  test::write_tiny_checkpoint(d2, s);
  const Checkpoint a(d1), b(d2);
  const auto t = prompt(40, s.vocab);
  const auto r16 = run(a, t, 16, 8), s16 = run(b, t, 16, 8), r40 = run(a, t, 40, 8), r7 = run(a, t, 7, 8);
  EXPECT_EQ(r16.logits, s16.logits);  // the same bytes through another file layout
  EXPECT_TRUE(std::equal(r16.capture.probs.begin(), r16.capture.probs.end(), s16.capture.probs.begin(),
                         s16.capture.probs.end()));
  for (const auto* o : {&r40, &r7}) {
    EXPECT_LE(compare(o->capture.probs, r16.capture.probs).max_abs, 1e-3);
    EXPECT_LE(compare(o->logits, r16.logits).rel(), 1e-2);
  }
}

TEST(AttentionForward, Qwen2BiasTiedLinearAndHeadDimVariants) {
  struct V {
    const char* arch;
    const char* rope;
    bool tie;
    int head_dim;  // 24: q_dim 96 != hidden 64, as models with an explicit head_dim (Mistral-Nemo)
  } variants[] = {{"Qwen2ForCausalLM", "none", false, 16}, {"LlamaForCausalLM", "linear", true, 16},
                  {"MistralForCausalLM", "none", false, 16}, {"LlamaForCausalLM", "llama3", false, 24}};
  for (const auto& v : variants) {
    SCOPED_TRACE(std::string(v.arch) + " rope " + v.rope + (v.tie ? " tied" : "") + " head_dim " +
                 std::to_string(v.head_dim));
    const fs::path d = test::fresh_dir(std::string("var-") + v.arch + v.rope + std::to_string(v.head_dim));
    test::TinySpec s;
    s.arch = v.arch;
    s.rope = v.rope;
    s.tie = v.tie;
    s.head_dim = v.head_dim;
    test::write_tiny_checkpoint(d, s);
    const Checkpoint ck(d);
    EXPECT_EQ(ck.has("lm_head.weight"), !v.tie);
    const auto t = prompt(33, s.vocab, 9);
    check_both(ck, t, 8, 5);
  }
}

TEST(AttentionForward, F32CheckpointIsNotRounded) {
  const fs::path d = test::fresh_dir("f32");
  test::TinySpec s;
  s.dtype = "F32";
  test::write_tiny_checkpoint(d, s);
  const Checkpoint ck(d);
  const auto t = prompt(40, s.vocab);
  const auto r = run(ck, t, 16, 8);
  EXPECT_NE(r.gemm.find("not bf16"), std::string::npos) << r.gemm;
  expect_within(errors(r, forward_reference(ck, t, 8)), 1e-5, 1e-4);
}

// The tolerances can fail: the pass run on a config without the llama3 scaling, against the reference of the
// scaled model (same weights), misses them.
TEST(AttentionForward, WrongRopeScalingMissesTheTolerance) {
  const fs::path d1 = test::fresh_dir("scaled"), d2 = test::fresh_dir("unscaled");
  test::TinySpec s;
  test::write_tiny_checkpoint(d1, s);
  s.rope = "none";
  test::write_tiny_checkpoint(d2, s);
  const Checkpoint scaled(d1), unscaled(d2);
  const auto t = prompt(40, s.vocab);
  const auto e = errors(run(unscaled, t, 16, 8), forward_reference(scaled, t, 8));
  EXPECT_GT(e.probs.max_abs, 2 * kProbTol);
  EXPECT_GT(e.q.rel(), 2 * kRelTol);
}

TEST(AttentionForward, HfInvFreqOfLlama31) {
  // Llama-3.1's rope_scaling on head_dim 128, theta 500000: the three bands of _compute_llama3_parameters.
  models::ModelShape m;
  m.head_dim = 128;
  m.rope_theta = 500000;
  m.rope_scaling.type = "llama3";
  m.rope_scaling.factor = 8;
  m.rope_scaling.low_freq_factor = 1;
  m.rope_scaling.high_freq_factor = 4;
  m.rope_scaling.original_max_position = 8192;
  const auto f = hf_inv_freq(m);
  const double pi = std::acos(-1.0);
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128), wl = 2 * pi / base;
    if (wl < 8192 / 4.0) EXPECT_DOUBLE_EQ(f[i], base);
    else if (wl > 8192) EXPECT_DOUBLE_EQ(f[i], base / 8);
    else EXPECT_TRUE(f[i] < base && f[i] > base / 8) << i;
  }
  m.rope_scaling.type = "linear";
  m.rope_scaling.factor = 4;
  EXPECT_DOUBLE_EQ(hf_inv_freq(m)[3], std::pow(500000.0, -6.0 / 128) / 4);
}

SelectionMask some_mask(const test::TinySpec& s, int from) {
  SelectionMask k;
  k.layers = s.layers;
  k.kv_heads = s.kv_heads;
  k.from = from;
  for (int l = 0; l < s.layers; ++l)
    for (int h = 0; h < s.kv_heads; ++h) {
      std::vector<std::int32_t> kept = {0, 1, 2, 3};  // a sink block
      for (int p = 4; p < from; ++p)
        if ((p * 7 + l * 3 + h) % 5 == 0) kept.push_back(p);
      k.kept.push_back(kept);
    }
  return k;
}

TEST(AttentionForward, SelectionMaskMatchesTheReference) {
  const fs::path d = test::fresh_dir("mask");
  test::TinySpec s;
  test::write_tiny_checkpoint(d, s);
  const Checkpoint ck(d);
  const auto t = prompt(40, s.vocab);
  const auto mask = some_mask(s, 34);
  const auto r = check_both(ck, t, 16, 8, &mask);
  // Queries at 34.. give exactly nothing to dropped keys below 34; query 33 (m = 1) is before the mask.
  for (int c = 0; c < 3; ++c)
    for (int hq = 0; hq < 4; ++hq)
      for (int j = 0; j < 34; ++j) {
        const auto& kept = mask.kept[std::size_t(c) * 2 + hq / 2];
        if (std::find(kept.begin(), kept.end(), j) == kept.end()) {
          EXPECT_EQ(r.capture.probs_at(c, hq, 7)[j], 0.0f);
          EXPECT_EQ(r.capture.probs_at(c, hq, 2)[j], 0.0f);
        }
        EXPECT_GT(r.capture.probs_at(c, hq, 1)[j], 0.0f);
      }
  // Keeping every position is no mask at all.
  SelectionMask all = mask;
  for (auto& k : all.kept) {
    k.clear();
    for (int p = 0; p < 34; ++p) k.push_back(p);
  }
  EXPECT_EQ(run(ck, t, 16, 8, &all).logits, run(ck, t, 16, 8).logits);
  // Greedy decoding under the mask: each token is the reference's best of its step (or within tolerance).
  const auto prompt34 = std::vector<std::int32_t>(t.begin(), t.begin() + 34);
  const auto out = greedy_decode_cpu(ck, prompt34, 3, &mask, 16);
  ASSERT_EQ(out.size(), 3u);
  auto seq = prompt34;
  for (auto tok : out) {
    const auto ref = forward_reference(ck, seq, 1, &mask);
    const double best = *std::max_element(ref.logits.begin(), ref.logits.end());
    double ss = 0;
    for (double v : ref.logits) ss += v * v;
    EXPECT_GE(ref.logits[std::size_t(tok)], best - kRelTol * std::sqrt(ss / ref.logits.size()));
    seq.push_back(tok);
  }
}

// The KV-cached decode against the oracle that recomputes the whole sequence for every token: the same tokens for
// full attention and under each mask, all decoded in one batch, on two model variants (GQA; Qwen2 bias, tied
// embeddings, linear RoPE scaling).
TEST(AttentionForward, CachedDecodeEqualsRecomputingEveryStep) {
  for (const bool qwen : {false, true}) {
    const fs::path d = test::fresh_dir(qwen ? "cached_qwen" : "cached");
    test::TinySpec s;
    if (qwen) {  // Qwen2 has biases; tied embeddings and linear RoPE scaling ride along
      s.arch = "Qwen2ForCausalLM";
      s.tie = true;
      s.rope = "linear";
      s.head_dim = 24;
    }
    test::write_tiny_checkpoint(d, s);
    const Checkpoint ck(d);
    const auto mask = some_mask(s, 34);
    SelectionMask sinks = mask;  // the sink block only, each position listed twice (repeats allowed)
    for (auto& k : sinks.kept) k = {0, 1, 2, 3, 3, 2, 1, 0};
    const std::vector<const SelectionMask*> masks = {nullptr, &mask, &sinks, nullptr};
    int changed = 0;  // prompts whose decode the sink-only selection changes: the test can tell a mask ignored
    for (std::uint32_t seed = 1; seed <= 6; ++seed) {
      const auto p = prompt(34, s.vocab, seed);
      ForwardOptions o;
      o.chunk = 16;
      const auto prefill = forward_cpu(ck, p, o);
      std::string gemm;
      const int n = 5;
      const auto got = greedy_decode_cached_cpu(ck, prefill.capture, prefill.next_token, n, masks, &gemm);
      ASSERT_EQ(got.size(), masks.size());
      EXPECT_FALSE(gemm.empty());
      for (std::size_t i = 0; i < masks.size(); ++i)
        EXPECT_EQ(got[i], greedy_decode_cpu(ck, p, n, masks[i], 16))
            << "selection " << i << ", prompt seed " << seed << (qwen ? " (qwen2)" : "");
      EXPECT_EQ(got[0], got[3]);
      changed += got[0] != got[2];
    }
    EXPECT_GT(changed, 0) << (qwen ? "qwen2: " : "") << "the sink-only selection changed no decode";
  }
}

TEST(AttentionForward, CachedDecodeRefusesWhatItCannotUse) {
  const fs::path d = test::fresh_dir("cached_bad");
  test::TinySpec s;
  test::write_tiny_checkpoint(d, s);
  const Checkpoint ck(d);
  const auto p = prompt(34, s.vocab);
  ForwardOptions o;
  o.chunk = 16;
  const auto full = forward_cpu(ck, p, o);
  o.capture_layers = {0, 2};
  const auto partial = forward_cpu(ck, p, o);
  auto what = [&](const AttentionCapture& cap, std::int32_t first, int n, std::vector<const SelectionMask*> m) {
    try {
      greedy_decode_cached_cpu(ck, cap, first, n, m);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(what(partial.capture, 1, 3, {nullptr}).find("must hold K and V of every layer"), std::string::npos);
  EXPECT_NE(what(full.capture, 64, 3, {nullptr}).find("first token 64 is not in [0, 64)"), std::string::npos);
  EXPECT_NE(what(full.capture, 1, 0, {nullptr}).find("tokens 0 must be at least 1"), std::string::npos);
  EXPECT_NE(what(full.capture, 1, 3, {}).find("no selection"), std::string::npos);
  const auto early = some_mask(s, 30);
  EXPECT_NE(what(full.capture, 1, 3, {&early}).find("from the prompt's end 34"), std::string::npos);
  auto beyond = some_mask(s, 34);
  beyond.kept[1].push_back(34);
  EXPECT_NE(what(full.capture, 1, 3, {&beyond}).find("kept position 34 is not in [0, from 34)"), std::string::npos);
  EXPECT_EQ(what(full.capture, 1, 1, {nullptr}), "no error");
}

TEST(AttentionForward, BadInputsGiveOneLine) {
  const fs::path d = test::fresh_dir("bad");
  test::TinySpec s;
  s.arch = "MistralForCausalLM";
  auto cfg = test::tiny_config(s);
  cfg["sliding_window"] = 32;
  test::write_tiny_checkpoint(d, s);
  test::write_text(d / "config.json", cfg.dump());
  const Checkpoint ck(d);
  auto what = [&](std::vector<std::int32_t> t, int m, const SelectionMask* mask = nullptr) -> std::string {
    try {
      run(ck, t, 16, m, mask);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(what({1, 2, 64}, 1).find("position 2: token id 64 is not in [0, 64)"), std::string::npos);
  EXPECT_NE(what({1, 2, 3}, 4).find("queries 4 must be in [1, context 3]"), std::string::npos);
  EXPECT_NE(what(prompt(40, 64), 1).find("sliding-window attention is not built"), std::string::npos);
  SelectionMask bad;
  bad.layers = 3;
  bad.kv_heads = 1;
  EXPECT_NE(what({1, 2, 3}, 1, &bad).find("selection mask: 3 layers x 1 kv heads"), std::string::npos);
  bad = some_mask(s, 3);
  bad.kept[0].push_back(3);
  EXPECT_NE(what({1, 2, 3}, 1, &bad).find("kept position 3 is not in [0, from 3)"), std::string::npos);
  EXPECT_EQ(what(prompt(32, 64), 1), "no error");
}

// What the pass allocates stays within the estimate the run is refused by.
TEST(AttentionForward, AllocationWithinTheEstimate) {
  const fs::path d = test::fresh_dir("estimate");
  test::TinySpec s;
  test::write_tiny_checkpoint(d, s);
  const Checkpoint ck(d);
  for (int chunk : {7, 16, 64}) {
    const auto t = prompt(64, s.vocab);
    const auto r = run(ck, t, chunk, 8);
    RunShape shape;
    shape.context = 64;
    shape.queries = 8;
    shape.chunk = chunk;
    shape.threads = omp_get_max_threads();
    EXPECT_EQ(ck.weight_bytes_per_param(), 2.0);
    const auto e = estimate_run(ck.config(), ck.mapped_bytes(), ck.weight_bytes_per_param(), shape, 1e9, "stated");
    EXPECT_LE(r.allocated_bytes, e.resident_bytes) << "chunk " << chunk;
    EXPECT_GT(r.allocated_bytes, e.resident_bytes / 4) << "chunk " << chunk;  // the estimate is not vacuous
  }
}

// The numbers the issue asks for (Llama-3.1-8B at 8K and 32K on this machine), printed; not run by default
// (it measures this machine's GEMM): --gtest_also_run_disabled_tests --gtest_filter='*Llama31*'.
// The attention's rate is timed on the pass's own chunk code (a positive, finite rate) and refuses a chunk with
// fewer keys than rows.
TEST(AttentionForward, AttentionRateIsMeasuredOnTheChunkCode) {
  test::TinySpec s;
  const auto c = parse_hf_config(test::tiny_config(s), "config.json");
  const double r = measure_attention_rate(c.shape, 32, 256);
  EXPECT_GT(r, 0);
  EXPECT_TRUE(std::isfinite(r));
  EXPECT_THROW(measure_attention_rate(c.shape, 64, 32), std::invalid_argument);
}

TEST(AttentionForward, DISABLED_Llama31_8bEstimateOnThisMachine) {
  const auto j = nlohmann::json::parse(R"({"architectures":["LlamaForCausalLM"],"hidden_size":4096,
    "intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,
    "vocab_size":128256,"max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":500000.0,
    "rope_scaling":{"factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192,
    "rope_type":"llama3"},"tie_word_embeddings":false,"torch_dtype":"bfloat16","hidden_act":"silu"})");
  const auto c = parse_hf_config(j, "Llama-3.1-8B/config.json");
  {
    // The tiny model's forward, for scale: best of 10 (the machine is shared).
    const fs::path d = test::fresh_dir("timing");
    test::TinySpec s;
    test::write_tiny_checkpoint(d, s);
    const Checkpoint ck(d);
    for (int ctx : {40, 1024}) {
      const auto t = prompt(ctx, s.vocab);
      double best = 1e30;
      for (int i = 0; i < 10; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        run(ck, t, 256, 8);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("tiny model (3 layers, hidden 64), C=%d, M=8, chunk 256: forward_cpu %.2f ms\n", ctx, best * 1e3);
    }
  }
  std::string what;
  const double rate = measure_gemm_rate(256, 4096, &what);
  for (int ctx : {8192, 32768}) {
    RunShape r;
    r.context = ctx;
    r.queries = 16;
    r.chunk = 256;
    r.threads = omp_get_max_threads();
    const double attention_rate = measure_attention_rate(c.shape, 256, ctx / 2 + 256);
    const auto e = estimate_run(c, 16060522496ull, 2, r, rate, "measured: " + what, attention_rate);
    std::printf("Llama-3.1-8B, C=%d, M=16: %s\n", ctx, describe(e, available_memory_bytes()).c_str());
    // bench_attention's default sweep at this context (49 decodes at 8K) and an 8-token answer
    const auto d = estimate_decode(c, ctx, 49, 8, rate);
    std::printf("Llama-3.1-8B, C=%d: needle decode of 49 selections x 8 tokens: %.2f TFLOP, %.0f s at that rate\n", ctx,
                d.flops / 1e12, d.seconds);
  }
}

}  // namespace
}  // namespace kvf::attention
