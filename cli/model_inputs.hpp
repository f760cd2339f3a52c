// What `kvf model` and `kvf residency` both read: a GPU spec (data/gpus.json), a model shape (data/models.json)
// and, with --calibrate DIR, the measured ceilings of a results directory in place of the spec's peaks; and the
// flag validators they share.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvf/report.hpp"

namespace kvf::cli {

struct ModelInputs {
  report::GpuSpec gpu;
  std::vector<report::Shape> shapes;
  std::size_t model = 0;  // index into shapes
  report::ResultSet calibration;  // loaded when --calibrate was given
  std::vector<std::string> calibrated;  // the fields replaced, "field <- source"
  bool cpu_calibration = false;  // --calibrate named a CPU run: only the disk and remote tiers came from it
  std::string calibration_note;  // what a CPU run left to the spec, one line ("" otherwise)
  const report::Shape& shape() const { return shapes[model]; }
};
// UsageError naming the flag for an unknown GPU or model, an unreadable spec file, or a --calibrate directory
// without any stream read, GEMM ceiling or host copy row.
ModelInputs load_model_inputs(const std::string& gpus_path, const std::string& gpu, const std::string& models_path,
                              const std::string& model, const std::string& calibrate_dir);

// Flag values are checked where CLI11 parses them, so a bad one is one line naming the flag and the value
// (ValidationError -> exit 2) before any file is read. Written as !(in range): "nan" is refused too.
CLI::Validator number_in(double lo, double hi, const std::string& allowed, bool whole = false);
CLI::Validator non_empty(const std::string& what);

}  // namespace kvf::cli
