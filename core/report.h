// How a whole graph scales across a `teeny profile --sweep`: the statistics behind the scaling
// table and JSON (cli/profile_report.h renders them).
#pragma once

#include <cstdint>
#include <vector>

#include "core/profiler.h"

namespace teeny {

// One row per run of the sweep.
struct ScalingRow {
  int64_t value = 0;            // the swept dim's value
  double gpu_median_us = 0;     // end-to-end GPU time per iteration
  double us_per_unit = 0;       // gpu_median_us / value
  double time_vs_first = 0;     // against the sweep's first run
  double gbps = 0, gflops = 0;  // the whole graph's bytes and flops at gpu_median_us
};

// Empty when the report is not a sweep.
std::vector<ScalingRow> scaling_rows(const ProfileReport& report);

}  // namespace teeny
