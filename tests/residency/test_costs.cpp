// Costs of a replay (issue 17): bytes per block, capacity floors, the prefill and fetch terms against
// hand-computed figures, latency percentiles, and totals that add up.
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "kvf/errors.hpp"
#include "kvf/residency/costs.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

const report::Shape& llama8b() {
  static const auto shapes = report::load_shapes();
  return report::find_shape(shapes, "Llama-3.1-8B");
}

// A GPU whose memory and launches cost nothing: every kernel is compute-bound at 1000 TFLOP/s, so prefill time
// is FLOPs / 1e15 exactly.
report::GpuSpec compute_only() {
  report::GpuSpec g;
  g.name = "test";
  g.bf16_tflops = 1000;
  g.hbm_tbps = 1e12;
  g.host_link_gbps = 50;
  g.copy_fixed_us = 10;
  return g;
}

TEST(ResidencyCosts, BytesPerBlockOfLlama8bBf16) {
  // 2 (K and V) x 8 KV heads x 128 head dim x 2 bytes x 32 layers x block tokens
  EXPECT_EQ(block_bytes(llama8b(), 512), 2.0 * 8 * 128 * 2 * 32 * 512);
  EXPECT_EQ(block_bytes(llama8b(), 512), 67108864.0);
  EXPECT_EQ(block_bytes(llama8b(), 16), 2.0 * 8 * 128 * 2 * 32 * 16);
}

TEST(ResidencyCosts, BytesPerBlockOfMlaIsTheLatentPlusRopeKey) {
  static const auto shapes = report::load_shapes();
  const auto& ds = report::find_shape(shapes, "DeepSeek-V3");
  ASSERT_TRUE(ds.mla);
  // (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes x 61 layers x 512 tokens
  EXPECT_EQ(block_bytes(ds, 512), (512.0 + 64) * 2 * 61 * 512);
}

TEST(ResidencyCosts, CapacityIsTheFloorOfBudgetOverBlockBytes) {
  const double b = 67108864;  // 1/16 GiB
  EXPECT_EQ(capacity_blocks(8, b), 128u);
  EXPECT_EQ(capacity_blocks(0.0625, b), 1u);
  EXPECT_EQ(capacity_blocks(0.0624, b), 0u);
  EXPECT_EQ(capacity_blocks(0.1, b), 1u);  // 1.6 blocks
  EXPECT_EQ(capacity_blocks(312.5, b), 5000u);
  EXPECT_EQ(capacity_blocks(1, 3 * 1024.0 * 1024 * 1024 / 7), 2u);  // 2.33 blocks
  EXPECT_EQ(capacity_blocks(0, b), 0u);
  EXPECT_EQ(capacity_blocks(-1, b), 0u);
  EXPECT_EQ(capacity_blocks(std::nan(""), b), 0u);
}

TEST(ResidencyCosts, PrefillIsTwiceActiveParametersPerTokenPlusAttention) {
  const auto g = compute_only();
  const CostModel c = make_cost_model(g, llama8b(), 512);
  // Llama-3.1-8B per layer: attention projections 4096 x (4096 + 2 x 1024) + 4096 x 4096, MLP 3 x 4096 x 14336.
  const double params = 4096.0 * (4096 + 2048) + 4096.0 * 4096 + 3.0 * 4096 * 14336;
  const double M = 1000, P = 3000, qdim = 32 * 128;
  // per layer: 2 x params x M, causal attention over the M tokens (2 x M x M x qdim), M over the prefix
  // (QK^T and PV: 2 x M x P x (qdim + qdim))
  const double flops = 32 * (2 * params * M + 2 * M * M * qdim + 2 * M * P * (qdim + qdim));
  EXPECT_NEAR(prefill_s(c, 1000, 3000), flops / 1e15, 1e-12);
  EXPECT_NEAR(prefill_s(c, 1000, 0), 32 * (2 * params * M + 2 * M * M * qdim) / 1e15, 1e-12);
  EXPECT_EQ(prefill_s(c, 0, 3000), 0.0);
}

TEST(ResidencyCosts, FetchIsOneCopyPerBlockPerLayerOverTheHostLink) {
  const auto g = compute_only();
  const CostModel c = make_cost_model(g, llama8b(), 512);
  EXPECT_NEAR(fetch_s(c, 3), 3 * 32 * 10e-6 + 3 * 67108864.0 / 50e9, 1e-15);
  EXPECT_EQ(fetch_s(c, 0), 0.0);
}

