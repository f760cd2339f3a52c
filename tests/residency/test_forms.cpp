// Block forms (issue 17): the flags' parsing and the reachable compress targets, and the `cost` policy keeping
// blocks in several forms on hand-made byte sizes and costs: compress computed by hand, compress before demote,
// budgets in bytes on random traces, and hits and restores counted by form.
#include <random>

#include <gtest/gtest.h>

#include "kvf/errors.hpp"
#include "residency_test_util.hpp"

namespace kvf::residency {
namespace {

using test::hits;

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ResidencyForms, NamesParseAndReachableTargets) {
  for (const Form f : kAllForms) EXPECT_EQ(parse_form(form_name(f), "--form"), f);
  EXPECT_EQ(form_column(Form::kv_int8), "kv_int8");
  EXPECT_EQ(form_description(Form::x_int4), "int4 X");
  EXPECT_EQ(form_description(Form::kv), "bf16 K/V");
  EXPECT_EQ(parse_forms("kv-int8,kv-int4", "--compress-to"), (std::vector<Form>{Form::kv_int8, Form::kv_int4}));
  EXPECT_TRUE(parse_forms("none", "--compress-to").empty());
  EXPECT_EQ(usage_error([] { parse_form("fp8", "--form"); }),
            "--form fp8: expected one of kv, kv-int8, kv-int4, x, x-int8, x-int4");
  EXPECT_EQ(usage_error([] { parse_forms("kv-int8,", "--compress-to"); }),
            "--compress-to kv-int8,: an empty item; expected forms among kv, kv-int8, kv-int4, x, x-int8, x-int4, "
            "comma-separated, or none");
  EXPECT_EQ(usage_error([] { parse_forms("x,x", "--compress-to"); }), "--compress-to x,x: x twice");
  EXPECT_EQ(usage_error([] { check_compress_to(Form::kv, {Form::kv_int8, Form::kv_int4}, "--compress-to"); }),
            "no error");
  EXPECT_EQ(usage_error([] { check_compress_to(Form::x, {Form::x_int4}, "--compress-to"); }), "no error");
  EXPECT_NE(usage_error([] { check_compress_to(Form::kv, {Form::x_int8}, "--compress-to"); }).find("cannot be turned into X"),
            std::string::npos);
  EXPECT_NE(usage_error([] { check_compress_to(Form::x, {Form::kv_int8}, "--compress-to"); }).find("compress X to fewer bits"),
            std::string::npos);
  EXPECT_NE(usage_error([] { check_compress_to(Form::kv_int8, {Form::kv_int8}, "--compress-to"); }).find("not smaller"),
            std::string::npos);
}

// Sizes: kv 4 units, kv-int8 2, kv-int4 1; prefill = tokens seconds, dequantize 0.5 s (int8) and 0.75 s (int4).
Capacity units(std::size_t hbm, std::size_t host, std::vector<Form> to) {
  Capacity c{hbm, host, 0, Form::kv};
  c.form_bytes = {4, 2, 1, 0, 0, 0};
  c.compress_to = std::move(to);
  return c;
}
RestoreCosts costs(double fetch_s) {
  RestoreCosts c;
  c.fetch_block_s = fetch_s;
  c.restore_form_s = {0, 0.5, 0.75, 0, 0, 0};
  c.prefill_s = [](std::int64_t tokens, std::int64_t) { return double(tokens); };
  return c;
}
Result run_cost(const std::vector<std::vector<std::uint64_t>>& reqs, const Capacity& cap, const RestoreCosts& c) {
  return simulate(index_trace(test::make_trace(reqs, 4), 4), "cost", cap, &c);
}

TEST(ResidencyForms, CostCompressesWhereLruEvictsAndCountsTheRestore) {
  // HBM 2 kv blocks = 8 units, no host; each block 4 tokens (cost 4). [1] H1 = 4; [2] H2 = 4 (8 units).
  // [3]: 1 is the victim (tie, lower id); drop adds 4/4 = 1 per unit, compress 0.5/2 = 0.25: compressed,
  // H1 = L + 4 x 4/2 = 12 (6 units); still short: 2 compressed the same way (4 units); 3 enters, H3 = 4 + 4 = 8.
  // [1]: an HBM hit in kv-int8 (a dequantize); 1 re-enters whole: 3 (H 8) is compressed (4 units + 4).
  const std::vector<std::vector<std::uint64_t>> reqs = {{1}, {2}, {3}, {1}};
  const Result r = run_cost(reqs, units(2, 0, {Form::kv_int8}), costs(100));
  EXPECT_EQ(r.hits_hbm, 1u);
  EXPECT_EQ(r.hits_hbm_form[static_cast<std::size_t>(Form::kv_int8)], 1u);
  EXPECT_EQ(r.compressed[static_cast<std::size_t>(Form::kv_int8)], 3u);
  ASSERT_EQ(r.restores.size(), 1u);
  EXPECT_EQ(r.restores[0].request, 3u);
  EXPECT_EQ(r.restores[0].tier, Tier::hbm);
  EXPECT_EQ(r.restores[0].form, Form::kv_int8);
  EXPECT_EQ(r.restores[0].blocks, 1u);
  // Units held after each request: kv 4, 8, 4, 4 and kv-int8 0, 0, 4, 4: means 5 and 2.
  EXPECT_DOUBLE_EQ(r.mean_hbm_units_form[0], 5.0);
  EXPECT_DOUBLE_EQ(r.mean_hbm_units_form[1], 2.0);
  EXPECT_EQ(hits(test::run(reqs, "lru", {2, 0})), 0u);
  // Without compress targets, the same sizes give the one-form policy: 1 is dropped and [1] misses.
  EXPECT_EQ(hits(run_cost(reqs, units(2, 0, {}), costs(100))), 0u);
}

TEST(ResidencyForms, ACompressWhoseBlockWouldComeStraightBackIsNotTaken) {
  // HBM 2 kv blocks (8 units), no host. [1, 2]: a chain, H1 = 4, H2 = min(4, H1) = 4. [3]: 2 is the victim (the
  // deeper of a tie); compressed to int8 it would keep H 4 (clamped to 1's) and sort before 1 again, so it would be
  // the next victim in its new form: a pass for nothing. It is dropped (4 / 4 per unit), and [1] hits whole.
  const Result r = run_cost({{1, 2}, {3}, {1}}, units(2, 0, {Form::kv_int8}), costs(100));
  EXPECT_EQ(r.compressed[static_cast<std::size_t>(Form::kv_int8)], 0u);
  EXPECT_EQ(r.hits_hbm, 1u);
  EXPECT_EQ(r.hits_hbm_form[static_cast<std::size_t>(Form::kv)], 1u);
}

// With a host tier, a block may leave HBM as a smaller form (one compress pass): priced as its own action.
// HBM 1 kv block, host 1 kv block (4 units); fetch 2 s per block in any form; int4 restore 0.75 s. [1]; [2]: 1 is
// the victim, alone in HBM after its removal. Demote as kv: 2 / 4 = 0.5 per unit; demote as int4: (2 + 0.75) / 4 =
// 0.6875; compress to int4 (it stays: nothing else is left) 0.75 / 3 = 0.25: compressed; short again (1 + 4 > 4):
// 1 (int4) is the victim: demote 2 / 1, drop (4 - 0.75) / 1: demoted in int4. With a cheaper int4 fetch (0.5 s)
// and two blocks in HBM, demote as int4 ((0.5 + 0.75) / 4 = 0.3125) beats demote as kv (0.5) and a compress that
// would come straight back.
TEST(ResidencyForms, DemoteAsASmallerFormIsAnActionOfItsOwn) {
  RestoreCosts c = costs(2);
  c.fetch_form_s = {2, 0, 0.5, 0, 0, 0};
  const Result r = run_cost({{1, 2}, {3}, {1}}, units(2, 1, {Form::kv_int4}), c);
  EXPECT_EQ(r.compressed[static_cast<std::size_t>(Form::kv_int4)], 1u);  // 2, demoted as int4
  EXPECT_EQ(r.demoted_form[static_cast<std::size_t>(Form::kv_int4)], 1u);
  EXPECT_EQ(r.hits_hbm, 1u);  // [1] stayed whole
}

TEST(ResidencyForms, ADequantizeDearerThanAPrefillIsNotTaken) {
  RestoreCosts c = costs(100);
  c.restore_form_s[1] = 9;  // 9 / 2 units freed > 4 / 4: drop
  const Result r = run_cost({{1}, {2}, {3}, {1}}, units(2, 0, {Form::kv_int8}), c);
  EXPECT_EQ(r.compressed[1], 0u);
  EXPECT_EQ(hits(r), 0u);
}

// A request's partial last block kept as X restores by recomputing its rows only, and the policy prices it so.
// Entry form x (4 units), x-int4 1 unit; HBM 2 blocks; restore 0.5 s (x) and 0.75 s (x-int4) per token, 4-token
// blocks; prefill = tokens. [1] (4 tokens): H1 = 4. [2] (1 token): H2 = 1. [3]: 2 is the victim, L = 1: drop adds
// (1 - 0.5) / 4 = 0.125 per unit, compress to x-int4 (0.75 - 0.5) / 3 = 0.083 and it then outranks 1 (1 + 4 > 4):
// compressed. Still short: 1 (H 4) is compressed too ((3 - 2) / 3 against (4 - 2) / 4). [2]: an HBM hit in x-int4,
// its restore of 1 token.
// Priced as a full block (2 s and 3 s), dropping 2 would have looked free ((1 - 2) / 4 < 0): dropped, no hit.
TEST(ResidencyForms, APartialLastBlockKeptAsXIsPricedByItsTokens) {
  Capacity cap{2, 0, 0, Form::x};
  cap.form_bytes = {0, 0, 0, 4, 2, 1};
  cap.compress_to = {Form::x_int4};
  RestoreCosts c;
  c.fetch_block_s = 100;
  c.restore_form_s = {0, 0, 0, 2, 2.5, 3};
  c.prefill_s = [](std::int64_t tokens, std::int64_t) { return double(tokens); };
  const IndexedTrace t = index_trace(test::make_trace({{1}, {2}, {3}, {2}}, 4, {4, 1, 4, 1}), 4);
  const Result whole = simulate(t, "cost", cap, &c);
  EXPECT_EQ(hits(whole), 0u);
  c.restore_tokens_s = [](Form f, std::int64_t tokens) {
    return (f == Form::x ? 0.5 : f == Form::x_int8 ? 0.625 : 0.75) * double(tokens);
  };
  const Result r = simulate(t, "cost", cap, &c);
  EXPECT_EQ(r.compressed[static_cast<std::size_t>(Form::x_int4)], 3u);  // 2 and 1, then 3 when 2 re-enters whole
  EXPECT_EQ(r.hits_hbm_form[static_cast<std::size_t>(Form::x_int4)], 1u);
  ASSERT_EQ(r.restores.size(), 1u);
  EXPECT_EQ(r.restores[0].request, 3u);
  EXPECT_EQ(r.restores[0].form, Form::x_int4);
  EXPECT_EQ(r.restores[0].tokens, 1);
}

TEST(ResidencyForms, CompressedBlocksAreDemotedInTheirFormAndFetchedBack) {
  // HBM 1 kv block (4 units), host 1 kv block (4 units), fetch 1 s: per unit freed compress to int4 costs
  // 0.75 / 3 = 0.25, demote 1 / 4 = 0.25 (a tie goes to demote), drop 4 / 4 = 1. [1]; [2]: 1 demoted as kv.
  // [3]: 2 demoted, host full: 1 (lower priority) dropped. [2]: a host hit in kv, fetched.
  const Result one = run_cost({{1}, {2}, {3}, {2}}, units(1, 1, {Form::kv_int4}), costs(1));
  EXPECT_EQ(one.hits_host, 1u);
  EXPECT_EQ(one.compressed[2], 0u);
  // Fetch 2 s: compress to int4 (0.25 per unit) beats demote (0.5). [2]: 1 is compressed (1 unit), then still
  // short (1 + 4 > 4) compressed 1 is the victim again: demote 2 / 1 vs drop (4 - 0.75) / 1: demoted as kv-int4.
  const Result r = run_cost({{1}, {2}, {1}}, units(1, 1, {Form::kv_int4}), costs(2));
  EXPECT_EQ(r.compressed[2], 2u);  // 1, then 2 when 1 comes back
  EXPECT_EQ(r.hits_host, 1u);
  EXPECT_EQ(r.hits_host_form[2], 1u);
  ASSERT_EQ(r.restores.size(), 1u);
  EXPECT_EQ(r.restores[0].tier, Tier::host);
  EXPECT_EQ(r.restores[0].form, Form::kv_int4);
}

TEST(ResidencyForms, BudgetsHoldInBytesAndCountsAddUpOnRandomTraces) {
  std::mt19937_64 rng(23);
  for (int round = 0; round < 40; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 80, 4, 25);
    const IndexedTrace t = index_trace(test::make_trace(reqs, 4), 4);
    RestoreCosts c = costs(1.0 + round % 4);
    c.prefill_s = [](std::int64_t tokens, std::int64_t prefix) { return 0.5 * double(tokens) + 0.01 * double(prefix); };
    const Capacity cap = units(t.max_request_blocks + round % 6, std::size_t(round % 3) * 3,
                               round % 2 ? std::vector<Form>{Form::kv_int8, Form::kv_int4} : std::vector<Form>{Form::kv_int4});
    const Result r = simulate(t, "cost", cap, &c);  // throws std::logic_error past a budget
    std::size_t hbm = 0, host = 0, restored = 0;
    for (const Form f : kAllForms) {
      hbm += r.hits_hbm_form[static_cast<std::size_t>(f)];
      host += r.hits_host_form[static_cast<std::size_t>(f)];
    }
    for (const auto& x : r.restores) restored += x.blocks;
    EXPECT_EQ(hbm, r.hits_hbm) << round;
    EXPECT_EQ(host, r.hits_host) << round;
    EXPECT_EQ(restored, r.hits_host + r.hits_hbm - r.hits_hbm_form[0]) << round;
    double units_mean = 0;
    for (double u : r.mean_hbm_units_form) units_mean += u;
    EXPECT_LE(units_mean, double(cap.hbm_units())) << round;
  }
}

