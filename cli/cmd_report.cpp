// `kvf report DIR...`: reads one or more results directories (cases.csv, samples.csv, counters.csv,
// meta.json; a `kvf residency` replay in DIR/residency/; bench_attention's output in DIR/attention/) or a replay's
// own directory, and writes <first DIR>/report/ (or --out): report.md, report.html, charts (gnuplot .dat/.gp, SVG
// and PNG). The logic lives in analysis/report (kvf/report.hpp); this file is flags and output.
//   exit 0: report written (a partial directory is reported with what is missing), 2: bad input.
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kvf/errors.hpp"
#include "kvf/install_paths.hpp"
#include "kvf/report.hpp"
#include "model_inputs.hpp"
#include "read_limits.hpp"

namespace kvf::cli {

void add_report(CLI::App& app) {
  struct Args {
    std::vector<std::string> dirs;
    report::ReportOptions opts;
    bool no_charts = false;
    double residency_hbm_gib = 0;  // 0: not given (the value is checked > 0)
  };
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "report",
      "Report from results directories: verdicts, crossovers, frontier map, measured vs predicted; report.md, "
      "report.html and gnuplot charts in DIR/report/ (docs/report.md)");
  sub->add_option("dirs", args->dirs,
                  "Results directories; several (two GPUs, CPU and GPU) overlay in one report. Beside a directory's files: "
                  "DIR/residency/ (kvf residency --out) adds a Residency section, DIR/attention/ (bench_attention --out) "
                  "an Attention quality section")
      ->required();
  sub->add_option("--out", args->opts.out_dir, "Report directory (default: <first DIR>/report)")
      ->check(non_empty("a directory (leave the flag out for <first DIR>/report)"));
  sub->add_flag("--no-charts", args->no_charts, "Write the .dat/.gp chart files but do not run gnuplot");
  auto* gnuplot = sub->add_option("--gnuplot", args->opts.gnuplot,
                                  "gnuplot executable (given: it must run; by default a missing gnuplot leaves the "
                                  ".dat/.gp files with a warning)")
                      ->capture_default_str()
                      ->check(non_empty("a gnuplot executable"));
  sub->add_option("--gpus", args->opts.gpus_path, "GPU spec file (default: gpus.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)");
  sub->add_option("--models-file", args->opts.models_path, "Model shape file (default: models.json in $KVF_DATA_DIR, <prefix>/share/kvfrontier or data/)");
  sub->add_option("--model", args->opts.model, "Model of the frontier map and the predicted crossovers: name, alias or Hugging Face id from data/models.json, case-blind")
      ->capture_default_str();
  sub->add_option("--spec-gpu", args->opts.spec_gpu, "GPU whose spec sheet the map predicts when no GPU results are given: name or alias from data/gpus.json, case-blind")
      ->capture_default_str();
  sub->add_option("--residency-hbm-gib", args->residency_hbm_gib,
                  "HBM budget (GiB) of the Residency section's answer table: the nearest budget the replay swept "
                  "(default: the middle of the sweep)")
      ->check(number_in(std::numeric_limits<double>::denorm_min(), 1e9, "an HBM budget in GiB, > 0 and <= 1e9"));
  auto limits = add_read_limit_flags(sub);
  sub->callback([args, limits, gnuplot] {
    limits->apply();
    // A gnuplot named on purpose that cannot run is bad input, not the default's quiet fallback.
    if (gnuplot->count() > 0 && !args->no_charts) {
      if (!runnable(args->opts.gnuplot))
        throw UsageError("--gnuplot " + args->opts.gnuplot + ": not an executable (allowed: a gnuplot that runs; "
                         "--no-charts writes the .dat/.gp files without one)");
    }
    args->opts.charts = !args->no_charts;
    if (args->residency_hbm_gib > 0) args->opts.residency_hbm_gib = args->residency_hbm_gib;
    // Flags naming a model or a GPU are checked up front: a typo is bad input (exit 2), not a quiet gap.
    // An alias (a Hugging Face id, "h200") is replaced by the canonical name the report then records.
    args->opts.model = report::find_shape(report::load_shapes(args->opts.models_path), args->opts.model).name;
    args->opts.spec_gpu =
        report::find_gpu(report::load_gpus(args->opts.gpus_path.empty() ? report::default_gpus_path() : args->opts.gpus_path),
                         args->opts.spec_gpu, "--spec-gpu")
            .name;
    const auto sets = report::load_report_inputs(args->dirs);  // a replay's own directory too
    const auto res = report::write_report(sets, args->opts);
    for (const auto& s : sets)
      for (const auto& w : s.warnings) std::fprintf(stderr, "kvf report: warning: %s\n", w.c_str());
    for (const auto& w : res.warnings) std::fprintf(stderr, "kvf report: warning: %s\n", w.c_str());
    std::size_t missing = 0;
    for (const auto& s : sets) missing += s.missing.size();
    if (missing)
      std::fprintf(stderr, "kvf report: %zu missing input(s) listed under \"What is missing\" in report.md\n", missing);
    std::size_t images = 0;
    for (const auto& f : res.files)
      if (f.size() > 4 && (f.compare(f.size() - 4, 4, ".svg") == 0 || f.compare(f.size() - 4, 4, ".png") == 0)) ++images;
    std::printf("kvf report: %s/report.md, report.html, %zu chart images%s\n", res.dir.c_str(), images,
                res.gnuplot_ran ? "" : " (gnuplot did not run: .dat/.gp files only)");
    exit_with(kExitOk);
  });
}

}  // namespace kvf::cli
