#include "run_flags.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kvf/errors.hpp"
#include "kvf/studies.hpp"

namespace kvf::cli {

const char* const kStudyFlagsHelp =
    "Per-study flags: --<study>.<flag> [value] (or --<study>.<flag>=value) goes to that study's bench only, as "
    "--<flag> [value]; e.g. kvf run --study access --access.contexts 4K --access.case-filter gather. Flags after -- "
    "go to every bench (measurement flags such as --budget). A study's flags are checked by its bench (bench_<study> "
    "--help lists them) before any study runs. --<study>.case-filter also narrows the stream study to the ceilings "
    "the kept cases are stated against (or it does not run when they need none).\n"
    "Console: one whole-run progress line with an ETA (redrawn in place on a terminal, plain lines elsewhere), the "
    "benches' output above it, and a summary (cases measured, failed, skipped with reasons; the results directory; "
    "the kvf report command to run next).";

namespace {

std::vector<StudyFlag> g_flags;
std::vector<std::string> g_after;

std::string known_studies() {
  std::string s;
  for (const auto& st : kStudies) s += std::string(s.empty() ? "" : ", ") + std::string(st.name);
  return s;
}

}  // namespace

bool is_run_study(std::string_view name) {
  return std::any_of(kStudies.begin(), kStudies.end(), [&](const auto& s) { return s.name == name; });
}

std::string run_elsewhere(std::string_view name) {
  if (name == "attention")
    return "the attention study is not run by kvf run or kvf gate: it reads a model checkpoint or a capture (kvf "
           "attention --model-dir DIR --tokens FILE --out DIR, or --dump FILE; studies/attention/README.md)";
  if (name == "residency")
    return "residency is not run by kvf run or kvf gate: it replays a request trace (kvf residency --trace FILE, or "
           "--synthetic; analysis/residency/README.md)";
  return "";
}

std::string unknown_study(const std::string& typed, std::string_view name) {
  const std::string elsewhere = run_elsewhere(name);
  return typed + ": " + (elsewhere.empty() ? "unknown study; allowed: " + known_studies() : elsewhere);
}

namespace {

// Flags kvf run gives every bench itself: one spelling per run, never a per-study one.
const char* kvf_sets(std::string_view flag) {
  if (flag == "out") return "kvf run gives every bench its --out; use kvf run --out DIR";
  if (flag == "backend") return "kvf run resolves one backend for every study; use kvf run --backend";
  if (flag == "device") return "kvf run measures every study on one device; use kvf run --device";
  if (flag == "quick") return "use kvf run --quick (every study)";
  if (flag == "list") return "use kvf run --list";
  if (flag == "plan-device") return "not for kvf run; run the bench alone with --list --plan-device FILE";
  if (flag == "help" || flag == "h") return "see the bench's own --help";
  return nullptr;
}

bool is_value(const char* a) {
  if (std::strcmp(a, "--") == 0 || std::strncmp(a, "--", 2) == 0) return false;
  return !(a[0] == '-' && std::isalpha(static_cast<unsigned char>(a[1])));
}

// "--<study>.<flag>" with a study-like word before the dot; npos when the argument is not of that form.
std::size_t study_dot(std::string_view a) {
  if (a.size() < 4 || a.substr(0, 2) != "--") return std::string_view::npos;
  const std::string_view name = a.substr(0, a.find('='));
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 2) return std::string_view::npos;
  for (std::size_t i = 2; i < dot; ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i])) && name[i] != '_' && name[i] != '-') return std::string_view::npos;
  return dot;
}

}  // namespace

