#include "model_inputs.hpp"

#include <cmath>

#include "kvf/errors.hpp"

namespace kvf::cli {

ModelInputs load_model_inputs(const std::string& gpus_path, const std::string& gpu, const std::string& models_path,
                              const std::string& model, const std::string& calibrate_dir) {
  ModelInputs in;
  const auto gpus = report::load_gpus(gpus_path.empty() ? report::default_gpus_path() : gpus_path);
  in.gpu = report::find_gpu(gpus, gpu);
  in.shapes = report::load_shapes(models_path);
  in.model = static_cast<std::size_t>(&report::find_shape(in.shapes, model) - in.shapes.data());
  if (!calibrate_dir.empty()) {
    try {
      in.calibration = report::load_results(calibrate_dir);
    } catch (const UsageError& e) {
      throw UsageError("--calibrate " + std::string(e.what()));  // "--calibrate DIR: no such results directory"
    }
    // A CPU run prices a GPU's disk and remote tiers (the host's side), never its memory, GEMM or link.
    in.cpu_calibration = in.calibration.backend == "cpu";
    // A GPU run's ceilings are its own GPU's: they price --gpu only when it is that GPU.
    if (!in.cpu_calibration) {
      const report::GpuSpec* ran_on = report::gpu_for_device(gpus, in.calibration.device);
      if (ran_on && ran_on->name != in.gpu.name)
        throw UsageError("--calibrate " + calibrate_dir + ": measured on " + in.calibration.device + " (" +
                         ran_on->name + "), not --gpu " + in.gpu.name +
                         ": its ceilings price that GPU only (give --gpu \"" + ran_on->name +
                         "\", or a directory measured on " + in.gpu.name + ")");
      if (!ran_on)
        in.calibration_note = "--calibrate " + calibrate_dir + ": measured on " + in.calibration.device +
                              ", which the GPU spec file names nowhere: its ceilings taken as " + in.gpu.name + "'s";
    }
    in.calibrated = report::calibrate(in.gpu, in.calibration, in.cpu_calibration);
    std::size_t ceilings = 0;
    for (const auto& d : in.calibrated)
      if (d.rfind("l2_mib", 0) != 0) ++ceilings;  // the L2 size alone is not a ceiling
    if (ceilings == 0 && in.cpu_calibration)
      throw UsageError("--calibrate " + calibrate_dir + ": a CPU run (" + in.calibration.device +
                       "), which prices only the disk and remote tiers of " + in.gpu.name +
                       " (a CPU's memory and GEMM ceilings do not price a GPU), and it has no file-tier or remote "
                       "rows");
    if (ceilings == 0)
      throw UsageError("--calibrate " + calibrate_dir + ": no stream read, GEMM ceiling or host copy rows to calibrate from");
    if (in.cpu_calibration)
      in.calibration_note = "memory, GEMM, host link, copy and launch figures: " + in.gpu.name + "'s spec sheet (" +
                            calibrate_dir + " is a CPU run: its ceilings do not price a GPU)";
  }
  return in;
}

CLI::Validator number_in(double lo, double hi, const std::string& allowed, bool whole) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number (allowed: " + allowed + ")";
        if (!(v >= lo && v <= hi)) return "'" + text + "' is out of range (allowed: " + allowed + ")";
        if (whole && v != std::floor(v)) return "'" + text + "' is not a whole number (allowed: " + allowed + ")";
        return "";
      },
      allowed);
}

CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string { return text.empty() ? "empty (expected " + what + ")" : ""; }, what);
}

}  // namespace kvf::cli
