#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "kvf/errors.hpp"
#include "kvf/model_shapes.hpp"
#include "models.hpp"

using namespace kvf::models;

TEST(Models, LoadsEveryModelOfTheDataFile) {
  const auto all = load_models(default_models_path());
  ASSERT_EQ(all.size(), 6u);
  const auto& l8 = find_model(all, "Llama-3.1-8B");
  EXPECT_EQ(l8.hidden, 4096);
  EXPECT_EQ(l8.n_kv_heads, 8);
  EXPECT_EQ(l8.head_dim, 128);
  EXPECT_EQ(l8.layers, 32);
  EXPECT_EQ(l8.intermediate, 14336);
  EXPECT_EQ(l8.rope_scaling.type, "llama3");
  EXPECT_EQ(l8.kv_values_per_token(), 2 * 8 * 128);
  const auto& q7 = find_model(all, "Qwen2.5-7B");
  EXPECT_TRUE(q7.qkv_bias);
  EXPECT_EQ(q7.n_kv_heads, 4);
  EXPECT_EQ(find_model(all, "Llama-3.1-70B").layers, 80);
  EXPECT_EQ(find_model(all, "Qwen2.5-72B").intermediate, 29568);
  EXPECT_EQ(find_model(all, "Mistral-7B").rope_theta, 1e6);
  const auto& ds = find_model(all, "DeepSeek-V3");
  EXPECT_TRUE(ds.is_mla);
  EXPECT_EQ(ds.mla.kv_lora_rank, 512);
  EXPECT_EQ(ds.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(ds.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(ds.mla.v_head_dim, 128);
  EXPECT_EQ(ds.kv_values_per_token(), 576);
  EXPECT_TRUE(ds.is_moe);
  EXPECT_EQ(ds.first_k_dense, 3);
  for (const auto& m : all) EXPECT_FALSE(m.source.empty()) << m.name;
}

TEST(Models, UnknownModelIsAUsageErrorListingTheKnownOnes) {
  const auto all = load_models(default_models_path());
  try {
    find_model(all, "GPT-5");
    FAIL();
  } catch (const kvf::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("GPT-5"), std::string::npos);
    EXPECT_NE(msg.find("Llama-3.1-8B"), std::string::npos);
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(Models, MissingOrMalformedFileIsAUsageError) {
  EXPECT_THROW(load_models("/nonexistent/models.json"), kvf::UsageError);
  const std::string p = testing::TempDir() + "kvf_bad_models.json";
  { std::ofstream(p) << "{\"models\": [{\"name\": \"x\"}]}"; }
  EXPECT_THROW(load_models(p), kvf::UsageError);
  { std::ofstream(p) << "not json"; }
  EXPECT_THROW(load_models(p), kvf::UsageError);
  std::remove(p.c_str());
}
