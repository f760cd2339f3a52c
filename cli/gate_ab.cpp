// kvf gate --ab: the same cases of two builds, run alternately round by round (each pair of rounds one A-first
// and one B-first, drawn from a seed), so that whatever the machine does over minutes (another job, clocks,
// page cache) falls on both builds alike and cancels in the per-round ratios. The benches are launched as
// kvf run launches them (run_process.hpp) after the same --list pass (run_plan.hpp), and every round's results
// directory is read back with the gate's own loader.
#include "gate_ab.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <system_error>

#include "kvf/errors.hpp"
#include "kvf/studies.hpp"
#include "run_flags.hpp"
#include "run_plan.hpp"
#include "run_plan_detail.hpp"
#include "run_process.hpp"

namespace kvf::cli {

namespace {

namespace fs = std::filesystem;

// The places a build keeps bench_<study>: a build tree (DIR/bin), its bin directory itself, an install prefix.
std::vector<fs::path> ab_bench_candidates(const std::string& dir, const std::string& study) {
  const std::string file = "bench_" + study;
  return {fs::path(dir) / "bin" / file, fs::path(dir) / file, fs::path(dir) / "libexec" / "kvfrontier" / file};
}

std::optional<fs::path> ab_find_bench(const std::string& dir, const std::string& study) {
  for (const auto& p : ab_bench_candidates(dir, study)) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return std::nullopt;
}

std::string ab_list(const std::vector<std::string>& v, std::size_t show = 6) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < show; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > show) s += " and " + std::to_string(v.size() - show) + " more";
  return s.empty() ? "none" : s;
}

// Every study named is built in both trees; one line naming what is missing where, else.
std::vector<std::pair<fs::path, fs::path>> ab_benches(const AbOptions& o, const std::vector<std::string>& studies) {
  for (const auto& [flag, dir] : {std::pair{"BASE", &o.base_dir}, std::pair{"NEW", &o.new_dir}}) {
    std::error_code ec;
    if (dir->empty() || !fs::is_directory(*dir, ec))
      throw UsageError(std::string("--ab ") + flag + " '" + *dir + "': not a directory (give a build directory)");
  }
  std::vector<std::pair<fs::path, fs::path>> out;
  for (const auto& s : studies) {
    const auto a = ab_find_bench(o.base_dir, s), b = ab_find_bench(o.new_dir, s);
    auto tried = [&](const std::string& dir) {
      std::string t;
      for (const auto& p : ab_bench_candidates(dir, s)) t += (t.empty() ? "" : ", ") + p.string();
      return t;
    };
    if (!a && !b)
      throw UsageError("--ab: neither build has bench_" + s + " (tried " + tried(o.base_dir) + "; " + tried(o.new_dir) +
                       "): give build directories of kvfrontier in which study " + s + " is built");
    if (!a || !b)
      throw UsageError("--ab: the builds differ in their studies: bench_" + s + " is in " + (a ? "BASE" : "NEW") +
                       " (" + (a ? *a : *b).string() + ") but not in " + (a ? "NEW" : "BASE") + " (tried " +
                       tried(a ? o.new_dir : o.base_dir) + "); build study " + s + " in both or leave it out of --study");
    out.emplace_back(*a, *b);
  }
  return out;
}

std::vector<std::string> ab_args(const fs::path& bench, const AbOptions& o, bool is_new) {
  std::vector<std::string> a = {bench.string()};
  if (o.quick) a.push_back("--quick");
  a.insert(a.end(), o.pass.begin(), o.pass.end());
  if (is_new && !o.inject.empty()) a.insert(a.end(), {"--inject-slowdown", o.inject, "--allow-fault-injection"});
  return a;
}

