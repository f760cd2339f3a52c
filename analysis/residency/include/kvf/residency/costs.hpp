// What a replay costs (issue 17): bytes per block and capacities from the model shape, and per-request added
// latency from the simulator's per-request arrays, priced by the frontier study's analytic model
// (kvf/frontier_model.hpp) on a GPU spec, whose peaks `kvf residency --calibrate DIR` may have replaced with
// measured ceilings (kvf/report.hpp calibrate). Formulas: analysis/residency/README.md "Costs".
#pragma once
#include <cstddef>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvf/frontier_model.hpp"
#include "kvf/report.hpp"
#include "kvf/residency/forms.hpp"
#include "kvf/residency/simulate.hpp"

namespace kvf::residency {

inline constexpr double kGiB = 1073741824.0;  // 2^30 bytes: budgets are in GiB

// Bytes of one block of block_tokens tokens, every layer: bf16 K/V (kv_bytes_per_layer x layers; for MLA the
// latent plus the RoPE key), or another form: int8/int4 K/V with an fp32 scale per 128 values
// (kv_quant_bytes_per_layer), X in bf16/int8/int4 (x_bytes_per_layer: hidden values per token and layer).
// UsageError for an X form of an MLA model (its cache is the latent; X forms are modelled for GQA models).
double block_bytes(const report::Shape& m, int block_tokens, Form form = Form::kv);
// floor(budget_gib x 2^30 / bytes_per_block). A budget that is not finite or not positive gives 0.
std::size_t capacity_blocks(double budget_gib, double bytes_per_block);

// Prices of the two things a request waits for. Build with make_cost_model; g and m must outlive it.
struct CostModel {
  const report::GpuSpec* gpu = nullptr;
  const report::Shape* model = nullptr;
  int block_tokens = 0;
  Form form = Form::kv;                     // the form blocks enter HBM in (--form)
  double block_bytes = 0;                   // of `form`: capacities are budgets over it
  std::array<double, kForms> form_bytes{};  // every form's; 0 where the model has none (X of an MLA model)
  // Every prefill_s is the model's times this (measured_prefill: measured / modelled on this GPU; 1: the model).
  double prefill_scale = 1;
  // Measured recompute from X per form (measured_restores): seconds per layer of one call by the rows (tokens)
  // of the call, ascending; empty: the model. restore_source says which forms are measured.
  std::array<std::vector<double>, kForms> restore_rows{}, restore_secs{};
  std::string restore_source = "model";
  // "model" when every GPU figure a cost uses is the spec's; else "measured: <field> <- <source>; ...".
  // disk_source: "none" when the spec has no disk figure (only a results directory measures one).
  std::string prefill_source, fetch_source, disk_source;
  // The tier behind host memory is a peer node's pool (use_peer_tier: the remote tier's fit), not a local disk.
  bool peer_tier = false;
};
CostModel make_cost_model(const report::GpuSpec& g, const report::Shape& m, int block_tokens, Form form = Form::kv);
// Capacity of `hbm_blocks` and `host_blocks` blocks of c.form, with every form's bytes and the forms `cost` may
// compress to (check_compress_to first).
Capacity capacity(const CostModel& c, std::size_t hbm_blocks, std::size_t host_blocks,
                  const std::vector<Form>& compress_to = {}, std::size_t disk_blocks = 0);

// A prefill measured in a results directory: the frontier study's `layers` rows of this model through all of its
// layers (a page of T tokens after N prefix tokens, one page, eager launches; cold rows, else hot), each against
// prefill_s(T, N) of the model; the median of their ratios. nullopt when the directory has no such row.
struct PrefillCalibration {
  double scale = 1;
  std::string source;  // "measured: <rows> (mode) <seconds> against the model's <seconds>: x<scale> in <dir>"
  double max_context = 0;  // the longest measured prefill, prefix + tokens: beyond it the scale is extrapolated
};
std::optional<PrefillCalibration> measured_prefill(const CostModel& c, const report::ResultSet& rs);
// Every prefill_s of c is scaled by p.scale from now on, and its source says so.
void use_measured_prefill(CostModel& c, const PrefillCalibration& p);
// The recompute of K/V from X measured in a results directory: the frontier study's `x` (bf16 X) and `xq` (int8,
// int4 X) rows of this model, one layer, eager launches (cold rows, else hot), as seconds per call against the
// rows of the call (tokens x pages; the median where several shapes have one row count). restore_s of an X form
// then interpolates them at n blocks x block_tokens rows, times the layers; outside the measured rows, and for
// the K/V forms' dequantize (no arm measures it), the model. Returns whether any form was measured.
bool use_measured_restores(CostModel& c, const report::ResultSet& rs);

// Prefill of `missing` prompt tokens after `prefix` reused ones: recompute_layers(missing tokens, one call, all
// layers) (attention projections, causal attention of the missing tokens over themselves, MLP: 2 x active layer
// parameters x tokens FLOPs, roofline per kernel at bf16_tflops / hbm_tbps, plus launches), plus per layer the
// missing tokens' attention over the prefix: 2 x missing x prefix x (qk width + v width) FLOPs against reading
// the prefix's K/V, fused into the attention kernel (no launch). 0 when missing is 0.
double prefill_s(const CostModel& c, std::int64_t missing, std::int64_t prefix);
// Fetching `blocks` host-tier blocks to HBM: transfer(blocks x block_bytes, one copy per block per layer, as
// the paged cache keeps one tensor per layer) over host_link_gbps. 0 when blocks is 0.
double fetch_s(const CostModel& c, std::size_t blocks);
double fetch_s(const CostModel& c, Form form, std::size_t blocks);  // blocks of `form` (its bytes)
// Reading `blocks` blocks of `form` from the disk tier, one read each (disk_s: latency + bytes / disk_gbps), then
// fetching them over the host link (fetch_s): a bounce through host memory, not overlapped. UsageError when the
// GPU spec has no disk figure.
double disk_fetch_s(const CostModel& c, Form form, std::size_t blocks);
// The tier behind host memory becomes a peer node's pool (Mooncake store, LMCache remote, a prefill node): a
// block read from it is report::remote_s(bytes, one descriptor per block and layer, as engines post them) into
// host memory, then fetch_s, and disk_fetch_s prices that; disk_source says where the remote figure comes from.
// UsageError when the GPU spec has no remote figure (only a results directory with remote-study rows has one).
void use_peer_tier(CostModel& c);
// Whether the tier behind host memory has a price: a disk figure, or use_peer_tier.
bool third_tier_priced(const CostModel& c);
// Making `blocks` blocks of `form` readable by attention, once they are in HBM: 0 for kv; for quantized K/V one
// dequantize pass per layer over all of them (read the quantized bytes, write bf16); for X, recompute_x per
// layer with the blocks as the pages of one call (dequantize, GEMM with the K/V projections, RoPE + paged write),
// or the measured rows (use_measured_restores) where they cover the call. `tokens`: the blocks' real tokens (a
// request's partial last block holds fewer; X forms recompute those rows only); -1: blocks x block_tokens.
double restore_s(const CostModel& c, Form form, std::size_t blocks, std::int64_t tokens = -1);
// Writing the `tokens` prefilled tokens of one request into the cache in a quantized entry form: one pass per layer
// over their bytes, reading bf16 K/V (kv-int8, kv-int4) or X (x-int8, x-int4) and writing the entry form. 0 for kv
// and x: the prefill's own paged write stores them (prefill_s prices it). A separate pass: an upper bound where
// the cache write quantizes as it goes. Not in the added latency: the first token does not wait for it (the
// prefill's attention reads its own K/V); the first decode step does, once per request.
double entry_pass_s(const CostModel& c, std::int64_t tokens);
// Turning one block of the entry form into `to` (a quantize pass per layer: read one form, write the other):
// GPU work off the request path, reported beside it. 0 when `to` is the entry form.
double compress_s(const CostModel& c, Form to);

// What the `cost` policy is told (policy.hpp RestoreCosts): fetch_s(c, 1), per form fetch_s(c, f, 1) and
// restore_s(c, f, 1), and prefill_s(c, ...). Holds `c` by reference: c must outlive it.
RestoreCosts restore_costs(const CostModel& c);

// mean, p50, p99 (kvf::quantile_sorted: linear interpolation, type 7) and the sum of per-request seconds.
struct LatencySummary {
  double total_s = 0, mean_s = 0, p50_s = 0, p99_s = 0;
};
LatencySummary summarize_latency(std::span<const double> per_request_s);

// The no-cache baseline: every request prefills its whole prompt.
struct Baseline {
  std::vector<double> request_s;
  LatencySummary latency;
};
Baseline baseline(const CostModel& c, const IndexedTrace& trace);

// One policy at one budget, priced.
struct CostedResult {
  Result sim;
  double hbm_gib = 0, host_gib = 0, disk_gib = 0;  // the budgets asked for (0: no such tier)
  double hit_rate_hbm = 0, hit_rate_host = 0, hit_rate_disk = 0;  // of block references
  double disk_bytes = 0;             // read from disk: disk-tier hits x their form's bytes (they also cross the host link)
  double prefill_avoided = 0;        // reused tokens / input tokens (no cache prefills every input token)
  double host_bytes = 0;             // over the host link: host- and disk-tier hits x their form's bytes
  double demote_bytes = 0;           // the other way (HBM -> host): demoted blocks x their form's bytes
  // Added latency per request: prefill_s(missed, reused) + per form fetch_s(host blocks) + disk_fetch_s(disk
  // blocks) + restore_s(blocks reused in a form other than kv, from any tier). fetch_s_total has the disk reads.
  std::vector<double> request_s;
  double prefill_s_total = 0, fetch_s_total = 0, restore_s_total = 0;  // their parts, summed over requests
  std::size_t x_restored_blocks = 0;  // reused blocks whose K/V were recomputed from X
  std::int64_t x_restored_tokens = 0;  // their real tokens (a request's partial last block counts what it holds)
  double recomputed_tokens = 0;        // prefilled tokens + x_restored_tokens
  double compress_s_total = 0;        // GPU time of the compress passes (off the request path)
  double entry_pass_s_total = 0;      // GPU time of writing the prefilled tokens in the entry form (entry_pass_s)
  std::array<double, kForms> hbm_share{};  // mean share of the HBM budget held in each form
  LatencySummary added;
  // The same requests with the fetch pipelined by layer against the compute (copy engines beside the SMs, as
  // LMCache's layerwise transfer does): F fetch, C = prefill + restore, L layers: ((L - 1) max(F, C) + F + C) / L.
  // A lower bound on a pipelined engine's added latency, as `added` is an upper one.
  std::vector<double> request_pipelined_s;
  LatencySummary added_pipelined;
  double prefill_avoided_s = 0;      // baseline total - prefill_s_total: the prefill the cache saved, in time
};
CostedResult price(const CostModel& c, const Result& sim, const Baseline& base, double hbm_gib, double host_gib,
                   double disk_gib = 0);

}  // namespace kvf::residency
