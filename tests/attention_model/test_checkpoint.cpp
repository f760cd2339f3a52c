// The checkpoint reader against the files it must accept and every lie it must refuse (issue 19): one line
// each, naming the file and the tensor or key (kvf::UsageError: exit 2 in the CLI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "forward_detail.hpp"  // stack_bf16
#include "kvf/attention/checkpoint.hpp"
#include "kvf/attention/run_estimate.hpp"
#include "kvf/errors.hpp"
#include "tiny_checkpoint.hpp"

namespace kvf::attention {
namespace {

namespace fs = std::filesystem;
using test::raw_image;

// The message of the UsageError f throws (fails the test when none, or another type, is thrown).
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    const std::string w = e.what();
    EXPECT_EQ(w.find('\n'), std::string::npos) << "not one line: " << w;
    return w;
  }
  ADD_FAILURE() << "no UsageError";
  return {};
}

SafetensorsHeader parse(const std::string& image) {
  return parse_safetensors_header(reinterpret_cast<const std::uint8_t*>(image.data()), image.size(), image.size(),
                                  "x.safetensors");
}

TEST(AttentionSafetensors, ParsesTheRealLayout) {
  test::TinySpec s;
  const auto ts = test::tiny_tensors(s);
  const std::string img = test::safetensors_image(ts);
  const auto h = parse(img);
  ASSERT_EQ(h.tensors.size(), ts.size());
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ((8 + h.header_bytes) % 8, 0u);
  const TensorInfo* q = h.find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, Dtype::bf16);
  EXPECT_EQ(q->shape, (std::vector<std::int64_t>{64, 64}));
  EXPECT_EQ(q->end - q->begin, 64u * 64 * 2);
  EXPECT_EQ(h.find("no.such"), nullptr);
}

TEST(AttentionSafetensors, RefusesEveryLieOfTheHeader) {
  const std::string d8(8, '\0');
  struct Case {
    std::string image, expect;
  } cases[] = {
      {"\x05\x00\x00", "too short"},
      {raw_image("{}", "").substr(0, 8) + "{", "the file holds 1"},                      // length says 2, one byte follows
      {std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "above the format's limit"},
      {raw_image("[1, 2]", ""), "expected an object"},
      {raw_image("{\"a\": ", ""), "malformed JSON"},
      {raw_image(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", d8), "dtype 'Q4' is not a safetensors dtype"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "not a whole number"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", d8), "not a whole number"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8), "needs 12"},
      {raw_image(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", d8), "span 8 bytes, but BF16 [2] needs 4"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8), "past the data buffer (8 bytes"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d8), "end before begin"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", d8), "begin is not a non-negative"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
       "tensor 'b': data_offsets [4, 8) overlap tensor 'a' [0, 8)"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[65536,65536,65536,65536],"data_offsets":[0,8]}})", d8), "more than 2^48"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8), "not [begin, end]"},
      {raw_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", d8), "unknown key 'extra'"},
      {raw_image(R"({"a":[1,2]})", d8), "tensor 'a': expected an object"},
      {raw_image(R"({"__metadata__":{"k":1}})", d8), "__metadata__ 'k' is number"},
  };
  for (const auto& c : cases) {
    const std::string w = usage_error([&] { parse(c.image); });
    EXPECT_NE(w.find(c.expect), std::string::npos) << "got: " << w << "\nexpected: " << c.expect;
    EXPECT_EQ(w.rfind("x.safetensors", 0), 0u) << w;
  }
  // Gaps are allowed, and zero-sized tensors overlap nothing.
  const auto h = parse(raw_image(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", d8));
  EXPECT_EQ(h.tensors.size(), 2u);
}

TEST(AttentionSafetensors, F16Widening) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0200), std::ldexp(1.0f, -15));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

