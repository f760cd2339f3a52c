// What the --list pass teaches kvf run before anything is measured: which stream ceilings the kept cases need,
// and, when a bench refuses its flags, which of kvf run's arguments it refused.
#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>
#include <string_view>

#include "kvf/errors.hpp"
#include "run_flags.hpp"
#include "run_plan_detail.hpp"

namespace kvf::cli {

namespace {

constexpr std::size_t kMaxFilterChars = 1000;  // what a bench's --case-filter takes (harness/src/bench_flags.cpp)

std::string regex_escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out.push_back('\\');
    out.push_back(ch);
  }
  return out;
}

// "stream:op=read" for a --list "ceilings" entry.
std::string ref_label(const nlohmann::json& ref) {
  std::string s = ref.value("study", std::string());
  if (ref.contains("match") && ref["match"].is_object())
    for (const auto& [k, v] : ref["match"].items()) s += ":" + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

bool provides(const ListedCase& c, const nlohmann::json& ref) {
  if (!ref.contains("match") || !ref["match"].is_object() || ref["match"].empty()) return false;
  for (const auto& [k, v] : ref["match"].items())
    if (!c.params.contains(k) || c.params[k] != v) return false;
  return true;
}

// The bench flag's name in one of its arguments: "--contexts" of "--contexts=4K".
std::string flag_name(const std::string& arg) { return arg.substr(0, arg.find('=')); }

// Whether `text` names `flag` as a whole word ("--context" is not named by "--contexts").
bool names(const std::string& text, const std::string& flag) {
  for (std::size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const std::size_t end = at + flag.size();
    if (end >= text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-' || text[end] == '_'))
      return true;
  }
  return false;
}

}  // namespace

void throw_bench_refusal(const std::string& study, const std::vector<std::string>& pass, int rc, const std::string& err) {
  const std::string prog = "bench_" + study;
  // The bench's one error line (a bench says a refusal in one line, "bench_<study>: error: ...").
  std::string said;
  std::size_t start = 0;
  while (start < err.size()) {
    std::size_t nl = err.find('\n', start);
    if (nl == std::string::npos) nl = err.size();
    const std::string line = err.substr(start, nl - start);
    if (line.find(": error: ") != std::string::npos || said.empty()) said = line;
    start = nl + 1;
  }
  const std::string prefix = prog + ": error: ";
  if (said.rfind(prefix, 0) == 0) said = said.substr(prefix.size());
  if (said.empty()) said = "exited with " + std::to_string(rc) + " and said nothing";

  std::vector<std::string> named, all;
  for (const auto& f : study_flags()) {
    if (f.study != study) continue;
    all.push_back(f.typed);
    if (names(said, flag_name(f.bench_args[0]))) named.push_back(f.typed);
  }
  bool pass_named = false;
  for (const auto& p : pass) pass_named = pass_named || (p.rfind("--", 0) == 0 && names(said, flag_name(p)));
  std::string msg;
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!named.empty() || (!all.empty() && !pass_named)) {
    msg = list(named.empty() ? all : named) + ": refused by " + prog + " (study " + study + "): " + said;
  } else if (pass_named) {  // only where the bench's line names one of them (kvf gate adds flags of its own)
    std::string typed;
    for (const auto& p : pass) typed += " " + p;
    msg = "--" + typed + ": the flags after -- go to every bench, and " + prog + " (study " + study +
          ") refused them: " + said + "; a flag of one study goes as --<study>.<flag> [value]";
  } else {
    msg = prog + " (study " + study + ") refused its command line: " + said;
  }
  if (rc == kExitUsage) throw UsageError(msg);
  throw std::runtime_error(msg);
}

StreamNeed stream_need(const std::vector<StudyPlan>& others, const StudyPlan& stream) {
  StreamNeed need;
  std::vector<std::string> whole;
  for (const auto& s : others)
    if (study_flag_value(s.study, "case-filter").empty()) whole.push_back(s.study);
  if (!whole.empty()) {
    std::string w;
    for (const auto& s : whole) w += (w.empty() ? "" : ", ") + s;
    need.note = "kvf run: stream runs whole (" + std::to_string(stream.cases.size()) + " cases): " + w +
                " run(s) every case (no --<study>.case-filter); with a case filter on every study only the ceilings "
                "its kept cases are stated against run";
    return need;
  }
  // Each stream ceiling a kept, runnable case names (its `ceiling` or what it `uses`).
  std::vector<nlohmann::json> refs;
  std::set<std::string> labels;
  for (const auto& s : others)
    for (const auto& c : s.cases) {
      if (!c.skipped.empty() || !c.ceilings.is_array()) continue;
      for (const auto& r : c.ceilings)
        if (r.is_object() && r.value("study", std::string()) == "stream" && labels.insert(ref_label(r)).second)
          refs.push_back(r);
    }
  std::string label_text;
  for (const auto& l : labels) label_text += (label_text.empty() ? "" : ", ") + l;
  if (refs.empty()) {
    need.drop = true;
    need.note = "kvf run: stream does not run: the cases the case filters keep state no stream ceiling";
    return need;
  }
  std::vector<std::string> cases;
  for (const auto& c : stream.cases)
    if (c.skipped.empty() && std::any_of(refs.begin(), refs.end(), [&](const auto& r) { return provides(c, r); }))
      cases.push_back(c.name);
  if (cases.empty()) {
    need.note = "kvf run: stream runs whole: none of its cases here provides " + label_text +
                ", which the kept cases are stated against (their percent of ceiling stays empty)";
    return need;
  }
  std::string filter = "^(";
  for (std::size_t i = 0; i < cases.size(); ++i) filter += (i ? "|" : "") + regex_escaped(cases[i]);
  filter += ")$";
  if (filter.size() > kMaxFilterChars) {
    need.note = "kvf run: stream runs whole: the " + std::to_string(cases.size()) + " ceiling cases of " + label_text +
                " would need a --case-filter over " + std::to_string(kMaxFilterChars) + " characters";
    return need;
  }
  need.filter = filter;
  need.note = "kvf run: stream runs only its cases that provide " + label_text +
              " (the ceilings the kept cases are stated against) and the cases those divide by";
  return need;
}

}  // namespace kvf::cli
