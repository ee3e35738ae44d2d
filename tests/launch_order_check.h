// What a stream plan orders (tests/test_launch_graph.cpp, tests/test_compile_graphs.cpp),
// worked out from the plan's streams and waits alone, independently of its vector clocks.
#pragma once

#include <vector>

#include "core/launch_graph.h"

namespace teeny::testing {

// before[j][i]: launch i finishes before launch j starts, by stream order and waits.
inline std::vector<std::vector<bool>> ordered_before(const StreamPlan& plan) {
  const size_t n = plan.stream.size();
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));
  std::vector<std::ptrdiff_t> last(static_cast<size_t>(plan.streams_used), -1);
  auto inherit = [&](size_t j, size_t i) {
    before[j][i] = true;
    for (size_t k = 0; k < i; ++k)
      if (before[i][k]) before[j][k] = true;
  };
  for (size_t j = 0; j < n; ++j) {
    const std::ptrdiff_t previous = last[static_cast<size_t>(plan.stream[j])];
    if (previous >= 0) inherit(j, static_cast<size_t>(previous));
    for (size_t w : plan.waits[j]) {
      EXPECT_TRUE(plan.recorded[w]) << "launch " << j << " waits for " << w << ", which records no event";
      inherit(j, w);
    }
    last[static_cast<size_t>(plan.stream[j])] = static_cast<std::ptrdiff_t>(j);
  }
  return before;
}

}  // namespace teeny::testing
