// The frontier's model terms: one per arm (or group of arms), each predicting a measured row from the
// calibrated spec and, for the overlap and co-run arms, the run's own alone rows.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "kvf/errors.hpp"
#include "kvf/frontier_model.hpp"
#include "parts.hpp"

namespace kvf::report::frontier {

namespace {

using Term = std::function<std::optional<double>(Predictor&)>;

// A CPU row whose GEMM ran OpenBLAS fp32 (gemm=openblas_fp32: no oneDNN bf16 matmul here) is bound by the fp32 peak.
Term roof(int launches, std::string what) {
  return [launches, what = std::move(what)](Predictor& p) {
    return p.roof(launches, what, p.r.param("gemm") == "openblas_fp32");
  };
}

Term host_link(const char* what, int copies) {
  return [what, copies](Predictor& p) { return p.link(p.g.host_link_gbps, what, copies); };
}

// bidir: H2D and D2H of bytes / 2 each at once, each on its own copy engine and link direction (PCIe and NVLink-C2C
// are full duplex): one direction's time, not both bytes over one direction.
std::optional<double> duplex_link(Predictor& p) {
  if (p.g.host_link_gbps <= 0 || p.bytes <= 0) return p.none("host link, full duplex: no link figure or no bytes");
  p.say("host link, full duplex: fixed + (bytes / 2) / link, each direction on its own copy engine");
  return p.g.copy_fixed_us * 1e-6 + p.bytes / 2 / (p.g.host_link_gbps * 1e9);
}

// The arm's launches as its code issues them (through_layers_launches); the attention's split merge where the row's
// note says the prefix was split ("KV splits S", S > 1).
std::optional<double> through_layers(Predictor& p) {
  const auto layers = p.count("layers", kMaxLayers);
  if (!layers) return p.none(p.bad_count);
  if (p.r.backend != "cuda") return p.roof(0, "roofline");
  const bool merge = p.note_count("KV splits ").value_or(1) > 1;
  const int n = through_layers_launches(*layers, true, merge);
  const std::string whole = *layers > 1 ? std::to_string(kWholeLayerLaunches) + (merge ? " + 1 split merge" : "") +
                                              " per whole layer, "
                                        : "";
  return p.roof(n, "roofline + " + std::to_string(n) + " launches (input copy, " + whole +
                       std::to_string(kKvLayerLaunches) + " for the K/V-only last layer)");
}

// Read and write of every byte: a copy inside one memory.
std::optional<double> dram_copy(Predictor& p) {
  if (p.g.hbm_tbps <= 0 || p.bytes <= 0) return p.none("no memory bandwidth or no bytes");
  p.say("2 x bytes / memory bandwidth (read + write)");
  return 2 * p.bytes / (p.g.hbm_tbps * 1e12);
}

std::optional<double> granularity(Predictor& p) {
  const auto copies = p.count("copies", 1 << 30);
  if (!copies) return p.none(p.bad_count);
  if (p.r.backend == "cuda") {
    const auto t = p.link(p.g.host_link_gbps, "host link, one call per chunk", *copies);
    if (t && p.g.copy_issue_us > 0 && p.r.mode == "cold")  // the fit's own rows: its ratio restates it
      p.say("host link, one call per chunk: fixed + further copies x issue + bytes / link; in-sample: "
            "copy_issue_us is fitted on this run's cold granularity rows");
    return t;
  }
  if (p.g.hbm_tbps <= 0) return p.none("no memory bandwidth");
  p.say("2 x bytes / memory bandwidth (read + write)");
  return 2 * p.bytes / (p.g.hbm_tbps * 1e12);
}

std::optional<double> file_tier(Predictor& p) {
  const std::string& arm = p.r.param("arm");
  const auto cb = p.r.num("copy_bytes");
  if (!cb || *cb <= 0 || p.bytes < *cb) return p.none("file-tier row without copy_bytes <= bytes");
  if (p.g.disk_gbps <= 0)
    return p.none("no disk figure (no file-tier reads of 2 sizes and no dd_direct row to calibrate from)");
  const double reads = std::round(p.bytes / *cb);
  p.say("disk: reads x latency + bytes / disk bandwidth (" + fmt(reads) + (reads == 1 ? " read" : " reads") + ")" +
        (arm == "dd_direct"          ? "; dd's process start (fork+exec) not modelled"
         : arm == "file_direct_huge" ? "; disk fitted on 4 KiB-page destinations, this one is on huge pages"
                                     : ""));
  return disk_s(p.g, p.bytes, reads);
}

// The two parts of a pipelined split from the model's own terms: recompute_x of the recomputed tokens, the
// link's term of the fetched bytes. nullopt (with the reason said) when the link has no term.
std::optional<std::pair<double, double>> split_from_model(Predictor& p, const Shape* shape, double rr, double fetch,
                                                          std::string& source) {
  const std::string lk = p.r.param("link");
  double t_rec = 0, t_fetch = 0;
  if (rr > 0) t_rec = recompute_x(p.g, *shape, rr, 1, 16).seconds;
  if (fetch > 0) {
    if (lk == "file_o_direct") {
      if (p.g.disk_gbps <= 0) {
        p.none("overlap: no disk figure for the fetched part (no file-tier rows to calibrate from)");
        return std::nullopt;
      }
      t_fetch = disk_s(p.g, fetch, 1);
    } else if (lk == "h2d_pinned") {
      t_fetch = transfer(p.g, fetch, 1, p.g.host_link_gbps).seconds;
    } else {
      p.none("overlap: link '" + lk + "' has no model term");
      return std::nullopt;
    }
  }
  source = "model: recompute_x(" + fmt(rr) + " tok) " + us_text(t_rec) + ", " +
           (lk == "file_o_direct" ? "disk" : "host link") + "(" + fmt(fetch) + " B) " + us_text(t_fetch);
  return std::make_pair(t_rec, t_fetch);
}

std::optional<double> overlap(Predictor& p) {
  const auto T = p.r.num("tokens"), rr = p.r.num("recompute_tokens"), fetch = p.r.num("copy_bytes");
  if (!T || !rr || !fetch || *T <= 0) return p.none("overlap row without tokens, recompute_tokens or copy_bytes");
  const std::string model = p.r.param("model");
  const double sync = p.g.launch_us * 1e-6;
  // The run's alone rows: f=0 (fetch the whole page) and f=1 (recompute the whole page), same shape and mode.
  const CaseRow* f0 = p.alone_row("frontier", {{"arm", "overlap"}, {"model", model}, {"tokens", p.r.param("tokens")},
                                               {"recompute_tokens", "0"}});
  const CaseRow* f1 = p.alone_row("frontier", {{"arm", "overlap"}, {"model", model}, {"tokens", p.r.param("tokens")},
                                               {"recompute_tokens", p.r.param("tokens")}});
  std::string measured_alone;
  std::optional<double> m_rec, m_fetch;
  if (f0 && f1 && *rr > 0 && *rr < *T) {
    m_rec = *rr / *T * *f1->median_s;
    m_fetch = (*T - *rr) / *T * *f0->median_s;
    measured_alone = "this run's alone rows (f x t(f=1), (1-f) x t(f=0)): max " + us_text(std::max(*m_rec, *m_fetch)) +
                     ", sum " + us_text(*m_rec + *m_fetch);
  }
  const Shape* shape = p.shape(model);
  double t_rec = 0, t_fetch = 0;
  std::string source;
  try {
    if (shape || *rr == 0) {
      const auto parts = split_from_model(p, shape, *rr, *fetch, source);
      if (!parts) return std::nullopt;
      std::tie(t_rec, t_fetch) = *parts;
    } else if (m_rec) {
      t_rec = *m_rec;
      t_fetch = *m_fetch;
      source = "calibrated on " + measured_alone.substr(0, measured_alone.find(':')) + ", model " + model +
               " not in data/models.json";
      measured_alone.clear();
    } else {
      return p.none("overlap: model " + model + " not in data/models.json and no f=0/f=1 alone rows in this run");
    }
  } catch (const UsageError& e) {
    return p.none(std::string("overlap: ") + e.what());
  }
  const double t = overlap_s(t_rec, t_fetch, sync);
  p.say("pipelined split: max(recompute share, fetch share) + 1 sync (" + us_text(sync) + ") = " + us_text(t) +
        "; sum " + us_text(t_rec + t_fetch) + " [" + source + "]" + (measured_alone.empty() ? "" : "; " + measured_alone));
  return t;
}

// A decode step beside a background load; the co-runner's demand from its own alone row in this run. The
// interference arm is gone from bench_frontier (merged into the idleness study's corun arm); this term reads its
// rows in results written before the merge (results/gpu/H100-2026-11-22).
std::optional<double> interference(Predictor& p) {
  const std::string bg = p.r.param("background"), model = p.r.param("model"), N = p.r.param("decode_tokens");
  const bool gpu = p.r.backend == "cuda";
  if (bg == "none")
    return p.roof(gpu ? 1 : 0, std::string("decode step alone: roofline(flops, bytes)") +
                                   (gpu ? " + 1 launch" : " (one thread: the all-core ceilings overstate it)"));
  const CaseRow* alone = p.alone_row(
      "frontier", {{"arm", "interference"}, {"model", model}, {"decode_tokens", N}, {"background", "none"}});
  if (bg == "recompute")
    return p.corun(alone,
                   p.alone_row("frontier", {{"arm", "x"}, {"model", model}, {"tokens", "128"}, {"pages", "1"},
                                            {"layers", "1"}, {"xdtype", "bf16"}}),
                   1, "recompute x T=128 P=1", 1);
  if (bg == "copy" && gpu)
    return p.corun(alone, p.alone_row("frontier", {{"arm", "h2d_pinned"}, {"copy_bytes", "524288"}}), 1,
                   "512 KiB pinned H2D copies");
  if (bg == "copy") {
    // The background copies 512 KiB pages over a 128 MiB pool (DRAM, not cache): the largest memcpy row
    // measured, cold first; read + write traffic.
    const CaseRow* co = nullptr;
    for (const char* md : {"cold", "hot"})
      if (p.run_index && !co) co = p.run_index->largest("frontier", "memcpy", "copy_bytes", md);
    return p.corun(alone, co, 2, "DRAM copies (read + write)", 1);
  }
  if (bg == "file")
    return p.corun(alone, p.alone_row("frontier", {{"arm", "file_direct"}, {"copy_bytes", "524288"}}), 1,
                   "512 KiB O_DIRECT reads (DMA into memory)");
  return p.none("interference background '" + bg + "' has no model term");
}

}  // namespace

std::vector<ModelTerm> model_terms() {
  return {
      {{"gemm_ceiling"},
       [](Predictor& p) { return p.roof(1, "flops / GEMM peak", p.r.param("gemm_lib") != "onednn_bf16"); }},
      {{"x"}, roof(2, "roofline(flops, bytes) + 2 launches (GEMM, RoPE+write)")},
      {{"xq"}, roof(3, "roofline(flops, bytes) + 3 launches (dequant, GEMM, RoPE+write)")},
      {{"mla_latent", "mla_up"}, roof(2, "roofline(flops, bytes) + 2 launches")},
      {{"layers"}, through_layers},
      {{"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable"}, host_link("host link", 1)},
      {{"bidir"}, duplex_link},
      {{"zero_copy"}, host_link("host link (SM reads)", 0)},
      {{"p2p"}, [](Predictor& p) { return p.link(p.g.nvlink_gbps, "NVLink", 1); }},
      {{"granularity"}, granularity},
      {{"memcpy", "dram_copy"}, dram_copy},
      {{"dd_direct", "file_direct", "file_direct_huge", "file_page"}, file_tier},
      {{"overlap"}, overlap},
      {{"interference"}, interference},
  };
}

}  // namespace kvf::report::frontier
