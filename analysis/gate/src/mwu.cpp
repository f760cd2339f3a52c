// Mann-Whitney U test, two-sided, matching scipy.stats.mannwhitneyu(x, y) with its defaults.
//
// scipy's method='auto' (scipy/stats/_mannwhitneyu.py, _mwu_choose_method): the normal approximation
// when both samples have more than 8 values or when the pooled sample has any tie; the exact null
// distribution otherwise (i.e. min(nx, ny) <= 8 and no ties). The exact two-sided p-value is
// 2 * P(U >= max(U1, U2)) = 2 * P(U <= min(U1, U2)) by symmetry, clipped to 1. The asymptotic one is
// z = (U1 - nx*ny/2 -/+ 0.5) / s with s = sqrt(nx*ny/12 * ((n+1) - sum(t^3 - t) / (n*(n-1)))), the
// 0.5 taken towards the mean, and p = 2 * sf(|z|). We follow the same rule so p-values can be checked
// against scipy; where scipy returns NaN (every value equal: s = 0) we return p = 1.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "kvf/gate.hpp"

namespace kvf::gate {

double mwu_exact_cdf(std::size_t n1, std::size_t n2, std::size_t u) {
  const std::size_t m = std::min(n1, n2), n = std::max(n1, n2);
  if (m == 0) return 1.0;
  if (u >= m * n) return 1.0;
  // Number of arrangements with U = k is the coefficient of q^k in the Gaussian binomial
  // [m+n choose m]_q = prod_{j=1..m} (1 - q^(n+j)) / (1 - q^j). Both the multiplication by (1 - q^a)
  // and the division by (1 - q^j) only look at lower coefficients, so the polynomial can be cut
  // after q^u. Coefficients near q^0 stay small integers and are exact; long double keeps the
  // relative error of the larger ones far below anything a p-value cares about.
  std::vector<long double> c(u + 1, 0.0L);
  c[0] = 1.0L;
  for (std::size_t j = 1; j <= m; ++j) {
    const std::size_t a = n + j;
    for (std::size_t k = u; k >= a && k <= u; --k) c[k] -= c[k - a];  // * (1 - q^a)
    for (std::size_t k = j; k <= u; ++k) c[k] += c[k - j];            // / (1 - q^j)
  }
  long double total = 1.0L;  // C(m+n, m)
  for (std::size_t j = 1; j <= m; ++j) total = total * static_cast<long double>(n + j) / static_cast<long double>(j);
  long double s = 0;
  for (std::size_t k = 0; k <= u; ++k) s += c[k];
  return static_cast<double>(std::min(1.0L, s / total));
}

double mwu_min_p(std::size_t n1, std::size_t n2) {
  if (n1 == 0 || n2 == 0) return 1.0;
  return std::min(1.0, 2.0 * mwu_exact_cdf(n1, n2, 0));
}

MwuResult mann_whitney_u(std::span<const double> x, std::span<const double> y, MwuMethod method) {
  if (x.empty() || y.empty()) throw std::invalid_argument("mann_whitney_u: empty sample");
  const std::size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  // Pool, sort, and give tied values their average rank.
  std::vector<std::pair<double, bool>> pooled;  // value, belongs to x
  pooled.reserve(n);
  for (double v : x) pooled.emplace_back(v, true);
  for (double v : y) pooled.emplace_back(v, false);
  std::sort(pooled.begin(), pooled.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  double rank_sum_x = 0, tie_term = 0;
  bool ties = false;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;  // ranks i+1..j
    for (std::size_t k = i; k < j; ++k)
      if (pooled[k].second) rank_sum_x += avg_rank;
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j;
  }
  MwuResult r;
  const double dn1 = static_cast<double>(n1), dn2 = static_cast<double>(n2), dn = static_cast<double>(n);
  r.u1 = rank_sum_x - dn1 * (dn1 + 1) / 2;
  r.ties = ties;
  const double u2 = dn1 * dn2 - r.u1;
  r.exact = method == MwuMethod::automatic ? (!(n1 > 8 && n2 > 8) && !ties) : method == MwuMethod::exact;
  if (r.exact) {
    // With ties (forced exact) U can be a half-integer; scipy truncates it to an integer.
    const auto umin = static_cast<std::size_t>(dn1 * dn2 - std::trunc(std::max(r.u1, u2)));
    r.p = std::min(1.0, 2.0 * mwu_exact_cdf(n1, n2, umin));
    return r;
  }
  const double mu = dn1 * dn2 / 2;
  const double s = std::sqrt(dn1 * dn2 / 12.0 * ((dn + 1) - tie_term / (dn * (dn - 1))));
  double num = r.u1 - mu;
  if (num > 0) num -= 0.5;
  else if (num < 0) num += 0.5;
  if (!(s > 0)) {  // every value equal: no evidence of any difference
    r.p = 1.0;
    return r;
  }
  const double z = num / s;
  r.p = std::min(1.0, std::erfc(std::fabs(z) / std::sqrt(2.0)));  // 2 * sf(|z|)
  return r;
}

}  // namespace kvf::gate
