#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"

namespace teeny {

double percentile_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) throw Error("percentile of no samples");
  if (!(p >= 0 && p <= 100)) throw Error(fmt::format("percentile {} is outside [0, 100]", p));
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return sorted[lower] + (sorted[upper] - sorted[lower]) * fraction;
}

Summary summarize(std::vector<double> samples) {
  if (samples.empty()) throw Error("cannot summarise an empty set of timing samples");
  std::sort(samples.begin(), samples.end());
  Summary s;
  s.count = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.count);
  s.median = percentile_sorted(samples, 50);
  s.p90 = percentile_sorted(samples, 90);
  s.q1 = percentile_sorted(samples, 25);
  s.q3 = percentile_sorted(samples, 75);
  s.rel_iqr = s.median > 0 ? (s.q3 - s.q1) / s.median : 0;
  return s;
}

}  // namespace teeny
