#include "core/perf_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/stats.h"

namespace teeny {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

void check_sample(const std::vector<double>& sample, const char* name) {
  if (sample.empty()) throw Error(fmt::format("compare: sample {} is empty", name));
  for (size_t i = 0; i < sample.size(); ++i) {
    if (!std::isfinite(sample[i]))
      throw Error(fmt::format("compare: sample {} has a non-finite time ({}) at index {}", name, sample[i], i));
    if (sample[i] <= 0)
      throw Error(fmt::format("compare: sample {} has a non-positive time ({}) at index {}", name, sample[i], i));
  }
}

// The z with P(Z > z) = tail for a standard normal Z, tail in (0, 0.5), by bisection on erfc down to
// adjacent doubles: exact to erfc's accuracy, with no table of coefficients to get wrong.
double normal_upper_quantile(double tail) {
  const auto upper_tail = [](double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); };
  double lo = 0, hi = 40;  // upper_tail(40) underflows to 0, below any tail a double confidence gives
  while (true) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) return hi;
    (upper_tail(mid) > tail ? lo : hi) = mid;
  }
}

// The pairwise differences y_j - x_i of two ascending samples, as an implicit sorted multiset.
class PairDifferences {
 public:
  PairDifferences(const std::vector<double>& x, const std::vector<double>& y) : x_(x), y_(y) {}

  uint64_t size() const { return static_cast<uint64_t>(x_.size()) * y_.size(); }

  // The k-th smallest difference, k 1-based. Both ends of the bracket [low, high] are achievable
  // differences with low <= answer and at least k differences <= high; each pass moves one end past
  // the midpoint to the nearest achievable difference, so the bracket both halves in value and
  // loses at least one achievable value, and closes on the answer itself.
  double order_statistic(uint64_t k) const {
    double low = y_.front() - x_.back(), high = y_.back() - x_.front();
    while (low < high) {
      double mid = low + (high - low) / 2;
      if (mid >= high) mid = low;  // rounding between adjacent doubles
      const Split split = split_at(mid);
      if (split.count_at_most >= k) {
        high = split.largest_at_most;
      } else {
        low = split.smallest_above;
      }
    }
    return high;
  }

  // The median of the differences: for even counts the mean of the middle two, the second found from
  // the first with one more pass (it equals it, or is the next achievable difference).
  double median() const {
    const uint64_t n = size();
    if (n % 2 == 1) return order_statistic((n + 1) / 2);
    const double lower = order_statistic(n / 2);
    const Split split = split_at(lower);
    const double upper = split.count_at_most > n / 2 ? lower : split.smallest_above;
    return (lower + upper) / 2;
  }

 private:
  struct Split {
    uint64_t count_at_most = 0;  // differences <= v
    double largest_at_most = -kInfinity;
    double smallest_above = kInfinity;
  };

  // The differences against a value v, compared as computed so that counts agree with the values
  // order_statistic returns. For ascending y_j the x_i with y_j - x_i <= v are a suffix of x whose
  // start only moves right (rounding is monotone), so one merge-like pass suffices. Each step either
  // moves past an x_i (its difference is above v) or counts a row (its difference is the row's
  // largest <= v); the extremes of those differences are the achievable neighbours of v. Written
  // without data-dependent branches: the outcome of each comparison is unpredictable.
  Split split_at(double v) const {
    Split split;
    const size_t n_x = x_.size(), n_y = y_.size();
    size_t i = 0, j = 0;
    while (i < n_x && j < n_y) {
      const double d = y_[j] - x_[i];
      const size_t above = d > v;
      const double if_above[2] = {kInfinity, d}, if_at_most[2] = {d, -kInfinity};
      split.smallest_above = std::min(split.smallest_above, if_above[above]);
      split.largest_at_most = std::max(split.largest_at_most, if_at_most[above]);
      split.count_at_most += (n_x - i) & (above - 1);  // the row's count when d is not above v
      i += above;
      j += 1 - above;
    }
    return split;
  }

  const std::vector<double>& x_;
  const std::vector<double>& y_;
};

struct MannWhitney {
  double u_b = 0;    // pairs with b > a, ties counted as half
  double sigma = 0;  // standard deviation of U under no shift, tie-corrected
};

