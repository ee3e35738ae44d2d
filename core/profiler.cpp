#include "core/profiler.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace teeny {

const char* profile_mode_name(ProfileMode mode) {
  return mode == ProfileMode::kIsolated ? "isolated" : "sequence";
}

namespace {

// Counts one kind of validation problem and remembers where it first happened, so a run
// with thousands of bad records still gets one readable line per kind.
class Tally {
 public:
  explicit Tally(std::string what) : what_(std::move(what)) {}
  void add(const std::string& where) {
    if (count_++ == 0) first_ = where;
  }
  void report(std::vector<std::string>& problems) const {
    if (count_ > 0) problems.push_back(fmt::format("{} ({}x, first at {})", what_, count_, first_));
  }

 private:
  std::string what_, first_;
  size_t count_ = 0;
};

std::string where(uint32_t iteration, const LaunchFacts& launch) {
  return fmt::format("iteration {}, launch {} ({})", iteration, launch.index, launch.node);
}

LaunchTiming timing_of(const KernelRecord& record) {
  return {record.start_ns, record.end_ns, record.device_id, record.stream_id,
          record.graph_node_id};
}

}  // namespace

MatchedRecords match_records(const ActivityBatch& batch, const std::vector<LaunchFacts>& launches,
                             uint32_t iterations, bool cuda_graph) {
  MatchedRecords out;
  const size_t n = launches.size();
  out.timings.assign(iterations, std::vector<LaunchTiming>(n));
  if (batch.dropped > 0)
    out.problems.push_back(fmt::format("CUPTI dropped {} activity records", batch.dropped));

  std::unordered_map<uint32_t, uint64_t> external_of;
  for (const ExternalCorrelation& c : batch.correlations) external_of[c.correlation_id] = c.external_id;

  Tally missing("no kernel record for a launch");
  Tally duplicate("more than one kernel record for a launch");
  Tally wrong_kernel("kernel record for a different kernel than launched");
  Tally not_positive("kernel record that ends at or before its start");
  Tally stray("kernel record tagged with a launch that was not timed");
  Tally wrong_count("graph replay with a wrong number of kernel records");
  Tally node_mismatch("graph node id differs from the first replay");

  auto check_record = [&](const KernelRecord& record, uint32_t iteration, const LaunchFacts& launch) {
    if (record.name != launch.entry)
      wrong_kernel.add(fmt::format("{}: expected {}, found {}", where(iteration, launch),
                                   launch.entry, record.name));
    if (record.end_ns <= record.start_ns) not_positive.add(where(iteration, launch));
  };

  // Records per (iteration, launch) or, for graph replays, per iteration.
  std::vector<std::vector<const KernelRecord*>> by_slot(cuda_graph ? iterations : iterations * n);
  for (const KernelRecord& record : batch.kernels) {
    const auto it = external_of.find(record.correlation_id);
    if (it == external_of.end()) {
      ++out.excluded_records;  // not launched by teeny: the L2 flush, another library
      continue;
    }
    const auto [iteration, launch] = decode_external_id(it->second);
    const bool expected_tag = cuda_graph ? launch == kWholeGraph : launch < n;
    if (iteration >= iterations || !expected_tag) {
      stray.add(fmt::format("external id {:#x}", it->second));
      continue;
    }
    by_slot[cuda_graph ? iteration : iteration * n + launch].push_back(&record);
  }

  if (!cuda_graph) {
    for (uint32_t i = 0; i < iterations; ++i) {
      for (size_t l = 0; l < n; ++l) {
        const auto& records = by_slot[i * n + l];
        if (records.empty()) {
          missing.add(where(i, launches[l]));
          continue;
        }
        if (records.size() > 1) duplicate.add(where(i, launches[l]));
        check_record(*records.front(), i, launches[l]);
        out.timings[i][l] = timing_of(*records.front());
      }
    }
  } else {
    std::vector<uint64_t> first_nodes;  // graph node id per launch in the first full replay
    for (uint32_t i = 0; i < iterations; ++i) {
      auto records = by_slot[i];
      if (records.size() != n) {
        wrong_count.add(fmt::format("iteration {}: {} records for {} launches", i, records.size(), n));
        continue;
      }
      // A captured single-stream sequence is a chain of dependent nodes: start order is
      // launch order.
      std::sort(records.begin(), records.end(),
                [](const KernelRecord* a, const KernelRecord* b) { return a->start_ns < b->start_ns; });
      if (first_nodes.empty())
        for (const KernelRecord* r : records) first_nodes.push_back(r->graph_node_id);
      for (size_t l = 0; l < n; ++l) {
        check_record(*records[l], i, launches[l]);
        if (records[l]->graph_node_id != first_nodes[l]) node_mismatch.add(where(i, launches[l]));
        out.timings[i][l] = timing_of(*records[l]);
      }
    }
  }
  for (const Tally* t : {&missing, &duplicate, &wrong_kernel, &not_positive, &stray, &wrong_count,
                         &node_mismatch})
    t->report(out.problems);
  return out;
}