TEST(ResidencyCosts, SourcesNameMeasuredFields) {
  auto g = compute_only();
  EXPECT_EQ(make_cost_model(g, llama8b(), 512).prefill_source, "model");
  EXPECT_EQ(make_cost_model(g, llama8b(), 512).fetch_source, "model");
  g.source["bf16_tflops"] = "measured: 700 TFLOP/s, frontier arm=gemm_ceiling (cold) in r";
  g.source["hbm_tbps"] = "spec sheet";
  g.source["host_link_gbps"] = "measured: 25 GB/s, fit over 3 rows";
  g.source["copy_fixed_us"] = "assumption: fixed cost of one small cudaMemcpyAsync";  // data/gpus.json's wording
  const CostModel c = make_cost_model(g, llama8b(), 512);
  // The model on measured figures, and the figures it read that were not measured: a fetch at a measured link rate
  // still pays the assumed fixed cost of each copy.
  EXPECT_EQ(c.prefill_source, "model at measured bf16_tflops <- 700 TFLOP/s, frontier arm=gemm_ceiling (cold) in r; "
                              "not measured: hbm_tbps from the spec, launch_us from the spec");
  EXPECT_EQ(c.fetch_source, "model at measured host_link_gbps <- 25 GB/s, fit over 3 rows; not measured: "
                            "copy_fixed_us assumed, copy_issue_us not fitted (each copy pays copy_fixed_us)");
}

TEST(ResidencyCosts, LatencyPercentilesOnAHandMadeArray) {
  const std::vector<double> xs = {4, 1, 3, 2, 10};
  const auto s = summarize_latency(xs);
  EXPECT_EQ(s.total_s, 20);
  EXPECT_EQ(s.mean_s, 4);
  EXPECT_EQ(s.p50_s, 3);
  EXPECT_NEAR(s.p99_s, 4 + 0.96 * 6, 1e-12);  // type 7: rank 0.99 x 4 = 3.96 between 4 and 10
  const auto one = summarize_latency(std::vector<double>{7});
  EXPECT_EQ(one.p50_s, 7);
  EXPECT_EQ(one.p99_s, 7);
  EXPECT_EQ(summarize_latency(std::vector<double>{}).total_s, 0);
}

TEST(ResidencyCosts, TotalsAddUpAndAHostHitCostsItsFetch) {
  const auto g = compute_only();
  const int bt = 4;
  const CostModel c = make_cost_model(g, llama8b(), bt);
  // HBM 1 block, host 4: request 3 finds block 1 on the host (demoted by request 2): fetched, nothing prefilled.
  const auto trace = index_trace(test::make_trace({{1}, {2}, {1}, {1, 3}, {5, 6}}, bt, {4, 4, 4, 6, 8}), bt);
  const Baseline base = baseline(c, trace);
  for (const char* policy : {"lru", "lru-host"}) {
    const Capacity cap{1, std::string(policy) == "lru" ? 0u : 4u};
    const Result sim = simulate(trace, policy, cap);
    const CostedResult r = price(c, sim, base, 1, 1);
    double sum = 0;
    for (std::size_t i = 0; i < sim.requests; ++i) {
      EXPECT_DOUBLE_EQ(r.request_s[i], prefill_s(c, sim.request_missed_tokens[i], sim.request_reused_tokens[i]) +
                                           fetch_s(c, sim.request_host_blocks[i]));
      sum += r.request_s[i];
    }
    EXPECT_DOUBLE_EQ(r.added.total_s, sum) << policy;
    EXPECT_DOUBLE_EQ(r.added.mean_s * double(sim.requests), sum) << policy;
    EXPECT_DOUBLE_EQ(r.prefill_s_total + r.fetch_s_total, sum) << policy;
    EXPECT_DOUBLE_EQ(r.prefill_avoided_s, base.latency.total_s - r.prefill_s_total) << policy;
    EXPECT_EQ(r.host_bytes, double(sim.hits_host) * c.block_bytes) << policy;
    EXPECT_DOUBLE_EQ(r.prefill_avoided, double(sim.reused_tokens) / double(sim.input_tokens)) << policy;
    EXPECT_DOUBLE_EQ(r.hit_rate_hbm + r.hit_rate_host, sim.hit_rate()) << policy;
  }
  const Result host = simulate(trace, "lru-host", Capacity{1, 4});
  ASSERT_EQ(host.request_host_blocks[2], 1u);
  EXPECT_EQ(price(c, host, base, 1, 1).request_s[2], fetch_s(c, 1));
  // No cache: every request prefills its whole prompt from an empty prefix.
  EXPECT_EQ(base.request_s[3], prefill_s(c, 6, 0));
  EXPECT_DOUBLE_EQ(base.latency.total_s, prefill_s(c, 4, 0) * 3 + prefill_s(c, 6, 0) + prefill_s(c, 8, 0));
}

