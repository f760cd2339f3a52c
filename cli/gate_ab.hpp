// kvf gate --ab: both builds' bench binaries run alternately, round by round, on this machine in this job; the
// rounds go to kvf_gate's run_paired_gate (kvf/gate.hpp), which decides on the paired per-round ratios.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvf/gate.hpp"

namespace kvf::cli {

struct AbOptions {
  std::string base_dir, new_dir;     // build trees (DIR/bin/bench_*), bin directories, or install prefixes
  std::vector<std::string> studies;  // empty: stream
  int rounds = 10;
  std::uint64_t seed = 0;
  bool seed_given = false;
  bool quick = false;
  std::string inject;                // --inject-slowdown for the new build ("" none); needs allow_fault_injection
  bool allow_fault_injection = false;
  std::string keep;                  // keep the rounds' results here ("" a temporary directory, removed)
  std::vector<std::string> pass;     // after --: to every bench of both builds
};

// A forwarded signal (SIGINT, SIGTERM, SIGHUP) stopped the rounds: the shell's exit code is 128 + sig.
struct AbStopped {
  int sig;
};

// Checks the options and both builds (UsageError, nothing run), lists both builds' cases, runs the rounds and
// returns the verdicts.
gate::GateReport run_ab(const AbOptions& o, const gate::GateOptions& g);

}  // namespace kvf::cli
