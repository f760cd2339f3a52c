// Model arithmetic against hand-computed cases (every expected number is worked out in the comment).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "kvf/report.hpp"
#include "kvf/study_report.hpp"
#include "model_fixtures.hpp"

using namespace kvf::report;

namespace {

using test::small;
using test::toy;

// The cost of one action in a class (a failure, and an empty cost, when the class has none).
ActionCost cost_of(const ActionClass& c, const std::string& action) {
  for (const auto& x : c.costs)
    if (x.action == action) return x;
  ADD_FAILURE() << action;
  return ActionCost{};
}

}  // namespace

TEST(Model, BytesPerPage) {
  const Shape m = small();
  EXPECT_DOUBLE_EQ(kv_bytes_per_layer(m, 64), 64 * 256 * 2);            // 32768
  EXPECT_DOUBLE_EQ(kv_quant_bytes_per_layer(m, 64, 8), 64 * (256 + 8));   // 2 groups of 128 -> 2 x 4 B scales
  EXPECT_DOUBLE_EQ(kv_quant_bytes_per_layer(m, 64, 4), 64 * (128 + 8));
  EXPECT_DOUBLE_EQ(x_bytes_per_layer(m, 64, 16), 64 * 2048);
  EXPECT_DOUBLE_EQ(x_bytes_per_layer(m, 64, 4), 64 * (512 + 32));         // 8 groups x 4 B
}

TEST(Model, RecomputeOnePage) {
  // T=64, P=1, bf16 X.
  // GEMM: flops 2*64*1024*256 = 33,554,432 -> 0.33554 us at 100 TFLOP/s;
  //       bytes W 256*1024*2 = 524,288 + X 64*1024*2 = 131,072 + Y fp32 64*256*4 = 65,536 = 720,896 -> 0.720896 us
  //       memory bound: 0.720896 + 5 us launch.
  // RoPE+write: 64*256*(4+2) = 98,304 B -> 0.098304 us + 5 us.
  // Total 10.8192 us.
  const Cost c = recompute_x(toy(), small(), 64, 1, 16);
  EXPECT_NEAR(c.seconds * 1e6, 10.8192, 1e-9);
  EXPECT_EQ(c.launches, 2);
  EXPECT_EQ(c.bound, "fixed");
}

TEST(Model, WeightReadsAmortizedOverPages) {
  // T=64, P=4 (256 rows). GEMM flops 134,217,728 -> 1.34217728 us; bytes 524,288 + 524,288 + 262,144 = 1,310,720
  // -> 1.31072 us: compute bound, 1.34217728 + 5. RoPE: 256*1536 = 393,216 B -> 0.393216 + 5.
  // Per call 11.73539328 us; per page / 4 = 2.93384832 us.
  const Cost c = recompute_x(toy(), small(), 64, 4, 16);
  EXPECT_NEAR(c.seconds * 1e6, 2.93384832, 1e-9);
  // Per page the weights are read a quarter as often: per-page bytes = 1,704,... / 4
  EXPECT_NEAR(c.bytes, (1310720.0 + 393216.0) / 4, 1e-6);
}

TEST(Model, QuantizedXAddsADequantPass) {
  // int4 X, T=64, P=1: dequant reads 64*544 = 34,816 B, writes 131,072 B: 165,888 B -> 0.165888 us + 5 us.
  const double base = recompute_x(toy(), small(), 64, 1, 16).seconds * 1e6;
  const Cost c = recompute_x(toy(), small(), 64, 1, 4);
  EXPECT_NEAR(c.seconds * 1e6, base + 5.165888, 1e-9);
  EXPECT_EQ(c.launches, 3);
}

TEST(Model, TransferFixedCostPerCopy) {
  // 1 MB at 50 GB/s = 20 us; + 10 us per copy.
  EXPECT_NEAR(transfer(toy(), 1e6, 1, 50).seconds * 1e6, 30, 1e-9);
  EXPECT_NEAR(transfer(toy(), 1e6, 2, 50).seconds * 1e6, 40, 1e-9);
  EXPECT_EQ(transfer(toy(), 1e6, 1, 50).bound, "link");
  EXPECT_THROW(transfer(toy(), 1e6, 1, 0), kvf::UsageError);
}