// Both builds must offer the same cases: a ratio of two different cases means nothing.
void ab_same_cases(const std::string& study, const StudyPlan& a, const StudyPlan& b) {
  std::set<std::string> na, nb;
  for (const auto& c : a.cases) na.insert(c.name);
  for (const auto& c : b.cases) nb.insert(c.name);
  if (na.empty() && nb.empty())
    throw UsageError("--ab: study " + study + " lists no case to run in either build with the flags given");
  if (na == nb) return;
  std::vector<std::string> only_a, only_b;
  std::set_difference(na.begin(), na.end(), nb.begin(), nb.end(), std::back_inserter(only_a));
  std::set_difference(nb.begin(), nb.end(), na.begin(), na.end(), std::back_inserter(only_b));
  throw UsageError("--ab: the builds differ in study " + study + "'s cases: only in BASE: " + ab_list(only_a) +
                   "; only in NEW: " + ab_list(only_b) + " (compare the same cases: narrow both with -- --case-filter REGEX)");
}

// The rounds' results: the directory kept (--keep-runs) or a temporary one, removed when the gate is done.
struct AbWorkDir {
  fs::path path;
  bool remove = false;
  AbWorkDir(const AbWorkDir&) = delete;
  AbWorkDir& operator=(const AbWorkDir&) = delete;
  explicit AbWorkDir(const std::string& keep) {
    if (!keep.empty()) {
      std::error_code ec;
      if (fs::exists(keep, ec) && !(fs::is_directory(keep, ec) && fs::is_empty(keep, ec)))
        throw UsageError("--keep-runs " + keep + ": exists and is not an empty directory (the rounds need a fresh one)");
      path = keep;
      return;
    }
    std::string tmpl = (fs::temp_directory_path() / "kvf-gate-ab-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary directory under " + tmpl);
    path = tmpl;
    remove = true;
  }
  ~AbWorkDir() {
    std::error_code ec;
    if (remove) fs::remove_all(path, ec);
  }
};

// The last line a bench wrote to stderr that says what went wrong (its "error:" line when there is one).
std::string ab_said(const std::string& err) {
  std::string said, line;
  for (std::size_t start = 0; start < err.size();) {
    std::size_t nl = err.find('\n', start);
    if (nl == std::string::npos) nl = err.size();
    line = err.substr(start, nl - start);
    if (line.find("error") != std::string::npos || said.empty()) said = line;
    start = nl + 1;
  }
  return said.empty() ? "it said nothing" : said;
}

std::string ab_round_dir(std::size_t round, const char* side) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "round-%02zu-%s", round + 1, side);
  return buf;
}

}  // namespace

