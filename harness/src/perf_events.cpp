#include "kvf/perf_events.hpp"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace kvf {

namespace {
int perf_open(std::uint64_t config) {
  perf_event_attr a;
  std::memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_HARDWARE;
  a.config = config;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  return int(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
}
}  // namespace

PerfProbe probe_perf() {
  PerfProbe p;
  const int fd = perf_open(PERF_COUNT_HW_CPU_CYCLES);
  if (fd < 0) {
    p.reason = std::string("perf_event_open(cycles): ") + std::strerror(errno) +
               " (hardware counters absent here; see /proc/sys/kernel/perf_event_paranoid, or a VM without a vPMU)";
    return p;
  }
  close(fd);
  p.available = true;
  return p;
}

PerfCounts perf_count(const std::function<void()>& fn) {
  PerfCounts c;
  const int fc = perf_open(PERF_COUNT_HW_CPU_CYCLES), fi = perf_open(PERF_COUNT_HW_INSTRUCTIONS);
  if (fc < 0 || fi < 0) {
    if (fc >= 0) close(fc);
    if (fi >= 0) close(fi);
    fn();
    return c;
  }
  ioctl(fc, PERF_EVENT_IOC_RESET, 0);
  ioctl(fi, PERF_EVENT_IOC_RESET, 0);
  ioctl(fc, PERF_EVENT_IOC_ENABLE, 0);
  ioctl(fi, PERF_EVENT_IOC_ENABLE, 0);
  fn();
  ioctl(fc, PERF_EVENT_IOC_DISABLE, 0);
  ioctl(fi, PERF_EVENT_IOC_DISABLE, 0);
  std::uint64_t vc = 0, vi = 0;
  c.ok = read(fc, &vc, 8) == 8 && read(fi, &vi, 8) == 8;
  c.cycles = double(vc);
  c.instructions = double(vi);
  close(fc);
  close(fi);
  return c;
}

}  // namespace kvf