TEST(Model, Roofline) {
  EXPECT_NEAR(roofline_s(toy(), 1e12, 1e6), 0.01, 1e-15);   // 1 TFLOP at 100 TFLOP/s = 10 ms
  EXPECT_NEAR(roofline_s(toy(), 1e6, 1e9), 1e-3, 1e-15);    // 1 GB at 1 TB/s = 1 ms
  GpuSpec g = toy();
  g.bf16_tflops = 0;
  EXPECT_THROW(roofline_s(g, 1, 1), kvf::UsageError);       // unknown peak: never guessed
}

TEST(Model, ThroughLayersDense) {
  // One layer, T=16, P=1. attention params: 1024*(1024 + 256) + 1024*1024 = 2,359,296; qdim 1024.
  // proj: flops 2*16*2,359,296 = 75,497,472 (0.755 us); bytes 2*2,359,296 + 16*1024*4 + 16*256*2 = 4,792,320 (4.79 us)
  // attn over the page: flops 2*16*16*1024 = 524,288; bytes 16*1024*4 = 65,536 (0.0655 us)
  // MLP: 3*1024*4096 = 12,582,912 params: flops 402,653,184 (4.03 us); bytes 25,165,824 + 65,536 = 25,231,360 (25.23 us)
  // a whole layer = 4.79232 + 0.065536 + 25.23136 + 10 launches (the arm's kernels) * 5 = 80.089216 us; the step's
  // input copy is one launch more: 85.089216 us.
  const Cost c = recompute_layers(toy(), small(), 16, 1, 1);
  EXPECT_NEAR(c.seconds * 1e6, 85.089216, 1e-9);
  EXPECT_EQ(c.launches, 1 + kWholeLayerLaunches);
  EXPECT_NEAR(recompute_layers(toy(), small(), 16, 1, 3).seconds * 1e6, 5 + 3 * 80.089216, 1e-9);
  // The page's K/V of layers 1..L (evict): layers 1..L-1 whole, then layer L's K/V as recompute_x computes them:
  // GEMM flops 2*16*1024*256 = 8,388,608 (0.0839 us), bytes 256*1024*2 + 16*1024*2 + 16*256*4 = 573,440 (0.573 us);
  // RoPE + write 16*256*4 + 16*256*2 = 24,576 bytes (0.0246 us); two launches, 10 us: recompute_x's 10.598016 us,
  // and the arm's RMSNorm and input copy, two launches more.
  const Cost kv = recompute_layers(toy(), small(), 16, 1, 1, true);
  EXPECT_NEAR(kv.seconds * 1e6, 10.598016 + 10, 1e-9);
  EXPECT_NEAR(kv.seconds - 10e-6, recompute_x(toy(), small(), 16, 1, 16).seconds, 1e-15);
  EXPECT_NEAR(recompute_layers(toy(), small(), 16, 1, 3, true).seconds * 1e6, 5 + 2 * 80.089216 + 15.598016, 1e-9);
  // The counts the predictor charges the arm's rows are the model's.
  EXPECT_EQ(recompute_layers(toy(), small(), 16, 1, 3, true).launches, through_layers_launches(3, true, false));
  EXPECT_EQ(through_layers_launches(1, true, true), 1 + kKvLayerLaunches);
  EXPECT_EQ(through_layers_launches(3, true, true), 1 + 2 * (kWholeLayerLaunches + 1) + kKvLayerLaunches);
  EXPECT_EQ(through_layers_launches(2, false, false), 1 + 2 * kWholeLayerLaunches);
}

// The note's count the layer arms' predictions read ("KV splits S": S > 1 adds the split merge's launch).
TEST(Model, NoteCountReadsTheNumberAfterItsKey) {
  CaseRow r;
  const Predictor p(toy(), r, nullptr, nullptr, nullptr);
  EXPECT_FALSE(p.note_count("KV splits ").has_value());
  r.note = "GPU: ...; attention on mma, KV splits 3; graph: 14 kernel nodes";
  EXPECT_EQ(p.note_count("KV splits "), 3);
  r.note = "attention KV splits 12";
  EXPECT_EQ(p.note_count("KV splits "), 12);
  r.note = "KV splits unknown";
  EXPECT_FALSE(p.note_count("KV splits ").has_value());
}

