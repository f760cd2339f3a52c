// What runs beside a co-run's decode step (the corun arm's backgrounds), and how a row shows that it really ran
// beside the step.
//
//   recompute  recompute one page of T=128 tokens from bf16 X per unit (the frontier study's x arm)
//   copy       CPU: copy a 512 KiB page between two 128 MiB DRAM pools per unit (memcpy, one thread);
//              GPU: a pinned 512 KiB H2D copy then a 512 KiB D2H copy per unit on a side stream (the host link)
//   file       CPU: read a 512 KiB page of a 64 MiB tier file with O_DIRECT per unit (the SSD tier, --file-dir)
//
// CPU: one background thread loops over units for the whole case (CpuBackground). The timed step reads the
// thread's unit count and whether it is in its loop at its start and end (two atomic loads): a row whose
// background was not in its loop across every step, or completed no unit while the steps ran, measured no co-run
// and says "co-run INVALID" in its note (the report predicts no such row).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "decode.hpp"
#include "models.hpp"
#include "transfer.hpp"

namespace kvf::idleness {

// The background of a co-run row by its `background` value (green_recompute runs recompute; none and the alone
// rows none).
enum class Background { none, recompute, copy, file };
Background background_of(const std::string& background);

inline constexpr std::size_t kBgPageBytes = std::size_t(512) << 10;   // a copy or file unit
inline constexpr std::size_t kBgCopyPool = std::size_t(128) << 20;    // CPU copy: each of the two pools (DRAM)
inline constexpr std::size_t kBgFileBytes = std::size_t(64) << 20;    // file: the tier file
inline constexpr int kBgRecomputeTokens = 128;                        // recompute: one page per unit

// The marker of a row whose background did not overlap its steps (the report skips such rows).
inline constexpr const char* kNoCorun = "co-run INVALID";

// One unit of each kind, in words, for the notes.
std::string unit_words(Background b, bool gpu);

class CpuBackground {
 public:
  CpuBackground(Background kind, const kvf::models::ModelShape& m, std::string file_dir, std::uint64_t seed);
  ~CpuBackground();
  CpuBackground(const CpuBackground&) = delete;
  CpuBackground& operator=(const CpuBackground&) = delete;

  // Makes the unit's buffers (or tier file) in the calling thread, so their errors are the caller's, then starts
  // the loop on a thread of its own (one OpenMP thread: it runs beside the step's team).
  void start();
  void stop();
  // Around each timed step: two atomic loads and a clock read each.
  void step_begin();
  void step_end();
  // The mode's figures: units/s over the mode, units while the steps ran, and the overlap verdict; resets the
  // counts for the next mode. Throws std::runtime_error when the thread failed.
  std::string note();

 private:
  void loop();
  void unit();

  const Background kind_;
  const kvf::models::ModelShape m_;
  const std::string dir_;
  const std::uint64_t seed_;
  std::unique_ptr<kvf::decode::RecomputeState> rc_;
  std::vector<unsigned char> a_, b_;
  std::unique_ptr<kvf::frontier::DirectFile> file_;
  void* page_ = nullptr;  // O_DIRECT destination, 4096-aligned
  std::size_t off_ = 0;

  std::thread th_;
  std::atomic<bool> stop_{false}, looping_{false};
  std::atomic<long> units_{0};
  std::string error_;  // written by the thread before looping_ drops

  // The mode's accounting (the harness calls run() from one thread).
  using Clock = std::chrono::steady_clock;
  Clock::time_point mode_t0_{}, step_t0_{};
  long mode_u0_ = 0, step_u0_ = 0;
  bool step_live0_ = false;
  long steps_ = 0, steps_live_ = 0, steps_with_unit_ = 0, units_in_steps_ = 0;
  double step_s_ = 0;
};

}  // namespace kvf::idleness
