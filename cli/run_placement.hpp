// kvf run's thread placement: one per run, chosen on the host it runs on and handed to every bench it launches
// (kvf/thread_placement.hpp says why per host). --thread-placement auto calibrates where placement can change a
// CPU figure (more than one NUMA node or L3 domain) and otherwise leaves the environment as it is; calibrate
// always measures; inherit, close and spread are taken as given.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvf::cli {

inline constexpr const char* kThreadPlacementModes = "auto, calibrate, inherit, close, spread";
// A non-inherited placement is taken only when its stream read is this much faster.
inline constexpr double kPlacementMinGain = 0.05;
inline constexpr int kPlacementRounds = 2;  // each candidate measured this many times, the candidates alternated

struct PlacementChoice {
  std::string requested;           // the flag's value
  std::string choice = "inherit";  // a name of kvf::kThreadPlacements
  std::vector<std::string> env;    // what every bench gets ("OMP_PROC_BIND=close", ...)
  std::string reason;
  bool calibrate = false;  // plan_thread_placement: the candidates are to be measured
  std::string domains;     // "2 NUMA node(s), 4 L3 domain(s) in sysfs" (auto and calibrate)
  // calibration: per candidate the stream read rate of each round (GB/s; -1: that run failed)
  std::vector<std::pair<std::string, std::vector<double>>> gbps;
  std::string size;  // the calibration's stream array (bench_stream --size)
  std::string dir;   // where its runs' results are kept
  nlohmann::json json() const;
  std::string line() const;  // "thread placement: close (...)" for the console
};

// The choice as far as it is made without measuring: `calibrate` set where the candidates must be measured (then
// `reason` says why), else the final choice (kvf run --list prints this one).
PlacementChoice plan_thread_placement(const std::string& requested, bool cpu_figures, bool quick);
// The choice for a run (nothing measured unless it calibrates). `cpu_figures`: some study runs on the CPU
// backend; `stream_size`: the stream bench's --size in this run ("": none, or no stream study; then 2x the LLC,
// 256 MiB .. 1 GiB); `calib_dir`: where the calibration writes one results directory per run. `say` prints a line.
PlacementChoice choose_thread_placement(const std::string& requested, bool cpu_figures, bool quick,
                                        const std::string& stream_size, const std::string& calib_dir,
                                        const std::function<void(const std::string&)>& say);

}  // namespace kvf::cli