TEST(Actions, HandComputedClass) {
  ActionOptions o;
  o.tokens = {64};
  o.layers = {1};
  o.reuse = {0.1};
  o.hbm_price_us_per_mib = 1;
  const auto t = action_table(toy(), small(), o);
  ASSERT_EQ(t.size(), 2u);  // decode, prefill
  const ActionClass& c = t[0];
  EXPECT_EQ(c.phase, "decode");
  const auto cost = [&](const std::string& a) { return cost_of(c, a); };
  // keep: 32768 B = 1/32 MiB at 1 us/MiB
  EXPECT_NEAR(cost("keep").total_us, 0.03125, 1e-12);
  // demote: fetch 10 us + 32768 B / 50 GB/s = 10.65536 us on reuse; 0.1 x that
  EXPECT_NEAR(cost("demote").reuse_us, 10.65536, 1e-9);
  EXPECT_NEAR(cost("demote").total_us, 1.065536, 1e-9);
  // compress_int8: 16896 B resident; pass (16896 + 32768) B at 1 TB/s + 5 us = 5.049664 us, once and on reuse
  EXPECT_NEAR(cost("compress_int8").reuse_us, 5.049664, 1e-9);
  EXPECT_NEAR(cost("compress_int8").total_us, 0.1 * 5.049664 + 5.049664 + 16896.0 / 1048576, 1e-9);
  // recompute_x: 10.8192 us on reuse (see Model.RecomputeOnePage), X 131072 B resident = 0.125 MiB
  EXPECT_NEAR(cost("recompute_x").total_us, 1.08192 + 0.125, 1e-9);
  EXPECT_EQ(c.cheapest, "keep");
  EXPECT_EQ(c.costs.size(), 8u);
  const auto j = action_table_json(toy(), small(), o, t);
  EXPECT_EQ(j["classes"][0]["cheapest"], "keep");
  EXPECT_EQ(j["classes"][1]["phase"], "prefill");
  EXPECT_DOUBLE_EQ(j["hbm_price_us_per_mib"].get<double>(), 1.0);
}

// Prefill fetches and (de)quantizes the P pages of a call together: one copy, one launch per layer for all of them.
TEST(Actions, PrefillAmortizesFixedCostsOverItsPages) {
  ActionOptions o;
  o.tokens = {64};
  o.layers = {2};
  o.reuse = {0.1};
  o.prefill_pages = 4;
  o.hbm_price_us_per_mib = 1;
  const auto t = action_table(toy(), small(), o);
  ASSERT_EQ(t.size(), 2u);
  // decode, L=2: two copies of 32768 B: 2 x 10 us + 65536 B / 50 GB/s = 21.31072 us
  EXPECT_NEAR(cost_of(t[0], "demote").reuse_us, 21.31072, 1e-9);
  // prefill, P=4: two copies of 4 x 32768 B: (20 us + 262144 B / 50 GB/s) / 4 = (20 + 5.24288) / 4 = 6.31072 us
  EXPECT_NEAR(cost_of(t[1], "demote").reuse_us, 6.31072, 1e-9);
  // compress_int8, prefill: per layer one pass over 4 pages, 4 x (16896 + 32768) B = 198656 B at 1 TB/s + 5 us;
  // two layers, per page: 2 x (0.198656 + 5) / 4 = 2.599328 us (decode: 2 x 5.049664 = 10.099328)
  EXPECT_NEAR(cost_of(t[0], "compress_int8").reuse_us, 10.099328, 1e-9);
  EXPECT_NEAR(cost_of(t[1], "compress_int8").reuse_us, 2.599328, 1e-9);
}

TEST(Actions, DefaultPriceIsAFetchOfOneMiB) {
  ActionOptions o;
  o.tokens = {64};
  o.layers = {1};
  o.reuse = {0.5};
  const auto t = action_table(toy(), small(), o);
  // 1 MiB / 50 GB/s = 20.97152 us per MiB; keep = 1/32 of that
  for (const auto& a : t[0].costs)
    if (a.action == "keep") {
      EXPECT_NEAR(a.total_us, 20.97152 / 32, 1e-9);
    }
}

TEST(Actions, BadClassesAreUsageErrors) {
  ActionOptions o;
  o.layers = {5};  // small() has 4 layers
  EXPECT_THROW(action_table(toy(), small(), o), kvf::UsageError);
  o.layers = {1};
  o.reuse = {1.5};
  EXPECT_THROW(action_table(toy(), small(), o), kvf::UsageError);
}

TEST(Crossover, InterpolatedBetweenMeasuredPoints) {
  // d = a - b: +10 at 16, -122 at 128 -> 16 + 112 * 10 / 132 = 24.4848...
  const auto c = find_crossover({16, 128, 512}, {40, 48, 90}, {30, 170, 650}, "recompute", "transfer", "tokens");
  ASSERT_TRUE(c.found);
  EXPECT_NEAR(c.x, 16 + 112.0 * 10 / 132, 1e-12);
  EXPECT_EQ(c.text, "24.48 tokens (interpolated between 16 and 128; transfer faster below, recompute above)");
}