// A zero-element tensor is legal safetensors; widening it writes nothing and may be handed a null buffer (the
// fuzzer found memcpy(nullptr, p, 0) here, UB that UBSan reports: tests/fuzz/regressions/fuzz_safetensors).
TEST(AttentionSafetensors, ZeroElementTensorsWidenToNothing) {
  const std::string json = R"({"f":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                           R"("b":{"dtype":"BF16","shape":[4,0],"data_offsets":[0,0]}})";
  std::string img(8, '\0');
  const std::uint64_t n = json.size();
  std::memcpy(img.data(), &n, 8);
  img += json;
  const auto h = parse(img);
  for (const char* name : {"f", "b"}) {
    const TensorInfo* t = h.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->numel(), 0) << name;
    const TensorView v{t, reinterpret_cast<const std::uint8_t*>(img.data()) + img.size(), "x.safetensors"};
    to_f32(v, static_cast<float*>(nullptr));
    to_bf16(v, static_cast<std::uint16_t*>(nullptr));
  }
}

TEST(AttentionSafetensors, TruncatedAndOddFiles) {
  const fs::path d = test::fresh_dir("trunc");
  test::TinySpec s;
  test::write_tiny_checkpoint(d, s);
  const auto full = fs::file_size(d / "model.safetensors");
  fs::resize_file(d / "model.safetensors", full - 100);
  std::string w = usage_error([&] { Checkpoint ck(d); });
  EXPECT_NE(w.find("lm_head.weight"), std::string::npos) << w;
  EXPECT_NE(w.find("past the data buffer"), std::string::npos) << w;
  fs::resize_file(d / "model.safetensors", 5);
  w = usage_error([&] { Checkpoint ck(d); });
  EXPECT_NE(w.find("too short"), std::string::npos) << w;
  fs::remove(d / "model.safetensors");
  fs::create_directory(d / "model.safetensors");
  w = usage_error([&] { Checkpoint ck(d); });
  EXPECT_NE(w.find("a directory, expected a regular safetensors file"), std::string::npos) << w;
}

TEST(AttentionCheckpoint, ConfigOfEachArchitecture) {
  test::TinySpec s;
  auto c = parse_hf_config(test::tiny_config(s), "config.json");
  EXPECT_EQ(c.shape.hidden, 64);
  EXPECT_EQ(c.shape.n_kv_heads, 2);
  EXPECT_EQ(c.shape.head_dim, 16);
  EXPECT_EQ(c.shape.rope_scaling.type, "llama3");
  EXPECT_EQ(c.shape.rope_scaling.original_max_position, 32);
  EXPECT_FALSE(c.shape.qkv_bias);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  s.arch = "Qwen2ForCausalLM";
  c = parse_hf_config(test::tiny_config(s), "config.json");
  EXPECT_TRUE(c.shape.qkv_bias);
  EXPECT_EQ(c.sliding_window, 0);
  s.arch = "MistralForCausalLM";
  auto j = test::tiny_config(s);
  j["sliding_window"] = 4096;
  j.erase("head_dim");
  c = parse_hf_config(j, "config.json");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.shape.head_dim, 16);  // hidden / heads
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
  c = parse_hf_config(j, "config.json");
  EXPECT_EQ(c.shape.rope_scaling.type, "linear");
  EXPECT_EQ(c.shape.rope_scaling.factor, 2);
}

TEST(AttentionCheckpoint, RefusesConfigsItCannotRun) {
  test::TinySpec s;
  const auto base = test::tiny_config(s);
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expect;
  } cases[] = {
      {"architectures", {"GPT2LMHeadModel"}, "architecture 'GPT2LMHeadModel' is not supported; supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM"},
      {"architectures", nullptr, "key 'architectures' is missing"},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}, "rope_scaling type 'yarn' is not supported; supported: llama3, linear"},
      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}}, "llama3 needs factor, low_freq_factor"},
      {"num_key_value_heads", 3, "not a multiple of num_key_value_heads 3"},
      {"head_dim", 15, "head_dim 15 is odd"},
      {"hidden_size", "64", "key 'hidden_size': expected a whole number"},
      {"hidden_size", -1, "key 'hidden_size': -1 is not a whole number"},
      {"hidden_act", "gelu", "hidden_act 'gelu' is not supported"},
      {"vocab_size", nullptr, "key 'vocab_size' is missing"},
  };
  for (const auto& c : cases) {
    auto j = base;
    if (c.value.is_null()) j.erase(c.key);
    else j[c.key] = c.value;
    const std::string w = usage_error([&] { parse_hf_config(j, "m/config.json"); });
    EXPECT_NE(w.find(c.expect), std::string::npos) << w;
  }
  const fs::path d = test::fresh_dir("noconfig");
  const std::string w = usage_error([&] { Checkpoint ck(d); });
  EXPECT_NE(w.find("no config.json"), std::string::npos) << w;
}

