// The seeded synthetic trace generator (issue 17): determinism, prefix-consistent ids, and each part of the mix
// showing in the trace's statistics, hand-computed where the lengths are fixed (sigma 0).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "kvf/errors.hpp"
#include "kvf/residency/synth.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

namespace fs = std::filesystem;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Every request has exactly its length's ids, arrivals do not go back in time, and the ids are prefix-consistent.
IndexedTrace check_consistent(const Trace& t, int block_tokens) {
  double last = 0;
  for (std::size_t i = 0; i < t.requests.size(); ++i) {
    const Request& r = t.requests[i];
    EXPECT_EQ(std::int64_t(r.hash_ids.size()), ceil_div(r.input_length, block_tokens)) << "request " << i;
    EXPECT_GE(r.timestamp_ms, last) << "request " << i;
    EXPECT_EQ(r.timestamp_ms, std::floor(r.timestamp_ms)) << "request " << i;
    EXPECT_GE(r.output_length, 1);
    last = r.timestamp_ms;
  }
  IndexedTrace x = index_trace(t, block_tokens);
  EXPECT_EQ(x.prefix_violations, 0u) << x.first_prefix_violation;
  return x;
}

bool same(const Trace& a, const Trace& b) {
  if (a.requests.size() != b.requests.size()) return false;
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    const Request &x = a.requests[i], &y = b.requests[i];
    if (x.timestamp_ms != y.timestamp_ms || x.input_length != y.input_length || x.output_length != y.output_length ||
        x.hash_ids != y.hash_ids)
      return false;
  }
  return true;
}

// Only shared system prompts and single-turn chat requests, fixed lengths: block_tokens 4, prompts of 3 blocks,
// a 10-token message (3 blocks, the last partial).
SynthSpec prompts_only(int prompts, double share) {
  SynthSpec s;
  s.requests = 100;
  s.block_tokens = 4;
  s.system_prompts = prompts;
  s.system_prompt_blocks = 3;
  s.system_prompt_share = share;
  s.rag_fraction = 0;
  s.session_continue = 0;
  s.first_message = {10, 0};
  return s;
}

TEST(ResidencySynth, DeterministicForASeedAndDifferentAcrossSeeds) {
  SynthSpec s;
  s.requests = 600;
  const Trace a = generate_trace(s);
  EXPECT_EQ(a.source, "synthetic(seed=1)");
  EXPECT_TRUE(same(a, generate_trace(s)));
  s.seed = 2;
  const Trace b = generate_trace(s);
  EXPECT_FALSE(same(a, b));
  EXPECT_EQ(b.requests.size(), 600u);
  check_consistent(a, s.block_tokens);
  check_consistent(b, s.block_tokens);
}

TEST(ResidencySynth, SharedPromptsOnlyHandComputed) {
  // One prompt shared by every request: 3 prompt blocks + 100 * 3 unique blocks.
  const IndexedTrace one = check_consistent(generate_trace(prompts_only(1, 1.0)), 4);
  EXPECT_EQ(one.references(), 100u * 6);
  EXPECT_EQ(one.distinct, 3u + 300);
  // Two prompts, both drawn in 100 requests: 2 * 3 + 300.
  const IndexedTrace two = check_consistent(generate_trace(prompts_only(2, 1.0)), 4);
  EXPECT_EQ(two.references(), 100u * 6);
  EXPECT_EQ(two.distinct, 6u + 300);
  // Share 0.5: references = 300 unique + 3 per request that has the prompt; distinct = 3 + 300.
  const Trace half = generate_trace(prompts_only(1, 0.5));
  const IndexedTrace h = check_consistent(half, 4);
  std::size_t with_prompt = 0;
  for (const Request& r : half.requests) with_prompt += r.input_length == 22;
  EXPECT_GT(with_prompt, 30u);
  EXPECT_LT(with_prompt, 70u);
  EXPECT_EQ(h.references(), 300 + 3 * with_prompt);
  EXPECT_EQ(h.distinct, 3u + 300);
  // No prompt, no sessions, no RAG: nothing is reused.
  const IndexedTrace none = check_consistent(generate_trace(prompts_only(1, 0.0)), 4);
  EXPECT_EQ(none.distinct, none.references());
}

