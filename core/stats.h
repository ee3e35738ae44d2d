// Summary statistics of timing samples, used by the profiler and its reports.
#pragma once

#include <cstddef>
#include <vector>

namespace teeny {

struct Summary {
  size_t count = 0;
  double min = 0, max = 0, mean = 0, median = 0, p90 = 0;
  double q1 = 0, q3 = 0;  // 25th and 75th percentiles
  // Noise figure: (q3 - q1) / median. Robust to the occasional outlier that would
  // dominate a standard deviation; 0 when the median is 0.
  double rel_iqr = 0;
};

// Percentile `p` in [0, 100] of sorted samples, interpolating linearly between closest
// ranks (NumPy's default "linear" method). Throws teeny::Error on no samples or p outside [0, 100].
double percentile_sorted(const std::vector<double>& sorted, double p);

// Throws teeny::Error when `samples` is empty.
Summary summarize(std::vector<double> samples);

}  // namespace teeny