// U from the ranks of the merged ascending samples, ties given their average rank.
MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y) {
  const double n_a = static_cast<double>(x.size()), n_b = static_cast<double>(y.size());
  const double n = n_a + n_b;
  double rank_sum_b = 0, tie_term = 0, below = 0;
  size_t i = 0, j = 0;
  while (i < x.size() || j < y.size()) {
    const double v = j == y.size() || (i < x.size() && x[i] < y[j]) ? x[i] : y[j];
    double ties_a = 0, ties_b = 0;
    for (; i < x.size() && x[i] == v; ++i) ++ties_a;
    for (; j < y.size() && y[j] == v; ++j) ++ties_b;
    const double t = ties_a + ties_b;
    rank_sum_b += ties_b * (below + (t + 1) / 2);
    tie_term += t * t * t - t;
    below += t;
  }
  MannWhitney mw;
  mw.u_b = rank_sum_b - n_b * (n_b + 1) / 2;
  const double variance = n_a * n_b / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  mw.sigma = std::sqrt(std::max(variance, 0.0));
  return mw;
}

double two_sided_p(const MannWhitney& mw, double n_pairs) {
  if (mw.sigma == 0) return 1;  // every time equal: nothing to tell apart
  const double z = std::max(std::abs(mw.u_b - n_pairs / 2) - 0.5, 0.0) / mw.sigma;
  return std::min(std::erfc(z / std::sqrt(2.0)), 1.0);
}

// The k of the interval [d_(k), d_(N-k+1)]: the rank where U's normal approximation leaves
// (1 - confidence) / 2 in each tail; 0 when the samples are too small to reach the confidence.
uint64_t interval_rank(uint64_t n_pairs, double sigma, double confidence) {
  const double z = normal_upper_quantile((1 - confidence) / 2);
  const double k = std::floor(static_cast<double>(n_pairs) / 2 - z * sigma);
  return k < 1 ? 0 : static_cast<uint64_t>(k);
}

// Ascending logs of an ascending sample; log is monotone, so they stay sorted.
std::vector<double> logs_of(const std::vector<double>& sorted) {
  std::vector<double> logs(sorted.size());
  std::transform(sorted.begin(), sorted.end(), logs.begin(), [](double v) { return std::log(v); });
  return logs;
}

std::vector<double> sorted_copy(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kFaster:
      return "faster";
    case Verdict::kSlower:
      return "slower";
    case Verdict::kSame:
      return "no difference";
  }
  return "no difference";
}

RatioEstimate compare_samples(const std::vector<double>& a, const std::vector<double>& b, double confidence) {
  check_sample(a, "A");
  check_sample(b, "B");
  if (!(confidence > 0 && confidence < 1))
    throw Error(fmt::format("compare: confidence {} is outside (0, 1)", confidence));

  const std::vector<double> sorted_a = sorted_copy(a), sorted_b = sorted_copy(b);
  const std::vector<double> x = logs_of(sorted_a), y = logs_of(sorted_b);
  const PairDifferences differences(x, y);
  const uint64_t n_pairs = differences.size();
  const MannWhitney mw = mann_whitney(x, y);

  RatioEstimate e;
  e.n_a = a.size();
  e.n_b = b.size();
  e.median_a = percentile_sorted(sorted_a, 50);
  e.median_b = percentile_sorted(sorted_b, 50);
  e.confidence = confidence;
  e.p_value = two_sided_p(mw, static_cast<double>(n_pairs));
  e.ratio = std::exp(differences.median());
  const uint64_t k = interval_rank(n_pairs, mw.sigma, confidence);
  if (k == 0) {  // unbounded: no verdict from so few samples
    e.ratio_low = 0;
    e.ratio_high = std::numeric_limits<double>::infinity();
    return e;
  }
  e.ratio_low = std::exp(differences.order_statistic(k));
  e.ratio_high = std::exp(differences.order_statistic(n_pairs - k + 1));
  return e;
}

Verdict verdict_of(const RatioEstimate& e) {
  if (e.ratio_high < 1) return Verdict::kFaster;
  if (e.ratio_low > 1) return Verdict::kSlower;
  return Verdict::kSame;
}

}  // namespace teeny