TEST(ResidencyCosts, TheCommittedTraceCostsLessWithACacheThanWithout) {
  const auto shapes = report::load_shapes();
  const auto gpus = report::load_gpus(report::default_gpus_path());
  const auto& g = report::find_gpu(gpus, "H100 SXM");
  const CostModel c = make_cost_model(g, report::find_shape(shapes, "Llama-3.1-8B"), kMooncakeBlockTokens);
  Trace t;
  try {
    t = read_mooncake_jsonl(KVF_RESIDENCY_TRACE, kMooncakeBlockTokens);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "trace " << KVF_RESIDENCY_TRACE << " not readable: " << e.what();
  }
  const auto it = index_trace(t, kMooncakeBlockTokens);
  const Baseline base = baseline(c, it);
  const auto lru = price(c, simulate(it, "lru", Capacity{4000, 0}), base, 250, 0);
  const auto oracle = price(c, simulate(it, "oracle", Capacity{4000, 0}), base, 250, 0);
  EXPECT_GT(lru.prefill_avoided_s, 0);
  EXPECT_LT(lru.added.total_s, base.latency.total_s);
  EXPECT_GE(oracle.sim.hits_hbm, lru.sim.hits_hbm);
  EXPECT_NEAR(lru.added.mean_s * double(it.requests()), lru.added.total_s, 1e-9 * lru.added.total_s);
}

// What the `cost` policy is told is the cost model's own figures; with bf16 K/V of Llama-3.1-8B on H100 SXM even
// a one-token prefill (all layer weights read) outweighs one block's fetch, so that policy always demotes there.
TEST(ResidencyCosts, RestoreCostsAreTheModelsAndPrefillOutweighsAFetchForLlama8b) {
  const auto gpus = report::load_gpus(report::default_gpus_path());
  const CostModel c = make_cost_model(report::find_gpu(gpus, "H100 SXM"), llama8b(), 512);
  const RestoreCosts r = restore_costs(c);
  EXPECT_EQ(r.fetch_block_s, fetch_s(c, 1));
  EXPECT_EQ(r.prefill_s(512, 1024), prefill_s(c, 512, 1024));
  EXPECT_GT(r.prefill_s(1, 0), r.fetch_block_s);
  EXPECT_GT(r.prefill_s(512, 1024), r.prefill_s(512, 0));  // attention over the prefix is priced
  std::printf("H100 SXM, Llama-3.1-8B: prefill of 1 token %.3g ms, of a 512-token block at depth 0 %.3g ms, at "
              "depth 100 %.3g ms; fetch of one block %.3g ms\n",
              1e3 * r.prefill_s(1, 0), 1e3 * r.prefill_s(512, 0), 1e3 * r.prefill_s(512, 51200),
              1e3 * r.fetch_block_s);
}

// `kvf residency` on the committed trace with the real costs: the oracle's bound at HBM + host holds for `cost`.
TEST(ResidencyCosts, CostPolicyOnTheCommittedTraceStaysUnderTheOracle) {
  const auto gpus = report::load_gpus(report::default_gpus_path());
  const CostModel c = make_cost_model(report::find_gpu(gpus, "H100 SXM"), llama8b(), kMooncakeBlockTokens);
  Trace t;
  try {
    t = read_mooncake_jsonl(KVF_RESIDENCY_TRACE, kMooncakeBlockTokens);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "trace " << KVF_RESIDENCY_TRACE << " not readable: " << e.what();
  }
  const auto it = index_trace(t, kMooncakeBlockTokens);
  const RestoreCosts r = restore_costs(c);
  for (std::size_t hbm : {1000u, 4000u}) {
    const Result cost = simulate(it, "cost", Capacity{hbm, 8000}, &r);
    EXPECT_GE(test::hits(simulate(it, "oracle", Capacity{hbm + 8000, 0})), test::hits(cost)) << hbm;
    EXPECT_EQ(cost.hits_hbm + cost.hits_host + cost.misses, cost.references);
  }
}