TEST(Crossover, OutsideMeasuredRangeIsSaid) {
  const auto c = find_crossover({16, 128}, {1, 2}, {5, 9}, "recompute", "transfer", "tokens");
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.text, "outside measured range (16..128 tokens): recompute faster throughout");
  const auto one = find_crossover({128}, {3}, {2}, "recompute", "transfer", "tokens");
  EXPECT_EQ(one.text, "one measured point (128..128 tokens): transfer faster there; crossover unknown");
  const auto exact = find_crossover({16, 64}, {5, 7}, {5, 9}, "r", "t", "tokens");
  EXPECT_EQ(exact.text, "16 tokens (measured point; t faster below, r above)");
  const auto at_first = find_crossover({16, 64}, {5, 9}, {5, 7}, "r", "t", "tokens");
  EXPECT_EQ(at_first.text, "16 tokens (measured point; r faster below, t above)");
}

TEST(Crossover, Interpolate) {
  EXPECT_NEAR(*interpolate({65536, 1048576}, {30, 330}, 524288), 170, 1e-9);
  EXPECT_FALSE(interpolate({65536, 1048576}, {30, 330}, 65535));
  EXPECT_FALSE(interpolate({65536, 1048576}, {30, 330}, 1048577));
  EXPECT_EQ(*interpolate({65536}, {30}, 65536), 30);
}

TEST(Format, FixedFourSignificantDigits) {
  EXPECT_EQ(fmt(24.484848), "24.48");
  // Never e-notation in a cell a person reads: large values keep their integer digits, small ones decimals.
  EXPECT_EQ(fmt(1e-7), "0.0000001");
  EXPECT_EQ(fmt(0.000123456), "0.0001235");
  EXPECT_EQ(fmt(65536), "65536");
  EXPECT_EQ(fmt(-262144.4), "-262144");
  EXPECT_EQ(fmt(9999.4), "9999");
  EXPECT_EQ(fmt(2.0), "2");
  EXPECT_EQ(fmt(0.0), "0");
  EXPECT_EQ(fmt(std::optional<double>{}), "-");
  EXPECT_EQ(fmt(std::numeric_limits<double>::quiet_NaN()), "-");
}

TEST(Format, HumanUnits) {
  EXPECT_EQ(md::tokens(4096), "4K");
  EXPECT_EQ(md::tokens(262144), "256K");
  EXPECT_EQ(md::tokens(1536), "1536");  // not a multiple of 1024
  EXPECT_EQ(md::tokens(1000), "1000");
  EXPECT_EQ(md::tokens(16), "16");
  EXPECT_EQ(md::bytes(512 * 1024.0), "512 KiB");
  EXPECT_EQ(md::bytes(16 << 20), "16 MiB");
  EXPECT_EQ(md::bytes(100), "100 B");
  EXPECT_EQ(md::rate(3080), "3.08 TB/s");
  EXPECT_EQ(md::rate(25.1), "25.1 GB/s");
}

TEST(Format, GroupParamsStatesFixedOnceAndKeysTheRest) {
  const auto g = md::group_params({{{"dtype", "bf16"}, {"ctx", "4096"}, {"keep", "1/8"}},
                                   {{"dtype", "bf16"}, {"ctx", "8192"}, {"keep", "1/8"}},
                                   {{"dtype", "fp8"}, {"ctx", "4096"}}},
                                  {"ctx"});
  EXPECT_EQ(g.fixed, "");
  ASSERT_EQ(g.varying, (std::vector<std::string>{"dtype", "keep"}));
  EXPECT_EQ(g.keys, (std::vector<std::string>{"dtype=bf16, keep=1/8", "dtype=bf16, keep=1/8", "dtype=fp8, keep=-"}));
  const auto h = md::group_params({{{"dtype", "bf16"}, {"hq", "32"}}, {{"dtype", "fp8"}, {"hq", "32"}}});
  EXPECT_EQ(h.fixed, "hq=32");
  EXPECT_EQ(h.keys, (std::vector<std::string>{"dtype=bf16", "dtype=fp8"}));
}

TEST(Html, FoldsPassThroughAndInputTextCannotFakeOne) {
  const std::string md = md::fold("Every row", "| a |\n|---|\n| 1 |\n") + md::txt("<details>") + "\n";
  const std::string html = markdown_to_html(md, ".", {});
  EXPECT_NE(html.find("<details>\n<summary>Every row</summary>"), std::string::npos);
  EXPECT_NE(html.find("</details>"), std::string::npos);
  EXPECT_NE(html.find("&lt;details&gt;"), std::string::npos);  // the escaped input text stays text
}

