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

// Issue 16: the names a user types (case-blind, Hugging Face ids, older ids) resolve to the canonical entry.
TEST(Models, AliasesAndHuggingFaceIdsCaseBlind) {
  const auto all = load_models(default_models_path());
  EXPECT_EQ(find_model(all, "llama-3.1-8b").name, "Llama-3.1-8B");
  EXPECT_EQ(find_model(all, "meta-llama/Llama-3.1-8B").name, "Llama-3.1-8B");
  EXPECT_EQ(find_model(all, "META-LLAMA/META-LLAMA-3.1-70B").name, "Llama-3.1-70B");
  EXPECT_EQ(find_model(all, "mistralai/Mistral-7B-v0.3").name, "Mistral-7B");
  EXPECT_EQ(find_model(all, "deepseek-ai/deepseek-v3").name, "DeepSeek-V3");
  // Every entry has its Hugging Face id, so each model can be named the way its weights are.
  for (const auto& m : all) EXPECT_EQ(&find_model(all, m.hf_id), &m) << m.name;
}

TEST(Models, SharedAliasIsRefusedAndConflictingNamesAreBadInput) {
  const std::string p = testing::TempDir() + "kvf_alias_models.json";
  const std::string shape = R"("hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, )"
                            R"("num_hidden_layers": 2, "intermediate_size": 128)";
  { std::ofstream(p) << R"({"models": [{"name": "Tiny-A", "aliases": ["tiny"], )" << shape << R"(},
                                        {"name": "Tiny-B", "aliases": ["Tiny"], )" << shape << "}]}"; }
  const auto all = load_models(p);
  try {
    find_model(all, "TINY", "--model");
    FAIL();
  } catch (const kvf::UsageError& e) {
    EXPECT_STREQ(e.what(), "--model TINY: ambiguous model alias, names 2: Tiny-A, Tiny-B (give one of them)");
  }
  // An alias that is another model's name would make that name mean two things: the file is refused.
  { std::ofstream(p) << R"({"models": [{"name": "Tiny-A", "aliases": ["tiny-b"], )" << shape << R"(},
                                        {"name": "Tiny-B", )" << shape << "}]}"; }
  try {
    load_models(p);
    FAIL();
  } catch (const kvf::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("alias 'tiny-b' of 'Tiny-A' is the name of 'Tiny-B'"), std::string::npos) << e.what();
  }
  { std::ofstream(p) << R"({"models": [{"name": "Tiny-A", "aliases": "tiny", )" << shape << "}]}"; }
  EXPECT_THROW(load_models(p), kvf::UsageError);
  std::remove(p.c_str());
}
