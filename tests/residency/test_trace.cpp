// The Mooncake JSONL reader and the indexed trace (issue 17).
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "kvf/errors.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

std::string usage_error(const std::string& text, int block_tokens = 4) {
  try {
    parse_mooncake_jsonl(text, "t.jsonl", block_tokens);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ResidencyTrace, ParsesFieldsAndSkipsBlankLines) {
  const Trace t = parse_mooncake_jsonl(
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 6, \"hash_ids\": [0, 1, 2]}\n"
      "\n  \n"
      "{\"timestamp\": 2.5, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [0]}",
      "t.jsonl", 4);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].input_length, 10);
  EXPECT_EQ(t.requests[0].output_length, 6);
  EXPECT_EQ(t.requests[0].hash_ids, (std::vector<std::uint64_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(t.requests[1].timestamp_ms, 2.5);
  EXPECT_TRUE(t.warnings.empty());
}

TEST(ResidencyTrace, MalformedLinesNameFileAndLine) {
  const std::string ok = "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [7]}\n";
  EXPECT_NE(usage_error(ok + ok + "{\"timestamp\": 0,\n").find("t.jsonl:3:"), std::string::npos);
  EXPECT_NE(usage_error(ok + "{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": []}\n")
                .find("t.jsonl:2: missing key 'input_length'"),
            std::string::npos);
  EXPECT_NE(usage_error("\n" + ok + "{\"timestamp\": 0, \"input_length\": -4, \"output_length\": 1, \"hash_ids\": []}")
                .find("t.jsonl:3: key 'input_length': -4 is not a whole number"),
            std::string::npos);
  EXPECT_NE(usage_error("{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1.5]}")
                .find("t.jsonl:1: key 'hash_ids[0]'"),
            std::string::npos);
  EXPECT_NE(usage_error("{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [0, \"x\"]}")
                .find("t.jsonl:1: key 'hash_ids[1]': expected a whole number"),
            std::string::npos);
  EXPECT_NE(usage_error("{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": 3}")
                .find("t.jsonl:1: key 'hash_ids': expected an array"),
            std::string::npos);
  EXPECT_NE(usage_error("[1, 2]").find("t.jsonl:1: expected one JSON object per line"), std::string::npos);
  EXPECT_NE(usage_error("{\"input_length\": 4, \"output_length\": 1, \"hash_ids\": []}")
                .find("t.jsonl:1: missing key 'timestamp'"),
            std::string::npos);
  EXPECT_NE(usage_error(ok, 0).find("block tokens 0"), std::string::npos);
}

TEST(ResidencyTrace, FileErrorsNameTheFileAndLine) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("kvf_residency_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(p);
    f << "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [7]}\nnot json\n";
  }
  try {
    read_mooncake_jsonl(p, 4);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(p.string() + ":2:"), std::string::npos) << e.what();
  }
  std::filesystem::remove(p);
  EXPECT_THROW(read_mooncake_jsonl(p, 4), UsageError);
}

TEST(ResidencyTrace, InconsistentHashIdsWarnNamingTheRequest) {
  const Trace t = parse_mooncake_jsonl(
      "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 1, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 1, \"input_length\": 9, \"output_length\": 1, \"hash_ids\": [0, 1]}\n",
      "t.jsonl", 4);
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_EQ(t.warnings[0], "t.jsonl:2: request 1 has 2 hash_ids, but input_length 9 at 4 tokens per block needs 3");
}

// The replay goes in file order: a request before its predecessor is refused, equal times are not.
TEST(ResidencyTrace, TimestampsMayNotGoBack) {
  const std::string a = "{\"timestamp\": 5, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [7]}\n";
  const std::string b = "{\"timestamp\": 4.5, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [7]}\n";
  EXPECT_EQ(parse_mooncake_jsonl(a + a, "t.jsonl", 4).requests.size(), 2u);
  EXPECT_NE(usage_error(a + b).find("t.jsonl:2: timestamp 4.5 ms is before the previous request's 5 ms"),
            std::string::npos)
      << usage_error(a + b);
}