TEST(AttentionCheckpoint, TokenIds) {
  EXPECT_EQ(parse_token_ids(nlohmann::json::parse("[0, 5, 63]"), 64, "t.json"), (std::vector<std::int32_t>{0, 5, 63}));
  std::string w = usage_error([] { parse_token_ids(nlohmann::json::parse("[1, 2, 64]"), 64, "t.json"); });
  EXPECT_NE(w.find("t.json: position 2: token id 64 is not below the vocabulary size 64"), std::string::npos) << w;
  w = usage_error([] { parse_token_ids(nlohmann::json::parse("[1, -2]"), 64, "t.json"); });
  EXPECT_NE(w.find("position 1: -2 is not a token id"), std::string::npos) << w;
  w = usage_error([] { parse_token_ids(nlohmann::json::parse("[1.5]"), 64, "t.json"); });
  EXPECT_NE(w.find("position 0"), std::string::npos) << w;
  w = usage_error([] { parse_token_ids(nlohmann::json::parse("[18446744073709551615]"), 64, "t.json"); });
  EXPECT_NE(w.find("position 0"), std::string::npos) << w;
  w = usage_error([] { parse_token_ids(nlohmann::json::parse("{\"input_ids\": [1]}"), 64, "t.json"); });
  EXPECT_NE(w.find("expected a JSON array"), std::string::npos) << w;
  w = usage_error([] { parse_token_ids(nlohmann::json::parse("[]"), 64, "t.json"); });
  EXPECT_NE(w.find("no token ids"), std::string::npos) << w;
  const fs::path d = test::fresh_dir("tokens");
  test::write_text(d / "t.json", "[3, 1, 4, 1, 5]");
  EXPECT_EQ(read_token_ids(d / "t.json", 64).size(), 5u);
}

TEST(AttentionCheckpoint, ShardedIndexAndItsLies) {
  const fs::path d = test::fresh_dir("sharded");
  test::TinySpec s;
  s.shards = 2;
  test::write_tiny_checkpoint(d, s);
  {
    const Checkpoint ck(d);
    EXPECT_EQ(ck.files(), 2u);
    EXPECT_TRUE(ck.has("lm_head.weight"));
    EXPECT_TRUE(ck.has("model.embed_tokens.weight"));
    EXPECT_NO_THROW(ck.tensor("model.layers.2.mlp.down_proj.weight", {64, 96}));
    const std::string w = usage_error([&] { ck.tensor("model.layers.2.mlp.down_proj.weight", {96, 64}); });
    EXPECT_NE(w.find("has shape [64, 96], config.json implies [96, 64]"), std::string::npos) << w;
    const std::string w2 = usage_error([&] { ck.tensor("model.layers.9.mlp.down_proj.weight", {64, 96}); });
    EXPECT_NE(w2.find("is not in the checkpoint"), std::string::npos) << w2;
  }
  const auto index = nlohmann::json::parse(std::ifstream(d / "model.safetensors.index.json"));
  auto lie = [&](const std::string& tensor, const nlohmann::json& file, const char* expect) {
    auto j = index;
    j["weight_map"][tensor] = file;
    test::write_text(d / "model.safetensors.index.json", j.dump());
    const std::string w = usage_error([&] { Checkpoint ck(d); });
    EXPECT_NE(w.find(expect), std::string::npos) << w;
  };
  lie("lm_head.weight", "../../etc/passwd", "shards must be plain file names");
  lie("lm_head.weight", "model-00003-of-00003.safetensors", "which is not in");
  lie("lm_head.weight", "model-00001-of-00002.safetensors", "whose header does not hold it");
  lie("lm_head.weight", 7, "expected a file name");
  test::write_text(d / "model.safetensors.index.json", "{\"weight_map\": {}}");
  EXPECT_NE(usage_error([&] { Checkpoint ck(d); }).find("no weight_map"), std::string::npos);
  fs::remove(d / "model.safetensors.index.json");
  EXPECT_NE(usage_error([&] { Checkpoint ck(d); }).find("neither model.safetensors nor"), std::string::npos);
}