TEST(Specs, EveryGpuHasEveryFieldAndASource) {
  const auto gpus = load_gpus(default_gpus_path());
  std::vector<std::string> names;
  for (const auto& g : gpus) names.push_back(g.name);
  EXPECT_EQ(names, (std::vector<std::string>{"H100 SXM", "H100 PCIe", "H200", "A100 SXM 80GB", "B200", "GH200", "L40S"}));
  for (const auto& g : gpus)
    for (const char* f : {"hbm_tbps", "l2_mib", "host_link_gbps", "nvlink_gbps", "bf16_tflops", "sms"})
      EXPECT_FALSE(g.source.at(f).empty()) << g.name << " " << f;
  EXPECT_EQ(find_gpu(gpus, "NVIDIA H100 80GB HBM3").name, "H100 SXM");  // CUDA device name -> spec
  EXPECT_EQ(find_gpu(gpus, "h200").name, "H200");
  EXPECT_THROW(find_gpu(gpus, "V100"), kvf::UsageError);
  // A bare H100 is SXM or PCIe: refused with both, never silently the SXM part (issue 16).
  EXPECT_THROW(find_gpu(gpus, "H100"), kvf::UsageError);
  EXPECT_EQ(find_gpu(gpus, "h100-pcie").name, "H100 PCIe");
  // Device names of results directories: exact aliases, else the longest contained name; a tie is no match.
  EXPECT_EQ(gpu_for_device(gpus, "NVIDIA H100 80GB HBM3")->name, "H100 SXM");
  EXPECT_EQ(gpu_for_device(gpus, "NVIDIA GH200 96GB HBM3")->name, "GH200");
  EXPECT_EQ(gpu_for_device(gpus, "NVIDIA H100 NVL"), nullptr);
  EXPECT_EQ(gpu_for_device(gpus, "Tesla V100-SXM2-32GB"), nullptr);
}

TEST(Specs, ModelShapesComeFromModelsJson) {
  const auto shapes = load_shapes();
  const Shape& m = find_shape(shapes, "Llama-3.1-8B");
  EXPECT_EQ(m.kv_values_per_token, 2048);
  EXPECT_EQ(m.kv_out(), 2048);
  const Shape& d = find_shape(shapes, "DeepSeek-V3");
  EXPECT_TRUE(d.mla);
  EXPECT_EQ(d.kv_values_per_token, 576);  // 512 latent + 64 rope
  EXPECT_THROW(find_shape(shapes, "GPT-9"), kvf::UsageError);
}

TEST(Specs, H100SpecSheetPrediction) {
  // H100 SXM, Llama-3.1-8B, T=128, P=1, bf16 X (hand-computed):
  // GEMM bytes 2048*4096*2 + 128*4096*2 + 128*2048*4 = 16,777,216 + 1,048,576 + 1,048,576 = 18,874,368 B
  //   -> 5.634139 us at 3.35 TB/s (flops 2,147,483,648 -> 2.1705 us: memory bound) + 4 us launch
  // RoPE+write 128*2048*6 = 1,572,864 B -> 0.469512 us + 4 us.  Total 14.103651 us.
  // Fetch 524,288 B at 64 GB/s = 8.192 us + 10 us = 18.192 us.
  const auto gpus = load_gpus(default_gpus_path());
  const auto shapes = load_shapes();
  const GpuSpec& g = find_gpu(gpus, "H100 SXM");
  const Shape& m = find_shape(shapes, "Llama-3.1-8B");
  EXPECT_NEAR(recompute_x(g, m, 128, 1, 16).seconds * 1e6, 14.103651, 1e-5);
  EXPECT_NEAR(transfer(g, kv_bytes_per_layer(m, 128), 1, g.host_link_gbps).seconds * 1e6, 18.192, 1e-9);
}

TEST(Model, MlaUpProjection) {
  // DeepSeek-V3: kv_lora 512, 128 heads x (128 nope + 128 v) = 32768 outputs. T=128, P=1 on the toy GPU:
  // flops 2*128*512*32768 = 4,294,967,296 -> 42.949673 us at 100 TFLOP/s;
  // bytes 512*32768*2 + 128*512*2 + 128*32768*2 = 33,554,432 + 131,072 + 8,388,608 = 42,074,112 -> 42.074112 us
  // compute bound: 42.94967296 + 5 us launch.
  const auto shapes = load_shapes();
  const Cost c = mla_up(toy(), find_shape(shapes, "DeepSeek-V3"), 128, 1);
  EXPECT_NEAR(c.seconds * 1e6, 47.94967296, 1e-9);
  EXPECT_EQ(c.bound, "compute");
  EXPECT_THROW(mla_up(toy(), small(), 128, 1), kvf::UsageError);
}

