// Student's t distribution for the stored-baseline gate's run-level test (verdict.cpp): its upper tail through
// the regularized incomplete beta function, and the inverse of that tail by bisection. A few dozen lines of
// textbook numerics (the continued fraction of I_x(a, b), evaluated by the modified Lentz method) rather than a
// dependency: the gate needs two functions, and the tests pin them to tabulated quantiles.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kvf/gate.hpp"

namespace kvf::gate {
namespace {

// The continued fraction of I_x(a, b) (converges fast for x < (a + 1) / (a + b + 2)).
double beta_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300, eps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    // even step
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    // odd step
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < eps) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function, for x in [0, 1].
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                                b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
  return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

}  // namespace

double student_t_sf(double t, double df) {
  if (!(df > 0)) throw std::invalid_argument("student_t_sf: degrees of freedom must be > 0");
  if (std::isnan(t)) return std::nan("");
  if (std::isinf(t)) return t > 0 ? 0.0 : 1.0;
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));  // P(T > |t|)
  return t >= 0 ? tail : 1 - tail;
}

double student_t_isf(double p, double df) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("student_t_isf: p must be in (0, 1)");
  if (p > 0.5) return -student_t_isf(1 - p, df);
  double lo = 0, hi = 1;
  while (student_t_sf(hi, df) > p) {
    lo = hi;
    hi *= 2;
    if (hi > 1e300) return std::numeric_limits<double>::infinity();
  }
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_sf(mid, df) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace kvf::gate
