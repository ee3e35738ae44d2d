#include "core/report.h"

namespace teeny {

std::vector<ScalingRow> scaling_rows(const ProfileReport& report) {
  std::vector<ScalingRow> rows;
  if (report.sweep_dim.empty()) return rows;
  for (const ProfileRun& run : report.runs) {
    ScalingRow row;
    const auto it = run.bindings.find(report.sweep_dim);
    row.value = it != run.bindings.end() ? it->second : 0;
    row.gpu_median_us = run.gpu_time_us.median;
    row.us_per_unit = row.value > 0 ? row.gpu_median_us / static_cast<double>(row.value) : 0;
    const double first = report.runs.front().gpu_time_us.median;
    row.time_vs_first = first > 0 ? row.gpu_median_us / first : 0;
    double bytes = 0, flops = 0;
    for (const LaunchStats& l : run.launches) {
      bytes += static_cast<double>(l.facts.bytes);
      flops += static_cast<double>(l.facts.flops);
    }
    if (row.gpu_median_us > 0) {
      row.gbps = bytes / (row.gpu_median_us * 1e3);
      row.gflops = flops / (row.gpu_median_us * 1e3);
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace teeny
