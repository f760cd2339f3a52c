// `kvf metrics --chip GA100|GH100|GB100 [--sampling] [--metric NAME ...]`: the idleness study's metric sets, each
// metric's validity and the set's pass count, from the CUPTI Profiler Host API (works without a GPU).
//   exit 0: every listed set is valid and fits one pass; 2: unknown chip or metric, or a set needing > 1 pass.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kvf/errors.hpp"
#if defined(HAVE_KVF_CUPTI)
#include "kvf/cupti/metric_sets.hpp"
#endif

namespace kvf::cli {

namespace {
// Chip and metric names are identifiers (GH100, sm__cycles_active.avg): anything else, an empty value
// included, is refused with one line before the Profiler Host API sees it.
void check_name(const char* flag, const std::string& v, const char* extra, const char* allowed) {
  bool ok = !v.empty() && v.size() <= 256;
  for (char ch : v)
    ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                (ch && std::strchr(extra, ch)));
  if (ok) return;
  std::string shown = v.empty() ? "''" : v.substr(0, 64);
  for (auto& ch : shown)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  throw UsageError(std::string(flag) + " " + shown + (v.size() > 64 ? "..." : "") + ": " + allowed);
}
}  // namespace

void add_metrics(CLI::App& app) {
  struct Args {
    std::string chip;
    bool sampling = false;
    std::vector<std::string> metrics;
  };
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "metrics",
      "CUPTI metric sets of the idleness study for a chip: each metric's validity and the pass count (no GPU "
      "needed); exit 2 for an unknown chip or metric or a set that needs more than one pass");
  sub->add_option("--chip", args->chip, "Chip: GA100 (A100), GH100 (H100/H200) or GB100 (B200)")->required();
  sub->add_flag("--sampling", args->sampling, "The PM-sampling set (time series) instead of the range-profiler set");
  sub->add_option("--metric", args->metrics,
                  "Check these metrics as one set instead of the default set (repeatable; one pass required)");
  sub->callback([args] {
    check_name("--chip", args->chip, "", "a chip name: GA100 (A100), GH100 (H100/H200) or GB100 (B200)");
    for (const auto& m : args->metrics)
      check_name("--metric", m, "_.", "a metric name: letters, digits, '_' and '.' (e.g. sm__cycles_active.avg)");
#if !defined(HAVE_KVF_CUPTI)
    std::fprintf(stderr, "kvf metrics: not available: this build has no CUDA/CUPTI (configure with nvcc present)\n");
    exit_with(kExitUsage);
#else
    namespace kc = kvf::cupti;
    kc::require_study_chip(args->chip);  // UsageError -> exit 2
    const auto profiler = args->sampling ? kc::Profiler::pm_sampling : kc::Profiler::range;
    kc::MetricSet set = kc::default_set(args->chip, profiler);
    if (!args->metrics.empty()) {
      set.name = "custom";
      set.purpose = "metrics given with --metric";
      set.metrics = args->metrics;
      set.one_pass = true;
    }
    const kc::SetCheck check = kc::check_set(args->chip, set);
    if (!check.ok()) throw UsageError(check.problem());

    std::printf("chip %s: CUPTI Profiler Host API (no GPU needed)\n", check.chip.c_str());
    std::printf("set %s: %s profiler, %zu metrics, valid, %zu pass%s (one pass required)\n", set.name.c_str(),
                kc::to_string(set.profiler), set.metrics.size(), check.passes, check.passes == 1 ? "" : "es");
    std::printf("  %s\n", set.purpose.c_str());
    std::size_t w = 6;
    for (const auto& m : check.metrics) w = std::max(w, m.name.size());
    std::printf("  %-*s  %-5s  %-18s  %s\n", static_cast<int>(w), "METRIC", "VALID", "UNIT", "DESCRIPTION");
    for (const auto& m : check.metrics)
      std::printf("  %-*s  %-5s  %-18s  %s\n", static_cast<int>(w), m.name.c_str(), m.valid ? "yes" : "no",
                  m.unit.c_str(), m.description.c_str());
    exit_with(kExitOk);
#endif
  });
}

}  // namespace kvf::cli
