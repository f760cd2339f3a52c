#include "kvf/residency/costs.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "kvf/errors.hpp"
#include "kvf/stats.hpp"
#include "kvf/study_report.hpp"

namespace kvf::residency {
namespace {

// A cost the model computes is "model" unless a GPU figure it reads was replaced by a measured ceiling; then it is
// "model at measured ...", naming each measured figure and each that stayed the spec's or an assumption (a fetch
// at a measured link rate still pays an assumed fixed cost per copy).
std::string source_of(const report::GpuSpec& g, std::initializer_list<const char*> fields) {
  std::string measured, rest;
  for (const char* f : fields) {
    const auto origin = g.origin(f);
    if (origin != report::GpuSpec::Origin::measured) {
      const bool unfitted = std::string_view(f) == "copy_issue_us" && g.copy_issue_us <= 0;
      const char* why = unfitted                                     ? " not fitted (each copy pays copy_fixed_us)"
                        : origin == report::GpuSpec::Origin::assumed ? " assumed"
                                                                     : " from the spec";
      rest += (rest.empty() ? "" : ", ") + std::string(f) + why;
      continue;
    }
    measured += (measured.empty() ? "" : "; ") + std::string(f) + " <- " + g.source.at(f).substr(10);
  }
  if (measured.empty()) return "model";
  return "model at measured " + measured + (rest.empty() ? "" : "; not measured: " + rest);
}

}  // namespace

double block_bytes(const report::Shape& m, int block_tokens, Form form) {
  if (form == Form::kv) return report::kv_bytes_per_layer(m, block_tokens) * m.layers;
  if (!is_x_form(form)) return report::kv_quant_bytes_per_layer(m, block_tokens, form_bits(form)) * m.layers;
  if (m.mla)
    throw UsageError("form " + std::string(form_name(form)) + ": " + m.name +
                     " is an MLA model, whose cache is the latent; X forms are modelled for GQA models only");
  return report::x_bytes_per_layer(m, block_tokens, form_bits(form)) * m.layers;
}

std::size_t capacity_blocks(double budget_gib, double bytes_per_block) {
  if (!(budget_gib > 0) || !std::isfinite(budget_gib) || !(bytes_per_block > 0)) return 0;
  const double n = std::floor(budget_gib * kGiB / bytes_per_block);
  // Beyond what a block id can name (2^32) no trace can fill it: the cap changes nothing.
  return n >= 4294967296.0 ? std::size_t{4294967296} : static_cast<std::size_t>(n);
}

CostModel make_cost_model(const report::GpuSpec& g, const report::Shape& m, int block_tokens, Form form) {
  if (block_tokens < 1) throw UsageError("block tokens " + std::to_string(block_tokens) + ": at least 1");
  CostModel c;
  c.gpu = &g;
  c.model = &m;
  c.block_tokens = block_tokens;
  c.form = form;
  c.block_bytes = block_bytes(m, block_tokens, form);
  for (const Form f : kAllForms)
    c.form_bytes[static_cast<std::size_t>(f)] = m.mla && is_x_form(f) ? 0 : block_bytes(m, block_tokens, f);
  c.prefill_source = source_of(g, {"bf16_tflops", "hbm_tbps", "launch_us"});
  c.fetch_source = source_of(g, {"host_link_gbps", "copy_fixed_us", "copy_issue_us"});
  c.disk_source = g.disk_gbps > 0 ? source_of(g, {"disk_gbps", "disk_latency_us"}) : "none";
  return c;
}

namespace {

double model_prefill_s(const CostModel& c, std::int64_t missing, std::int64_t prefix) {
  if (missing <= 0) return 0;
  const report::Shape& m = *c.model;
  const auto M = static_cast<double>(missing), P = static_cast<double>(prefix);
  double s = report::recompute_layers(*c.gpu, m, M, 1, m.layers).seconds;
  if (prefix > 0) {
    // recompute_layers counts attention over the tokens themselves only; the prefix part is QK^T and PV of
    // every missing token against every prefix token, reading the prefix's K/V once per layer.
    const double qk = m.mla ? m.n_heads * (m.qk_nope + m.qk_rope) : m.n_heads * m.head_dim;
    const double v = m.mla ? m.n_heads * m.v_head : m.n_heads * m.head_dim;
    s += m.layers * report::roofline_s(*c.gpu, 2 * M * P * (qk + v), report::kv_bytes_per_layer(m, P));
  }
  return s;
}

}  // namespace

double prefill_s(const CostModel& c, std::int64_t missing, std::int64_t prefix) {
  return c.prefill_scale * model_prefill_s(c, missing, prefix);
}

std::optional<PrefillCalibration> measured_prefill(const CostModel& c, const report::ResultSet& rs) {
  const report::Shape& m = *c.model;
  for (const char* mode : {"cold", "hot"}) {
    std::vector<double> ratios;
    std::string rows;
    double max_context = 0;
    for (const report::CaseRow& r : rs.cases) {
      if (r.study != "frontier" || r.mode != mode || !r.measured() || !r.invalid.empty() || r.param("arm") != "layers" ||
          r.param("model") != m.name || r.param("launch") == "graph")
        continue;
      const auto tokens = r.num("tokens"), layers = r.num("layers"), prefix = r.num("prefix"), pages = r.num("pages");
      if (!tokens || !layers || *layers != m.layers || *tokens < 1 || (pages && *pages != 1)) continue;
      const double model = model_prefill_s(c, std::llround(*tokens), prefix ? std::llround(*prefix) : 0);
      if (!(model > 0) || !(*r.median_s > 0)) continue;
      ratios.push_back(*r.median_s / model);
      max_context = std::max(max_context, *tokens + (prefix ? *prefix : 0));
      rows += (rows.empty() ? "" : ", ") + r.case_name + " " + report::us_text(*r.median_s) + " against the model's " +
              report::us_text(model);
    }
    if (ratios.empty()) continue;
    std::sort(ratios.begin(), ratios.end());
    PrefillCalibration p;
    p.scale = quantile_sorted(ratios, 0.5);
    p.max_context = max_context;
    p.source = "measured: frontier " + rows + " (" + mode + "): every prefill x" + report::fmt(p.scale) +
               (ratios.size() > 1 ? " (median of " + std::to_string(ratios.size()) + ")" : "") + " in " + rs.dir;
    return p;
  }
  return std::nullopt;
}

bool use_measured_restores(CostModel& c, const report::ResultSet& rs) {
  std::string said;
  for (const Form form : {Form::x, Form::x_int8, Form::x_int4}) {
    const std::string want = form == Form::x ? "x_bf16" : form == Form::x_int8 ? "x_int8" : "x_int4";
    for (const char* mode : {"cold", "hot"}) {
      std::map<double, std::vector<double>> by_rows;  // rows of one call -> seconds
      for (const report::CaseRow& r : rs.cases) {
        if (r.study != "frontier" || r.mode != mode || !r.measured() || !r.invalid.empty() ||
            r.param("model") != c.model->name || r.param("resident_form") != want || r.param("launch") == "graph" ||
            (r.param("arm") != "x" && r.param("arm") != "xq"))
          continue;
        const auto tokens = r.num("tokens"), pages = r.num("pages"), layers = r.num("layers");
        if (!tokens || !(*tokens >= 1) || (layers && *layers != 1) || (pages && !(*pages >= 1))) continue;
        by_rows[*tokens * (pages ? *pages : 1)].push_back(*r.median_s);
      }
      if (by_rows.empty()) continue;
      const auto f = static_cast<std::size_t>(form);
      c.restore_rows[f].clear();
      c.restore_secs[f].clear();
      for (auto& [rows, secs] : by_rows) {
        std::sort(secs.begin(), secs.end());
        c.restore_rows[f].push_back(rows);
        c.restore_secs[f].push_back(quantile_sorted(secs, 0.5));
      }
      said += (said.empty() ? "" : "; ") + std::string(form_name(form)) + " <- " + std::to_string(by_rows.size()) +
              " frontier " + (form == Form::x ? "x" : "xq") + " row counts, " + report::fmt(by_rows.begin()->first) +
              ".." + report::fmt(by_rows.rbegin()->first) + " rows per call (" + mode + ")";
      break;
    }
  }
  if (said.empty()) return false;
  c.restore_source = "measured: " + said + " in " + rs.dir +
                     "; interpolated by the rows of one call, the model outside them and for the K/V dequantize";
  return true;
}

void use_measured_prefill(CostModel& c, const PrefillCalibration& p) {
  c.prefill_scale = p.scale;
  c.prefill_source = p.source;
}

Capacity capacity(const CostModel& c, std::size_t hbm_blocks, std::size_t host_blocks,
                  const std::vector<Form>& compress_to, std::size_t disk_blocks) {
  Capacity cap{hbm_blocks, host_blocks, disk_blocks, c.form};
  for (const Form f : kAllForms)
    cap.form_bytes[static_cast<std::size_t>(f)] = static_cast<std::int64_t>(std::llround(c.form_bytes[static_cast<std::size_t>(f)]));
  cap.compress_to = compress_to;
  return cap;
}

double fetch_s(const CostModel& c, std::size_t blocks) { return fetch_s(c, c.form, blocks); }

double fetch_s(const CostModel& c, Form form, std::size_t blocks) {
  if (blocks == 0) return 0;
  const double copies = static_cast<double>(blocks) * c.model->layers;
  if (copies > INT_MAX) throw UsageError("a host fetch of " + std::to_string(blocks) + " blocks x " +
                                         report::fmt(c.model->layers) + " layers: more copies than modelled (2^31)");
  return report::transfer(*c.gpu, static_cast<double>(blocks) * c.form_bytes[static_cast<std::size_t>(form)],
                          static_cast<int>(copies), c.gpu->host_link_gbps)
      .seconds;
}

double disk_fetch_s(const CostModel& c, Form form, std::size_t blocks) {
  if (blocks == 0) return 0;
  const double n = static_cast<double>(blocks), bytes = n * c.form_bytes[static_cast<std::size_t>(form)];
  const double read = c.peer_tier ? report::remote_s(*c.gpu, bytes, n * c.model->layers) : report::disk_s(*c.gpu, bytes, n);
  return read + fetch_s(c, form, blocks);
}

void use_peer_tier(CostModel& c) {
  if (!(c.gpu->remote_gbps > 0))
    throw UsageError(c.gpu->name + " has no remote figure (no spec sheet gives one): give --calibrate DIR, a results "
                     "directory with the remote study's rows");
  c.peer_tier = true;
  c.disk_source = "peer pool: " + source_of(*c.gpu, {"remote_gbps", "remote_fixed_us", "remote_descriptor_us"});
}

bool third_tier_priced(const CostModel& c) { return c.peer_tier || c.gpu->disk_gbps > 0; }

namespace {

// One pass per layer reading `from_bytes` and writing `to_bytes` (the whole model's, split over its layers).
double pass_s(const CostModel& c, double from_bytes, double to_bytes) {
  const double L = c.model->layers;
  return L * (report::roofline_s(*c.gpu, 0, (from_bytes + to_bytes) / L) + c.gpu->launch_us * 1e-6);
}

}  // namespace

double restore_s(const CostModel& c, Form form, std::size_t blocks, std::int64_t tokens) {
  if (blocks == 0 || form == Form::kv) return 0;
  const double n = static_cast<double>(blocks);
  if (!is_x_form(form)) return pass_s(c, n * c.form_bytes[static_cast<std::size_t>(form)], n * c.form_bytes[0]);
  const double rows = tokens < 0 ? n * c.block_tokens : double(tokens);
  if (rows <= 0) return 0;
  const auto f = static_cast<std::size_t>(form);
  if (const auto per_layer = report::interpolate(c.restore_rows[f], c.restore_secs[f], rows))
    return c.model->layers * *per_layer;
  // One call over the rows of n pages (the model prices its rows; the weights are read once per call).
  return c.model->layers * n * report::recompute_x(*c.gpu, *c.model, rows / n, n, form_bits(form)).seconds;
}

double entry_pass_s(const CostModel& c, std::int64_t tokens) {
  // bf16 K/V: the prefill's own paged write. x: X written where that write would go (prefill_s prices it).
  if (tokens <= 0 || c.form == Form::kv || c.form == Form::x) return 0;
  const double blocks = double(tokens) / c.block_tokens;  // the bytes of the tokens written, in blocks
  const Form source = is_x_form(c.form) ? Form::x : Form::kv;
  return pass_s(c, blocks * c.form_bytes[static_cast<std::size_t>(source)], blocks * c.block_bytes);
}

double compress_s(const CostModel& c, Form to) {
  if (to == c.form) return 0;
  return pass_s(c, c.block_bytes, c.form_bytes[static_cast<std::size_t>(to)]);
}

RestoreCosts restore_costs(const CostModel& c) {
  RestoreCosts r;
  r.fetch_block_s = fetch_s(c, 1);
  for (const Form f : kAllForms) {
    const auto i = static_cast<std::size_t>(f);
    if (c.form_bytes[i] <= 0) continue;
    r.fetch_form_s[i] = fetch_s(c, f, 1);
    if (third_tier_priced(c)) r.disk_fetch_form_s[i] = disk_fetch_s(c, f, 1);
    r.restore_form_s[i] = restore_s(c, f, 1);
  }
  r.restore_tokens_s = [&c](Form f, std::int64_t tokens) { return restore_s(c, f, 1, tokens); };
  r.prefill_s = [&c](std::int64_t tokens, std::int64_t prefix) { return prefill_s(c, tokens, prefix); };
  return r;
}

LatencySummary summarize_latency(std::span<const double> per_request_s) {
  LatencySummary s;
  if (per_request_s.empty()) return s;
  std::vector<double> sorted(per_request_s.begin(), per_request_s.end());
  std::sort(sorted.begin(), sorted.end());
  for (double x : sorted) s.total_s += x;
  s.mean_s = s.total_s / static_cast<double>(sorted.size());
  s.p50_s = quantile_sorted(sorted, 0.5);
  s.p99_s = quantile_sorted(sorted, 0.99);
  return s;
}

Baseline baseline(const CostModel& c, const IndexedTrace& trace) {
  Baseline b;
  b.request_s.reserve(trace.requests());
  for (std::size_t r = 0; r < trace.requests(); ++r) b.request_s.push_back(prefill_s(c, trace.input_length[r], 0));
  b.latency = summarize_latency(b.request_s);
  return b;
}

CostedResult price(const CostModel& c, const Result& sim, const Baseline& base, double hbm_gib, double host_gib,
                   double disk_gib) {
  if (base.request_s.size() != sim.requests)
    throw std::logic_error("price: a baseline of " + std::to_string(base.request_s.size()) + " requests for a replay of " +
                           std::to_string(sim.requests));
  CostedResult out;
  out.sim = sim;
  out.hbm_gib = hbm_gib;
  out.host_gib = host_gib;
  out.disk_gib = disk_gib;
  if (sim.references) {
    out.hit_rate_hbm = double(sim.hits_hbm) / double(sim.references);
    out.hit_rate_host = double(sim.hits_host) / double(sim.references);
    out.hit_rate_disk = double(sim.hits_disk) / double(sim.references);
  }
  out.prefill_avoided = sim.input_tokens ? double(sim.reused_tokens) / double(sim.input_tokens) : 0;
  for (const Form f : kAllForms) {
    const auto i = static_cast<std::size_t>(f);
    out.host_bytes += double(sim.hits_host_form[i] + sim.hits_disk_form[i]) * c.form_bytes[i];
    out.disk_bytes += double(sim.hits_disk_form[i]) * c.form_bytes[i];
    out.demote_bytes += double(sim.demoted_form[i]) * c.form_bytes[i];
    out.compress_s_total += double(sim.compressed[i]) * compress_s(c, f);
    if (sim.capacity.hbm_units() > 0) out.hbm_share[i] = sim.mean_hbm_units_form[i] / double(sim.capacity.hbm_units());
  }
  out.request_s.resize(sim.requests);
  out.request_pipelined_s.resize(sim.requests);
  const double L = c.model->layers;
  std::size_t next = 0;  // sim.restores is in trace order
  for (std::size_t r = 0; r < sim.requests; ++r) {
    const double p = prefill_s(c, sim.request_missed_tokens[r], sim.request_reused_tokens[r]);
    double f = 0, restore = 0;
    for (; next < sim.restores.size() && sim.restores[next].request == r; ++next) {
      const Result::Restore& x = sim.restores[next];
      if (x.tier == Tier::host) f += fetch_s(c, x.form, x.blocks);
      if (x.tier == Tier::disk) f += disk_fetch_s(c, x.form, x.blocks);
      restore += restore_s(c, x.form, x.blocks, x.tokens);
      if (is_x_form(x.form)) {
        out.x_restored_blocks += x.blocks;
        out.x_restored_tokens += x.tokens < 0 ? std::int64_t(x.blocks) * c.block_tokens : x.tokens;
      }
    }
    out.prefill_s_total += p;
    out.fetch_s_total += f;
    out.restore_s_total += restore;
    out.entry_pass_s_total += entry_pass_s(c, sim.request_missed_tokens[r]);
    out.request_s[r] = p + f + restore;
    out.request_pipelined_s[r] = ((L - 1) * std::max(f, p + restore) + f + p + restore) / L;
  }
  out.added_pipelined = summarize_latency(out.request_pipelined_s);
  out.recomputed_tokens = double(sim.prefill_tokens) + double(out.x_restored_tokens);
  out.added = summarize_latency(out.request_s);
  out.prefill_avoided_s = base.latency.total_s - out.prefill_s_total;
  return out;
}

}  // namespace kvf::residency
