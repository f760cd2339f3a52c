// Spec peaks -> ceilings measured in a results directory. Which rows measure which field is the plug-ins'
// knowledge (their calibration terms); the core applies them in one fixed field order, so the lines a
// spec's calibration lists come out in that order whatever the study list's order.
#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "kvf/errors.hpp"
#include "kvf/study_report.hpp"

namespace kvf::report {

// Memory: the cold rows where the run has them (a hot row may read a cache). Compute (tflops): the best of both
// modes. A ceiling is the most the kernel did; a GEMM is bound by its arithmetic, and the flush before a cold sample
// costs it little by bytes (its operands' first reads), though it can cost more by what else it disturbs (threads
// woken, a clock): a cold-first rule had taken 0.141 TFLOP/s beside 0.151 hot, and rows beat that 'ceiling'.
std::optional<std::pair<double, std::string>> best_value(const ResultSet& rs, const std::string& study,
                                                         const Match& match, bool tflops) {
  std::optional<std::pair<double, std::string>> best;
  for (const char* mode : {"cold", "hot"}) {
    std::optional<double> b;
    for (const auto* r : rs.rows(study)) {
      if (r->mode != mode) continue;
      bool ok = true;
      for (const auto& [k, v] : match) ok = ok && r->param(k) == v;
      const auto& val = tflops ? r->tflops : r->gbps;
      if (ok && val && *val > 0 && (!b || *val > *b)) b = *val;
    }
    if (b && (!best || *b > best->first)) best = std::make_pair(*b, std::string(mode));
    if (best && !tflops) return best;
  }
  return best;
}

CalibrationTerm best_row_term(const std::string& field, int rank, const std::string& study, const Match& match,
                              bool tflops, double per_unit, bool say_best) {
  CalibrationTerm t;
  t.field = field;
  t.rank = rank;
  t.measure = [=](const ResultSet& rs) -> std::vector<Calibrated> {
    const auto v = best_value(rs, study, match, tflops);
    if (!v) return {};
    std::string rows = study;
    for (const auto& [k, val] : match) rows += (rows == study ? " " : ",") + k + "=" + val;
    return {{field, v->first / per_unit,
             fmt(v->first) + (tflops ? " TFLOP/s, " : " GB/s, ") + (say_best ? "best " : "") + rows + " (" + v->second +
                 ") in " + rs.dir}};
  };
  return t;
}

std::optional<std::pair<double, double>> fit_affine(const std::vector<std::pair<double, double>>& pts,
                                                    bool relative) {
  std::set<double> xs;
  for (const auto& p : pts) xs.insert(p.first);
  if (xs.size() < 2) return std::nullopt;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    if (relative && !(y > 0)) return std::nullopt;
    const double w = relative ? 1 / (y * y) : 1;
    n += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double a = (sy - b * sx) / n;
  if (!(b > 0)) return std::nullopt;
  return std::make_pair(a, b);
}

namespace {

// The fields a calibration term may set, in the order they are calibrated and listed.
// host_tier: a figure of the host's side (disk, the remote tier between hosts' memories), which a CPU run measures
// for a GPU as well as a GPU run does; the others are the device's own.
// lower_is_better: a cost (a fixed time), where the other fields are rates; of two terms of one rank that both
// measure a field, the better figure is the ceiling.
struct Field {
  const char* name;
  double GpuSpec::*member;
  bool host_tier;
  bool lower_is_better = false;
};
constexpr Field kFields[] = {
    {"hbm_tbps", &GpuSpec::hbm_tbps, false},
    {"bf16_tflops", &GpuSpec::bf16_tflops, false},
    {"fp32_tflops", &GpuSpec::fp32_tflops, false},
    {"host_link_gbps", &GpuSpec::host_link_gbps, false},
    {"copy_fixed_us", &GpuSpec::copy_fixed_us, false, true},
    {"copy_issue_us", &GpuSpec::copy_issue_us, false, true},
    {"disk_gbps", &GpuSpec::disk_gbps, true},
    {"disk_latency_us", &GpuSpec::disk_latency_us, true, true},
    {"nvlink_gbps", &GpuSpec::nvlink_gbps, false},
    {"launch_us", &GpuSpec::launch_us, false, true},
    {"remote_gbps", &GpuSpec::remote_gbps, true},
    {"remote_fixed_us", &GpuSpec::remote_fixed_us, true, true},
    {"remote_descriptor_us", &GpuSpec::remote_descriptor_us, true, true},
};

double GpuSpec::*member_of(const std::string& field) {
  for (const auto& f : kFields)
    if (field == f.name) return f.member;
  throw std::logic_error("calibration term sets '" + field + "', which is not a calibrated GpuSpec field");
}

}  // namespace

std::vector<std::string> calibrate(const StudyReports& studies, GpuSpec& g, const ResultSet& rs, bool host_tiers_only) {
  std::vector<std::string> done;
  auto note = [&](const std::string& field, const std::string& text) {
    // A term may set a field it could not measure to the value the others need (a disk latency with one read
    // size): its text then starts "assumed" and the source says so, not "measured".
    g.source[field] = text.rfind("assumed", 0) == 0 ? text : "measured: " + text;
    done.push_back(field + " <- " + text);
  };
  for (const auto& field : kFields) {
    if (host_tiers_only && !field.host_tier) continue;
    std::vector<const CalibrationTerm*> terms;
    for (const auto& s : studies)
      for (const auto& t : s.calibration)
        if (t.field == field.name && t.measure) terms.push_back(&t);
    std::stable_sort(terms.begin(), terms.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
    for (std::size_t first = 0; first < terms.size();) {
      // The terms of one rank: of those that measure this field, the best figure wins (two studies' reads of the
      // same memory: the ceiling is the faster), and the others are named beside it.
      std::size_t end = first;
      while (end < terms.size() && terms[end]->rank == terms[first]->rank) ++end;
      std::vector<std::vector<Calibrated>> found;  // per term that found rows: what it measured
      for (std::size_t i = first; i < end; ++i)
        if (auto got = terms[i]->measure(rs); !got.empty()) found.push_back(std::move(got));
      first = end;
      if (found.empty()) continue;
      const auto value_of = [&](const std::vector<Calibrated>& got) -> const Calibrated* {
        const auto it =
            std::find_if(got.begin(), got.end(), [&](const Calibrated& c) { return c.field == field.name; });
        return it == got.end() ? nullptr : &*it;
      };
      std::size_t win = 0;
      for (std::size_t i = 1; i < found.size(); ++i) {
        const Calibrated *a = value_of(found[i]), *b = value_of(found[win]);
        if (a && (!b || (field.lower_is_better ? a->value < b->value : a->value > b->value))) win = i;
      }
      std::vector<Calibrated> measured = found[win];
      for (auto& m : measured)
        if (m.field == field.name)
          for (std::size_t i = 0; i < found.size(); ++i)
            if (const Calibrated* o = value_of(found[i]); i != win && o) m.text += "; also " + o->text;
      for (const auto& m : measured) {
        if (host_tiers_only && !std::any_of(std::begin(kFields), std::end(kFields), [&](const Field& f) {
              return f.host_tier && m.field == f.name;
            }))
          continue;  // a term that sets a device field beside a host-tier one
        g.*member_of(m.field) = m.value;
        note(m.field, m.text);
      }
      break;
    }
  }
  // The L2 (last-level cache) size is the device's, from meta.json: no study measures it.
  if (!host_tiers_only && rs.backend == "cuda" && rs.llc_bytes) {
    g.l2_mib = static_cast<double>(rs.llc_bytes) / (1 << 20);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.4g MiB, meta.json device.llc_bytes in %s", g.l2_mib, rs.dir.c_str());
    note("l2_mib", buf);
  }
  for (const auto& d : done) g.calibration.push_back(d);
  return done;
}

GpuSpec spec_from_results(const StudyReports& studies, const ResultSet& rs, const std::vector<GpuSpec>& gpus) {
  GpuSpec g;
  if (rs.backend == "cuda") {
    if (const GpuSpec* known = gpu_for_device(gpus, rs.device)) {
      g = *known;
    } else {
      g.name = rs.device;  // unknown GPU: only measured ceilings, plus the spec file's stated overheads
      if (!gpus.empty()) {
        g.launch_us = gpus.front().launch_us;
        g.copy_fixed_us = gpus.front().copy_fixed_us;
        for (const char* f : {"launch_us", "copy_fixed_us"})
          if (gpus.front().source.count(f)) g.source[f] = gpus.front().source.at(f);
      }
    }
  } else {
    g.name = rs.device.empty() ? "cpu" : rs.device;
    g.launch_us = 0;
    g.copy_fixed_us = 0;
    g.l2_mib = static_cast<double>(rs.llc_bytes) / (1 << 20);
    g.source["l2_mib"] = "meta.json device.llc_bytes";
    g.source["launch_us"] = "CPU: no launch";
    g.source["copy_fixed_us"] = "CPU: not modelled (0)";
  }
  calibrate(studies, g, rs);
  if (rs.backend != "cuda") {
    // The CPU's GEMM ceiling is the best gemm_ceiling row: OpenBLAS fp32, or oneDNN's bf16 matmul where this CPU
    // has one (its case name says onednn_bf16). The field name says bf16 either way: say which it was.
    if (g.source.count("bf16_tflops")) {
      bool onednn = false;  // the row that gave the figure (the best gemm_ceiling row's rate is the field's)
      for (const auto& r : rs.cases)
        if (r.param("arm") == "gemm_ceiling" && r.tflops && *r.tflops == g.bf16_tflops)
          onednn = onednn || r.param("gemm_lib") == "onednn_bf16";
      const std::string which = onednn ? " (oneDNN bf16 matmul on the CPU; fp32 twins are predicted at fp32_tflops)"
                                       : " (fp32 sgemm on the CPU)";
      g.source["bf16_tflops"] += which;
      for (auto& line : g.calibration)  // the list the report prints ("bf16_tflops <- ...") says it too
        if (line.rfind("bf16_tflops <- ", 0) == 0) line += which;
    }
  }
  return g;
}

}  // namespace kvf::report
