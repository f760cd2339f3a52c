// The planning backend behind --plan-device: a device described by a file (a results directory's meta.json,
// or its "device" object alone), so that --list prints the cases and time estimates a run would have on that
// device from any machine, a GPU run planned on a laptop included. It runs nothing: every operation is a
// logic error, and bench_main accepts it with --list only.
#include <stdexcept>

#include "kvf/backend.hpp"
#include "kvf/errors.hpp"
#include "kvf/input.hpp"

namespace kvf {

namespace {

class PlanBackend final : public Backend {
 public:
  explicit PlanBackend(DeviceInfo info) : info_(std::move(info)) {}
  std::string name() const override { return info_.backend; }
  const DeviceInfo& info() const override { return info_; }
  Buffer alloc(std::size_t, MemKind, AllocOptions) override { refuse(); }
  void release(Buffer&) noexcept override {}
  void fill(const Buffer&, std::uint64_t) override { refuse(); }
  void copy(const Buffer&, const Buffer&, std::size_t) override { refuse(); }
  void synchronize() override { refuse(); }
  Sample time_region(const std::function<void()>&, const TimeOptions&) override { refuse(); }
  void flush_caches() override { refuse(); }
  std::size_t flush_bytes() const override { return 0; }

 private:
  [[noreturn]] void refuse() const {
    throw std::logic_error("the planning backend (--plan-device) lists cases; it runs nothing");
  }
  DeviceInfo info_;
};

}  // namespace

int compute_capability(const DeviceInfo& info) {
  const std::string& a = info.arch;
  if (a.size() < 4 || a.size() > 6 || a.compare(0, 3, "sm_") != 0) return 0;
  int v = 0;
  for (std::size_t i = 3; i < a.size(); ++i) {
    if (a[i] < '0' || a[i] > '9') return 0;
    v = v * 10 + (a[i] - '0');
  }
  return v;
}

std::unique_ptr<Backend> make_plan_backend(const std::string& path) {
  const std::string src = "--plan-device " + path;
  nlohmann::json file;
  try {
    file = read_json_input(path);
  } catch (const UsageError& e) {
    throw UsageError("--plan-device: " + std::string(e.what()));  // the reader names the file, not the flag
  }
  if (!file.is_object()) throw UsageError(src + ": expected a JSON object (a meta.json, or its \"device\" object)");
  const bool meta = file.contains("device");
  const nlohmann::json& d = meta ? file.at("device") : file;
  const std::string at = meta ? "device." : "";
  if (!d.is_object()) throw UsageError(src + ": key 'device': expected an object");
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 52;  // 4 PiB: beyond any device, far from overflow
  DeviceInfo info;
  info.backend = json_string(d, "backend", src, at + "backend").value_or("");
  if (info.backend != "cpu" && info.backend != "cuda")
    throw UsageError(src + ": key '" + at + "backend': '" + info.backend + "' is not cpu or cuda");
  info.name = json_string(d, "name", src, at + "name").value_or("unnamed device");
  info.arch = json_string(d, "arch", src, at + "arch").value_or("");
  info.compute_units = static_cast<int>(json_integer(d, "compute_units", src, at + "compute_units", 0, 1 << 20).value_or(0));
  info.clock_mhz = json_number(d, "clock_mhz", src, at + "clock_mhz", 0, 1e6).value_or(0);
  info.max_clock_mhz = json_number(d, "max_clock_mhz", src, at + "max_clock_mhz", 0, 1e6).value_or(0);
  info.memory_bytes = static_cast<std::uint64_t>(json_integer(d, "memory_bytes", src, at + "memory_bytes", 0, kMaxBytes).value_or(0));
  info.llc_bytes = static_cast<std::uint64_t>(json_integer(d, "llc_bytes", src, at + "llc_bytes", 0, kMaxBytes).value_or(0));
  info.pcie_link = json_string(d, "pcie_link", src, at + "pcie_link").value_or("");
  info.extra = nlohmann::json::object();
  info.extra["planned_from"] = path;
  return std::make_unique<PlanBackend>(std::move(info));
}

}  // namespace kvf
