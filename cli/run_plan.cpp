#include "run_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kvf/errors.hpp"
#include "kvf/input.hpp"
#include "kvf/install_paths.hpp"
#include "kvf/studies.hpp"
#include "run_flags.hpp"
#include "run_plan_detail.hpp"
#include "run_process.hpp"

namespace kvf::cli {

namespace {

std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, ','))
      if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::string joined(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// --gpu-sweep: every study's default GPU grid, each case verified before it is timed, into one directory,
// within --time-limit (25 minutes unless given). Extra flags per study, sized from the H100 run of 2026-11-22
// (results/gpu/H100-2026-11-22): its frontier default grid did not finish in 150 s (stopped inside the layers
// arm after 505 planned x/xq cases), and its idleness sweep ran with --budget 0.2. The idleness prefill times both
// causal attention kernels (its default grid with the CUDA-core rows beside the tensor-core ones, a few ms each).
std::vector<std::string> gpu_sweep_flags(const std::string& study) {
  if (study == "frontier") return {"--budget", "0.2"};
  if (study == "idleness") return {"--budget", "0.2", "--prefill-attention", "mma,cuda_core"};
  return {};
}

struct Chosen {
  std::vector<std::string> studies;
  bool stream_added = false;  // stream runs because another study states its figures against it
  bool stream_kept = false;   // the directory holds a finished stream study: its ceilings are used
};

// The studies to run, in the study list's order: those asked for (all built ones by default), stream first.
Chosen choose_studies(const RunOptions& o, const std::string& out, const std::string& backend,
                      std::vector<std::string>& notes) {
  Chosen c;
  const auto requested = split_commas(o.studies);
  for (const auto& r : requested)
    if (!is_run_study(r)) throw UsageError(unknown_study("--study " + r, r));
  for (const auto& study : kStudies) {
    const std::string name(study.name);
    const bool want = requested.empty() || std::find(requested.begin(), requested.end(), name) != requested.end();
    if (want && !std::filesystem::exists(bench_path(name))) {
      if (!requested.empty())
        throw UsageError("--study " + name + ": not available in this build (" + bench_path(name).string() +
                         " is missing)");
      notes.push_back("kvf run: study " + name + " is not built yet; skipping it");
      continue;
    }
    if (want) c.studies.push_back(name);
  }
  if (c.studies.empty()) throw UsageError("no study to run");
  // A run continued into a directory that holds a finished stream study (a sweep split over several calls)
  // keeps that ceiling instead of measuring it twice under one case name.
  // A directory holds one backend's ceilings: rows are stated against their own backend's only (find_ceiling), so
  // another backend's run there would find none, and two stream studies cannot share one meta.json.
  if (const std::string held = study_backend(out, "stream"); !held.empty() && held != backend)
    throw UsageError("--out " + out + ": holds a stream study measured on backend " + held +
                     ", this run's backend is " + backend + "; give another --out");
  // The default list leaves out a stream study the directory already holds (its ceilings are kept, below); one
  // asked for by name is refused there, as any study run twice.
  if (const std::string st = study_status(out, "stream"); requested.empty() && !st.empty()) {
    std::erase(c.studies, std::string("stream"));
    if (c.studies.empty())
      throw UsageError("--out " + out + ": already holds the stream study (status " + st +
                       ") and no other study is built: nothing to run");
  }
  // One run of a study per directory (the bench refuses a second: it would write every case name again); said
  // here before any study runs.
  for (const auto& name : c.studies)
    if (const std::string st = study_status(out, name); !st.empty())
      throw UsageError("--out " + out + ": already holds the " + name + " study (status " + st +
                       "); a second run there would write its cases twice: give another --out" +
                       (name == "stream" ? " (or leave stream out of --study: the other studies use its ceilings)"
                                         : ""));
  if (c.studies.front() != "stream" && std::filesystem::exists(bench_path("stream"))) {
    // Any stream study there is kept: one that ended with a failed case (errors) or at its time limit has the
    // rows it measured, and a second would write its cases twice.
    if (const std::string st = study_status(out, "stream"); !st.empty()) {
      c.stream_kept = true;
      notes.push_back("kvf run: " + out + " already holds a " +
                      (st == "complete" ? std::string("finished stream study") : "stream study (status " + st + ")") +
                      ": its ceilings are used, not measured again");
    } else {
      c.studies.insert(c.studies.begin(), "stream");
      c.stream_added = true;
    }
  }
  return c;
}

}  // namespace

// Next to kvf in a build tree, ../libexec/kvfrontier when installed (kvf/install_paths.hpp).
std::filesystem::path bench_path(const std::string& study) { return kvf::bench_path(study); }

namespace {
// A string field of a study in OUT's meta.json ("" when the file, the study or the field is absent).
std::string study_field(const std::string& out, const std::string& study, const char* field) {
  if (out.empty()) return {};
  try {
    const auto m = read_json_input(std::filesystem::path(out) / "meta.json", out);
    const auto v = m.at("studies").at(study).at(field);
    return v.is_string() ? v.get<std::string>() : std::string{};
  } catch (const std::exception&) {
    return {};
  }
}
}  // namespace

std::string study_status(const std::string& out, const std::string& study) { return study_field(out, study, "status"); }
std::string study_backend(const std::string& out, const std::string& study) {
  return study_field(out, study, "backend");
}

std::vector<DeviceChoice> run_devices(const RunOptions& o) {
  if (o.device.kind != DeviceChoice::Kind::all) return {o.device};
  if (o.backend == "cpu")
    throw UsageError("--device all with --backend cpu: the cpu backend has one device, the CPU; give --device cpu or "
                     "leave --backend out");
  std::string why;
  const auto gpus = list_gpus(&why);
  if (gpus.empty()) throw UsageError("--device all: no GPU visible (" + why + "); allowed here: --device cpu");
  std::vector<DeviceChoice> out;
  for (const auto& g : gpus) out.push_back({DeviceChoice::Kind::gpu, g.ordinal, std::to_string(g.ordinal)});
  return out;
}

