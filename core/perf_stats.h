// Is B faster than A? The statistics behind `teeny compare`: a Mann–Whitney U test on log times,
// with the Hodges–Lehmann estimate of the shift and its confidence interval.
//
// Method, and why:
// - Work on logs. Timing noise is multiplicative (a slower clock stretches every part of a run), so a
//   shift of log times is the natural model, and the shift estimate becomes a ratio B/A.
// - Rank-based, not mean-based: GPU timings have heavy right tails (preemption, clock changes), and
//   ranks do not let one outlier decide the verdict. Unlike a bootstrap the result is deterministic.
// - Hodges–Lehmann estimate: the median of all n_a*n_b pairwise differences d_ij = log b_j - log a_i.
//   Its confidence interval inverts the Mann–Whitney test: [d_(k), d_(N-k+1)] (1-based order
//   statistics among N = n_a*n_b), with k = floor(N/2 - z*sigma), z the two-sided normal quantile of
//   the confidence and sigma the standard deviation of U. k < 1 means samples that small cannot
//   reach the confidence at all: the interval is then unbounded, (0, inf), and the verdict "no
//   difference", rather than the whole range d_(1)..d_(N), which would claim more than it knows.
// - sigma is tie-corrected (coarse timers make ties common) and the same sigma serves the p-value and
//   the interval, so the two answer the same question.
// - Samples can hold 10^5 times each, so the pairs are never enumerated: an order statistic of the
//   differences is found by bisection over the values, counting the pairs at or below a value with
//   one two-pointer pass over the sorted samples in O(n_a + n_b). Each pass also moves the bracket's
//   ends onto achievable differences, so it closes on the exact order statistic in about log2(N)
//   passes rather than at a midpoint.
#pragma once

#include <cstddef>
#include <vector>

namespace teeny {

struct RatioEstimate {
  size_t n_a = 0, n_b = 0;
  double median_a = 0, median_b = 0;     // sample medians (same units as input)
  double ratio = 1;                      // exp(HL estimate of log b - log a): B's time relative to A's
  double ratio_low = 1, ratio_high = 1;  // confidence interval of `ratio` at `confidence`; (0, inf): too few samples
  double p_value = 1;  // two-sided Mann–Whitney p (normal approximation, tie-corrected, continuity-corrected)
  double confidence = 0.95;
};

enum class Verdict { kFaster, kSlower, kSame };  // of B against A

// "faster", "slower", "no difference".
const char* verdict_name(Verdict v);

// Throws teeny::Error when either sample is empty, has a value <= 0 or non-finite, or `confidence`
// is not in (0, 1).
RatioEstimate compare_samples(const std::vector<double>& a, const std::vector<double>& b, double confidence = 0.95);

// kFaster when the whole interval is below 1, kSlower when above 1, else kSame.
Verdict verdict_of(const RatioEstimate& e);

}  // namespace teeny
