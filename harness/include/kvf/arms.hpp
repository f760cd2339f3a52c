// Arms declared once. An arm of a study is one declaration: its name, a one-line doc, its axes (each a
// parameter column with default values for the CPU, the GPU and --quick), which points of the grid are
// valid, how a case is named, and the factory that makes the case. The case name, its parameter columns,
// --list, the --arms check, the time estimate and the quick/CPU/GPU defaults all come from it.
//
//   kvf::Arm<FrontierEnv> xq{
//       .name = "xq", .doc = "recompute K/V from int8/int4 X (dequant, GEMM, RoPE, write)",
//       .axes = {{.name = "model", ...}, {.name = "xdtype", .cpu = {"int8", "int4"}},
//                {.name = "tokens", .cpu = {"128"}, .gpu = {"16", "128", "1024", "4096"}, .flag = "--tokens"}, ...},
//       .valid = [](const kvf::Point& p, const FrontierEnv&) { return p.integer("tokens") * p.integer("pages") <= 65536; },
//       .case_name = "recompute/xq/{model}/{xdtype}/T{tokens}xP{pages}",
//       .make = [](const kvf::Point& p, FrontierEnv& env) { ... return case; }};
//
// A study lists its arms in one place (an ArmList); bench_main knows none of them.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvf/results.hpp"
#include "kvf/study.hpp"

namespace kvf {

// The values of one point of an arm's sweep: axis name -> value text, in the arm's axis order. These are
// the case's parameter columns (the factory may add derived columns after them).
class Point {
 public:
  Point() = default;
  explicit Point(std::vector<Param> values) : values_(std::move(values)) {}
  bool has(std::string_view axis) const;
  // The value of `axis`; std::logic_error when the arm declares no such axis (a bug in the declaration).
  const std::string& operator[](std::string_view axis) const;
  long long integer(std::string_view axis) const;  // std::logic_error when the value is not a whole number
  double number(std::string_view axis) const;      // likewise for a number
  void set(std::string_view axis, std::string value);  // replaces, or appends a new axis
  const std::vector<Param>& values() const { return values_; }
  bool operator==(const Point& o) const;

 private:
  std::vector<Param> values_;
};

// Which defaults a sweep takes.
struct Target {
  bool gpu = false;
  bool quick = false;
};

// One product of axis value lists (first axis slowest). A grid is the union of its products, in order,
// duplicates dropped: a side sweep is a second product.
struct Product {
  std::vector<std::pair<std::string, std::vector<std::string>>> lists;
};
using Grid = std::vector<Product>;
std::vector<Point> expand(const Grid& grid);

// "{name}" placeholders replaced by the point's values; std::logic_error on an unknown name or a lone brace.
std::string format_name(std::string_view pattern, const Point& p);

struct Axis {
  std::string name;  // the parameter column, and {name} in case names
  std::string doc;
  // Default values: on the CPU, on the GPU (empty: as the CPU), with --quick (empty: the arm is not part of
  // the quick subset; quick_gpu empty: as quick).
  std::vector<std::string> cpu, gpu, quick, quick_gpu;
  // The study flag whose list replaces these values (e.g. "--tokens"); empty: not user-swept.
  std::string flag;
  // When the user gives the list of another axis of this arm, this axis takes these values (empty: the
  // first of its defaults for the target). The user's flags replace the whole default grid, so that a
  // user sweep is exactly the product of what was asked.
  std::vector<std::string> fixed;