TEST(AttentionCheckpoint, RefusesNonFloatWeights) {
  const fs::path d = test::fresh_dir("int8");
  test::TinySpec s;
  test::write_tiny_checkpoint(d, s);
  auto ts = test::tiny_tensors(s);
  for (auto& t : ts)
    if (t.name == "model.norm.weight") {
      t.dtype = "I16";  // same byte count as BF16
    }
  test::write_text(d / "model.safetensors", test::safetensors_image(ts));
  const Checkpoint ck(d);
  const std::string w = usage_error([&] { ck.tensor("model.norm.weight", {64}); });
  EXPECT_NE(w.find("is I16; a model's weights must be BF16, F16 or F32"), std::string::npos) << w;
}

// The cached decode: tokens - 1 passes over the weights, one row per decode; nothing after the first token.
TEST(AttentionRunEstimate, DecodeCountsOnePassPerTokenAfterTheFirst) {
  test::TinySpec s;  // hidden 64, intermediate 96, 3 layers, 4 heads, 2 kv heads of 16, vocab 64
  const auto c = parse_hf_config(test::tiny_config(s), "config.json");
  const double per_row_layer = 2.0 * (64 * (64 + 2 * 32) + 64 * 64 + 3 * 64 * 96) + 4.0 * 64 * (100 + 5);
  const auto e = estimate_decode(c, 100, 7, 5, 1e9);
  EXPECT_DOUBLE_EQ(e.flops, 4 * 7 * (3 * per_row_layer + 2.0 * 64 * 64));
  EXPECT_DOUBLE_EQ(e.seconds, e.flops / 1e9);
  EXPECT_EQ(e.cache_bytes, std::uint64_t(2) * 7 * 3 * 32 * 5 * 4);
  EXPECT_EQ(estimate_decode(c, 100, 7, 1, 1e9).flops, 0);
  // The attention reads each row's fp32 K and V (2 x kv_dim x keys x 4 bytes per row, layer and step): with a slow
  // memory its bytes, not its FLOPs, set its time.
  const auto slow = estimate_decode(c, 100, 7, 5, 1e9, 1e3);
  EXPECT_DOUBLE_EQ(slow.attention_bytes, 4.0 * 7 * 3 * 2 * 32 * 105 * 4);
  EXPECT_DOUBLE_EQ(slow.attention_flops, 4.0 * 7 * 3 * 4 * 64 * 105);
  EXPECT_DOUBLE_EQ(slow.seconds, (slow.flops - slow.attention_flops) / 1e9 + slow.attention_bytes / 1e3);
  EXPECT_DOUBLE_EQ(estimate_decode(c, 100, 7, 5, 1e9, 1e15).seconds, e.seconds);  // a fast one: FLOPs bound it
}

// The causal attention runs at its own rate (fp32 OpenBLAS per head), not the GEMM's: its FLOPs are timed apart.
TEST(AttentionRunEstimate, AttentionFlopsAtTheirOwnRate) {
  test::TinySpec s;  // 3 layers, 4 heads of 16
  const auto c = parse_hf_config(test::tiny_config(s), "config.json");
  RunShape r;
  r.context = 1000;
  r.queries = 8;
  r.chunk = 256;
  const auto one = estimate_run(c, 0, 2, r, 1e9, "stated");
  const auto two = estimate_run(c, 0, 2, r, 1e9, "stated", 1e8);
  EXPECT_DOUBLE_EQ(two.attention_flops, 3 * 4.0 * 64 * 1000 * (1000 + 256) / 2);
  EXPECT_DOUBLE_EQ(two.flops, one.flops);
  EXPECT_DOUBLE_EQ(one.seconds, one.flops / 1e9);
  EXPECT_DOUBLE_EQ(two.seconds, (two.flops - two.attention_flops) / 1e9 + two.attention_flops / 1e8);
  EXPECT_NE(describe(two, 0).find(", attention "), std::string::npos) << describe(two, 0);
  EXPECT_EQ(describe(one, 0).find(", attention "), std::string::npos) << describe(one, 0);
}

