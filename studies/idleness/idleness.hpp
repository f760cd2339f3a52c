// The idleness study's environment and arms (studies/idleness/README.md). The study (idleness.cpp) parses and
// checks the flags into an Env, the arms read it: each arm file declares its kvf::Arm<Env> and its cases.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode.hpp"
#include "kvf/arms.hpp"
#include "kvf/file_dir_flag.hpp"
#include "kvf/launch_axis.hpp"
#include "kvf/model_shapes.hpp"
#include "kvf/results.hpp"
#include "kvf/study.hpp"
#include "layers.hpp"
#include "models.hpp"
#include "text.hpp"

#if defined(KVF_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kvf::idleness {

namespace dc = kvf::decode;
namespace fr = kvf::frontier;
namespace md = kvf::models;

inline constexpr std::uint64_t kSeed = 0x1d1e;

// What the arms read: the flags once checked, facts of this backend and run, and buffers the cases share.
struct Env {
  std::string out_dir;  // the results directory, always explicit (main()): ceilings are read and counters.csv written there
  bool gpu = false;
  bool quick = false;                  // --quick: no graph rows (the launch axis's eager rows only)
  std::vector<md::ModelShape> shapes;  // the model shape file
  std::string model;                   // the model the arms expand for: the study takes --models one at a time
  int layers = 1;                      // L of every step (--layers, else the axis default for the target)
  int first_context = 1024;            // the prefill chunk's resident context: the first context of the sweep
  bool user_shape = false;             // --batches and --contexts both given: a step that cannot fit is bad input
  double usable_bytes = 0;             // memory one case may take (device or host)
  std::string device_name;             // the chip column of counters.csv rows
  // CPU hardware counters (perf events), probed once.
  bool perf_ok = false;
  std::string perf_reason;
  // GPU counters (CUPTI), collected once per case after its hot samples.
  bool no_counters = false;
  std::string metric_set = "decode_idleness";
  std::vector<std::string> metrics;
  bool counters_unavailable_said = false;
  // GPU co-run on SM partitions (green contexts), probed once before the arms expand (probe_green).
  std::optional<int> green_sms;  // --green-sms; absent: about a quarter of the device
  int green_request = 0, green_decode_sms = 0, green_bg_sms = 0;
  std::string green_skip;  // non-empty: why the green-context cases are one skipped row
  // The CPU co-run's bg_file tier file (--file-dir), checked once before the arms expand (probe_file_dir).
  std::string file_dir = kvf::study::kFileDirDefault;
  std::string file_skip;  // non-empty: the default directory cannot hold it; the bg_file row is skipped with this

  const md::ModelShape& shape(const std::string& name) const;
  // One synthetic layer per model, built on first use and shared by every case of the model.
  std::shared_ptr<fr::LayerWeights> weights(const md::ModelShape& m);

 private:
  std::map<std::string, std::shared_ptr<fr::LayerWeights>> weights_;
};

using Arm = kvf::Arm<Env>;

// ---------------------------------------------------------------- the arms (one file each)
Arm gemm_ceiling_arm();  // ceilings.cpp
Arm read_ceiling_arm();  // ceilings.cpp
// gpu: the arms of a GPU target carry the launch axis (kvf/launch_axis.hpp); CPU rows have no launch column.
Arm decode_arm(bool gpu);   // decode.cpp
Arm prefill_arm(bool gpu);  // prefill.cpp
Arm corun_arm();         // corun.cpp
// The bg_file row's directory (corun.cpp): a --file-dir the tier cannot use is bad input (exit 2); the default
// directory that cannot be used makes the row a skipped one (env.file_skip). Checked only when `used`.
void probe_file_dir(Env& env, bool given, bool used);

// Axes several arms share (decode.cpp): the same flag reaches each arm through the same declaration.
kvf::Axis arm_axis(const std::string& arm, bool in_quick);  // the "arm" column: one value
kvf::Axis model_axis();
kvf::Axis batch_axis();
kvf::Axis context_axis();
kvf::Axis layers_axis();
// The axes, with the launch axis appended on the GPU.
std::vector<kvf::Axis> launch_axes(std::vector<kvf::Axis> axes, bool gpu);

// The decode step at point p (model, batch, context, layers): decode's rows and the co-run's steps (with
// `background`); CPU in decode.cpp, GPU in decode_gpu.cpp.
std::unique_ptr<kvf::Case> make_decode_case(const kvf::Point& p, Env& env, const std::string& background);
#if defined(KVF_HAVE_CUDA)
// launch: "eager", or "graph" (background none only; a co-run is a skipped row that says why).
std::unique_ptr<kvf::Case> make_decode_gpu_case(const md::ModelShape& m, int B, int C, int L,
                                                 const std::string& background, const std::string& launch, Env& env);
// The SM split of the green-context co-run (corun.cpp): sets env.green_request/..._sms or env.green_skip.
void probe_green(Env& env);
#endif

// ---------------------------------------------------------------- shared arithmetic and notes (notes.cpp; num, i2s: text.hpp)
std::string ctx_name(long long c);  // 4096 -> "4K": case names
// Seconds a case takes: setup + warm-up and samples of each mode under the default stop rule (0.5 s per mode at
// most; 0.1 s with --quick, as the harness samples: it moves the estimate for another --budget).
double est(const Env& env, double t, double setup_s, int modes = 2);
// Seconds of the prefill check's double-precision reference (a few rows, ~1 ns per multiply-add).
double prefill_verify_s(const md::ModelShape& m, int T, int N);
// The ceilings of this run every step's idleness figures divide by; --case-filter keeps them for a kept step.
std::vector<kvf::CeilingRef> idle_ceilings();
kvf::CeilingRef gemm_ceiling_ref();       // the best GEMM row (CPU: oneDNN bf16 where it beats OpenBLAS fp32)
kvf::CeilingRef gemm_fp32_ceiling_ref();  // CPU: the OpenBLAS fp32 rows, the ceiling of the fp32 twins
kvf::CeilingRef read_ceiling_ref();
// The axes that make one decode step: a co-run row is stated against the "decode alone" row that shares them.
inline constexpr const char* kStepAxes[] = {"model", "batch", "context", "layers", kvf::study::kLaunchAxis};
// A ceiling measured earlier in this run (rows are written as each case ends), in FLOP/s or bytes/s; 0 if absent.
double ceiling_value(const Env& env, const kvf::CeilingRef& ref, const std::string& mode);
// CPU idleness of a measured case: the note text, and its rows appended to counters.csv. `once` runs one
// more step under the perf counters.
std::string cpu_after(Env& env, const kvf::Case& c, const kvf::Summary& s, const std::string& mode,
                      const std::function<void()>& once);

#if defined(KVF_HAVE_CUDA)
// ---------------------------------------------------------------- GPU counters (counters_gpu.cpp)
// Whether the range profiler can run here (said once on stderr when not); bad metrics are bad input (exit 2).
void probe_counters(Env& env);
// The counters phases of a GPU case, once, after its hot samples: "; counters: ..." for its note.
std::string counters_note(Env& env, bool& counted, const std::string& case_name, const std::string& mode,
                          kvf::Backend& be, const std::function<void(cudaStream_t)>& step);
#endif

}  // namespace kvf::idleness