// ------------------------------------------------------------------------------------------ disk, overlap, co-run
TEST(Model, DiskLatencyPlusBytesOverBandwidth) {
  GpuSpec g = toy();
  // no disk figure: the model refuses rather than invent one
  EXPECT_THROW(disk_s(g, 524288, 1), kvf::UsageError);
  g.disk_gbps = 2;
  g.disk_latency_us = 80;
  // one 512 KiB read: 80 us + 524288 B / 2 GB/s (262.144 us) = 342.144 us
  EXPECT_NEAR(disk_s(g, 524288, 1), 342.144e-6, 1e-15);
  // 256 MiB in 512 reads: 512 x 80 us (40.96 ms) + 268435456 / 2e9 (134.217728 ms) = 175.177728 ms
  EXPECT_NEAR(disk_s(g, 268435456, 512), 0.175177728, 1e-12);
}

TEST(Model, OverlapIsMaxPlusOneSync) {
  // both parts: max(10, 4) + 5 us sync = 15 us (the sum would be 14 + 5)
  EXPECT_NEAR(overlap_s(10e-6, 4e-6, 5e-6), 15e-6, 1e-18);
  EXPECT_NEAR(overlap_s(3e-6, 40e-6, 5e-6), 45e-6, 1e-18);
  // one part only (f = 0 or f = 1): no sync
  EXPECT_NEAR(overlap_s(0, 4e-6, 5e-6), 4e-6, 1e-18);
  EXPECT_NEAR(overlap_s(3e-6, 0, 5e-6), 3e-6, 1e-18);
}

TEST(Model, CorunBandwidthSharing) {
  // decode of 80e6 B alone in 10 ms (8 GB/s); memory 10 GB/s; co-runner 6 GB/s leaves 4 GB/s: 80e6 / 4e9 = 20 ms
  EXPECT_NEAR(*corun_s(80e6, 0.01, 10e9, 6e9), 0.02, 1e-15);
  // co-runner 1 GB/s leaves 9 GB/s, more than the decode used alone: no slowdown (10 ms)
  EXPECT_NEAR(*corun_s(80e6, 0.01, 10e9, 1e9), 0.01, 1e-15);
  // co-runner 3 GB/s: 80e6 / 7e9 = 11.428571... ms
  EXPECT_NEAR(*corun_s(80e6, 0.01, 10e9, 3e9), 80e6 / 7e9, 1e-15);
  // demand at or above the bandwidth: no bound
  EXPECT_FALSE(corun_s(80e6, 0.01, 10e9, 10e9));
  EXPECT_FALSE(corun_s(80e6, 0.01, 10e9, 12e9));
}

