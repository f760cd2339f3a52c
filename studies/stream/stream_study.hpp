// The stream study's environment and arms: the bandwidth ceilings every other study states its figures
// against. The arms are listed once, in stream_arms() (study.cpp); each arm file declares its arms.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvf/arms.hpp"
#include "kvf/backend.hpp"

namespace kvf::stream_study {

inline constexpr std::uint64_t kSeed = 0x5eed;

// Buffers of the case being measured; released at teardown so only one case's memory is live.
struct Arrays {
  BufferHandle a, b;
  std::uint64_t sink = 0;
  void reset() {
    a.reset();
    b.reset();
  }
};

struct StreamEnv {
  std::size_t array_bytes = 0;  // --size, or the default from the LLC; whole cache lines
  std::string note;             // carried to every row (arrays smaller than 4x LLC)
  bool quick = false;
  std::shared_ptr<Arrays> arrays = std::make_shared<Arrays>();
};
using StreamArm = Arm<StreamEnv>;

// Base of every stream case: bytes moved per run, the read ceiling, the note and the time estimate.
class StreamCase : public Case {
 public:
  // array_bytes: the size of the case's arrays (the time estimate); moved_bytes: what one run() moves.
  StreamCase(const StreamEnv& env, std::size_t array_bytes, double moved_bytes);
  void teardown(Backend&) override { arrays->reset(); }

 protected:
  std::shared_ptr<Arrays> arrays;
};

// "{op}[/{variant}]/{MiB}MiB", the case names the stream study has always used.
std::string sized_name(const Point& p, const std::string& variant);
// The op and array size every stream point carries, before the arm's own axes.
Product sized(const std::string& op, std::size_t array_bytes, std::vector<std::pair<std::string, std::vector<std::string>>> axes);

std::vector<StreamArm> cpu_arms();
std::vector<StreamArm> gpu_arms();     // empty in a build without CUDA; ends with launch_arms()
std::vector<StreamArm> launch_arms();  // arms_launch_gpu.cpp

}  // namespace kvf::stream_study