// Forms (README "Forms"): bytes per block, restores, fetches and compress passes against hand-computed figures.
TEST(ResidencyCosts, BytesPerBlockOfEveryFormOfLlama8b) {
  const auto& m = llama8b();  // 2048 K/V values and 4096 hidden values per token and layer, 32 layers
  EXPECT_EQ(block_bytes(m, 512, Form::kv_int8), 512.0 * (2048 + 16 * 4) * 32);
  EXPECT_EQ(block_bytes(m, 512, Form::kv_int4), 512.0 * (1024 + 16 * 4) * 32);
  EXPECT_EQ(block_bytes(m, 512, Form::x), 512.0 * 4096 * 2 * 32);
  EXPECT_EQ(block_bytes(m, 512, Form::x_int8), 512.0 * (4096 + 32 * 4) * 32);
  EXPECT_EQ(block_bytes(m, 512, Form::x_int4), 512.0 * (2048 + 32 * 4) * 32);
  const auto g = compute_only();
  const CostModel c = make_cost_model(g, m, 512, Form::kv_int8);
  EXPECT_EQ(c.block_bytes, 512.0 * (2048 + 16 * 4) * 32);
  EXPECT_EQ(c.form_bytes[0], 67108864.0);
  const Capacity cap = capacity(c, 3, 5, {Form::kv_int4});
  EXPECT_EQ(cap.hbm_units(), 3 * 34603008);
  EXPECT_EQ(cap.host_units(), 5 * 34603008);
  EXPECT_EQ(cap.unit(Form::kv_int4), 17825792);
  static const auto shapes = report::load_shapes();
  try {
    make_cost_model(g, report::find_shape(shapes, "DeepSeek-V3"), 512, Form::x_int8);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "form x-int8: DeepSeek-V3 is an MLA model, whose cache is the latent; X forms are "
                           "modelled for GQA models only");
  }
}

TEST(ResidencyCosts, RestoresFetchesAndCompressPassesByForm) {
  auto g = compute_only();
  g.hbm_tbps = 2;  // memory-bound passes: bytes / 2 TB/s, plus a launch per layer
  g.launch_us = 3;
  const auto& m = llama8b();
  const CostModel c = make_cost_model(g, m, 512);
  const double kv = 67108864, q8 = 34603008, q4 = 17825792;
  EXPECT_EQ(restore_s(c, Form::kv, 7), 0.0);
  EXPECT_EQ(restore_s(c, Form::kv_int8, 0), 0.0);
  // One dequantize pass per layer over all 3 blocks: read int8, write bf16.
  EXPECT_NEAR(restore_s(c, Form::kv_int8, 3), 32 * (3 * (q8 + kv) / 32 / 2e12 + 3e-6), 1e-12);
  // X: recompute_x per layer, the blocks as the pages of one call.
  EXPECT_NEAR(restore_s(c, Form::x_int8, 2), 32 * 2 * report::recompute_x(g, m, 512, 2, 8).seconds, 1e-12);
  EXPECT_NEAR(fetch_s(c, Form::kv_int4, 2), 2 * 32 * 10e-6 + 2 * q4 / 50e9, 1e-15);
  EXPECT_EQ(fetch_s(c, Form::kv, 2), fetch_s(c, 2));
  EXPECT_NEAR(compress_s(c, Form::kv_int4), 32 * ((kv + q4) / 32 / 2e12 + 3e-6), 1e-12);
  EXPECT_EQ(compress_s(c, Form::kv), 0.0);
  const RestoreCosts r = restore_costs(c);
  EXPECT_EQ(r.restore_form_s[1], restore_s(c, Form::kv_int8, 1));
  EXPECT_EQ(r.fetch_form_s[2], fetch_s(c, Form::kv_int4, 1));
}

