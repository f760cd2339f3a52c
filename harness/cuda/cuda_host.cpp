// Host-side helpers of the CUDA backend (cuda_host.hpp): compiled by the host compiler, no device code.
#include "cuda_host.hpp"

#include <driver_types.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "kvf/pattern.hpp"

namespace kvf::cuda_host {

std::string version_string(int v) {
  if (v <= 0) return {};
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string bytes_text(std::size_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", b, static_cast<double>(b) / (1ull << 30));
  else
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f MiB)", b, static_cast<double>(b) / (1ull << 20));
  return buf;
}

void host_fill(void* ptr, std::size_t bytes, std::uint64_t seed) {
  auto* p = static_cast<unsigned char*>(ptr);
  const std::size_t nwords = bytes / 8;
  const std::size_t per_thread_min = std::size_t{8} << 20 >> 3;  // 8 MiB of words
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t nt = std::clamp<std::size_t>(nwords / per_thread_min, 1, hw);
  auto work = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint64_t w = pattern_word(seed, i);
      std::memcpy(p + 8 * i, &w, 8);
    }
  };
  if (nt == 1) {
    work(0, nwords);
  } else {
    std::vector<std::thread> ts;
    ts.reserve(nt);
    for (std::size_t t = 0; t < nt; ++t) ts.emplace_back(work, nwords * t / nt, nwords * (t + 1) / nt);
    for (auto& t : ts) t.join();
  }
  if (const std::size_t tail = bytes % 8) {
    const std::uint64_t w = pattern_word(seed, nwords);
    std::memcpy(p + 8 * nwords, &w, tail);  // the low bytes on a little-endian host
  }
}

std::string pcie_gen_from_speed(const std::string& speed) {
  const double gts = std::atof(speed.c_str());
  if (gts <= 0) return {};
  struct G { double gts; const char* gen; };
  static constexpr G table[] = {{2.5, "Gen1"}, {5, "Gen2"}, {8, "Gen3"}, {16, "Gen4"}, {32, "Gen5"}, {64, "Gen6"}};
  for (const auto& g : table)
    if (std::fabs(gts - g.gts) < 0.01) return g.gen;
  return {};
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (!in || !std::getline(in, s)) return {};
  return s;
}

std::string sysfs_pci_id(const std::string& cuda_bus_id) {
  std::string id = cuda_bus_id;
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (const auto colon = id.find(':'); colon != std::string::npos && colon > 4) id.erase(0, colon - 4);
  return id;
}

std::string compute_mode_name(int cuda_compute_mode) {
  switch (cuda_compute_mode) {
    case cudaComputeModeDefault: return "default";
    case cudaComputeModeProhibited: return "prohibited";
    case cudaComputeModeExclusiveProcess: return "exclusive_process";
    default: return "unknown";
  }
}

}  // namespace kvf::cuda_host