// The layer axis of the action table: every action's cost but evict's is per layer (K/V bytes, one copy per
// layer, launches per layer), so for a dense model each total is exactly L times the one-layer total; evict
// rebuilds layers 1..L-1 whole and layer L's K/V, so each layer more adds one whole layer (docs/report.md, "The
// layer axis").
TEST(Model, ActionTableLayerAxisIsProportionalForDenseModelsButEvict) {
  const GpuSpec g = toy();
  const Shape m = small();
  ActionOptions o;
  o.tokens = {16, 128, 1024};
  o.layers = {1, 2, 4};
  o.reuse = {0.1, 0.9};
  const auto t = action_table(g, m, o);
  std::map<std::string, const ActionClass*> one;  // phase/T/p -> the L=1 class
  auto key = [](const ActionClass& c) { return c.phase + "/" + fmt(c.tokens) + "/" + fmt(c.reuse); };
  for (const auto& c : t)
    if (c.layers == 1) one[key(c)] = &c;
  ASSERT_EQ(one.size(), 12u);
  for (const auto& c : t) {
    const ActionClass& b = *one.at(key(c));
    ASSERT_EQ(c.costs.size(), b.costs.size());
    const double P = c.phase == "decode" ? 1 : o.prefill_pages;
    const double whole_layer_us =
        (recompute_layers(g, m, c.tokens, P, 2).seconds - recompute_layers(g, m, c.tokens, P, 1).seconds) * 1e6;
    for (std::size_t i = 0; i < c.costs.size(); ++i) {
      const double want = c.costs[i].action == "evict"
                              ? b.costs[i].total_us + c.reuse * (c.layers - 1) * whole_layer_us
                              : c.layers * b.costs[i].total_us;
      EXPECT_NEAR(c.costs[i].total_us, want, 1e-9 * c.costs[i].total_us + 1e-12)
          << c.costs[i].action << " " << key(c) << " L=" << c.layers;
    }
  }
  // MoE with dense first layers breaks the proportionality of evict only: layer 1 dense, layers 2.. MoE.
  Shape moe = small();
  moe.moe = true;
  moe.first_k_dense = 1;
  moe.moe_intermediate = 512;
  moe.n_routed = 64;
  moe.n_shared = 1;
  moe.experts_per_tok = 4;
  const double e1 = recompute_layers(g, moe, 128, 1, 1).seconds, e4 = recompute_layers(g, moe, 128, 1, 4).seconds;
  EXPECT_GT(std::fabs(e4 - 4 * e1), 1e-3 * e4);
  // The routed experts a MoE layer reads: the expected distinct ones of rows x k uniform picks, E (1 - (1 - k/E)^rows)
  // (16 rows x 4 of 64: 41.2, where min(E, rows x k) had counted 64). Every layer whole: L=1 is layer 0 (dense),
  // L=2 adds layer 1 (MoE); their difference less layer 0 leaves twice the MLP weights read, MoE less dense.
  const auto bytes = [&](int L) { return recompute_layers(g, moe, 16, 1, L, false).bytes; };
  const double moe_read = (bytes(2) - 2 * bytes(1)) / 2 + 3.0 * moe.hidden * moe.intermediate;
  const double distinct = 64 * (1 - std::pow(1 - 4.0 / 64, 16));
  EXPECT_NEAR(moe_read, (distinct + 1) * 3.0 * moe.hidden * moe.moe_intermediate, 1e-6 * moe_read);
}

// ------------------------------------------------------------------------------------------ bad input (issue 12)
namespace {

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const kvf::UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

std::filesystem::path scratch(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("kvf_model_test_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A one-GPU spec file with `field` replaced by `value` (JSON text).
std::string gpus_with(const std::string& field, const std::string& value) {
  std::map<std::string, std::string> f = {{"name", "\"toy\""},      {"hbm_tbps", "1"},    {"l2_mib", "50"},
                                          {"host_link_gbps", "50"}, {"nvlink_gbps", "0"}, {"bf16_tflops", "100"},
                                          {"sms", "132"}};
  f[field] = value;
  std::string g = "{";
  for (const auto& [k, v] : f) g += "\"" + k + "\": " + v + ", ";
  g += R"("source": {"hbm_tbps": "a", "l2_mib": "b", "host_link_gbps": "c", "nvlink_gbps": "d", "bf16_tflops": "e", "sms": "f"}})";
  return R"({"defaults": {"launch_us": 4, "copy_fixed_us": 10}, "gpus": [)" + g + "]}";
}

}  // namespace

TEST(BadInput, GpuSpecFileTypesAndRanges) {
  const auto dir = scratch("gpus");
  auto load = [&](const std::string& text) {
    const auto p = dir / "gpus.json";
    std::ofstream(p) << text;
    return usage_message([&] { load_gpus(p.string()); });
  };
  EXPECT_EQ(load(gpus_with("sms", "132")), "(no UsageError)");
  EXPECT_NE(load(gpus_with("sms", "1e30")).find("key 'gpus[0].sms'"), std::string::npos);  // no cast of 1e30 to int
  EXPECT_NE(load(gpus_with("sms", "\"many\"")).find("key 'gpus[0].sms'"), std::string::npos);
  EXPECT_NE(load(gpus_with("hbm_tbps", "-1")).find("key 'gpus[0].hbm_tbps'"), std::string::npos);
  EXPECT_NE(load(gpus_with("hbm_tbps", "1e300")).find("key 'gpus[0].hbm_tbps'"), std::string::npos);
  EXPECT_NE(load(gpus_with("name", "7")).find("key 'gpus[0].name': expected a string"), std::string::npos);
  EXPECT_NE(load(gpus_with("launch_us", "\"fast\"")).find("key 'gpus[0].launch_us'"), std::string::npos);
  EXPECT_NE(load(gpus_with("aliases", "[\"a\", 3]")).find("key 'gpus[0].aliases[1]': expected a string"),
            std::string::npos);
  EXPECT_NE(load(R"({"gpus": {}})").find("key 'gpus': expected an array"), std::string::npos);
  EXPECT_NE(load("[1, 2]").find("expected a JSON object"), std::string::npos);
  const std::string m = load(R"({"gpus": [)");
  EXPECT_EQ(m.rfind((dir / "gpus.json").string(), 0), 0u) << m;  // malformed: names the file
  // a directory where the file should be: bad input naming it
  EXPECT_NE(usage_message([&] { load_gpus(dir.string()); }).find(dir.string() + ": a directory"), std::string::npos);
}

TEST(BadInput, ModelShapeOutOfRangeNamesFileAndKey) {
  const auto dir = scratch("models");
  const auto p = dir / "models.json";
  std::ofstream(p) << R"({"models": [{"name": "deep", "hidden_size": 1024, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 20000, "intermediate_size": 4096,
    "vocab_size": 32000, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 4096}]})";
  const std::string m = usage_message([&] { load_shapes(p.string()); });
  EXPECT_NE(m.find(p.string()), std::string::npos) << m;
  EXPECT_NE(m.find("num_hidden_layers"), std::string::npos) << m;
}

