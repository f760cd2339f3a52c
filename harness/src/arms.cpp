#include "kvf/arms.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "kvf/errors.hpp"

namespace kvf {

bool Point::has(std::string_view axis) const {
  return std::any_of(values_.begin(), values_.end(), [&](const Param& p) { return p.name == axis; });
}

const std::string& Point::operator[](std::string_view axis) const {
  for (const auto& p : values_)
    if (p.name == axis) return p.value;
  throw std::logic_error("point has no axis " + std::string(axis));
}

long long Point::integer(std::string_view axis) const {
  const std::string& v = (*this)[axis];
  long long x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty())
    throw std::logic_error("axis " + std::string(axis) + " value '" + v + "' is not a whole number");
  return x;
}

double Point::number(std::string_view axis) const {
  const std::string& v = (*this)[axis];
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || !std::isfinite(x))
    throw std::logic_error("axis " + std::string(axis) + " value '" + v + "' is not a number");
  return x;
}

void Point::set(std::string_view axis, std::string value) {
  for (auto& p : values_)
    if (p.name == axis) {
      p.value = std::move(value);
      return;
    }
  values_.push_back({std::string(axis), std::move(value)});
}

bool Point::operator==(const Point& o) const {
  if (values_.size() != o.values_.size()) return false;
  for (std::size_t i = 0; i < values_.size(); ++i)
    if (values_[i].name != o.values_[i].name || values_[i].value != o.values_[i].value) return false;
  return true;
}

std::vector<Point> expand(const Grid& grid) {
  std::vector<Point> out;
  for (const auto& prod : grid) {
    if (std::any_of(prod.lists.begin(), prod.lists.end(), [](const auto& l) { return l.second.empty(); })) continue;
    std::vector<std::size_t> at(prod.lists.size(), 0);
    while (true) {
      std::vector<Param> v;
      for (std::size_t i = 0; i < at.size(); ++i) v.push_back({prod.lists[i].first, prod.lists[i].second[at[i]]});
      Point p(std::move(v));
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
      // Odometer, last axis fastest.
      bool done = true;
      for (std::size_t k = at.size(); k-- > 0;) {
        if (++at[k] < prod.lists[k].second.size()) {
          done = false;
          break;
        }
        at[k] = 0;
      }
      if (done) break;
    }
  }
  return out;
}

std::string format_name(std::string_view pattern, const Point& p) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char ch = pattern[i];
    if (ch == '}') throw std::logic_error("case name format '" + std::string(pattern) + "': lone '}'");
    if (ch != '{') {
      out.push_back(ch);
      continue;
    }
    const auto close = pattern.find('}', i);
    if (close == std::string_view::npos)
      throw std::logic_error("case name format '" + std::string(pattern) + "': '{' without '}'");
    out += p[pattern.substr(i + 1, close - i - 1)];
    i = close;
  }
  return out;
}

const std::vector<std::string>& Axis::defaults(const Target& t) const {
  if (t.quick) return t.gpu && !quick_gpu.empty() ? quick_gpu : quick;
  return t.gpu && !gpu.empty() ? gpu : cpu;
}

Grid arm_grid(const std::vector<Axis>& axes, const Target& t, const UserLists& user,
              const std::optional<Grid>& declared_default) {
  const bool in_quick =
      declared_default ? !expand(*declared_default).empty()
                       : std::all_of(axes.begin(), axes.end(), [&](const Axis& a) { return !a.defaults(t).empty(); });
  if (t.quick && !in_quick) return {};
  const auto given = [&](const Axis& a) {
    if (a.flag.empty()) return false;
    const auto it = user.find(a.flag);
    return it != user.end() && !it->second.empty();
  };
  if (std::any_of(axes.begin(), axes.end(), given)) {
    Product prod;
    for (const auto& a : axes) {
      if (given(a)) {
        prod.lists.push_back({a.name, user.at(a.flag)});
        continue;
      }
      std::vector<std::string> v = a.fixed;
      if (v.empty()) {
        const auto& d = a.defaults(Target{t.gpu, false});
        if (!d.empty()) v = {d.front()};
      }
      prod.lists.push_back({a.name, v});
    }
    return {prod};
  }
  if (declared_default) return *declared_default;
  Product prod;
  for (const auto& a : axes) prod.lists.push_back({a.name, a.defaults(t)});
  return {prod};
}

std::string join_names(const std::vector<std::string>& names, const char* sep) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

void check_arm_names(const char* flag, const std::vector<std::string>& given, const std::vector<std::string>& known) {
  for (const auto& g : given)
    if (std::find(known.begin(), known.end(), g) == known.end())
      bad_flag(flag, g, "unknown arm; allowed: " + join_names(known, ","));
}

void check_arms_here(const char* flag, const std::vector<std::string>& given, const std::vector<std::string>& here,
                     bool gpu) {
  for (const auto& g : given)
    if (std::find(here.begin(), here.end(), g) == here.end())
      bad_flag(flag, g, gpu ? "a CPU arm, which the cuda backend does not run (--backend cpu)"
                            : "a GPU arm, which the CPU backend does not run (--backend cuda on a machine with a GPU)");
}

void finish_case(Case& c, const Point& p, std::string name) {
  c.name = std::move(name);
  std::vector<Param> params = p.values();
  for (auto& extra : c.params) set_param(params, extra.name, extra.value);
  c.params = std::move(params);
}

}  // namespace kvf