// A trace states no block size: the power of two whose block counts match most requests, where one matches
// more than half of them.
TEST(ResidencyTrace, LikelyBlockTokensMatchesMostRequests) {
  const Trace t = parse_mooncake_jsonl(
      "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [0, 1, 2, 3]}\n"
      "{\"timestamp\": 1, \"input_length\": 64, \"output_length\": 1, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 2, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [0, 9, 8]}\n",
      "t.jsonl", 4);
  EXPECT_EQ(t.length_mismatches, 3u);
  EXPECT_EQ(likely_block_tokens(t), 32);  // 100 -> 4, 64 -> 2; 20 -> 1, not 3
  const Trace none = parse_mooncake_jsonl(
      "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 1, \"hash_ids\": [0, 1, 2]}\n"
      "{\"timestamp\": 1, \"input_length\": 64, \"output_length\": 1, \"hash_ids\": [0, 1, 2, 3, 4]}\n",
      "t.jsonl", 4);
  EXPECT_EQ(likely_block_tokens(none), std::nullopt);  // no power of two gives 3 blocks of 100 or 5 of 64
}

TEST(ResidencyTrace, BlockTokensCountTheLastPartialBlock) {
  EXPECT_EQ(block_tokens_of(10, 0, 4), 4);
  EXPECT_EQ(block_tokens_of(10, 2, 4), 2);
  EXPECT_EQ(block_tokens_of(10, 3, 4), 0);
  EXPECT_EQ(block_tokens_of(8, 1, 4), 4);
}

TEST(ResidencyTrace, IndexRemapsIdsAndFindsPrefixViolations) {
  const IndexedTrace ok = index_trace(test::make_trace({{10, 20, 30}, {10, 20}, {10, 40}}, 4), 4);
  EXPECT_EQ(ok.distinct, 4u);
  EXPECT_EQ(ok.references(), 7u);
  EXPECT_EQ(ok.max_request_blocks, 3u);
  EXPECT_EQ(ok.blocks, (std::vector<BlockId>{0, 1, 2, 0, 1, 0, 3}));
  EXPECT_EQ(ok.original_ids[3], 40u);
  EXPECT_EQ(ok.prefix_violations, 0u);
  const IndexedTrace bad = index_trace(test::make_trace({{10, 20}, {30, 20}, {20}}, 4), 4);
  EXPECT_EQ(bad.prefix_violations, 2u);
  EXPECT_EQ(bad.first_prefix_violation, "request 1: block id 20 at position 1 follows 30, where it first followed 10");
}

TEST(ResidencyTrace, SharedMooncakeSyntheticTrace) {
  const auto path = test::shared_trace();
  if (path.empty()) GTEST_SKIP() << "not available: " << KVF_RESIDENCY_TRACE << " is absent in this checkout";
  const Trace t = read_mooncake_jsonl(path, kMooncakeBlockTokens);
  EXPECT_EQ(t.requests.size(), 3993u);
  EXPECT_TRUE(t.warnings.empty()) << t.warnings.front();
  const IndexedTrace x = index_trace(t, kMooncakeBlockTokens);
  EXPECT_EQ(x.references(), 121877u);
  EXPECT_EQ(x.distinct, 43924u);
  EXPECT_EQ(x.prefix_violations, 0u) << x.first_prefix_violation;
  // The same file read with the wrong block size: every multi-block request is inconsistent.
  const Trace wrong = read_mooncake_jsonl(path, 256);
  ASSERT_FALSE(wrong.warnings.empty());
  EXPECT_NE(wrong.warnings.front().find(":1: request 0 has 79 hash_ids"), std::string::npos) << wrong.warnings.front();
}

}  // namespace
}  // namespace kvf::residency