namespace {
// A bench that could not start (its loader found no shared library, or it cannot be executed: exit 126 or 127):
// not a refusal of its flags, and not a reason to stop a run of the other studies.
struct BenchUnavailable {
  std::string why;
};
}  // namespace

StudyPlan list_study(const std::string& study, std::vector<std::string> args, const std::vector<std::string>& pass) {
  StudyPlan p;
  p.study = study;
  p.args = args;
  // First, so a study flag given last without its value (--stream.size) is refused as such, not by "json" read
  // as its value's stray neighbour.
  args.insert(args.begin() + 1, {"--list", "json"});
  std::string out, err;
  const int rc = run_process(args, {.out = &out, .err = &err});
  if (stop_signal()) throw RunStopped{};
  if (rc == 126 || rc == 127) {
    std::string why = err.substr(0, err.find('\n'));
    if (why.empty()) why = "exit " + std::to_string(rc);
    throw BenchUnavailable{args.front() + " cannot start: " + why};
  }
  if (rc != 0) throw_bench_refusal(study, pass, rc, err);
  const int reps = repetitions_in(p.args);
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    ListedCase c;
    c.name = j.value("case", std::string());
    c.est_s = j.value("est_seconds", 0.0);
    if (p.backend.empty()) p.backend = j.value("backend", std::string());
    const std::size_t modes =
        static_cast<std::size_t>(j.value("cold", false)) + static_cast<std::size_t>(j.value("hot", false));
    c.runs = modes * static_cast<std::size_t>(reps);
    c.est_per_run_s = modes ? c.est_s / double(modes) : 0;
    if (j.contains("skipped") && j["skipped"].is_string()) c.skipped = j["skipped"].get<std::string>();
    c.params = j.value("params", nlohmann::json::object());
    c.ceilings = j.value("ceilings", nlohmann::json::array());
    p.est_s += c.est_s * reps;
    p.runs += c.runs;
    p.cases.push_back(std::move(c));
  }
  return p;
}

DevicePlan plan_device(const RunOptions& o, const DeviceChoice& device, const std::string& stamp, bool per_device_dir) {
  DevicePlan d;
  d.device = device;
  auto be = make_backend(o.backend, &d.backend_note, device);
  d.backend = be->name();
  be.reset();
  if (o.gpu_sweep && d.backend != "cuda")
    throw UsageError("--gpu-sweep: no usable GPU here (" + d.backend_note + "); it runs the GPU grids only");
  d.out = o.out.empty() ? "results/runs/" + stamp + "-" + d.backend : o.out;
  if (per_device_dir) {
    d.label = "dev" + std::to_string(device.ordinal);
    d.out = (std::filesystem::path(d.out) / d.label).string();
  }
  const Chosen chosen = choose_studies(o, d.out, d.backend, d.notes);
  check_study_flags(chosen.studies, [&](const std::string& study) {
    if (study == "stream" && chosen.stream_kept)
      return d.out + " holds a finished stream study, whose ceilings are used (a new --out measures it again)";
    return "not chosen (--study " + joined(split_commas(o.studies), ",") + "); add it to --study or drop the flag";
  });

  auto args_for = [&](const std::string& study) {
    std::vector<std::string> a = {bench_path(study).string(), "--backend", d.backend};
    if (device.kind != DeviceChoice::Kind::unset) a.insert(a.end(), {"--device", device.text});
    if (o.quick) a.push_back("--quick");
    if (o.gpu_sweep)
      for (const auto& f : gpu_sweep_flags(study)) a.push_back(f);
    a.insert(a.end(), o.pass.begin(), o.pass.end());
    for (const auto& f : bench_args_for(study)) a.push_back(f);
    return a;
  };
  // A study whose bench cannot start is skipped with a note when no --study named it (as one not built), and is
  // bad input when one did; the stream study's ceilings are needed by every other.
  auto listed = [&](const std::string& s, std::vector<std::string> args) -> std::optional<StudyPlan> {
    try {
      return list_study(s, std::move(args), o.pass);
    } catch (const BenchUnavailable& e) {
      if (!split_commas(o.studies).empty() || s == "stream")
        throw UsageError("study " + s + ": not available: " + e.why);
      d.notes.push_back("kvf run: study " + s + " is not available (" + e.why + "); skipping it");
      return std::nullopt;
    }
  };
  // The other studies first: their kept cases say which stream ceilings they need.
  for (const auto& s : chosen.studies)
    if (s != "stream")
      if (auto p = listed(s, args_for(s))) d.studies.push_back(std::move(*p));
  if (!chosen.studies.empty() && chosen.studies.front() == "stream") {
    StudyPlan stream = *listed("stream", args_for("stream"));
    if (chosen.stream_added && study_flag_value("stream", "case-filter").empty()) {
      const StreamNeed need = stream_need(d.studies, stream);
      d.notes.push_back(need.note);
      if (need.drop) {
        stream.study.clear();
      } else if (!need.filter.empty()) {
        const std::size_t all = stream.cases.size();
        d.stream_filter = need.filter;
        auto args = args_for("stream");
        args.insert(args.end(), {"--case-filter", need.filter});
        stream = *listed("stream", args);
        d.notes.back() += ": " + std::to_string(stream.cases.size()) + " of its " + std::to_string(all) + " cases";
      }
    }
    if (!stream.study.empty()) d.studies.insert(d.studies.begin(), std::move(stream));
  }
  return d;
}

}  // namespace kvf::cli
