// The co-run's CPU backgrounds (studies/idleness/background.hpp): each kind runs units beside steps and its note
// says so; a background that is not running across the steps, or completes no unit while they run, marks the row
// "co-run INVALID"; a tier-file directory the O_DIRECT tier cannot use is the --file-dir line.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "background.hpp"
#include "kvf/errors.hpp"
#include "test_shapes.hpp"

namespace ki = kvf::idleness;

namespace {

// Steps of `ms` milliseconds (sleeps: the background gets a core) bracketed as the timed step brackets them.
std::string run_steps(ki::CpuBackground& bg, int steps, int ms) {
  for (int i = 0; i < steps; ++i) {
    bg.step_begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    bg.step_end();
  }
  return bg.note();
}

std::string tmp_dir() {
  const auto d = std::filesystem::path(KVF_IDLENESS_TMP) / "bg";
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace

TEST(CorunBackground, CopyRunsUnitsBesideTheSteps) {
  ki::CpuBackground bg(ki::Background::copy, kvf::test::tiny_shape(512, 8, 2, 64, 1536), "", 1);
  bg.start();
  const std::string note = run_steps(bg, 8, 5);
  EXPECT_NE(note.find("units_per_s="), std::string::npos) << note;
  EXPECT_NE(note.find("in its loop across 8 of 8 steps"), std::string::npos) << note;
  EXPECT_EQ(note.find(ki::kNoCorun), std::string::npos) << note;
  // The counts start again for the next mode.
  EXPECT_NE(run_steps(bg, 3, 5).find("across 3 of 3 steps"), std::string::npos);
}

// Six steps of `step_ms` beside a started background of `kind`: its note, which must not call the row invalid.
static std::string overlapped_note(ki::Background kind, const std::string& dir, int seed, int step_ms) {
  ki::CpuBackground bg(kind, kvf::test::tiny_shape(512, 8, 2, 64, 1536), dir, seed);
  bg.start();
  const std::string note = run_steps(bg, 6, step_ms);
  EXPECT_EQ(note.find(ki::kNoCorun), std::string::npos) << note;
  return note;
}

TEST(CorunBackground, FileReadsTheTierFile) {
  const std::string dir = tmp_dir();
  try {
    kvf::frontier::check_file_dir(dir);
  } catch (const kvf::frontier::DirectFileError& e) {
    GTEST_SKIP() << e.what();
  }
  const std::string note = overlapped_note(ki::Background::file, dir, 2, 10);
  EXPECT_NE(note.find("O_DIRECT reads"), std::string::npos) << note;
}

TEST(CorunBackground, RecomputeKeepsItsFigure) {
  const std::string note = overlapped_note(ki::Background::recompute, "", 3, 20);
  EXPECT_NE(note.find("background recompute pages_per_s="), std::string::npos) << note;
}

TEST(CorunBackground, NotRunningAcrossTheStepsIsInvalid) {
  ki::CpuBackground bg(ki::Background::copy, kvf::test::tiny_shape(512, 8, 2, 64, 1536), "", 4);
  bg.start();
  bg.stop();  // drained before the steps: the case the guard is for
  const std::string note = run_steps(bg, 4, 1);
  EXPECT_NE(note.find(std::string(ki::kNoCorun) + ": the background was not running across every step"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("in its loop across 0 of 4 steps"), std::string::npos) << note;
}

TEST(CorunBackground, NoThreadIsInvalid) {
  // Kind none starts no thread: nothing ran beside the steps.
  ki::CpuBackground bg(ki::Background::none, kvf::test::tiny_shape(512, 8, 2, 64, 1536), "", 5);
  bg.start();
  const std::string note = run_steps(bg, 2, 1);
  EXPECT_NE(note.find(std::string(ki::kNoCorun) + ": the background was not running"), std::string::npos) << note;
}

TEST(CorunBackground, NoUnitWhileTheStepsRanIsInvalid) {
  // One recompute page of a 4096-wide layer (2 GFLOP on one thread: tens of ms at least) against two steps of
  // half a millisecond right after the start: the thread is in its loop, but no unit completes within the steps.
  ki::CpuBackground bg(ki::Background::recompute, kvf::test::tiny_shape(4096, 32, 8, 128, 4096), "", 7);
  bg.start();
  for (int i = 0; i < 2; ++i) {
    bg.step_begin();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    bg.step_end();
  }
  const std::string note = bg.note();
  EXPECT_NE(note.find(std::string(ki::kNoCorun) + ": the background completed no unit while the steps ran"),
            std::string::npos)
      << note;
}

TEST(CorunBackground, UnusableFileDirIsTheFlagsLine) {
  ki::CpuBackground bg(ki::Background::file, kvf::test::tiny_shape(512, 8, 2, 64, 1536), "/nonexistent/kvf", 6);
  try {
    bg.start();
    FAIL() << "no error for a missing directory";
  } catch (const kvf::UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--file-dir /nonexistent/kvf: ", 0), 0u) << e.what();
  }
}
