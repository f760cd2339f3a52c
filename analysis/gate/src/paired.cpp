// The statistics of the A/B mode: Wilcoxon's signed-rank test on paired per-round log ratios, the Hodges-Lehmann
// shift estimate with its distribution-free interval, the smallest shift a run could have detected, Holm's
// correction over cases, and the balanced round order.
//
// The signed-rank test follows scipy.stats.wilcoxon(d) with its defaults (zero_method='wilcox': zeros dropped;
// correction=False; method='auto'): the exact null distribution when at most 50 differences are left and their
// absolute values have no ties, else the normal approximation with the tie correction
// var = n(n+1)(2n+1)/24 - sum(t^3 - t)/48. We follow the same rule so p-values can be checked by hand or against
// scipy; where nothing is left (every difference zero) p = 1.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kvf/gate.hpp"

namespace kvf::gate {

namespace {

constexpr std::size_t kExactMaxN = 50;

// Number of subsets of {1..n} per rank sum (index 0..n(n+1)/2). Doubles hold the counts exactly up to 2^53,
// far above 2^50.
std::vector<double> rank_sum_counts(std::size_t n) {
  const std::size_t top = n * (n + 1) / 2;
  std::vector<double> c(top + 1, 0.0);
  c[0] = 1.0;
  for (std::size_t r = 1; r <= n; ++r)
    for (std::size_t s = r * (r + 1) / 2; s >= r; --s) c[s] += c[s - r];
  return c;
}

double normal_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// z with normal_sf(z) = q, for q in (0, 0.5]: bisection is plenty for an interval's bound.
double normal_isf(double q) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (normal_sf(mid) > q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

struct Ranked {
  std::vector<double> ranks;  // of |d|, zeros dropped, in the order of `signs`
  std::vector<bool> positive;
  double tie_term = 0;        // sum(t^3 - t) over groups of tied |d|
  bool ties = false;
};

Ranked rank_abs(std::span<const double> d) {
  std::vector<std::pair<double, bool>> v;  // |d|, d > 0
  for (double x : d)
    if (x != 0) v.emplace_back(std::fabs(x), x > 0);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Ranked r;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j < v.size() && v[j].first == v[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double avg = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (std::size_t k = i; k < j; ++k) {
      r.ranks.push_back(avg);
      r.positive.push_back(v[k].second);
    }
    if (t > 1) {
      r.ties = true;
      r.tie_term += t * t * t - t;
    }
    i = j;
  }
  return r;
}

double median_sorted(const std::vector<double>& s) {
  const std::size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

}  // namespace

double signed_rank_cdf(std::size_t n, double w) {
  if (w < 0) return 0.0;
  const std::size_t top = n * (n + 1) / 2;
  if (w >= static_cast<double>(top)) return 1.0;
  const auto c = rank_sum_counts(n);
  const auto upto = static_cast<std::size_t>(std::floor(w));
  double s = 0;
  for (std::size_t k = 0; k <= upto; ++k) s += c[k];
  return std::min(1.0, s / std::ldexp(1.0, static_cast<int>(n)));
}

SignedRank wilcoxon_signed_rank(std::span<const double> d) {
  for (double x : d)
    if (!std::isfinite(x)) throw std::invalid_argument("wilcoxon_signed_rank: a difference is not finite");
  const Ranked r = rank_abs(d);
  SignedRank out;
  out.n = r.ranks.size();
  for (std::size_t i = 0; i < out.n; ++i)
    if (r.positive[i]) out.w_plus += r.ranks[i];
  if (out.n == 0) return out;  // every difference zero: no evidence either way
  const double n = static_cast<double>(out.n);
  out.exact = out.n <= kExactMaxN && !r.ties;
  if (out.exact) {
    // W+ is symmetric about M/2 (M = n(n+1)/2): P(W+ >= w) = P(W+ <= M - w), with no cancellation for small p.
    out.p_less = signed_rank_cdf(out.n, out.w_plus);
    out.p_greater = signed_rank_cdf(out.n, n * (n + 1) / 2 - out.w_plus);
  } else {
    const double mean = n * (n + 1) / 4;
    const double var = n * (n + 1) * (2 * n + 1) / 24 - r.tie_term / 48;
    if (!(var > 0)) return out;
    const double z = (out.w_plus - mean) / std::sqrt(var);
    out.p_greater = normal_sf(z);
    out.p_less = normal_sf(-z);
  }
  out.p_greater = std::clamp(out.p_greater, 0.0, 1.0);
  out.p_less = std::clamp(out.p_less, 0.0, 1.0);
  out.p_two_sided = std::min(1.0, 2.0 * std::min(out.p_greater, out.p_less));
  return out;
}

ShiftEstimate hodges_lehmann(std::span<const double> d, double alpha) {
  if (d.empty()) throw std::invalid_argument("hodges_lehmann: no differences");
  if (!(alpha > 0 && alpha < 1)) throw std::invalid_argument("hodges_lehmann: alpha must be in (0, 1)");
  std::vector<double> walsh;  // (d_i + d_j) / 2 for i <= j
  walsh.reserve(d.size() * (d.size() + 1) / 2);
  for (std::size_t i = 0; i < d.size(); ++i)
    for (std::size_t j = i; j < d.size(); ++j) walsh.push_back(0.5 * (d[i] + d[j]));
  std::sort(walsh.begin(), walsh.end());
  ShiftEstimate e;
  e.estimate = median_sorted(walsh);
  // The shifts the two-sided signed-rank test at alpha keeps: with t the largest w such that P(W+ <= w) <= alpha/2
  // (by symmetry the upper tail starts at M - t), the interval is [walsh_(t+1), walsh_(M-t)] (1-based).
  const std::size_t n = d.size(), m = walsh.size();
  double t = -1;
  if (n <= kExactMaxN) {
    const auto c = rank_sum_counts(n);
    const double total = std::ldexp(1.0, static_cast<int>(n));
    double cum = 0;
    for (std::size_t w = 0; w < c.size(); ++w) {
      cum += c[w];
      if (cum / total > alpha / 2) break;
      t = static_cast<double>(w);
    }
  } else {
    const double nn = static_cast<double>(n);
    const double mean = nn * (nn + 1) / 4, sd = std::sqrt(nn * (nn + 1) * (2 * nn + 1) / 24);
    t = std::floor(mean - normal_isf(alpha / 2) * sd - 0.5);  // the last w whose lower tail stays within alpha/2
  }
  const double inf = std::numeric_limits<double>::infinity();
  if (t < 0) {
    e.lo = -inf;
    e.hi = inf;
    return e;
  }
  const auto k = static_cast<std::size_t>(t);
  e.lo = walsh[k];
  e.hi = walsh[m - 1 - k];
  return e;
}

double detectable_shift(std::span<const double> d, double level) {
  const double inf = std::numeric_limits<double>::infinity();
  if (d.empty()) return inf;
  const double hl = hodges_lehmann(d, 0.5).estimate;
  std::vector<double> e(d.begin(), d.end());
  double spread = 0;
  for (double& x : e) {
    x -= hl;
    spread = std::max(spread, std::fabs(x));
  }
  auto p_at = [&](double s) {
    std::vector<double> shifted(e);
    for (double& x : shifted) x += s;
    return wilcoxon_signed_rank(shifted).p_greater;
  };
  // Past every residual all differences are positive: the smallest p the test can give for this n.
  double hi = 2 * spread + 1e-12;
  if (!(p_at(hi) < level)) return inf;
  if (p_at(0) < level) return 0;
  double lo = 0;
  for (int i = 0; i < 100 && hi - lo > 1e-9 * std::max(1.0, hi); ++i) {
    const double mid = 0.5 * (lo + hi);
    (p_at(mid) < level ? hi : lo) = mid;
  }
  return hi;
}

std::vector<double> holm_adjust(std::span<const double> p) {
  const std::size_t m = p.size();
  std::vector<std::size_t> idx(m);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return p[a] < p[b]; });
  std::vector<double> out(m);
  double running = 0;
  for (std::size_t rank = 0; rank < m; ++rank) {
    const double adj = std::min(1.0, static_cast<double>(m - rank) * p[idx[rank]]);
    running = std::max(running, adj);  // step-down: never below an earlier adjusted p
    out[idx[rank]] = running;
  }
  return out;
}

std::vector<bool> ab_order(std::size_t rounds, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<bool> out;
  out.reserve(rounds);
  // The draws are rng()'s raw bits (not a distribution, whose algorithm the standard leaves open), so a seed
  // gives the same order with every standard library.
  for (std::size_t i = 0; i + 1 < rounds; i += 2) {
    const bool base_first = (rng() >> 63) != 0;
    out.push_back(base_first);
    out.push_back(!base_first);
  }
  if (out.size() < rounds) out.push_back((rng() >> 63) != 0);
  return out;
}

}  // namespace kvf::gate