TEST(ResidencySynth, SessionTurnsExtendThePreviousPromptAtTheDrawnGap) {
  SynthSpec s;
  s.requests = 20000;
  s.block_tokens = 16;
  s.system_prompt_share = 0;  // a session's first block is its own: it names the session
  s.rag_fraction = 0;
  s.session_continue = 0.3;
  s.turn_gap_mean = 20;
  s.first_message = {100, 0};
  s.next_message = {30, 0};
  s.output = {7, 0};
  const Trace t = generate_trace(s);
  const IndexedTrace x = check_consistent(t, s.block_tokens);
  EXPECT_LT(x.distinct, x.references());
  std::map<std::uint64_t, std::size_t> last;  // first id -> the session's latest request
  double gap_sum = 0;
  std::size_t turns = 0;
  for (std::size_t i = 0; i < t.requests.size(); ++i) {
    const Request& r = t.requests[i];
    const auto [it, first] = last.try_emplace(r.hash_ids.front(), i);
    if (first) {
      EXPECT_EQ(r.input_length, 100) << "request " << i;
      continue;
    }
    const Request& prev = t.requests[it->second];
    EXPECT_EQ(r.input_length, prev.input_length + 7 + 30) << "request " << i;
    const auto kept = static_cast<std::ptrdiff_t>(prev.input_length / s.block_tokens);
    EXPECT_TRUE(std::equal(prev.hash_ids.begin(), prev.hash_ids.begin() + kept, r.hash_ids.begin()))
        << "request " << i;
    if (prev.hash_ids.size() > std::size_t(kept)) {  // the previous partial last block grew: a new id
      EXPECT_NE(r.hash_ids[std::size_t(kept)], prev.hash_ids[std::size_t(kept)]) << "request " << i;
    }
    gap_sum += double(i - it->second);
    ++turns;
    it->second = i;
  }
  // About 30% of requests continue a session (a few sessions run past the end).
  EXPECT_GT(turns, 20000u * 25 / 100);
  EXPECT_LT(turns, 20000u * 31 / 100);
  // The gap is 1 + floor(Exp(20)), mean 1 + 1 / (e^(1/20) - 1) = 20.5, pushed a little later when its slot is
  // taken by another session's turn.
  const double mean_gap = gap_sum / double(turns);
  EXPECT_GT(mean_gap, 20.5 * 0.95);
  EXPECT_LT(mean_gap, 20.5 * 1.25);
}

TEST(ResidencySynth, RagDocumentsFollowZipfAndAreDistinctPerRequest) {
  SynthSpec s;
  s.requests = 5000;
  s.block_tokens = 16;
  s.system_prompt_share = 0;
  s.rag_fraction = 1;
  s.rag_documents = 100;
  s.rag_documents_per_request = 1;
  s.rag_zipf = 1;
  s.rag_document = {32, 0};  // two blocks
  s.rag_question = {20, 0};  // two blocks, the last partial
  const Trace t = generate_trace(s);
  const IndexedTrace x = check_consistent(t, s.block_tokens);
  std::map<std::uint64_t, std::size_t> by_first;
  for (const Request& r : t.requests) {
    EXPECT_EQ(r.input_length, 52);
    ++by_first[r.hash_ids.front()];
  }
  std::vector<std::size_t> counts;
  for (const auto& [id, n] : by_first) counts.push_back(n);
  std::sort(counts.rbegin(), counts.rend());
  // Rank 1 of Zipf(1) over 100: 1 / H_100 = 0.193 of the requests; rank 2 half of that.
  EXPECT_NEAR(double(counts[0]) / 5000, 0.193, 0.02);
  EXPECT_NEAR(double(counts[1]) / double(counts[0]), 0.5, 0.1);
  // Distinct: 2 blocks per document drawn + 2 unique per request.
  EXPECT_EQ(x.distinct, 2 * by_first.size() + 2 * 5000);

  // Every document in every request: a request holds each of the 5 exactly once, in some order.
  s.requests = 50;
  s.rag_documents = 5;
  s.rag_documents_per_request = 5;
  for (const Request& r : generate_trace(s).requests) EXPECT_EQ(r.input_length, 5 * 32 + 20);
}