TEST(ResidencyForms, OneFormInBytesIsTheOneFormPolicyInBlocks) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    const auto reqs = test::random_prefix_trace(rng, 80, 4, 25);
    const IndexedTrace t = index_trace(test::make_trace(reqs, 4), 4);
    const RestoreCosts c = costs(1.5);
    const std::size_t h = t.max_request_blocks + round % 4, d = std::size_t(round % 3) * 2;
    const Result blocks = simulate(t, "cost", {h, d}, &c);
    const Result bytes = simulate(t, "cost", units(h, d, {}), &c);
    EXPECT_EQ(bytes.hits_hbm, blocks.hits_hbm) << round;
    EXPECT_EQ(bytes.hits_host, blocks.hits_host) << round;
    EXPECT_EQ(bytes.demoted(), blocks.demoted()) << round;
  }
}

TEST(ResidencyForms, ACompressTargetWithoutBytesIsRefused) {
  const IndexedTrace t = index_trace(test::make_trace({{1}}, 4), 4);
  const RestoreCosts c = costs(1);
  Capacity cap{2, 0};
  cap.compress_to = {Form::kv_int8};
  EXPECT_EQ(usage_error([&] { simulate(t, "cost", cap, &c); }), "compress to kv-int8: no bytes per block given for it");
  EXPECT_EQ(usage_error([&] { simulate(t, "lru", units(2, 0, {Form::kv_int8})); }),
            "policy lru keeps every block in one form: it takes no forms to compress to");
  EXPECT_TRUE(find_policy("cost").compresses);
  EXPECT_FALSE(find_policy("lru-host").compresses);
}

}  // namespace
}  // namespace kvf::residency