TEST(ResidencyCosts, ARestoreAddsToItsRequestAndTotalsStillAddUp) {
  auto g = compute_only();
  g.hbm_tbps = 2;
  const int bt = 4;
  const CostModel c = make_cost_model(g, llama8b(), bt);
  // HBM 3 kv blocks; a dequantize is far cheaper than a prefill, so `cost` compresses instead of dropping. An int8
  // block is a little over half a kv block (its scales): [4] compresses 1, 2 and 3 (3 x 0.516 + 1 <= 3); [1]
  // reuses 1 from HBM as kv-int8 and re-enters whole, which compresses 4.
  const auto trace = index_trace(test::make_trace({{1}, {2}, {3}, {4}, {1}}, bt), bt);
  const RestoreCosts rc = restore_costs(c);
  ASSERT_LT(rc.restore_form_s[1] / (c.form_bytes[0] - c.form_bytes[1]), prefill_s(c, bt, 0) / c.form_bytes[0]);
  const Result sim = simulate(trace, "cost", capacity(c, 3, 0, {Form::kv_int8}), &rc);
  ASSERT_EQ(sim.hits_hbm_form[1], 1u);
  ASSERT_EQ(sim.compressed[1], 4u);
  const CostedResult r = price(c, sim, baseline(c, trace), 1, 0);
  EXPECT_DOUBLE_EQ(r.request_s[4], restore_s(c, Form::kv_int8, 1));
  EXPECT_DOUBLE_EQ(r.restore_s_total, restore_s(c, Form::kv_int8, 1));
  EXPECT_DOUBLE_EQ(r.prefill_s_total + r.fetch_s_total + r.restore_s_total, r.added.total_s);
  EXPECT_DOUBLE_EQ(r.compress_s_total, 4 * compress_s(c, Form::kv_int8));
  EXPECT_EQ(r.x_restored_blocks, 0u);
  EXPECT_DOUBLE_EQ(r.recomputed_tokens, double(sim.prefill_tokens));
  // Held after each request, in kv blocks: 1, 2, 3, 1 + 3 int8, 1 + 3 int8: shares of the 3-block budget.
  const double q = c.form_bytes[1] / c.form_bytes[0];
  EXPECT_NEAR(r.hbm_share[0], (1 + 2 + 3 + 1 + 1) / 5.0 / 3, 1e-12);
  EXPECT_NEAR(r.hbm_share[1], (3 * q + 3 * q) / 5.0 / 3, 1e-12);
}

TEST(ResidencyCosts, APartialLastBlockRecomputedFromXCountsItsRealTokens) {
  auto g = compute_only();
  g.hbm_tbps = 2;
  const int bt = 4;
  const CostModel c = make_cost_model(g, llama8b(), bt, Form::x);
  // Two requests of 6 tokens over blocks [1 2]: block 2 holds 2 tokens. The second reuses both from HBM as X.
  const auto trace = index_trace(test::make_trace({{1, 2}, {1, 2}}, bt, {6, 6}), bt);
  const Result sim = simulate(trace, "lru", capacity(c, 2, 0));
  ASSERT_EQ(sim.restores.size(), 1u);
  EXPECT_EQ(sim.restores[0].blocks, 2u);
  EXPECT_EQ(sim.restores[0].tokens, 6);
  const CostedResult r = price(c, sim, baseline(c, trace), 1, 0);
  EXPECT_EQ(r.x_restored_blocks, 2u);
  EXPECT_EQ(r.x_restored_tokens, 6);
  EXPECT_DOUBLE_EQ(r.recomputed_tokens, 6 + 6);  // the first request's prefill, then the 6 rows recomputed
  // One call over the 6 rows of the two pages, per layer; less than two full pages.
  EXPECT_NEAR(restore_s(c, Form::x, 2, 6), 32 * 2 * report::recompute_x(g, llama8b(), 3, 2, 16).seconds, 1e-15);
  EXPECT_LT(restore_s(c, Form::x, 2, 6), restore_s(c, Form::x, 2));
  EXPECT_DOUBLE_EQ(r.restore_s_total, restore_s(c, Form::x, 2, 6));
  EXPECT_EQ(restore_s(c, Form::x, 1, 0), 0.0);  // a block past the request's input holds no token
}

