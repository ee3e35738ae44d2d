#include "cli/chrome_trace.h"

#include <algorithm>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "core/expr.h"

namespace teeny::cli {

nlohmann::json chrome_trace(const ProfileReport& report) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < report.runs.size(); ++r) {
    const ProfileRun& run = report.runs[r];
    const int pid = static_cast<int>(r);
    events.push_back(
        {{"ph", "M"},
         {"name", "process_name"},
         {"pid", pid},
         {"args",
          {{"name", fmt::format("{} ({}) on {}{}", report.graph_name, bindings_text(run.bindings),
                                report.environment.gpu_name, report.environment.cupti ? "" : " [CUDA events]")}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    // Each run starts at 0 so runs of a sweep line up.
    uint64_t origin = std::numeric_limits<uint64_t>::max();
    std::set<uint32_t> streams;
    for (const TraceSlice& s : run.trace) {
      origin = std::min(origin, s.start_ns);
      streams.insert(s.stream_id);
    }
    for (uint32_t stream : streams)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", stream},
                        {"args", {{"name", fmt::format("stream {}", stream)}}}});
    for (const TraceSlice& s : run.trace) {
      const LaunchFacts& f = run.launches.at(static_cast<size_t>(s.launch)).facts;
      events.push_back({{"ph", "X"},
                        {"cat", "kernel"},
                        {"name", f.kernel},
                        {"pid", pid},
                        {"tid", s.stream_id},
                        {"ts", static_cast<double>(s.start_ns - origin) / 1e3},
                        {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1e3},
                        {"args",
                         {{"node", f.node},
                          {"launch", f.index},
                          {"iteration", s.iteration},
                          {"grid", f.grid},
                          {"block", f.block},
                          {"registers_per_thread", f.registers},
                          {"static_smem_bytes", f.static_smem_bytes},
                          {"dynamic_smem_bytes", f.dynamic_smem_bytes},
                          {"device", s.device_id}}}});
    }
  }
  const Environment& e = report.environment;
  return {{"traceEvents", events},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"tool", "teeny profile"},
            {"bundle", report.bundle_path},
            {"gpu_name", e.gpu_name},
            {"timing_method", e.timing_method},
            {"mode", e.mode},
            {"cuda_graph", e.cuda_graph}}}};
}

void write_chrome_trace(const ProfileReport& report, const std::string& path) {
  write_file_atomically(path, chrome_trace(report).dump(), "trace");
}

}  // namespace teeny::cli