TEST(BadInput, LayerCountsAreCheckedBeforeAnyIntegerConversion) {
  Shape m = small();
  // a layer count far beyond int: refused, never a loop bound or a cast
  EXPECT_NE(usage_message([&] { recompute_layers(toy(), m, 16, 1, 1e10); }).find("layers: '1e+10' is not a whole number in [0, 10000]"),
            std::string::npos);
  EXPECT_THROW(recompute_layers(toy(), m, 16, 1, std::nan("")), kvf::UsageError);
  EXPECT_THROW(recompute_layers(toy(), m, 16, 1, 1.5), kvf::UsageError);
  // a row whose layers column is 1e30: no prediction, the reason names the row and the column
  CaseRow r;
  r.study = "idleness";
  r.where = "x/cases.csv:9";
  r.params = {{"arm", "decode"}, {"layers", "1e30"}};
  r.bytes = 1e9;
  r.median_s = 1e-3;
  r.samples = 5;
  std::string why;
  EXPECT_FALSE(predict_row(toy(), r, &why));
  EXPECT_NE(why.find("x/cases.csv:9: column 'layers'"), std::string::npos) << why;
  r.study = "frontier";
  r.params = {{"arm", "granularity"}, {"copies", "-5"}};
  EXPECT_FALSE(predict_row(toy(), r, &why));
  EXPECT_NE(why.find("column 'copies'"), std::string::npos) << why;
}

TEST(BadInput, ActionOptionsNameTheFlag) {
  auto msg = [](auto set) {
    ActionOptions o;
    set(o);
    return usage_message([&] { action_table(toy(), small(), o); });
  };
  EXPECT_NE(msg([](ActionOptions& o) { o.hbm_price_us_per_mib = -1; }).find("--hbm-price -1"), std::string::npos);
  EXPECT_NE(msg([](ActionOptions& o) { o.hbm_price_us_per_mib = std::nan(""); }).find("--hbm-price"), std::string::npos);
  EXPECT_EQ(msg([](ActionOptions& o) { o.hbm_price_us_per_mib = 0; }), "(no UsageError)");  // free HBM is allowed
  EXPECT_NE(msg([](ActionOptions& o) { o.tokens = {std::nan("")}; }).find("--tokens"), std::string::npos);
  EXPECT_NE(msg([](ActionOptions& o) { o.tokens = {1e300}; }).find("--tokens"), std::string::npos);
  EXPECT_NE(msg([](ActionOptions& o) { o.reuse = {std::nan("")}; }).find("--reuse"), std::string::npos);
  EXPECT_NE(msg([](ActionOptions& o) { o.layers = {1.5}; }).find("--layers 1.5: a whole number in [1, 4]"),
            std::string::npos);
  EXPECT_NE(msg([](ActionOptions& o) { o.layers = {5}; }).find("--layers 5"), std::string::npos);
  EXPECT_NE(msg([](ActionOptions& o) { o.prefill_pages = 0; }).find("--prefill-pages 0"), std::string::npos);
  // unset: the default price (a fetch of 1 MiB), said so in the JSON
  ActionOptions o;
  o.tokens = {64};
  const auto j = action_table_json(toy(), small(), o, action_table(toy(), small(), o));
  EXPECT_EQ(j["hbm_price_source"], "default: time to fetch 1 MiB over the host link");
}
