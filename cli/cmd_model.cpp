// `kvf model --gpu NAME --model NAME [--calibrate DIR]`: the analytic model's predictions for every arm,
// the recompute/transfer crossovers and the residency action table (text; --json FILE for a serving system).
// Logic in the frontier study's report plug-in (studies/frontier/report, kvf/frontier_model.hpp) on the report
// core (analysis/report, kvf/report.hpp); docs/report.md describes every term.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "kvf/report.hpp"
#include "kvf/results.hpp"
#include "model_inputs.hpp"

namespace kvf::cli {

namespace {

std::string f(double v) { return report::fmt(v); }

void print_model(const report::GpuSpec& g, const report::Shape& m, const report::ActionOptions& ao,
                 const std::vector<report::ActionClass>& table) {
  using namespace report;
  std::printf("GPU %s\n", g.name.c_str());
  auto field = [&](const char* name, double v, const char* unit) {
    auto it = g.source.find(name);
    std::printf("  %-15s %10s %-7s %s\n", name, f(v).c_str(), unit, it == g.source.end() ? "" : it->second.c_str());
  };
  field("hbm_tbps", g.hbm_tbps, "TB/s");
  field("l2_mib", g.l2_mib, "MiB");
  field("host_link_gbps", g.host_link_gbps, "GB/s");
  field("nvlink_gbps", g.nvlink_gbps, "GB/s");
  field("bf16_tflops", g.bf16_tflops, "TFLOP/s");
  field("sms", g.sms, "");
  field("launch_us", g.launch_us, "us");
  field("copy_fixed_us", g.copy_fixed_us, "us");
  if (g.copy_issue_us > 0) field("copy_issue_us", g.copy_issue_us, "us");
  if (g.disk_gbps > 0) {
    field("disk_gbps", g.disk_gbps, "GB/s");
    field("disk_latency_us", g.disk_latency_us, "us");
  } else {
    std::printf("  %-15s %10s %-7s %s\n", "disk_gbps", "-", "", "no disk figure (a spec has none; --calibrate DIR with file-tier rows)");
  }
  if (g.remote_gbps > 0) {
    field("remote_gbps", g.remote_gbps, "GB/s");
    field("remote_fixed_us", g.remote_fixed_us, "us");
    field("remote_descriptor_us", g.remote_descriptor_us, "us");
  } else {
    std::printf("  %-15s %10s %-7s %s\n", "remote_gbps", "-", "",
                "no remote figure (a spec has none; --calibrate DIR with remote-study rows)");
  }
  std::printf("Model %s: hidden %s, kv values/token/layer %s, layers %s%s\n\n", m.name.c_str(), f(m.hidden).c_str(),
              f(m.kv_values_per_token).c_str(), f(m.layers).c_str(), m.mla ? " (MLA)" : "");

  std::printf("Predicted time per page per layer (us), P = pages per call (weight reads amortized over P):\n");
  // The disk and remote tiers (one read / one descriptor of the page's layer K/V) where --calibrate measured them.
  std::printf("%7s %4s %12s %12s %12s %12s %12s %12s %12s %12s %12s\n", "tokens", "P", "recompute_x", "x_int8",
              "x_int4", "fetch_host", "fetch_nvlink", "fetch_disk", "fetch_remote", "dequant_kv8", "kv_bytes");
  for (double T : ao.tokens)
    for (double P : {1.0, double(ao.prefill_pages)}) {
      const double kv = kv_bytes_per_layer(m, T);
      const std::string nv = g.nvlink_gbps > 0 ? f(transfer(g, kv, 1, g.nvlink_gbps).seconds * 1e6) : "-";
      const std::string disk = g.disk_gbps > 0 ? f(disk_s(g, kv, 1) * 1e6) : "-";
      const std::string remote = g.remote_gbps > 0 ? f(remote_s(g, kv, 1) * 1e6) : "-";
      const double dq = roofline_s(g, 0, kv + kv_quant_bytes_per_layer(m, T, 8)) + g.launch_us * 1e-6;
      std::printf("%7s %4s %12s %12s %12s %12s %12s %12s %12s %12s %12s\n", f(T).c_str(), f(P).c_str(),
                  f(recompute_x(g, m, T, P, 16).seconds * 1e6).c_str(), f(recompute_x(g, m, T, P, 8).seconds * 1e6).c_str(),
                  f(recompute_x(g, m, T, P, 4).seconds * 1e6).c_str(),
                  f(transfer(g, kv, 1, g.host_link_gbps).seconds * 1e6).c_str(), nv.c_str(), disk.c_str(),
                  remote.c_str(), f(dq * 1e6).c_str(), f(kv).c_str());
    }
  // The model prices any page size; the benches measure 16..4096 tokens in 16-token blocks (bench_frontier --tokens),
  // so a page outside that has no row that could check it, whatever --calibrate fitted.
  std::string unmeasurable;
  for (double T : ao.tokens)
    if (T < 16 || T > 4096 || std::fmod(T, 16) != 0) unmeasurable += (unmeasurable.empty() ? "" : ", ") + f(T);
  if (!unmeasurable.empty())
    std::printf("Tokens %s: outside what bench_frontier measures (16..4096 per page, multiples of 16): the model's "
                "alone, no measured row can check them\n", unmeasurable.c_str());
  if (m.mla) {
    std::printf("\nMLA: up-projection of the latent to per-head K/V (us per page per layer), after recompute_x "
                "(the latent):\n%7s %4s %12s\n", "tokens", "P", "mla_up");
    for (double T : ao.tokens)
      for (double P : {1.0, double(ao.prefill_pages)})
        std::printf("%7s %4s %12s\n", f(T).c_str(), f(P).c_str(), f(mla_up(g, m, T, P).seconds * 1e6).c_str());
  }
  std::printf("\nThrough L layers from tokens (evict -> recompute: layers 1..L-1 whole, layer L's K/V as recompute_x; "
              "prefix attention not counted), P=1, us per page:\n");
  std::printf("%7s", "tokens");
  std::vector<double> Ls = ao.layers;
  if (Ls.empty()) Ls = {1, 4, 16, m.layers};
  for (double L : Ls) std::printf(" %12s", ("L=" + f(L)).c_str());
  std::printf("\n");
  for (double T : ao.tokens) {
    std::printf("%7s", f(T).c_str());
    for (double L : Ls)
      std::printf(" %12s", L <= m.layers ? f(recompute_layers(g, m, T, 1, L, true).seconds * 1e6).c_str() : "-");
    std::printf("\n");
  }

  std::printf("\nCrossovers, recompute from bf16 X (P=1) vs fetch of the page's K/V (one copy per layer):\n");
  std::vector<double> Ts = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  for (const char* link : {"host", "nvlink"}) {
    const double bw = std::string(link) == "host" ? g.host_link_gbps : g.nvlink_gbps;
    if (bw <= 0) {
      std::printf("  %-6s: link bandwidth unknown\n", link);
      continue;
    }
    for (double L : Ls) {
      if (L > m.layers) continue;
      std::vector<double> r, t;
      for (double T : Ts) {
        r.push_back(L * recompute_x(g, m, T, 1, 16).seconds);
        // L is whole and in [1, model layers]: action_table checked --layers, load_shapes the model's count.
        t.push_back(transfer(g, kv_bytes_per_layer(m, T) * L, static_cast<int>(L), bw).seconds);
      }
      const auto c = find_crossover(Ts, r, t, "recompute", "fetch", "tokens", "evaluated");
      std::printf("  %-6s L=%-3s %s\n", link, f(L).c_str(), c.text.c_str());
    }
  }

  if (g.remote_gbps > 0) {
    // The page pulled from a peer (remote tier, one descriptor per layer) then over the host link, as fetch_peer.
    std::printf("\nCrossovers, recompute from bf16 X (P=1) vs a fetch from a peer node (remote fit, one descriptor per "
                "layer, then the host link):\n");
    for (double L : Ls) {
      if (L > m.layers) continue;
      std::vector<double> r, t;
      for (double T : Ts) {
        const double kv = kv_bytes_per_layer(m, T) * L;
        r.push_back(L * recompute_x(g, m, T, 1, 16).seconds);
        t.push_back(remote_s(g, kv, L) + transfer(g, kv, static_cast<int>(L), g.host_link_gbps).seconds);
      }
      const auto c = find_crossover(Ts, r, t, "recompute", "fetch_peer", "tokens", "evaluated");
      std::printf("  %-6s L=%-3s %s\n", "peer", f(L).c_str(), c.text.c_str());
    }
  }

  std::printf("\nAction table (cheapest; total us per page = reuse x reuse cost + one-time + HBM price x MiB):\n");
  // The price of holding a page decides keep against demote and evict: said where the answer is read.
  std::printf("HBM price: %s us per MiB held (%s)\n", f(report::hbm_price(g, ao)).c_str(),
              ao.hbm_price_us_per_mib ? "--hbm-price" : "default: the time to fetch 1 MiB over the host link");
  std::printf("%8s %7s %6s %6s  %-18s %10s %s\n", "phase", "tokens", "layers", "reuse", "cheapest", "total_us", "source");
  for (const auto& c : table) {
    double best = 0;
    std::string src;
    for (const auto& a : c.costs)
      if (a.action == c.cheapest) {
        best = a.total_us;
        src = a.source;
      }
    std::printf("%8s %7s %6s %6s  %-18s %10s %s\n", c.phase.c_str(), f(c.tokens).c_str(), f(c.layers).c_str(),
                f(c.reuse).c_str(), c.cheapest.c_str(), f(best).c_str(), src.c_str());
  }
}

}  // namespace

void add_model(CLI::App& app) {
  struct Args {
    std::string gpu, model, calibrate, json, gpus_path, models_path;
    std::vector<double> tokens, layers, reuse;
    int prefill_pages = 16;
    double hbm_price = 0;  // used only when the flag is given (ActionOptions::hbm_price_us_per_mib)
  };
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "model",
      "Analytic model: predicted time of every arm, recompute/transfer crossovers and the residency action table "
      "(docs/report.md)");
  sub->add_option("--gpu", args->gpu, "GPU from data/gpus.json, name or alias, case-blind (H100 SXM, H100 PCIe, H200, A100 SXM 80GB, B200, GH200, L40S)")
      ->required()
      ->check(non_empty("a GPU name"));
  sub->add_option("--model", args->model, "Model from data/models.json: name, alias or Hugging Face id, case-blind (e.g. Llama-3.1-8B, meta-llama/Llama-3.1-8B)")
      ->required()
      ->check(non_empty("a model name"));
  sub->add_option("--calibrate", args->calibrate,
                  "Results directory whose measured ceilings (stream read, GEMM, host copy, disk, remote tier) "
                  "replace the spec peaks; from a CPU run, the disk and remote tier only (a CPU's ceilings do not "
                  "price a GPU)")
      ->check(non_empty("a results directory"));
  sub->add_option("--json", args->json, "Write the action table as JSON to FILE ('-' for stdout, then nothing else)")
      ->check(non_empty("a file name or '-'"));
  const std::string tokens_allowed =
      "whole tokens per page in [1, " + std::to_string(static_cast<long long>(report::kMaxTokensPerPage)) + "]";
  auto* tokens = sub->add_option("--tokens", args->tokens, "Tokens per page (default 16,64,128,256,1024,4096)")
                     ->delimiter(',')
                     ->check(number_in(1, report::kMaxTokensPerPage, tokens_allowed, true));
  // The upper bound of --layers is the model's layer count: action_table checks it once the model is known.
  const std::string layers_allowed = "whole layer counts in [1, " + std::to_string(report::kMaxLayers) + "]";
  auto* layers = sub->add_option("--layers", args->layers, "Layer counts (default 1,4,16 and the model's depth)")
                     ->delimiter(',')
                     ->check(number_in(1, static_cast<double>(report::kMaxLayers), layers_allowed, true));
  auto* reuse = sub->add_option("--reuse", args->reuse, "Reuse probabilities (default 0.1,0.5,0.9)")
                    ->delimiter(',')
                    ->check(number_in(0, 1, "probabilities in [0, 1]"));
  sub->add_option("--prefill-pages", args->prefill_pages, "Pages per recompute call in prefill")
      ->capture_default_str()
      ->check(number_in(1, report::kMaxPrefillPages,
                        "whole pages per call in [1, " + std::to_string(report::kMaxPrefillPages) + "]", true));
  auto* price = sub->add_option("--hbm-price", args->hbm_price,
                                "Price of 1 MiB resident in HBM, in us (default: the time to fetch 1 MiB over the host link)")
                    ->check(number_in(0, report::kMaxHbmPrice,
                                      "microseconds per MiB in [0, " + f(report::kMaxHbmPrice) + "]"));
  sub->add_option("--gpus", args->gpus_path, "GPU spec file (default: gpus.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)")
      ->check(non_empty("a GPU spec file"));
  sub->add_option("--models-file", args->models_path, "Model shape file (default: models.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)")
      ->check(non_empty("a model shape file"));
  sub->callback([args, tokens, layers, reuse, price] {
    // A list flag given as '' parses to no values: that is not "use the default".
    for (const auto& [opt, values] : {std::pair{tokens, &args->tokens}, std::pair{layers, &args->layers},
                                      std::pair{reuse, &args->reuse}})
      if (opt->count() > 0 && values->empty())
        throw UsageError(opt->get_name() + ": empty (expected a comma-separated list: " + opt->get_description() + ")");
    // A value given twice would print its rows twice.
    for (auto* values : {&args->tokens, &args->layers, &args->reuse}) {
      std::sort(values->begin(), values->end());
      values->erase(std::unique(values->begin(), values->end()), values->end());
    }
    // A file that cannot be written is refused before the tables are printed (they were, then "cannot write").
    if (!args->json.empty() && args->json != "-") check_out_file(args->json, "--json");
    const ModelInputs in = load_model_inputs(args->gpus_path, args->gpu, args->models_path, args->model, args->calibrate);
    const report::GpuSpec& g = in.gpu;
    const report::Shape& m = in.shape();
    report::ActionOptions ao;
    if (!args->tokens.empty()) ao.tokens = args->tokens;
    if (!args->layers.empty()) ao.layers = args->layers;
    if (!args->reuse.empty()) ao.reuse = args->reuse;
    ao.prefill_pages = args->prefill_pages;
    if (price->count() > 0) ao.hbm_price_us_per_mib = args->hbm_price;
    // Measured arm times replace the model's where present (a GPU run's; a CPU run's arms are the CPU's).
    if (!args->calibrate.empty() && !in.cpu_calibration) ao.measured = &in.calibration;
    const auto table = report::action_table(g, m, ao);
    const auto j = report::action_table_json(g, m, ao, table);
    if (args->json == "-") {
      std::cout << j.dump(2) << "\n";
      exit_with(kExitOk);
      return;
    }
    if (!args->json.empty()) write_file_atomically(args->json, j.dump(2) + "\n");  // a WriteError names the cause
    print_model(g, m, ao, table);
    if (!in.calibration_note.empty()) std::printf("\n%s\n", in.calibration_note.c_str());
    if (!args->json.empty()) std::printf("\naction table: %s\n", args->json.c_str());
    exit_with(kExitOk);
  });
}

}  // namespace kvf::cli