  const std::vector<std::string>& defaults(const Target& t) const;
};

// An axis with the same values on every target, --quick included (the part of a study an arm belongs to,
// the arms a declaration covers).
inline Axis everywhere_axis(std::string name, std::vector<std::string> values, std::string doc = "") {
  return Axis{.name = std::move(name), .doc = std::move(doc), .cpu = values, .quick = values};
}

// User lists by flag (e.g. "--tokens" -> {"64", "128"}), already checked by the study.
using UserLists = std::map<std::string, std::vector<std::string>>;

template <class Env>
struct Arm {
  std::string name;  // what --arms takes
  std::string doc;   // one line, for --help and the study README
  bool on_cpu = true, on_gpu = true;  // the backends it runs on
  std::vector<Axis> axes;
  // The points to run where the axis defaults are not a plain product (a list of (T, P) pairs, a side sweep
  // at one context): called instead of the product of the axes' defaults. User lists still replace it.
  std::function<Grid(const Target&, const Env&)> default_grid;
  // Points the sweep drops (e.g. more than 65536 rows per call); absent: all valid.
  std::function<bool(const Point&, const Env&)> valid;
  // Case name: a format over the point ("recompute/x/{model}/T{tokens}xP{pages}"), or a function where
  // parts are conditional.
  std::string case_name;
  std::function<std::string(const Point&)> case_name_fn;
  // Makes the case for a point: its name and parameter columns are set by the registry (the point's
  // values, then any the factory put in `params`). May return kvf::skipped_case(...) with its reason.
  std::function<std::unique_ptr<Case>(const Point&, Env&)> make;
};

// The grid an arm runs for a target and the user's lists. With --quick an arm outside the quick subset
// (an axis without quick values, or an empty declared quick grid) runs nothing, whatever the lists. Else
// the user's lists (other axes at their fixed values) when any of the arm's flags was given, else its
// declared defaults (declared_default when given, else the product of the axes' defaults).
Grid arm_grid(const std::vector<Axis>& axes, const Target& t, const UserLists& user,
              const std::optional<Grid>& declared_default);

// "a, b, c": for messages and --help.
std::string join_names(const std::vector<std::string>& names, const char* sep = ", ");

// Checks a --arms list against the known names: kvf::bad_flag(flag, value, "unknown arm; allowed: ...").
void check_arm_names(const char* flag, const std::vector<std::string>& given, const std::vector<std::string>& known);
// An arm the user named (known to the study) that has no cases on this run's backend: one line saying where it runs,
// rather than a run without it (here: the arms with cases on this backend; gpu: this run's target).
void check_arms_here(const char* flag, const std::vector<std::string>& given, const std::vector<std::string>& here,
                     bool gpu);

template <class Env>
class ArmList {
 public:
  explicit ArmList(std::vector<Arm<Env>> arms) : arms_(std::move(arms)) {}
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& a : arms_) n.push_back(a.name);
    return n;
  }
  const Arm<Env>& at(std::string_view name) const {
    for (const auto& a : arms_)
      if (a.name == name) return a;
    throw std::logic_error("no arm named " + std::string(name));
  }
  const std::vector<Arm<Env>>& all() const { return arms_; }
  // The names of the arms with cases on that target (GPU or CPU).
  std::vector<std::string> names_on(bool gpu) const {
    std::vector<std::string> n;
    for (const auto& a : arms_)
      if ((gpu ? a.on_gpu : a.on_cpu) && std::find(n.begin(), n.end(), a.name) == n.end()) n.push_back(a.name);
    return n;
  }

  // The points of one arm, valid ones only.
  std::vector<Point> points(const Arm<Env>& arm, const Target& t, const UserLists& user, const Env& env) const {
    if (!(t.gpu ? arm.on_gpu : arm.on_cpu)) return {};
    std::optional<Grid> declared;
    if (arm.default_grid) declared = arm.default_grid(t, env);
    std::vector<Point> out;
    for (auto& p : expand(arm_grid(arm.axes, t, user, declared)))
      if (!arm.valid || arm.valid(p, env)) out.push_back(std::move(p));
    return out;
  }
  // Makes the cases of one arm (named, with parameter columns) and appends them to `out`.
  void add_cases(const Arm<Env>& arm, const Target& t, const UserLists& user, Env& env,
                 std::vector<std::unique_ptr<Case>>& out) const {
    for (const auto& p : points(arm, t, user, env)) out.push_back(make_case(arm, p, env));
  }
  std::unique_ptr<Case> make_case(const Arm<Env>& arm, const Point& p, Env& env) const {
    auto c = arm.make(p, env);
    finish_case(*c, p, arm.case_name_fn ? arm.case_name_fn(p) : format_name(arm.case_name, p));
    return c;
  }

 private:
  std::vector<Arm<Env>> arms_;
};

// Sets the case's name and puts the point's values before the parameter columns the factory added
// (a column the factory set itself keeps the factory's value).
void finish_case(Case& c, const Point& p, std::string name);

}  // namespace kvf