gate::GateReport run_ab(const AbOptions& o, const gate::GateOptions& g) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.rounds < 2)
    throw UsageError("--rounds " + std::to_string(o.rounds) + ": must be at least 2 (the test pairs the rounds; " +
                     "10 or more give it the power to see a 5% slowdown)");
  if (!o.inject.empty() && !o.allow_fault_injection)
    throw UsageError("--inject-slowdown " + o.inject + ": a test-only fault injection (docs/gate.md), refused without "
                     "--allow-fault-injection");
  for (const auto& p : o.pass) {
    const std::string name = p.substr(0, p.find('='));
    if (name == "--out" || name == "--list" || name == "--inject-slowdown" || name == "--allow-fault-injection")
      throw UsageError("-- " + name + ": kvf gate --ab sets it itself" +
                       (name == "--out" ? std::string(" (keep the rounds' results with --keep-runs DIR)") : ""));
    if (name == "--help" || name == "-h" || name == "--version")
      throw UsageError("-- " + name +
                       ": a bench that prints its help measures nothing (bench_<study> --help shows it)");
  }
  std::vector<std::string> studies = o.studies.empty() ? std::vector<std::string>{"stream"} : o.studies;
  for (std::size_t i = 0; i < studies.size(); ++i) {
    if (!is_run_study(studies[i])) throw UsageError(unknown_study("--study " + studies[i], studies[i]));
    if (std::find(studies.begin(), studies.begin() + static_cast<std::ptrdiff_t>(i), studies[i]) !=
        studies.begin() + static_cast<std::ptrdiff_t>(i))
      throw UsageError("--study " + studies[i] + ": given twice (each study once)");
  }
  const auto benches = ab_benches(o, studies);

  install_forwarding();
  // The --list pass of both builds: each refuses a bad flag before anything is measured, and their cases must match.
  bool injection_hits = false;
  std::string example;  // a name the injection is searched in
  // The bench matches the injection against study/case/mode; built once, after the first bench's --list pass has
  // checked the regex (a bad one is refused there, in the bench's words).
  std::optional<std::regex> inject_re;
  try {
    for (std::size_t s = 0; s < studies.size(); ++s) {
      const StudyPlan a = list_study(studies[s], ab_args(benches[s].first, o, false), o.pass);
      const StudyPlan b = list_study(studies[s], ab_args(benches[s].second, o, true), o.pass);
      ab_same_cases(studies[s], a, b);
      if (!o.inject.empty()) {
        if (!inject_re) inject_re.emplace(o.inject.substr(0, o.inject.rfind('=')));
        for (const auto& c : b.cases)
          for (const char* mode : {"/cold", "/hot"}) {
            if (!c.skipped.empty()) continue;
            const std::string name = studies[s] + "/" + c.name + mode;
            if (example.empty()) example = name;
            injection_hits = injection_hits || std::regex_search(name, *inject_re);
          }
      }
    }
  } catch (const RunStopped&) {
    throw AbStopped{stop_signal()};
  }
  // An injection that slows nothing would let a power test report "injected, not detected" (or pass) for a typo.
  if (!o.inject.empty() && !injection_hits)
    throw UsageError("--inject-slowdown " + o.inject + ": matches no case of the new build (it is searched in "
                     "<study>/<case>/<mode>, e.g. " + example + ")");

  gate::PairedRuns runs;
  runs.base_source = o.base_dir;
  runs.new_source = o.new_dir;
  runs.seed = o.seed_given ? o.seed : std::random_device{}();
  runs.base_first = gate::ab_order(static_cast<std::size_t>(o.rounds), runs.seed);
  runs.injected = o.inject;
  const AbWorkDir work(o.keep);
  std::fprintf(stderr, "kvf gate --ab: %d rounds of %s, order from seed %llu; results in %s%s\n", o.rounds,
               ab_list(studies, 99).c_str(), static_cast<unsigned long long>(runs.seed), work.path.c_str(),
               work.remove ? " (removed at the end)" : "");
  for (std::size_t r = 0; r < runs.base_first.size(); ++r) {
    const auto round_start = std::chrono::steady_clock::now();
    const bool base_first = runs.base_first[r];
    // Study by study, both builds back to back: the two halves of a ratio are seconds apart.
    for (std::size_t s = 0; s < studies.size(); ++s)
      for (int k = 0; k < 2; ++k) {
        const bool is_new = (k == 0) != base_first;
        auto args = ab_args(is_new ? benches[s].second : benches[s].first, o, is_new);
        args.insert(args.end(), {"--out", (work.path / ab_round_dir(r, is_new ? "new" : "base")).string()});
        std::string out, err;
        const int rc = run_process(args, {.out = &out, .err = &err});
        if (stop_signal()) throw AbStopped{stop_signal()};
        if (rc != kExitOk)
          throw UsageError(std::string("--ab ") + (is_new ? "NEW" : "BASE") + ": bench_" + studies[s] + " exited with " +
                           std::to_string(rc) + " in round " + std::to_string(r + 1) + ": " + ab_said(err));
      }
    std::fprintf(stderr, "kvf gate --ab: round %zu/%d (%s) took %.1f s\n", r + 1, o.rounds, base_first ? "AB" : "BA",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - round_start).count());
  }
  for (std::size_t r = 0; r < runs.base_first.size(); ++r) {
    runs.base.push_back(gate::load_results((work.path / ab_round_dir(r, "base")).string()));
    runs.cur.push_back(gate::load_results((work.path / ab_round_dir(r, "new")).string()));
  }
  runs.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return gate::run_paired_gate(runs, g);
}

}  // namespace kvf::cli
