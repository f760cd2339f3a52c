// kvf run's plan, made before anything is measured: the devices, for each the backend, the studies (stream first
// unless its directory holds a finished one), each bench's --list pass (its cases, estimates and ceilings, and a
// refusal of its flags), and the stream cases a case filter leaves needed.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvf/backend.hpp"

namespace kvf::cli {

struct RunOptions {
  std::vector<std::string> studies;
  std::string backend = "auto";
  std::string device_text;  // --device as typed ("" when not given)
  DeviceChoice device;
  bool quick = false;
  bool list = false;
  bool list_devices = false;
  bool gpu_sweep = false;
  double time_limit_s = 0;  // 0: none
  std::string out;
  std::string thread_placement = "auto";  // run_placement.hpp
  std::vector<std::string> pass;  // after "--": given to every bench binary
};

struct ListedCase {
  std::string name, skipped;  // skipped: the reason, "" when it runs
  double est_s = 0;          // the bench's estimate for the case, all its modes
  double est_per_run_s = 0;  // of one (case, mode) run
  std::size_t runs = 0;      // (case, mode) runs, repetitions included
  nlohmann::json params, ceilings;
};

struct StudyPlan {
  std::string study;
  std::string backend;  // what its cases run on, from its --list pass ("cpu" for a host-only study on any device)
  std::vector<std::string> args;  // the bench's command line without --out (and without --list)
  std::vector<ListedCase> cases;
  double est_s = 0;
  std::size_t runs = 0;  // (case, mode) runs, repetitions included
};

struct DevicePlan {
  DeviceChoice device;
  std::string label;  // "dev1" under --device all, else ""
  std::string out;
  std::string backend, backend_note;
  std::vector<std::string> notes;  // kvf's lines about the plan, printed once it stands
  std::vector<StudyPlan> studies;
  std::string stream_filter;  // the --case-filter stream got ("" when all of it runs)
};

std::filesystem::path bench_path(const std::string& study);
// The status a bench left for its study in meta.json; empty when it cannot be read.
std::string study_status(const std::string& out, const std::string& study);
// The backend a study of OUT's meta.json ran on ("" when none is recorded).
std::string study_backend(const std::string& out, const std::string& study);

// The bench's --list json pass (args: its command line without --list): its cases, or the one line of its
// refusal, naming the study (UsageError for exit 2). kvf run's plan and kvf gate --ab's both come from it.
StudyPlan list_study(const std::string& study, std::vector<std::string> args, const std::vector<std::string>& pass);

// The devices a run measures in turn: each visible GPU for --device all, else the one asked for (or the default).
std::vector<DeviceChoice> run_devices(const RunOptions& o);
// The plan of one device. Its directory: --out, or results/runs/<stamp>-<backend>; under --device all one
// directory per device below it (dev<ordinal>). Throws UsageError (nothing has run) for a bad study, a per-study
// flag of a study that does not run, or flags a bench refused in its --list pass (the line names the flag and
// the study).
DevicePlan plan_device(const RunOptions& o, const DeviceChoice& device, const std::string& stamp, bool per_device_dir);
// Under --device all: a study that runs on the CPU whatever the device (host-only, as the remote study) stays in the
// first GPU's plan only, and each later plan says where it is measured (run_host_studies.cpp).
void measure_host_studies_once(std::vector<DevicePlan>& plans);
// Whether any planned study runs on the CPU backend (a CPU run, or a host-only study of a GPU run).
bool runs_on_cpu(const std::vector<DevicePlan>& plans);

}  // namespace kvf::cli
