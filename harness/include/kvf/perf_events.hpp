// CPU hardware counters through Linux perf events (cycles, instructions of the calling thread), for studies
// that state a CPU figure beside its counters. Generic measurement: no study knows the syscall.
#pragma once
#include <functional>
#include <string>

namespace kvf {

// Whether hardware counters can be read here, and if not, one line saying why.
struct PerfProbe {
  bool available = false;
  std::string reason;  // "perf_event_open(cycles): Operation not supported ..." etc.
};
PerfProbe probe_perf();

// Cycles and instructions of the calling thread over fn(); ok false where the counters cannot be opened
// (fn() still runs once).
struct PerfCounts {
  double cycles = 0, instructions = 0;
  bool ok = false;
};
PerfCounts perf_count(const std::function<void()>& fn);

}  // namespace kvf
