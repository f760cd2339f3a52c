// Numbers in case names and notes, shared by the bench's units and background.cpp (which the unit tests build
// alone): one definition, so the unity build of bench_idleness sees no second one.
#pragma once
#include <sstream>
#include <string>

namespace kvf::idleness {

inline std::string num(double v, int prec = 4) {
  std::ostringstream o;
  o.precision(prec);
  o << v;
  return o.str();
}
inline std::string i2s(long long v) { return std::to_string(v); }

}  // namespace kvf::idleness