std::vector<char*> take_study_flags(int argc, char** argv) {
  std::vector<char*> kept(argv, argv + argc);
  // Only `kvf run`: the subcommand is the first argument that is not an option.
  int sub = 1;
  while (sub < argc && argv[sub][0] == '-') ++sub;
  // `kvf gate --ab` gives the flags after "--" to its benches: taken out here for the same reason as below.
  if (sub < argc && std::strcmp(argv[sub], "gate") == 0) {
    for (int i = sub + 1; i < argc; ++i)
      if (std::strcmp(argv[i], "--") == 0) {
        g_after.assign(argv + i + 1, argv + argc);
        kept.assign(argv, argv + i);
        break;
      }
    return kept;
  }
  if (sub >= argc || std::strcmp(argv[sub], "run") != 0) return kept;
  kept.assign(argv, argv + sub + 1);
  for (int i = sub + 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      // Kept from CLI11 too: after a list option (--study a) it takes "--" as the end of that option's values and
      // parses what follows as kvf's own flags.
      g_after.assign(argv + i + 1, argv + argc);
      break;
    }
    const std::size_t dot = study_dot(a);
    if (dot == std::string_view::npos) {
      kept.push_back(argv[i]);
      continue;
    }
    StudyFlag f;
    f.study = std::string(a.substr(2, dot - 2));
    const std::size_t eq = a.find('=');
    f.flag = std::string(a.substr(dot + 1, eq == std::string_view::npos ? std::string_view::npos : eq - dot - 1));
    f.typed = std::string(a);
    if (!is_run_study(f.study)) {
      const std::string typed = f.typed.substr(0, f.typed.find('=')), elsewhere = run_elsewhere(f.study);
      throw UsageError(typed + (elsewhere.empty() ? ": no study named '" + f.study + "'; per-study flags are "
                                                    "--<study>.<flag> [value] with <study> one of: " + known_studies()
                                                  : ": " + elsewhere));
    }
    if (f.flag.empty()) throw UsageError(f.typed + ": no flag after '" + f.study + ".'; e.g. --" + f.study + ".budget 1");
    if (const char* why = kvf_sets(f.flag)) throw UsageError("--" + f.study + "." + f.flag + ": " + why);
    if (eq != std::string_view::npos) {
      f.bench_args = {"--" + f.flag + std::string(a.substr(eq))};
    } else {
      f.bench_args = {"--" + f.flag};
      if (i + 1 < argc && is_value(argv[i + 1])) {
        f.bench_args.push_back(argv[++i]);
        f.typed += " " + f.bench_args.back();
      }
    }
    g_flags.push_back(std::move(f));
  }
  return kept;
}

const std::vector<StudyFlag>& study_flags() { return g_flags; }
const std::vector<std::string>& flags_after_separator() { return g_after; }

void check_study_flags(const std::vector<std::string>& running,
                       const std::function<std::string(const std::string& study)>& why_not) {
  for (const auto& f : g_flags)
    if (std::find(running.begin(), running.end(), f.study) == running.end())
      throw UsageError("--" + f.study + "." + f.flag + ": study " + f.study + " does not run here: " + why_not(f.study));
}

void check_pass_flags(const std::vector<std::string>& pass) {
  for (const auto& p : pass) {
    const std::string name = p.substr(0, p.find('='));
    if (name == "--case-filter")
      throw UsageError("-- --case-filter: after -- it would filter every bench, the stream ceilings too; give it to "
                       "one study: --<study>.case-filter REGEX (the stream study then keeps the ceilings it needs)");
    // Every bench would write the one file in turn, and only the last study's JSON would be left.
    if (name == "--benchmark_out")
      throw UsageError("-- " + p + ": every bench would overwrite the one file; give it to one study: "
                       "--<study>.benchmark_out=FILE (e.g. --stream.benchmark_out=stream.json)");
    if (name == "--device" || name == "--out" || name == "--backend")
      throw UsageError("-- " + name + ": kvf run sets it for every bench; use kvf run " + name);
  }
}

std::vector<std::string> bench_args_for(const std::string& study) {
  std::vector<std::string> out;
  for (const auto& f : g_flags)
    if (f.study == study) out.insert(out.end(), f.bench_args.begin(), f.bench_args.end());
  return out;
}

std::string study_flag_value(const std::string& study, const std::string& flag) {
  std::string v;
  for (const auto& f : g_flags) {
    if (f.study != study || f.flag != flag) continue;
    const std::string& a = f.bench_args[0];
    v = a.find('=') != std::string::npos ? a.substr(a.find('=') + 1) : f.bench_args.size() > 1 ? f.bench_args[1] : "";
  }
  return v;
}

int repetitions_in(const std::vector<std::string>& args) {
  int reps = 1;
  constexpr std::string_view key = "--benchmark_repetitions=";
  for (const auto& a : args)
    if (a.rfind(key, 0) == 0) {
      const int n = std::atoi(a.c_str() + key.size());
      reps = n >= 1 ? n : 1;
    }
  return reps;
}

}  // namespace kvf::cli
