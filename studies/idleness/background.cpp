#include "background.hpp"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "kvf/file_dir_flag.hpp"
#include "text.hpp"

namespace kvf::idleness {

namespace dc = kvf::decode;

Background background_of(const std::string& background) {
  if (background == "recompute" || background == "green_recompute") return Background::recompute;
  if (background == "copy") return Background::copy;
  if (background == "file") return Background::file;
  return Background::none;
}

std::string unit_words(Background b, bool gpu) {
  switch (b) {
    case Background::recompute: return "recompute pages (T=128, 1 page per call)";
    case Background::copy:
      return gpu ? "copies of 512 KiB pinned H2D then D2H (the host link)"
                 : "512 KiB page copies between two 128 MiB DRAM pools (memcpy, one thread)";
    case Background::file: return "512 KiB O_DIRECT reads of a 64 MiB tier file (one thread)";
    case Background::none: break;
  }
  return "none";
}

CpuBackground::CpuBackground(Background kind, const kvf::models::ModelShape& m, std::string file_dir,
                             std::uint64_t seed)
    : kind_(kind), m_(m), dir_(std::move(file_dir)), seed_(seed) {}

CpuBackground::~CpuBackground() {
  stop();
  std::free(page_);
}

void CpuBackground::start() {
  switch (kind_) {
    case Background::recompute:
      rc_ = std::make_unique<dc::RecomputeState>(dc::make_recompute_state(m_, kBgRecomputeTokens, 1, seed_));
      break;
    case Background::copy:
      a_.assign(kBgCopyPool, 1);  // written: every page is backed before the loop starts
      b_.assign(kBgCopyPool, 2);
      break;
    case Background::file:
      file_ = kvf::study::make_tier_file(dir_, kBgFileBytes, seed_);
      page_ = std::aligned_alloc(kvf::frontier::kDirectAlign, kBgPageBytes);
      if (!page_) throw std::bad_alloc();
      break;
    case Background::none: return;
  }
  stop_ = false;
  looping_ = true;  // before the thread exists: a step right after start() finds it in its loop
  th_ = std::thread([this] { loop(); });
}

void CpuBackground::stop() {
  stop_ = true;
  if (th_.joinable()) th_.join();
}

void CpuBackground::unit() {
  switch (kind_) {
    case Background::recompute: dc::recompute_cpu(*rc_); break;
    case Background::copy:
      std::memcpy(b_.data() + off_, a_.data() + off_, kBgPageBytes);
      off_ = (off_ + kBgPageBytes) % kBgCopyPool;
      break;
    case Background::file:
      file_->read(off_, kBgPageBytes, page_);
      off_ = (off_ + kBgPageBytes) % file_->bytes();
      break;
    case Background::none: break;
  }
}

void CpuBackground::loop() {
  omp_set_num_threads(1);  // one background thread: the unit runs beside the decode step's team
  try {
    while (!stop_) {
      unit();
      ++units_;
    }
  } catch (const std::exception& e) {
    error_ = e.what();
  }
  looping_ = false;
}

void CpuBackground::step_begin() {
  step_t0_ = Clock::now();
  if (mode_t0_ == Clock::time_point{}) {
    mode_t0_ = step_t0_;
    mode_u0_ = units_.load();
  }
  step_u0_ = units_.load();
  step_live0_ = looping_.load();
}

void CpuBackground::step_end() {
  const long u = units_.load();
  const bool live = looping_.load();
  step_s_ += std::chrono::duration<double>(Clock::now() - step_t0_).count();
  ++steps_;
  if (step_live0_ && live) ++steps_live_;
  if (u > step_u0_) ++steps_with_unit_;
  units_in_steps_ += u - step_u0_;
}

std::string CpuBackground::note() {
  if (!looping_ && th_.joinable()) th_.join();
  if (!error_.empty()) throw std::runtime_error("background " + unit_words(kind_, false) + " failed: " + error_);
  const double el = std::chrono::duration<double>(Clock::now() - mode_t0_).count();
  const long units = units_.load() - mode_u0_;
  // The recompute row's figure keeps the words it had before the other backgrounds.
  std::string note = kind_ == Background::recompute
                         ? "background recompute pages_per_s=" + num(units / el) + " (T=128, 1 page per call)"
                         : "background " + unit_words(kind_, false) + ": units_per_s=" + num(units / el);
  note += " over the mode; while the steps ran: " + i2s(units_in_steps_) + " units in " + num(step_s_, 3) + " s (" +
          num(step_s_ > 0 ? units_in_steps_ / step_s_ : 0) + "/s), a unit completed during " +
          i2s(steps_with_unit_) + " of " + i2s(steps_) + " steps; the background thread was in its loop across " +
          i2s(steps_live_) + " of " + i2s(steps_) + " steps (warm-up included)";
  if (steps_live_ < steps_)
    note += "; " + std::string(kNoCorun) + ": the background was not running across every step";
  else if (units_in_steps_ == 0)
    note += "; " + std::string(kNoCorun) + ": the background completed no unit while the steps ran";
  mode_t0_ = {};
  steps_ = steps_live_ = steps_with_unit_ = units_in_steps_ = 0;
  step_s_ = 0;
  return note;
}

}  // namespace kvf::idleness
