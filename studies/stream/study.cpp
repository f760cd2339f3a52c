// bench_stream: the stream study, the bandwidth ceilings every other study states its figures against.
//
// Run:   build/bin/bench_stream [--size 512MiB] [--arms read,copy] [--quick] [--out DIR]   (or: kvf run --study stream)
// The arms are declared in arms_cpu.cpp and arms_gpu.cpp and listed once here; README.md says how to read them.
#include <algorithm>

#include "kvf/errors.hpp"
#include "kvf/host_memory.hpp"
#include "kvf/study.hpp"
#include "kvf/units.hpp"
#include "stream_study.hpp"

namespace kvf::stream_study {

StreamCase::StreamCase(const StreamEnv& env, std::size_t array_bytes, double moved_bytes) : arrays(env.arrays) {
  bytes = moved_bytes;
  ceiling = CeilingRef{"stream", {{"op", "read"}}, "gbps"};
  note = env.note;
  // Fill + verify + (warm-up + ~budget) per mode (--quick: 0.1 s budget).
  est_seconds = 0.3 + static_cast<double>(array_bytes) / 2e9 + 2 * (env.quick ? 0.2 : 0.6);
}

std::string sized_name(const Point& p, const std::string& variant) {
  // Exactly: --size 1.5MiB was named "1MiB", and 1000000 bytes "0MiB".
  return p["op"] + (variant.empty() ? "" : "/" + variant) + "/" +
         exact_size_name(static_cast<unsigned long long>(p.integer("array_bytes")));
}

Product sized(const std::string& op, std::size_t array_bytes, std::vector<std::pair<std::string, std::vector<std::string>>> axes) {
  Product p;
  p.lists = {{"op", {op}}, {"array_bytes", {std::to_string(array_bytes)}}};
  p.lists.insert(p.lists.end(), axes.begin(), axes.end());
  return p;
}

namespace {

// Every arm of the study, CPU and GPU: what --arms takes and --help lists.
std::vector<std::string> all_arm_names() {
  std::vector<std::string> names = ArmList<StreamEnv>(cpu_arms()).names();
  for (const auto& n : ArmList<StreamEnv>(gpu_arms()).names())
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  return names;
}

class StreamStudy final : public Study {
 public:
  std::string name() const override { return "stream"; }

  void add_options(StudyFlags& flags) override {
    flags_ = flags;
    flags.text("--size", size_text_,
               "bytes per array, at least 4 KiB, rounded down to 64 bytes; two arrays within 70% of "
               "host memory (and 90% of GPU memory), e.g. 512MiB (default: 8x LLC within 256 MiB "
               ".. 2 GiB on CPU, 1 GiB on GPU; --quick: 4x LLC, at most 1 GiB)");
    flags.list("--arms", arms_, "arms to run (default all): " + join_names(all_arm_names(), ","));
  }

  std::vector<std::unique_ptr<Case>> cases(const StudyContext& ctx) override {
    check_arm_names("--arms", arms_, all_arm_names());
    Backend& be = *ctx.backend;
    const bool gpu = be.name() == "cuda";
#if !defined(KVF_HAVE_CUDA)
    if (gpu) throw UsageError("--backend cuda: this build of bench_stream has no CUDA kernels");
#endif
    env_.quick = ctx.quick;
    env_.array_bytes = array_bytes(be, ctx.quick);
    const std::size_t llc = be.info().llc_bytes ? be.info().llc_bytes : std::size_t{32} << 20;
    env_.note = env_.array_bytes < 4 * llc ? "arrays smaller than 4x LLC: partly cache, not memory" : "";
    const ArmList<StreamEnv> arms(gpu ? gpu_arms() : cpu_arms());
    check_arms_here("--arms", arms_, arms.names(), gpu);
    std::vector<std::unique_ptr<Case>> out;
    for (const auto& arm : arms.all())
      if (arms_.empty() || std::find(arms_.begin(), arms_.end(), arm.name) != arms_.end())
        arms.add_cases(arm, Target{gpu, ctx.quick}, {}, env_, out);
    return out;
  }

 private:
  // --size checked against the machine, or the default: 8x LLC within 256 MiB .. 2 GiB on the CPU (--quick 4x
  // LLC, at most 1 GiB), at least 1 GiB on the GPU; whole cache lines and 16-byte vectors.
  std::size_t array_bytes(const Backend& be, bool quick) const {
    const auto& info = be.info();
    const std::size_t llc = info.llc_bytes ? info.llc_bytes : std::size_t{32} << 20;
    std::size_t bytes;
    // Given but empty is refused, never taken for "not given".
    if (flags_.given("--size")) {
      if (size_text_.empty()) throw UsageError("--size '': a size is needed, e.g. 512MiB (at least 4 KiB)");
      bytes = parse_bytes(size_text_, "--size");
    } else if (be.name() == "cuda") {
      bytes = std::max<std::size_t>(std::size_t{1} << 30, 8 * llc);
    } else {
      // Capped (kvf/host_memory.hpp): a VM reporting a 480 MiB socket L3 would otherwise stream 3.75 GiB arrays.
      bytes = quick ? past_llc_bytes(llc, 4, 0, kPoolCapBytes)
                    : past_llc_bytes(llc, 8, std::size_t{256} << 20, 2 * kPoolCapBytes);
    }
    bytes = bytes / 64 * 64;
    // The value as typed when there is one (a message names what the user wrote), else the default's size.
    const auto shown_size = [&](std::size_t b) { return size_text_.empty() ? format_bytes(static_cast<double>(b)) : size_text_; };
    if (bytes < 4096)
      throw UsageError("--size " + size_text_ +
                       ": must be at least 4 KiB (memory rather than cache takes 4x the LLC, " +
                       format_bytes(4.0 * llc) + " here; smaller arrays run, and their rows say they measured cache)");
    const std::size_t host_mem = host_memory_bytes();
    if (host_mem && 2 * bytes > host_mem * 7 / 10)
      throw UsageError("--size " + shown_size(bytes) + ": two arrays need more than 70% of host memory (" +
                       format_bytes(static_cast<double>(host_mem)) + ")");
    if (be.name() == "cuda" && info.memory_bytes && 2 * bytes > info.memory_bytes * 9 / 10)
      throw UsageError("--size " + shown_size(bytes) + ": two arrays exceed 90% of GPU memory (" +
                       format_bytes(static_cast<double>(info.memory_bytes)) + ")");
    return bytes;
  }

  StreamEnv env_;
  std::string size_text_;
  std::vector<std::string> arms_;
  StudyFlags flags_;  // its command line outlives cases(): bench_main owns it
};

}  // namespace
}  // namespace kvf::stream_study

int main(int argc, char** argv) {
  kvf::stream_study::StreamStudy study;
  return kvf::bench_main(argc, argv, study);
}
