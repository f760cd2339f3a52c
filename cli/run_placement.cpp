#include "run_placement.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kvf/host_memory.hpp"
#include "kvf/table.hpp"
#include "kvf/thread_placement.hpp"
#include "run_plan.hpp"
#include "run_process.hpp"

namespace kvf::cli {

nlohmann::json PlacementChoice::json() const {
  nlohmann::json j = {{"requested", requested}, {"choice", choice}, {"env", env}, {"reason", reason}};
  if (!gbps.empty()) {
    nlohmann::json g = nlohmann::json::object();
    for (const auto& [name, v] : gbps) g[name] = v;
    j["calibration"] = {{"stream_read_gbps", g},
                        {"size", size},
                        {"rounds", kPlacementRounds},
                        {"min_gain", kPlacementMinGain},
                        {"dir", dir}};
  }
  return j;
}

std::string PlacementChoice::line() const {
  std::string s = "thread placement: " + choice;
  for (const auto& e : env) s += " " + e;
  if (!gbps.empty()) {
    s += " (stream read per round, GB/s:";
    for (const auto& [name, v] : gbps) {
      s += " " + name;
      for (std::size_t r = 0; r < v.size(); ++r) {
        char b[24];
        std::snprintf(b, sizeof b, "%s%.1f", r ? "/" : " ", v[r]);
        s += b;
      }
    }
    s += ")";
  }
  return s + ": " + reason;
}

namespace {

// One calibration run: the stream study's read arm (the ceiling the CPU rows are stated against), hot only, under
// the placement's environment; the best read rate of its rows, or -1 when it failed.
double stream_read_gbps(const std::string& placement, const std::string& size, const std::string& out) {
  // A bench appends to a results directory: an earlier calibration's rows there (a second run into the same --out)
  // are replaced, not read as this one's.
  std::error_code ec;
  std::filesystem::remove_all(out, ec);
  ProcessIo io;
  std::string sink_out, sink_err;
  io.out = &sink_out;
  io.err = &sink_err;
  io.env = kvf::thread_placement_env(placement);
  const int rc = run_process({bench_path("stream").string(), "--backend", "cpu", "--arms", "read", "--no-cold",
                              "--warmup", "1", "--budget", "0.3", "--size", size, "--out", out},
                             io);
  if (rc != 0) return -1;
  double best = -1;
  try {
    const CsvTable t = read_csv_table(out + "/cases.csv");
    for (std::size_t r = 0; r < t.rows.size(); ++r)
      if (t.at(r, "study") == "stream" && t.at(r, "mode") == "hot")
        if (const auto g = parse_number(t, r, "gbps")) best = std::max(best, *g);
  } catch (const std::exception&) {
    return -1;
  }
  return best;
}

}  // namespace

PlacementChoice plan_thread_placement(const std::string& requested, bool cpu_figures, bool quick) {
  PlacementChoice c;
  c.requested = requested;
  if (requested != "auto" && requested != "calibrate") {
    c.choice = requested;
    c.env = kvf::thread_placement_env(requested);
    c.reason = "as given (--thread-placement " + requested + ")";
    return c;
  }
  if (requested == "auto") {
    const char* bind = std::getenv("OMP_PROC_BIND");
    const char* places = std::getenv("OMP_PLACES");
    if (bind || places) {
      c.reason = std::string("set in the environment (") + (bind ? "OMP_PROC_BIND=" + std::string(bind) : "") +
                 (bind && places ? " " : "") + (places ? "OMP_PLACES=" + std::string(places) : "") + "): kept";
      return c;
    }
    if (!cpu_figures) {
      c.reason = "no study runs on the CPU backend: left as it is";
      return c;
    }
    if (quick) {
      c.reason = "--quick: not calibrated (--thread-placement calibrate measures it): left as it is";
      return c;
    }
  }
  const kvf::CpuDomains d = kvf::cpu_domains();
  c.domains = std::to_string(d.numa_nodes) + " NUMA node(s), " + std::to_string(d.l3_domains) +
              " L3 domain(s) in sysfs";
  if (requested == "auto" && d.numa_nodes <= 1 && d.l3_domains <= 1) {
    c.reason = d.l3_domains == 0 ? "one NUMA node and no L3 domains listed in sysfs: left as it is "
                                   "(--thread-placement calibrate measures it)"
                                 : "one NUMA node and one L3 domain: every placement reaches the same memory and "
                                   "cache; left as it is";
    return c;
  }
  c.calibrate = true;
  c.reason = requested == "calibrate" ? "--thread-placement calibrate" : c.domains;
  return c;
}

PlacementChoice choose_thread_placement(const std::string& requested, bool cpu_figures, bool quick,
                                        const std::string& stream_size, const std::string& calib_dir,
                                        const std::function<void(const std::string&)>& say) {
  PlacementChoice c = plan_thread_placement(requested, cpu_figures, quick);
  if (!c.calibrate) return c;
  // Calibrate: every candidate, alternated over the rounds (a slow phase of a shared host then hits all of them).
  // The stream study's own array size where the run sets one (its ceiling is read at that size), else past the LLC.
  c.size = stream_size.empty()
               ? std::to_string(kvf::past_llc_bytes(kvf::host_llc().total_bytes(), 2, std::size_t{256} << 20,
                                                    kvf::kPoolCapBytes) >> 20) + "MiB"
               : stream_size;
  c.dir = calib_dir;
  for (const char* name : kvf::kThreadPlacements) c.gbps.push_back({name, {}});
  say("kvf run: thread placement: calibrating: a stream read of " + c.size + " under " +
      kvf::thread_placement_names() + ", " + std::to_string(kPlacementRounds) + " rounds, into " + calib_dir);
  for (int round = 0; round < kPlacementRounds; ++round)
    for (auto& [name, v] : c.gbps) {
      if (stop_signal()) return c;
      v.push_back(stream_read_gbps(name, c.size, calib_dir + "/" + name + "-" + std::to_string(round + 1)));
    }
  const kvf::PlacementPick p = kvf::pick_thread_placement(c.gbps, kPlacementMinGain);
  c.choice = p.choice;
  c.env = kvf::thread_placement_env(p.choice);
  c.reason = p.why + " (" + c.domains + ")";
  return c;
}

}  // namespace kvf::cli
