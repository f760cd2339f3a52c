// Measured against predicted: the row's study's plug-in predicts it (its model terms, per arm); the core
// gives the terms their shared helpers (Predictor) and the run's alone rows (RunIndex).
#include <algorithm>
#include <cstdlib>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "internal.hpp"

namespace kvf::report {

namespace {

// Length-prefixed, so no parameter value can make two different tuples one key.
void append_key(std::string& key, const std::string& part) {
  key += std::to_string(part.size());
  key += ':';
  key += part;
}

std::string gbps_text(double bps) { return fmt(bps / 1e9) + " GB/s"; }

}  // namespace

const CaseRow* RunIndex::first(const std::string& study, const Match& match, const std::string& mode) const {
  std::string keys;
  append_key(keys, study);
  for (const auto& [k, v] : match) append_key(keys, k);
  auto [index, fresh] = first_.try_emplace(keys);
  auto& rows = index->second;
  auto tuple = [&](const CaseRow& r, bool from_match) {
    std::string t;
    append_key(t, r.mode);
    for (const auto& [k, v] : match) append_key(t, from_match ? v : r.param(k));
    return t;
  };
  // A CUDA-graph row (launch=graph) is never another row's "alone" row unless the match asks for it: the model's
  // alone rows are launched eagerly, as every row was before the launch axis.
  bool names_launch = false;
  for (const auto& [k, v] : match) names_launch = names_launch || k == "launch";
  if (fresh)
    for (const auto& r : run_->cases)
      if (r.study == study && r.measured() && r.invalid.empty() && (names_launch || r.param("launch") != "graph"))
        rows.try_emplace(tuple(r, false), &r);  // file order: the first wins
  CaseRow probe;
  probe.mode = mode;
  const auto it = rows.find(tuple(probe, true));
  return it == rows.end() ? nullptr : it->second;
}

const CaseRow* RunIndex::largest(const std::string& study, const std::string& arm, const std::string& param,
                                 const std::string& mode) const {
  std::string key;
  for (const auto* part : {&study, &arm, &param, &mode}) append_key(key, *part);
  auto [it, fresh] = largest_.try_emplace(key, nullptr);
  if (fresh) {
    std::optional<double> best;
    for (const auto& r : run_->cases) {
      if (r.study != study || !r.measured() || r.mode != mode || r.param("arm") != arm) continue;
      const auto v = r.num(param);
      if (v && (!best || *v > *best)) {
        best = v;
        it->second = &r;
      }
    }
  }
  return it->second;
}

Predictor::Predictor(const GpuSpec& g, const CaseRow& r, std::string* why, const RunIndex* run,
                     const std::vector<Shape>* shapes)
    : g(g), r(r), run_index(run), shapes(shapes), bytes(r.bytes.value_or(0)), flops(r.flops.value_or(0)), why_(why) {}

void Predictor::say(const std::string& s) {
  if (why_) *why_ = s;
}

std::optional<double> Predictor::none(const std::string& s) {
  say(s);
  return std::nullopt;
}

std::optional<double> Predictor::link(double gbps, const char* what, int copies) {
  if (gbps <= 0 || bytes <= 0) return none(std::string(what) + ": no link figure or no bytes");
  say(std::string(what) + (copies > 1 && g.copy_issue_us > 0 ? ": fixed + further copies x issue + bytes / link"
                                                               : ": copies x fixed + bytes / link"));
  return copies_fixed_s(g, copies) + bytes / (gbps * 1e9);
}

std::optional<double> Predictor::roof(int launches, const std::string& what, bool fp32) {
  if (flops > 0 && g.bf16_tflops <= 0) return none("no FLOP/s ceiling (no GEMM ceiling measured, no spec)");
  if (g.hbm_tbps <= 0) return none("no memory bandwidth (no stream read measured, no spec)");
  if (flops <= 0 && bytes <= 0) return none("row has neither bytes nor flops");
  GpuSpec peak = g;
  std::string said = what;
  if (fp32 && r.backend != "cuda" && flops > 0) {
    if (g.fp32_tflops > 0) {
      peak.bf16_tflops = g.fp32_tflops;
      said += "; compute at the fp32 GEMM peak " + fmt(g.fp32_tflops) + " TFLOP/s";
    } else {
      said += "; fp32: the best GEMM row (no fp32 GEMM row measured)";
    }
  }
  // A CUDA-graph row (the launch axis, kvf/cuda_graph.hpp) reaches the GPU in one launch however many kernels it holds.
  if (launches > 1 && r.param("launch") == "graph") {
    said += "; as one CUDA graph: 1 launch for the " + std::to_string(launches);
    launches = 1;
  }
  say(said);
  return roofline_s(peak, flops, bytes) + launches * g.launch_us * 1e-6;
}

std::optional<double> Predictor::corun(const CaseRow* alone, const CaseRow* co, double demand_factor,
                                       const std::string& co_what, int busy_threads) {
  if (!run_index) return none("co-run model: needs this run's alone rows (none given)");
  if (!alone) return none("co-run model: no decode-alone row (background none, same shape) in this run");
  if (!co || !co->bytes || *co->bytes <= 0 || !(*co->median_s > 0))
    return none("co-run model: no alone row of the co-runner (" + co_what + ") with bytes in this run");
  if (!(*alone->median_s > 0)) return none("co-run model: the decode-alone row's median is 0");
  if (g.hbm_tbps <= 0 || bytes <= 0) return none("co-run model: no memory bandwidth or no decode bytes");
  const double bw = g.hbm_tbps * 1e12, demand = demand_factor * *co->bytes / *co->median_s;
  auto t = corun_s(bytes, *alone->median_s, bw, demand);
  if (!t)
    return none("co-run model: co-runner demand " + gbps_text(demand) + " >= memory bandwidth " + gbps_text(bw) +
                ": bandwidth sharing gives no bound");
  // CPU: the decode team (one thread per core) also time-shares the cores with the co-runner's busy threads.
  // A fair share gives slowdown (C + busy) / C; a barrier-synchronized static team can do worse (up to 2).
  const int cores = run_index->run().compute_units;
  std::string share;
  if (r.backend == "cpu" && busy_threads > 0 && cores > 0) {
    const double ts = double(cores + busy_threads) / cores;
    share = "; core time-sharing: (" + std::to_string(cores) + " cores + " + std::to_string(busy_threads) +
            " busy thread) / " + std::to_string(cores) + " = slowdown " + fmt(ts) +
            " (a static team can reach 2); the larger of the two slowdowns";
    t = std::max(*t, ts * *alone->median_s);
  }
  say("co-run model (bandwidth sharing): decode bytes / min(alone rate " + gbps_text(bytes / *alone->median_s) +
      ", memory " + gbps_text(bw) + " - co-runner " + gbps_text(demand) + " = " + co_what + " " +
      (demand_factor == 1 ? "" : fmt(demand_factor) + " x ") + "bytes / time of '" + co->case_name + "' (" +
      co->mode + ")); decode alone '" + alone->case_name + "' " + us_text(*alone->median_s) + share +
      "; predicted slowdown " + fmt(*t / *alone->median_s) +
      (r.backend != "cpu"  ? " (shared SMs not modelled)"
       : busy_threads == 0 ? " (the co-runner waits on a device: no core time-sharing term)"
       : share.empty()     ? " (core time-sharing not modelled: meta.json gives no core count)"
                           : ""));
  return t;
}

std::optional<int> Predictor::count(const char* name, std::int64_t hi) {
  const auto v = r.num(name);
  if (!v) return 1;
  try {
    return static_cast<int>(kvf::checked_integer(*v, 1, hi, r.where + ": column '" + name + "'"));
  } catch (const UsageError& e) {
    bad_count = e.what();
    return std::nullopt;
  }
}

std::optional<long> Predictor::note_count(std::string_view key) const {
  const auto at = r.note.find(key);
  if (at == std::string::npos) return std::nullopt;
  const char* p = r.note.c_str() + at + key.size();
  if (*p < '0' || *p > '9') return std::nullopt;
  return std::strtol(p, nullptr, 10);
}

const CaseRow* Predictor::alone_row(const std::string& study, const Match& m) const {
  if (!run_index) return nullptr;
  for (const auto& md : {r.mode, std::string("cold"), std::string("hot")})
    if (const CaseRow* row = run_index->first(study, m, md)) return row;
  return nullptr;
}

const Shape* Predictor::shape(const std::string& name) const {
  const Shape* found = nullptr;
  if (shapes)
    for (const auto& sh : *shapes)
      if (sh.name == name) found = &sh;
  return found;
}

std::optional<double> predict_row(const StudyReports& studies, const GpuSpec& g, const CaseRow& r, std::string* why,
                                  const RunIndex* run, const std::vector<Shape>* shapes) {
  Predictor p(g, r, why, run, shapes);
  for (const auto& s : studies) {
    if (s.study != r.study) continue;
    const std::string& arm = r.param(s.arm_column);
    const ModelTerm* any = nullptr;
    for (const auto& t : s.terms) {
      if (t.arms.empty() && !any) any = &t;
      if (std::find(t.arms.begin(), t.arms.end(), arm) != t.arms.end()) return t.predict(p);
    }
    if (any) return any->predict(p);
    return p.none(r.study + " arm '" + arm + "' has no model term");
  }
  return p.none("study '" + r.study + "' has no model term");
}

std::vector<detail::Judged> detail::judge_all(const StudyReports& studies, const std::vector<ResultSet>& sets) {
  std::vector<const VerdictRule*> rules;
  for (const auto& s : studies)
    for (const auto& v : s.verdicts) rules.push_back(&v);
  std::stable_sort(rules.begin(), rules.end(), [](auto* a, auto* b) { return a->number < b->number; });
  std::vector<Judged> out;
  for (const auto* rule : rules)
    for (const auto& rs : sets)
      for (auto& v : rule->judge(rs)) out.push_back({rule, std::move(v)});
  return out;
}

std::vector<Verdict> verdicts(const StudyReports& studies, const std::vector<ResultSet>& sets) {
  std::vector<Verdict> out;
  for (auto& j : detail::judge_all(studies, sets)) out.push_back(std::move(j.verdict));
  return out;
}

}  // namespace kvf::report