TEST(ResidencySynth, PromptsStayWithinMaxInputTokens) {
  SynthSpec s;
  s.requests = 3000;
  s.max_input_tokens = 8192;
  s.session_continue = 0.95;
  s.turn_gap_mean = 3;
  const Trace t = generate_trace(s);
  check_consistent(t, s.block_tokens);
  for (const Request& r : t.requests) EXPECT_LE(r.input_length, 8192);
}

TEST(ResidencySynth, BadSpecNamesTheField) {
  const auto error = [](auto change) {
    SynthSpec s;
    change(s);
    try {
      generate_trace(s);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error([](SynthSpec& s) { s.rate_per_s = 0; }).find("rate_per_s 0: expected"), std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.rag_fraction = 1.5; }).find("rag_fraction 1.5"), std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.session_continue = std::nan(""); }).find("session_continue"),
            std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.rag_documents_per_request = 20000; }).find("rag_documents_per_request 20000"),
            std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.block_tokens = 0; }).find("block_tokens 0"), std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.max_input_tokens = 2048; }).find("max_input_tokens 2048"), std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.output.median = 0.5; }).find("output 0.5"), std::string::npos);
  EXPECT_NE(error([](SynthSpec& s) { s.requests = -1; }).find("requests -1"), std::string::npos);
  SynthSpec empty;
  empty.requests = 0;
  EXPECT_TRUE(generate_trace(empty).requests.empty());
}

TEST(ResidencySynth, SavedTraceReplaysThroughTheMooncakeReader) {
  SynthSpec s;
  s.requests = 800;
  const Trace t = generate_trace(s);
  const fs::path p = fs::temp_directory_path() / ("kvf_synth_" + std::to_string(::getpid()) + ".jsonl");
  write_mooncake_jsonl(t, p);
  const Trace back = read_mooncake_jsonl(p, s.block_tokens);
  const Trace detected = read_trace(p, s.block_tokens);
  fs::remove(p);
  EXPECT_TRUE(same(t, back));
  EXPECT_TRUE(same(t, detected));
  EXPECT_TRUE(back.warnings.empty()) << back.warnings.front();
}

// The default spec's statistics, printed for the README ("Synthetic traces"), and pinned: a change to the generator
// that moves them must update the README too. (A libm whose log, exp or cos round differently would also move
// them: synth.hpp's portability note.)
TEST(ResidencySynth, DefaultSpecStatistics) {
  const SynthSpec s;
  const Trace t = generate_trace(s);
  const IndexedTrace x = check_consistent(t, s.block_tokens);
  std::vector<std::int64_t> inputs;
  for (const Request& r : t.requests) inputs.push_back(r.input_length);
  std::sort(inputs.begin(), inputs.end());
  const double reuse = 1.0 - double(x.distinct) / double(x.references());
  EXPECT_NEAR(simulate(x, "lru", Capacity{x.distinct, 0}).hit_rate(), reuse, 1e-12);
  std::printf("default spec (seed %llu): %zu requests over %.0f s, %zu block references, %zu distinct (reuse %.3f), "
              "median input %lld tokens, at most %zu blocks in one request\n",
              static_cast<unsigned long long>(s.seed), x.requests(), t.requests.back().timestamp_ms / 1000,
              x.references(), x.distinct, reuse, static_cast<long long>(inputs[inputs.size() / 2]),
              x.max_request_blocks);
  for (const std::size_t blocks : {1000, 4000, 16000}) {
    const double lru = simulate(x, "lru", Capacity{blocks, 0}).hit_rate();
    const double oracle = simulate(x, "oracle", Capacity{blocks, 0}).hit_rate();
    std::printf("  %zu blocks: lru hit rate %.3f, oracle %.3f\n", blocks, lru, oracle);
    EXPECT_GE(oracle, lru);
  }
  EXPECT_EQ(x.requests(), 4000u);
  EXPECT_EQ(x.references(), 106061u);
  EXPECT_EQ(x.distinct, 34890u);
}

}  // namespace
}  // namespace kvf::residency