TEST(ResidencyCosts, PrefilledTokensWrittenInAQuantizedEntryFormCostAPassPerRequest) {
  auto g = compute_only();
  g.hbm_tbps = 2;
  g.launch_us = 3;
  const int bt = 4;
  // [1 2 3] of 10 tokens (block 3 holds 2), then [1 2 4] of 12: 8 reused, 4 prefilled.
  const auto trace = index_trace(test::make_trace({{1, 2, 3}, {1, 2, 4}}, bt, {10, 12}), bt);
  const CostModel kv = make_cost_model(g, llama8b(), bt);
  EXPECT_EQ(entry_pass_s(kv, 12), 0.0);  // the prefill writes bf16 K/V itself
  EXPECT_EQ(price(kv, simulate(trace, "lru", capacity(kv, 4, 0)), baseline(kv, trace), 1, 0).entry_pass_s_total, 0.0);
  EXPECT_EQ(entry_pass_s(make_cost_model(g, llama8b(), bt, Form::x), 12), 0.0);  // X where K/V would go
  const CostModel q8 = make_cost_model(g, llama8b(), bt, Form::kv_int8);
  const double k = q8.form_bytes[0], b = q8.block_bytes;
  // Read bf16 K/V, write int8, for the tokens' bytes (10 tokens: 2.5 blocks), a launch per layer.
  EXPECT_NEAR(entry_pass_s(q8, 10), 32 * (2.5 * (k + b) / 32 / 2e12 + 3e-6), 1e-15);
  EXPECT_EQ(entry_pass_s(q8, 0), 0.0);
  const Result sim = simulate(trace, "lru", capacity(q8, 4, 0));
  ASSERT_EQ(sim.request_missed_tokens, (std::vector<std::int64_t>{10, 4}));
  EXPECT_DOUBLE_EQ(price(q8, sim, baseline(q8, trace), 1, 0).entry_pass_s_total,
                   entry_pass_s(q8, 10) + entry_pass_s(q8, 4));
  const CostModel x8 = make_cost_model(g, llama8b(), bt, Form::x_int8);  // from bf16 X
  EXPECT_NEAR(entry_pass_s(x8, bt), 32 * ((x8.form_bytes[3] + x8.block_bytes) / 32 / 2e12 + 3e-6), 1e-15);
}

// lru-host with one block in each tier on [1] [2] [3] [1]: the last request reuses block 1 from the tier behind host
// memory (ResidencyDisk.LruHostDemotesHostEvictionsToDiskAndFetchesThemBack), priced.
CostedResult third_tier_hit(const CostModel& c) {
  const auto trace = index_trace(test::make_trace({{1}, {2}, {3}, {1}}, c.block_tokens), c.block_tokens);
  const Result sim = simulate(trace, "lru-host", capacity(c, 1, 1, {}, 1));
  return price(c, sim, baseline(c, trace), 1, 1, 1);
}

TEST(ResidencyCosts, ADiskHitCostsItsReadPlusItsFetch) {
  auto g = compute_only();
  const int bt = 4;
  {
    const CostModel none = make_cost_model(g, llama8b(), bt);
    EXPECT_EQ(none.disk_source, "none");
    EXPECT_THROW(disk_fetch_s(none, Form::kv, 1), UsageError);  // no disk figure
    EXPECT_EQ(restore_costs(none).disk_fetch_form_s[0], 0.0);
  }
  g.disk_gbps = 2;
  g.disk_latency_us = 50;
  const CostModel c = make_cost_model(g, llama8b(), bt);
  const double b = c.block_bytes;
  // Three reads of one block each (latency + bytes / bandwidth), then the host link's copies.
  EXPECT_NEAR(disk_fetch_s(c, Form::kv, 3), 3 * 50e-6 + 3 * b / 2e9 + fetch_s(c, 3), 1e-15);
  EXPECT_EQ(restore_costs(c).disk_fetch_form_s[0], disk_fetch_s(c, Form::kv, 1));
  const CostedResult r = third_tier_hit(c);
  ASSERT_EQ(r.sim.hits_disk, 1u);
  EXPECT_DOUBLE_EQ(r.request_s[3], disk_fetch_s(c, Form::kv, 1));
  EXPECT_DOUBLE_EQ(r.fetch_s_total, disk_fetch_s(c, Form::kv, 1));
  EXPECT_EQ(r.disk_bytes, b);
  EXPECT_EQ(r.host_bytes, b);  // a disk read crosses the host link too
  EXPECT_DOUBLE_EQ(r.hit_rate_disk, 0.25);
  EXPECT_EQ(r.disk_gib, 1);
}

