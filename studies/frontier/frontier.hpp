// The frontier study's environment and its arm declarations. study.cpp parses and checks the flags into an
// Env, then builds the arm list from it (frontier_arms) and expands it; each arm_*.cpp holds one arm or a
// group of closely related arms: its Case subclasses and its kvf::Arm<Env> declaration.
//
// The declarations are built from the Env, not static: the model list, the X forms, the granularity
// arm's page size and the through-layers arm's prefix are runtime facts (the model file, --models,
// the backend), and an axis whose values are such facts keeps them when another flag replaces the grid.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvf/arms.hpp"
#include "kvf/backend.hpp"
#include "gemm_onednn.hpp"
#include "kvf/file_dir_flag.hpp"
#include "kvf/study.hpp"
#include "layers.hpp"
#include "models.hpp"
#include "transfer.hpp"

namespace kvf::frontier_study {

namespace fr = kvf::frontier;
namespace md = kvf::models;

inline constexpr std::uint64_t kSeed = 0xf00d;
inline constexpr int kPos0 = 4096;  // pages of the X arms sit at positions 4096 .. 4096 + T - 1

struct Env {
  Backend* be = nullptr;
  bool gpu = false, quick = false;

  // From the flags, checked by the study before any arm expands.
  std::vector<md::ModelShape> all;              // the model file
  std::vector<const md::ModelShape*> models;    // --models, else Llama-3.1-8B,DeepSeek-V3 (GPU: every model)
  std::vector<std::string> xdtypes;             // --xdtypes, else int8,int4
  std::vector<std::string> copy_sizes;          // --copy-sizes in bytes (empty: each arm's defaults)
  std::vector<int> prefix;                      // --prefix
  std::string file_dir = kvf::study::kFileDirDefault;  // --file-dir
  std::size_t file_bytes = 0;                   // --file-size (default 256 MiB; --quick 64 MiB)

  // Backend facts.
  double mem_avail = 0;                         // 60% of host memory
  std::size_t gpu_memory_bytes = 0;

  // Built on first use and shared by the cases that read them.
  std::map<std::string, std::shared_ptr<fr::LayerWeights>> layer_weights;  // by model: one synthetic layer
  std::shared_ptr<fr::DirectFile> tier_file;                               // the file tier's file

  const md::ModelShape& model(const std::string& name) const;
  std::vector<std::string> model_names(bool mla) const;  // the GQA (mla = false) or MLA models, in order
  const md::ModelShape* first_gqa() const;              // the model of the single-model arms
  fr::LayerWeights& weights(const md::ModelShape& m);
  // The tier file, written whole by the first case setup that reads it: --list never writes it. A file that
  // cannot be made there is bad input (the --file-dir line).
  const fr::DirectFile& file();
};

using Arm = kvf::Arm<Env>;

// The one list (study.cpp): ceiling arms always run and are not named by --arms.
kvf::ArmList<Env> ceiling_arms(const Env& env);
kvf::ArmList<Env> frontier_arms(const Env& env);

Arm gemm_ceiling_arm(const Env& env);
Arm x_arm(const Env& env);
Arm xq_arm(const Env& env);
Arm layers_arm(const Env& env);
Arm mla_arm(const Env& env);
Arm copy_arm(const Env& env);
Arm granularity_arm(const Env& env);
Arm file_arm(const Env& env);
Arm file_page_arm(const Env& env);
Arm overlap_arm(const Env& env);
Arm link_arm(const Env& env);

// ---------------------------------------------------------------- helpers the arms share
// The row's "arm" column: the arm's name, or the variants it runs (memcpy/dram_copy, mla_latent/mla_up).
inline kvf::Axis arm_axis(std::vector<std::string> values, std::string doc = "the row's arm column") {
  return {.name = "arm", .doc = std::move(doc), .cpu = values, .quick = values, .fixed = values};
}
inline std::string str(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
inline std::string i2s(long long v) { return std::to_string(v); }
std::vector<std::string> texts(const std::vector<int>& v);

// Estimated seconds for a case whose run takes `t` seconds: setup/verify + warm-up and samples of
// both modes under the default stop rule (5 samples at least, 0.5 s per mode at most; 0.1 s with --quick, as the
// harness samples: it moves the estimate for another --budget).
double est(const Env& env, double t, double setup_s, int modes = 2);

// One layer's bf16 K/V of a page of T tokens.
std::size_t kv_page_bytes(const md::ModelShape& m, int T);
// Derived columns of a page of T tokens recomputed P at a time through L layers.
std::vector<Param> page_columns(const md::ModelShape& m, int T, int P, int L);

Buffer host_view(const void* p, std::size_t bytes);
Buffer sub(const Buffer& b, std::size_t off, std::size_t bytes);
BufferHandle upload(Backend& be, const void* p, std::size_t bytes);  // a device copy of host data
void download(Backend& be, void* p, const BufferHandle& d, std::size_t bytes);

// The launch axis of the GPU recompute arms (kvf/launch_axis.hpp): appended to an arm's axes on the GPU only, so
// CPU rows keep their columns.
std::vector<kvf::Axis> launch_axes(std::vector<kvf::Axis> axes, const Env& env);
// A GPU grid with the launch axis: every point eager, and a graph row beside the eager one at one page of at most
// 128 tokens, where the H100 run's recompute was flat (about 16 us against a 6 us bound): launch-bound points.
kvf::Grid launch_rows(const kvf::Grid& g);
// Case names from `pattern`, the graph row's with "/graph" appended (the eager row keeps its old name).
std::function<std::string(const kvf::Point&)> launch_named(std::string pattern);

inline const kvf::CeilingRef kGemmCeiling{"frontier", {{"arm", "gemm_ceiling"}}, "tflops"};

// The note of a CPU recompute row: which kernel its product ran (oneDNN's, or the OpenBLAS fallback and why).
inline std::string gemm_kernel_note(const fr::Bf16Gemm& g) { return "GEMM kernel " + g.impl() + " (ISA " + g.isa() + ")"; }
// The `gemm` column of a CPU recompute row once its product is built: the plan says onednn_bf16_fp32out; a host
// whose oneDNN has no bf16 matmul (AVX2 without AVX-512) runs the OpenBLAS fallback, and the row must say so.
// The fallback reads its weights widened to fp32: twice the bf16 bytes the case counted for its weight_values
// (its X, widened per call into a buffer in cache, is still counted once at bf16).
inline void set_gemm_column(Case& c, const fr::Bf16Gemm& g, double weight_values) {
  const bool fp32 = g.isa() == "openblas_fp32";
  kvf::set_param(c.params, "gemm", fp32 ? "openblas_fp32" : "onednn_bf16_fp32out");
  static const std::string said = "; bytes count the weights at fp32 (the OpenBLAS fallback reads them widened)";
  if (fp32 && c.note.find(said) == std::string::npos) {  // once, should a case be set up again
    c.bytes += 2.0 * weight_values;
    c.note += said;
  }
}

}  // namespace kvf::frontier_study