DevicePeaks peaks_from_attributes(int cc_major, int cc_minor, int sm_count, double sm_clock_khz,
                                  double memory_clock_khz, int memory_bus_bits) {
  // FP32 FMA lanes per SM: 64 on sm_70/sm_80 (V100, A100), 128 from sm_86 on (incl. H100/H200).
  const int lanes = (cc_major < 8 || (cc_major == 8 && cc_minor == 0)) ? 64 : 128;
  DevicePeaks peaks;
  peaks.bandwidth_gbps = 2.0 * memory_clock_khz * 1e3 * memory_bus_bits / 8.0 / 1e9;
  peaks.fp32_gflops = static_cast<double>(sm_count) * lanes * 2.0 * sm_clock_khz * 1e3 / 1e9;
  peaks.source = fmt::format(
      "from device attributes: bandwidth = 2 x {:.0f} MHz memory clock x {}-bit bus / 8; "
      "FP32 = {} SMs x {} lanes x 2 x {:.0f} MHz SM clock",
      memory_clock_khz / 1e3, memory_bus_bits, sm_count, lanes, sm_clock_khz / 1e3);
  return peaks;
}

ProfileRun summarize_run(const Bindings& bindings, const std::vector<LaunchFacts>& launches,
                         const MatchedRecords& matched, const std::vector<double>& enqueue_us,
                         const DevicePeaks& peaks, bool keep_trace) {
  ProfileRun run;
  run.bindings = bindings;
  run.iterations = static_cast<int>(matched.timings.size());
  run.untrusted = matched.problems;
  run.excluded_records = matched.excluded_records;

  const auto valid = [](const LaunchTiming& t) { return t.end_ns > t.start_ns; };
  std::vector<std::vector<double>> durations(launches.size());
  std::vector<double> gpu_time;
  for (size_t i = 0; i < matched.timings.size(); ++i) {
    uint64_t first = std::numeric_limits<uint64_t>::max(), last = 0;
    for (size_t l = 0; l < launches.size(); ++l) {
      const LaunchTiming& t = matched.timings[i][l];
      if (!valid(t)) continue;
      durations[l].push_back(static_cast<double>(t.end_ns - t.start_ns) / 1e3);
      first = std::min(first, t.start_ns);
      last = std::max(last, t.end_ns);
      if (keep_trace)
        run.trace.push_back({static_cast<int>(i), static_cast<int>(l), t.device_id, t.stream_id,
                             t.start_ns, t.end_ns});
    }
    if (last > first) gpu_time.push_back(static_cast<double>(last - first) / 1e3);
  }
  if (!gpu_time.empty()) run.gpu_time_us = summarize(gpu_time);
  if (!enqueue_us.empty()) run.enqueue_us = summarize(enqueue_us);

  double mean_sum = 0;
  for (size_t l = 0; l < launches.size(); ++l) {
    LaunchStats stats;
    stats.facts = launches[l];
    if (!durations[l].empty()) stats.duration_us = summarize(durations[l]);
    const double median = stats.duration_us.median;
    if (median > 0) {
      // bytes / (us * 1e3) = bytes per ns = GB/s.
      stats.gbps = static_cast<double>(stats.facts.bytes) / (median * 1e3);
      stats.gflops = static_cast<double>(stats.facts.flops) / (median * 1e3);
    }
    if (peaks.bandwidth_gbps > 0) stats.pct_peak_bandwidth = 100.0 * stats.gbps / peaks.bandwidth_gbps;
    if (peaks.fp32_gflops > 0) stats.pct_peak_fp32 = 100.0 * stats.gflops / peaks.fp32_gflops;
    mean_sum += stats.duration_us.mean;
    run.kernel_sum_us += median;
    run.launches.push_back(std::move(stats));
  }
  for (LaunchStats& stats : run.launches)
    stats.share = mean_sum > 0 ? stats.duration_us.mean / mean_sum : 0;

  if (run.gpu_time_us.rel_iqr > kNoisyEndToEnd)
    run.warnings.push_back(fmt::format(
        "noisy: end-to-end GPU time varies by {:.1f}% (relative IQR, above {:.0f}%); other GPU "
        "work or clock changes may be interfering, try a longer --min-time",
        100 * run.gpu_time_us.rel_iqr, 100 * kNoisyEndToEnd));
  std::vector<std::string> noisy;
  for (const LaunchStats& stats : run.launches)
    if (stats.duration_us.rel_iqr > kNoisyLaunch)
      noisy.push_back(fmt::format("{} ({:.1f}%)", stats.facts.node, 100 * stats.duration_us.rel_iqr));
  if (!noisy.empty())
    run.warnings.push_back(fmt::format("noisy launches (relative IQR above {:.0f}%): {}",
                                       100 * kNoisyLaunch, fmt::join(noisy, ", ")));
  return run;
}

std::pair<std::string, std::vector<int64_t>> parse_sweep(const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  const bool identifier = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                          std::all_of(name.begin(), name.end(), [](char c) {
                            return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                          });
  if (eq == std::string::npos || !identifier || eq + 1 == text.size())
    throw Error(fmt::format("--sweep '{}': expected DIM=a,b,c (e.g. B=1,8,64,512)", text));
  std::vector<int64_t> values;
  size_t pos = eq + 1;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const bool digits = !item.empty() && item.size() <= 18 &&
                        std::all_of(item.begin(), item.end(),
                                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!digits || std::stoll(item) <= 0)
      throw Error(fmt::format("--sweep '{}': '{}' is not a positive integer", text, item));
    const int64_t value = std::stoll(item);
    if (std::find(values.begin(), values.end(), value) != values.end())
      throw Error(fmt::format("--sweep '{}': {} is listed twice", text, value));
    values.push_back(value);
    pos = comma + 1;
  }
  return {name, values};
}

}  // namespace teeny