TEST(AttentionRunEstimate, RefusesWhatMemoryCannotHold) {
  test::TinySpec s;
  const auto c = parse_hf_config(test::tiny_config(s), "config.json");
  RunShape r;
  r.context = 4096;
  r.queries = 16;
  r.chunk = 256;
  const auto e = estimate_run(c, 1 << 20, 2, r, 1e9, "stated");
  // capture: 3 layers x (4 heads x 16 x 4096 probs + 4 x 16 x 16 q + 2 x 32 x 4096 K/V) x 4 bytes
  EXPECT_EQ(e.capture_bytes, std::uint64_t(3) * (4 * 16 * 4096 + 4 * 16 * 16 + 2 * 32 * 4096) * 4);
  EXPECT_EQ(e.hidden_bytes, std::uint64_t(4096) * (64 + 16) * 4);
  EXPECT_GT(e.seconds, 0);
  EXPECT_NO_THROW(check_memory(e, e.resident_bytes, r));
  EXPECT_NO_THROW(check_memory(e, 0, r));  // unknown: not refused
  const std::string w = usage_error([&] { check_memory(e, e.resident_bytes - 1, r); });
  EXPECT_NE(w.find("context 4096 with 16 captured queries needs"), std::string::npos) << w;
  EXPECT_NE(w.find("available"), std::string::npos) << w;
  r.queries = 5000;
  EXPECT_NE(usage_error([&] { estimate_run(c, 0, 2, r, 1e9, "stated"); }).find("queries 5000"), std::string::npos);
  EXPECT_GT(available_memory_bytes(), 0u);  // Linux: /proc/meminfo
}

}  // namespace
// The parallel stacking of a layer's matrices (the GPU forward's weight reader) and the range form of to_bf16
// equal the whole-tensor to_bf16 of each part one after another, across chunk boundaries and for every dtype.
TEST(Safetensors, StackBf16EqualsToBf16OfEachPartInOrder) {
  std::uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  struct Part { TensorInfo info; std::vector<std::uint8_t> bytes; };
  std::vector<Part> parts(4);
  const std::pair<Dtype, std::int64_t> kinds[4] = {{Dtype::bf16, (std::int64_t{5} << 19) + 7}, {Dtype::f32, 300},
                                                   {Dtype::f16, (std::int64_t{1} << 20) + 1}, {Dtype::bf16, 33}};
  for (int i = 0; i < 4; ++i) {
    parts[i].info.dtype = kinds[i].first;
    parts[i].info.shape = {kinds[i].second};
    const std::size_t eb = kinds[i].first == Dtype::f32 ? 4 : 2;
    parts[i].bytes.resize(std::size_t(kinds[i].second) * eb);
    for (std::size_t j = 0; j < parts[i].bytes.size(); j += eb) {
      if (eb == 4) {
        const float f = float(std::int32_t(next() >> 8) - (1 << 23)) / float(1 << 20);
        std::memcpy(&parts[i].bytes[j], &f, 4);
      } else {
        const std::uint16_t b = static_cast<std::uint16_t>((next() >> 16) & 0x3FFF);  // finite f16 and bf16
        std::memcpy(&parts[i].bytes[j], &b, 2);
      }
    }
  }
  std::vector<TensorView> views;
  std::vector<std::uint16_t> want;
  for (auto& p : parts) {
    views.push_back({&p.info, p.bytes.data(), "test"});
    std::vector<std::uint16_t> one(std::size_t(p.info.numel()));
    to_bf16(views.back(), one.data());
    want.insert(want.end(), one.begin(), one.end());
    std::vector<std::uint16_t> tail(7);
    to_bf16(views.back(), tail.data(), p.info.numel() - 7, 7);
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), one.end() - 7));
  }
  std::vector<std::uint16_t> got(want.size(), 0xFFFF);
  detail::stack_bf16(views, got.data());
  EXPECT_TRUE(got == want);
}

}  // namespace kvf::attention