TEST(ResidencyCosts, APeerPoolHitCostsItsRemoteReadPlusItsFetch) {
  auto g = compute_only();
  const int bt = 4;
  {
    CostModel none = make_cost_model(g, llama8b(), bt);
    EXPECT_THROW(use_peer_tier(none), UsageError);  // no remote figure: only a results directory has one
    EXPECT_FALSE(third_tier_priced(none));
  }
  g.remote_gbps = 4;
  g.remote_fixed_us = 20;
  g.remote_descriptor_us = 3;
  g.disk_gbps = 100;  // a disk figure too: the peer's price must be the one used
  CostModel c = make_cost_model(g, llama8b(), bt);
  use_peer_tier(c);
  EXPECT_TRUE(third_tier_priced(c));
  EXPECT_EQ(c.disk_source.rfind("peer pool: ", 0), 0u) << c.disk_source;
  const double b = c.block_bytes, L = llama8b().layers;
  // Two blocks: one transfer of 2 blocks' bytes as 2 x 32 descriptors (one per block and layer), then the host link.
  EXPECT_NEAR(disk_fetch_s(c, Form::kv, 2), 20e-6 + 2 * L * 3e-6 + 2 * b / 4e9 + fetch_s(c, 2), 1e-15);
  EXPECT_EQ(restore_costs(c).disk_fetch_form_s[0], disk_fetch_s(c, Form::kv, 1));
  const CostedResult r = third_tier_hit(c);
  ASSERT_EQ(r.sim.hits_disk, 1u);
  EXPECT_DOUBLE_EQ(r.request_s[3], disk_fetch_s(c, Form::kv, 1));
}

report::CaseRow layers_row(const std::string& mode, double tokens, double layers, double prefix, double median_s,
                           const std::string& launch = "eager") {
  report::CaseRow r;
  r.study = "frontier";
  r.case_name = "layers/Llama-3.1-8B/T" + report::fmt(tokens) + "/L" + report::fmt(layers);
  r.mode = mode;
  r.samples = 5;
  r.median_s = median_s;
  r.params = {{"arm", "layers"}, {"model", "Llama-3.1-8B"}, {"tokens", report::fmt(tokens)},
              {"layers", report::fmt(layers)}, {"prefix", report::fmt(prefix)}, {"pages", "1"}, {"launch", launch}};
  return r;
}

TEST(ResidencyCosts, MeasuredPrefillIsTheMedianRatioOfFullDepthLayersRows) {
  const auto g = compute_only();
  CostModel c = make_cost_model(g, llama8b(), 512);
  const double m128 = prefill_s(c, 128, 1024), m256 = prefill_s(c, 256, 0);
  report::ResultSet rs;
  rs.dir = "run";
  EXPECT_FALSE(measured_prefill(c, rs).has_value());
  rs.cases.push_back(layers_row("cold", 128, 4, 1024, 1.0));            // not the model's depth
  rs.cases.push_back(layers_row("cold", 128, 32, 1024, 9.0, "graph"));  // CUDA graph: left out
  rs.cases.push_back(layers_row("hot", 128, 32, 1024, 5 * m128));       // cold rows come first
  EXPECT_EQ(measured_prefill(c, rs)->scale, 5);
  rs.cases.push_back(layers_row("cold", 128, 32, 1024, 2 * m128));
  rs.cases.push_back(layers_row("cold", 256, 32, 0, 3 * m256));
  rs.cases.push_back(layers_row("cold", 256, 32, 0, 4 * m256));
  const auto p = measured_prefill(c, rs);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->scale, 3, 1e-12);  // median of 2, 3, 4
  EXPECT_NE(p->source.find("(cold): every prefill x3 (median of 3) in run"), std::string::npos) << p->source;
  use_measured_prefill(c, *p);
  EXPECT_NEAR(prefill_s(c, 128, 1024), 3 * m128, 1e-15);
  EXPECT_EQ(c.prefill_source, p->source);
  EXPECT_EQ(fetch_s(c, 1), fetch_s(make_cost_model(g, llama8b(), 512), 1));  // only the prefill moves
}

TEST(ResidencyCosts, PipelinedFetchLiesBetweenTheLongerPartAndTheSum) {
  const auto g = compute_only();
  const int bt = 4;
  const CostModel c = make_cost_model(g, llama8b(), bt);
  // Request 2 reuses 1 from host; request 3 reuses 2 from host and prefills 2 tokens: F and C overlap by layer.
  const auto trace = index_trace(test::make_trace({{1}, {2}, {1}, {2, 3}}, bt, {4, 4, 4, 6}), bt);
  const Result sim = simulate(trace, "lru-host", Capacity{1, 4});
  const CostedResult r = price(c, sim, baseline(c, trace), 1, 1);
  for (std::size_t i = 0; i < sim.requests; ++i) {
    EXPECT_LE(r.request_pipelined_s[i], r.request_s[i] * (1 + 1e-12)) << i;
    EXPECT_GE(r.request_pipelined_s[i], 0.5 * r.request_s[i] * (1 - 1e-12)) << i;
  }
  ASSERT_EQ(sim.request_host_blocks[2], 1u);
  EXPECT_DOUBLE_EQ(r.request_pipelined_s[2], fetch_s(c, 1));  // nothing to overlap with
  const double F = fetch_s(c, sim.request_host_blocks[3]), C = prefill_s(c, 2, 4), L = 32;
  ASSERT_GT(F, 0);
  EXPECT_DOUBLE_EQ(r.request_pipelined_s[3], ((L - 1) * std::max(F, C) + F + C) / L);
  EXPECT_DOUBLE_EQ(r.request_pipelined_s[0], r.request_s[0]);  // a miss: prefill only
}

report::CaseRow x_row(const std::string& form, double tokens, double pages, double median_s) {
  report::CaseRow r;
  r.study = "frontier";
  r.case_name = "x/Llama-3.1-8B/T" + report::fmt(tokens) + "/P" + report::fmt(pages);
  r.mode = "cold";
  r.samples = 5;
  r.median_s = median_s;
  r.params = {{"arm", form == "x_bf16" ? "x" : "xq"}, {"model", "Llama-3.1-8B"}, {"tokens", report::fmt(tokens)},
              {"pages", report::fmt(pages)}, {"layers", "1"}, {"resident_form", form}};
  return r;
}

TEST(ResidencyCosts, MeasuredRecomputeFromXInterpolatesByTheRowsOfOneCall) {
  const auto g = compute_only();
  CostModel c = make_cost_model(g, llama8b(), 512, Form::x);
  const double model16 = restore_s(c, Form::x, 16), model_q = restore_s(c, Form::x_int8, 1);
  report::ResultSet rs;
  rs.dir = "run";
  EXPECT_FALSE(use_measured_restores(c, rs));
  EXPECT_EQ(c.restore_source, "model");
  rs.cases.push_back(x_row("x_bf16", 512, 1, 10e-6));
  rs.cases.push_back(x_row("x_bf16", 512, 8, 50e-6));
  rs.cases.push_back(x_row("x_bf16", 4096, 1, 70e-6));  // the same 4096 rows per call: the median, 60 us
  ASSERT_TRUE(use_measured_restores(c, rs));
  EXPECT_NEAR(restore_s(c, Form::x, 1), 32 * 10e-6, 1e-15);
  EXPECT_NEAR(restore_s(c, Form::x, 8), 32 * 60e-6, 1e-15);
  EXPECT_NEAR(restore_s(c, Form::x, 4), 32 * (10e-6 + 50e-6 * (2048.0 - 512) / (4096 - 512)), 1e-15);
  EXPECT_EQ(restore_s(c, Form::x, 16), model16);        // beyond the measured rows: the model
  EXPECT_EQ(restore_s(c, Form::x_int8, 1), model_q);    // no xq rows: the model
  EXPECT_NE(c.restore_source.find("x <- 2 frontier x row counts, 512..4096 rows per call (cold) in run"),
            std::string::npos) << c.restore_source;
}

}  // namespace
}  // namespace kvf::residency
