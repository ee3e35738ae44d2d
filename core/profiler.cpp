#include "core/profiler.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/clock_probe.h"
#include "core/driver.h"
#include "core/error.h"
#include "core/executor.h"
#include "core/identifier.h"
#include "core/ptx.h"

namespace teeny {

const char* profile_mode_name(ProfileMode mode) { return mode == ProfileMode::kIsolated ? "isolated" : "sequence"; }

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
  return {record.start_ns, record.end_ns, record.device_id, record.stream_id, record.graph_node_id};
}

}  // namespace

MatchedRecords match_records(const ActivityBatch& batch, const std::vector<LaunchFacts>& launches, uint32_t iterations,
                             bool cuda_graph) {
  MatchedRecords out;
  const size_t n = launches.size();
  out.timings.assign(iterations, std::vector<LaunchTiming>(n));
  if (batch.dropped > 0) out.problems.push_back(fmt::format("CUPTI dropped {} activity records", batch.dropped));

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
      wrong_kernel.add(fmt::format("{}: expected {}, found {}", where(iteration, launch), launch.entry, record.name));
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
  for (const Tally* t : {&missing, &duplicate, &wrong_kernel, &not_positive, &stray, &wrong_count, &node_mismatch})
    t->report(out.problems);
  // What arrived, to tell missing kernel records from missing correlation records.
  if (!out.problems.empty())
    out.problems.push_back(
        fmt::format("received {} kernel records ({} without a teeny tag) and {} external-correlation records",
                    batch.kernels.size(), out.excluded_records, batch.correlations.size()));
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
  // Dense f16/bf16 tensor-core FLOP per clock per SM (f32 accumulate), from NVIDIA's published
  // rates: A100 312 TFLOP/s at 108 SMs x 1410 MHz, H100 SXM 989 TFLOP/s at 132 SMs x 1830 MHz.
  const int tensor_flop_per_clock = cc_major == 9 && cc_minor == 0 ? 4096 : cc_major == 8 && cc_minor == 0 ? 2048 : 0;
  if (tensor_flop_per_clock > 0) {
    peaks.tensor16_gflops = static_cast<double>(sm_count) * tensor_flop_per_clock * sm_clock_khz * 1e3 / 1e9;
    peaks.source += fmt::format("; f16/bf16 tensor = {} SMs x {} FLOP/clock x {:.0f} MHz SM clock", sm_count,
                                tensor_flop_per_clock, sm_clock_khz / 1e3);
  }
  return peaks;
}

ProfileRun summarize_run(const Bindings& bindings, const std::vector<LaunchFacts>& launches,
                         const MatchedRecords& matched, const std::vector<double>& enqueue_us, const DevicePeaks& peaks,
                         bool keep_trace) {
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
        run.trace.push_back({static_cast<int>(i), static_cast<int>(l), t.device_id, t.stream_id, t.start_ns, t.end_ns});
    }
    if (last > first) gpu_time.push_back(static_cast<double>(last - first) / 1e3);
  }
  if (!matched.end_to_end_us.empty()) gpu_time = matched.end_to_end_us;
  if (!gpu_time.empty()) run.gpu_time_us = summarize(gpu_time);
  run.gpu_time_samples_us = std::move(gpu_time);
  if (!enqueue_us.empty()) run.enqueue_us = summarize(enqueue_us);

  double mean_sum = 0;
  for (size_t l = 0; l < launches.size(); ++l) {
    LaunchStats stats;
    stats.facts = launches[l];
    if (!durations[l].empty()) stats.duration_us = summarize(durations[l]);
    stats.samples_us = std::move(durations[l]);
    const double median = stats.duration_us.median;
    if (median > 0) {
      // bytes / (us * 1e3) = bytes per ns = GB/s.
      stats.gbps = static_cast<double>(stats.facts.bytes) / (median * 1e3);
      stats.gflops = static_cast<double>(stats.facts.flops) / (median * 1e3);
    }
    if (peaks.bandwidth_gbps > 0) stats.pct_peak_bandwidth = 100.0 * stats.gbps / peaks.bandwidth_gbps;
    const double compute_peak = stats.facts.tensor_cores ? peaks.tensor16_gflops : peaks.fp32_gflops;
    if (compute_peak > 0) stats.pct_peak_compute = 100.0 * stats.gflops / compute_peak;
    mean_sum += stats.duration_us.mean;
    run.kernel_sum_us += median;
    run.launches.push_back(std::move(stats));
  }
  for (LaunchStats& stats : run.launches) stats.share = mean_sum > 0 ? stats.duration_us.mean / mean_sum : 0;

  if (run.gpu_time_us.rel_iqr > kNoisyEndToEnd)
    run.warnings.push_back(
        fmt::format("noisy: end-to-end GPU time varies by {:.1f}% (relative IQR, above {:.0f}%); other GPU "
                    "work or clock changes may be interfering, try a longer --min-time",
                    100 * run.gpu_time_us.rel_iqr, 100 * kNoisyEndToEnd));
  std::vector<std::string> noisy;
  for (const LaunchStats& stats : run.launches)
    if (stats.duration_us.rel_iqr > kNoisyLaunch)
      noisy.push_back(fmt::format("{} ({:.1f}%)", stats.facts.node, 100 * stats.duration_us.rel_iqr));
  if (!noisy.empty())
    run.warnings.push_back(
        fmt::format("noisy launches (relative IQR above {:.0f}%): {}", 100 * kNoisyLaunch, fmt::join(noisy, ", ")));
  return run;
}

ActivityBatch records_of_subject(const ActivityBatch& batch, size_t subject, size_t subjects) {
  if (subjects == 1) return batch;
  ActivityBatch out;
  out.dropped = subject == 0 ? batch.dropped : 0;
  std::unordered_map<uint32_t, bool> mine;  // correlation id -> belongs to `subject`
  for (const ExternalCorrelation& c : batch.correlations) {
    const auto [tag, launch] = decode_external_id(c.external_id);
    const bool ours = ((tag >> kSubjectBit) & 1u) == subject;
    mine[c.correlation_id] = ours;
    if (ours) out.correlations.push_back({c.correlation_id, encode_external_id(tag & ~(1u << kSubjectBit), launch)});
  }
  for (const KernelRecord& record : batch.kernels) {
    const auto it = mine.find(record.correlation_id);
    if (it == mine.end() ? subject == 0 : it->second) out.kernels.push_back(record);
  }
  return out;
}

void record_clocks(ProfileRun& run, double before_mhz, double after_mhz) {
  run.sm_clock_before_mhz = before_mhz;
  run.sm_clock_after_mhz = after_mhz;
  if (before_mhz > 0 && std::abs(after_mhz - before_mhz) > kClockDrift * before_mhz)
    run.warnings.push_back(
        fmt::format("the SM clock moved from {:.0f} MHz to {:.0f} MHz during the timed iterations (power or "
                    "thermal limit?); the times mix both clocks",
                    before_mhz, after_mhz));
}

std::pair<std::string, std::vector<int64_t>> parse_sweep(const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  if (eq == std::string::npos || !is_identifier(name) || eq + 1 == text.size())
    throw Error(fmt::format("--sweep '{}': expected DIM=a,b,c (e.g. B=1,8,64,512)", text));
  std::vector<int64_t> values;
  size_t pos = eq + 1;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const bool digits = !item.empty() && item.size() <= 18 && std::all_of(item.begin(), item.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
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

// ---- the protocol on the GPU ------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Warm-up iterations are tagged from here on, so a late warm-up record can never pass for a
// timed one (it shows up as a stray tag instead).
constexpr uint32_t kWarmupTagBase = 0x80000000u;

std::vector<LaunchFacts> launch_facts(const cuda::Device& device, const GpuExecutor& executor) {
  const cuda::Driver& driver = device.driver();
  const BoundBundle& bound = executor.bound();
  const int max_threads_per_sm = device.attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "threads per SM");
  std::vector<LaunchFacts> facts;
  for (size_t i = 0; i < bound.launches.size(); ++i) {
    const BoundLaunch& launch = bound.launches[i];
    const BundleKernel& kernel = bound.bundle->kernels.at(static_cast<size_t>(launch.kernel));
    LaunchFacts f;
    f.index = static_cast<int>(i);
    f.node = launch.label();
    f.owner = launch.node;
    f.role = bound.bundle->nodes.at(launch.node_index).role;
    f.kernel = kernel.name;
    f.entry = kernel.entry;
    f.grid = launch.grid;
    f.block = launch.block;
    f.dynamic_smem_bytes = launch.dynamic_smem;
    f.bytes = launch.bytes;
    f.flops = launch.flops;
    f.tensor_cores = ptx_uses_f16_mma(kernel.ptx);
    f.ptx_sha256 = kernel.sha256;
    f.kernel_source = fmt::format("{}:{}", kernel.source_file, kernel.source_line);
    const CUfunction function = executor.function(i);
    const std::string what = fmt::format("querying kernel '{}' for node '{}'", kernel.name, f.node);
    TEENY_CU(driver, FuncGetAttribute, what, &f.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, function);
    TEENY_CU(driver, FuncGetAttribute, what, &f.static_smem_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function);
    const int threads = launch.block[0] * launch.block[1] * launch.block[2];
    TEENY_CU(driver, OccupancyMaxActiveBlocksPerMultiprocessor,
             fmt::format("computing the theoretical occupancy of kernel '{}'", kernel.name), &f.active_blocks_per_sm,
             function, threads, static_cast<size_t>(launch.dynamic_smem));
    const int warps = (threads + 31) / 32;
    f.occupancy = static_cast<double>(f.active_blocks_per_sm * warps) / (max_threads_per_sm / 32);
    facts.push_back(std::move(f));
  }
  return facts;
}

Environment describe_environment(const cuda::Device& device, const Bundle& bundle) {
  Environment e;
  e.gpu_name = device.name();
  e.cc_major = device.cc_major();
  e.cc_minor = device.cc_minor();
  e.sm_count = device.sm_count();
  e.driver_version = device.driver().version();
  e.cuda_headers_version = CUDA_VERSION;
  e.nvrtc_version = bundle.nvrtc_version;
  e.cupti_version = CuptiTracer::version();
  const double sm_khz = device.attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "SM clock rate");
  const double memory_khz = device.attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "memory clock rate");
  e.memory_bus_bits = device.attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "memory bus width");
  e.l2_bytes = device.attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size");
  e.sm_clock_mhz = sm_khz / 1e3;
  e.memory_clock_mhz = memory_khz / 1e3;
  e.peaks = peaks_from_attributes(e.cc_major, e.cc_minor, e.sm_count, sm_khz, memory_khz, e.memory_bus_bits);
  return e;
}

// Times one binding: enqueues iterations and turns what was measured into MatchedRecords.
class Session {
 public:
  Session(std::shared_ptr<cuda::Device> device, GpuExecutor& executor, CuptiTracer* tracer,
          const ProfileOptions& options, int64_t l2_bytes)
      : device_(std::move(device)), executor_(executor), tracer_(tracer), launches_(executor.bound().launches.size()) {
    if (options.mode == ProfileMode::kIsolated)
      flush_ = std::make_unique<cuda::DeviceBuffer>(device_, static_cast<size_t>(2 * l2_bytes),
                                                    "the L2 flush buffer (2x the L2 size)");
    if (!tracer_) {
      for (size_t i = 0; i < (options.cuda_graph ? 1 : launches_); ++i) {
        starts_.push_back(std::make_unique<cuda::Event>(device_));
        ends_.push_back(std::make_unique<cuda::Event>(device_));
      }
    }
    if (options.cuda_graph) {
      // In isolated mode the flushes are captured too: memset nodes produce no kernel records.
      graph_ = cuda::CudaGraph::capture(device_, executor_.stream(), [this] {
        for (size_t i = 0; i < launches_; ++i) {
          flush_l2(0);
          executor_.enqueue(i);
        }
      });
    }
  }

  // One synchronised iteration; returns the host time spent enqueueing the launches (us).
  double iteration(uint32_t tag) {
    double enqueue_s = 0;
    if (graph_) {
      const uint64_t id = encode_external_id(tag, kWholeGraph);
      if (tracer_) tracer_->push_external_id(id, "a CUDA graph replay");
      if (!tracer_) starts_[0]->record(executor_.stream());
      const auto t0 = Clock::now();
      graph_->launch(executor_.stream());
      enqueue_s = seconds_since(t0);
      if (!tracer_) ends_[0]->record(executor_.stream());
      if (tracer_) tracer_->pop_external_id(id, "a CUDA graph replay");
    } else {
      for (size_t i = 0; i < launches_; ++i) {
        flush_l2(tag);
        const uint64_t id = encode_external_id(tag, static_cast<uint32_t>(i));
        if (tracer_) tracer_->push_external_id(id, "a kernel launch");
        if (!tracer_) starts_[i]->record(executor_.stream());
        const auto t0 = Clock::now();
        executor_.enqueue(i);
        enqueue_s += seconds_since(t0);
        if (!tracer_) ends_[i]->record(executor_.stream());
        if (tracer_) tracer_->pop_external_id(id, "a kernel launch");
      }
    }
    executor_.synchronize(
        "profiling (an asynchronous kernel failure shows here; `teeny run --check` "
        "names the node)");
    if (!tracer_) read_events();
    return enqueue_s * 1e6;
  }

  // Event timings of the iterations since the last call, as launch intervals. Iteration
  // origins are spaced by their host start times so a trace still reads left to right.
  MatchedRecords take_event_timings() {
    MatchedRecords m;
    if (graph_) {
      m.end_to_end_us = event_end_to_end_;
      m.timings.assign(event_end_to_end_.size(), std::vector<LaunchTiming>(launches_));
    } else {
      m.timings = std::move(event_timings_);
      size_t not_positive = 0;
      for (const auto& row : m.timings)
        for (const LaunchTiming& t : row) not_positive += t.end_ns <= t.start_ns ? 1 : 0;
      if (not_positive > 0)
        m.problems.push_back(fmt::format(
            "CUDA events measured {} launch durations as zero or negative (below their resolution)", not_positive));
    }
    event_timings_.clear();
    event_end_to_end_.clear();
    return m;
  }

 private:
  void flush_l2(uint32_t tag) {
    if (!flush_) return;
    TEENY_CU(device_->driver(), MemsetD8Async, "flushing the L2 cache before a launch (isolated mode)", flush_->ptr(),
             static_cast<unsigned char>(tag & 0xFF), flush_->size(), executor_.stream().handle());
  }

  void read_events() {
    if (graph_) {
      event_end_to_end_.push_back(1e3 * ends_[0]->elapsed_ms_since(*starts_[0]));
      return;
    }
    const uint64_t origin =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - created_).count());
    std::vector<LaunchTiming> row(launches_);
    for (size_t i = 0; i < launches_; ++i) {
      // Event offsets from the first launch's start; ms with about 0.5 us resolution.
      const double start_ns = 1e6 * starts_[i]->elapsed_ms_since(*starts_[0]);
      const double end_ns = 1e6 * ends_[i]->elapsed_ms_since(*starts_[0]);
      row[i].start_ns = origin + static_cast<uint64_t>(std::max(0.0, start_ns));
      row[i].end_ns = origin + static_cast<uint64_t>(std::max(0.0, end_ns));
    }
    event_timings_.push_back(std::move(row));
  }

  std::shared_ptr<cuda::Device> device_;
  GpuExecutor& executor_;
  CuptiTracer* tracer_;
  size_t launches_;
  std::unique_ptr<cuda::DeviceBuffer> flush_;
  std::unique_ptr<cuda::CudaGraph> graph_;
  std::vector<std::unique_ptr<cuda::Event>> starts_, ends_;
  std::vector<std::vector<LaunchTiming>> event_timings_;
  std::vector<double> event_end_to_end_;
  Clock::time_point created_ = Clock::now();
};

// One bundle bound to one binding, loaded, with its data uploaded, ready to time.
struct Subject {
  std::unique_ptr<BoundBundle> bound;
  std::unique_ptr<GpuExecutor> executor;
  std::vector<LaunchFacts> facts;
  std::unique_ptr<Session> session;
  std::vector<double> enqueue_us;  // per timed iteration
};

std::unique_ptr<Subject> prepare_subject(const Bundle& bundle, const std::string& bundle_path,
                                         const std::vector<std::string>& binds, std::shared_ptr<cuda::Device> device,
                                         CuptiTracer* tracer, const ProfileOptions& options, const Environment& env,
                                         std::vector<std::string>& notes, GpuExecutor::Modules& modules) {
  auto subject = std::make_unique<Subject>();
  subject->bound = std::make_unique<BoundBundle>(bind_bundle(bundle, bundle_bindings(bundle, binds), bundle_path));
  bind_launches(*subject->bound, device->facts());
  DataOptions data_options;
  data_options.seed = options.seed;
  data_options.weights_path = options.weights_path;
  data_options.fill = ParamFill::kRandom;
  const RunData data = prepare_data(*subject->bound, data_options);
  for (const std::string& note : data.notes)
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);

  subject->executor = std::make_unique<GpuExecutor>(device, *subject->bound, modules);
  subject->executor->overlap_launches(false);  // each launch's time is its own
  modules = subject->executor->modules();
  subject->executor->upload(data);
  subject->facts = launch_facts(*device, *subject->executor);
  subject->session = std::make_unique<Session>(device, *subject->executor, tracer, options, env.l2_bytes);
  return subject;
}

// Every subject's iteration `iteration`, the order reversed on odd iterations so that none always
// runs first or always after another's L2 footprint. Enqueue times go to `enqueue_us[subject]`.
void iterate_all(std::vector<std::unique_ptr<Subject>>& subjects, uint32_t iteration, uint32_t tag_base,
                 std::vector<double>* enqueue_us) {
  const size_t n = subjects.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t s = iteration % 2 == 0 ? k : n - 1 - k;
    const double us = subjects[s]->session->iteration(subject_tag(s, tag_base + iteration));
    if (enqueue_us) enqueue_us[s].push_back(us);
  }
}

// Runs the protocol over `subjects` (one binding of each bundle), interleaved; one run each.
std::vector<ProfileRun> time_subjects(std::vector<std::unique_ptr<Subject>>& subjects, CuptiTracer* tracer,
                                      const ProfileOptions& options, const Environment& env, const ClockProbe& probe) {
  const auto warmup_start = Clock::now();
  uint32_t warmup = 0;
  while ((static_cast<int>(warmup) < options.warmup_iterations ||
          seconds_since(warmup_start) < options.warmup_min_seconds) &&
         static_cast<int>(warmup) < options.max_iterations)
    iterate_all(subjects, warmup++, kWarmupTagBase, nullptr);
  const double warmup_seconds = seconds_since(warmup_start);
  const cuda::Stream& stream = subjects.front()->executor->stream();
  const double clock_before = probe.sm_clock_mhz(stream);

  // Every iteration ends with a stream synchronisation, so its kernels' records are complete.
  if (tracer) tracer->take();  // warm-up records (and the probe's) are not timed
  for (auto& subject : subjects) subject->session->take_event_timings();

  std::vector<std::vector<double>> enqueue_us(subjects.size());
  const auto timed_start = Clock::now();
  uint32_t iterations = 0;
  bool capped = false;
  while (static_cast<int>(iterations) < options.iterations || seconds_since(timed_start) < options.min_seconds) {
    if (static_cast<int>(iterations) >= options.max_iterations) {
      capped = true;
      break;
    }
    iterate_all(subjects, iterations++, 0, enqueue_us.data());
  }
  const ActivityBatch batch = tracer ? tracer->take() : ActivityBatch{};
  const double clock_after = probe.sm_clock_mhz(stream);

  std::vector<ProfileRun> runs;
  for (size_t s = 0; s < subjects.size(); ++s) {
    Subject& subject = *subjects[s];
    const MatchedRecords matched = tracer ? match_records(records_of_subject(batch, s, subjects.size()), subject.facts,
                                                          iterations, options.cuda_graph)
                                          : subject.session->take_event_timings();
    ProfileRun run =
        summarize_run(subject.bound->bindings, subject.facts, matched, enqueue_us[s], env.peaks, options.keep_trace);
    run.warmup_iterations = static_cast<int>(warmup);
    run.warmup_seconds = warmup_seconds;
    record_clocks(run, clock_before, clock_after);
    if (capped)
      run.warnings.push_back(fmt::format("stopped at {} iterations before --min-time {} s was reached",
                                         options.max_iterations, options.min_seconds));
    if (!tracer && options.cuda_graph)
      run.warnings.push_back(
          "per-launch times unavailable: a CUDA graph replay timed with CUDA events gives only the "
          "end-to-end time (CUPTI is needed for per-launch times)");
    runs.push_back(std::move(run));
  }
  return runs;
}

void check_options(const ProfileOptions& options) {
  if (options.iterations < 1) throw Error(fmt::format("--iterations must be at least 1, got {}", options.iterations));
  if (options.warmup_iterations < 0)
    throw Error(fmt::format("--warmup must be 0 or more, got {}", options.warmup_iterations));
  if (!(options.min_seconds >= 0))
    throw Error(fmt::format("--min-time must be 0 or more seconds, got {}", options.min_seconds));
}

}  // namespace

ProfileReport profile_bundle(const std::string& bundle_path, const std::vector<std::vector<std::string>>& bind_sets,
                             const std::string& sweep_dim, const ProfileOptions& options) {
  return std::move(profile_bundles({bundle_path}, bind_sets, sweep_dim, options).front());
}

std::vector<ProfileReport> profile_bundles(const std::vector<std::string>& bundle_paths,
                                           const std::vector<std::vector<std::string>>& bind_sets,
                                           const std::string& sweep_dim, const ProfileOptions& options) {
  check_options(options);
  // One subject bit in the tags (kSubjectBit).
  if (bundle_paths.empty() || bundle_paths.size() > 2)
    throw Error(fmt::format("one or two bundles are profiled at once, not {}", bundle_paths.size()));
  std::vector<Bundle> bundles;
  for (const std::string& path : bundle_paths) bundles.push_back(read_bundle(path));
  // Bad dims are input errors: report them before touching the GPU (launches are bound for
  // the device once it is open).
  for (size_t b = 0; b < bundles.size(); ++b)
    for (const std::vector<std::string>& binds : bind_sets)
      bind_bundle(bundles[b], bundle_bindings(bundles[b], binds), bundle_paths[b]);
  // Tracing starts before the driver is initialised and any context or module exists: CUPTI
  // attached to an existing context delivered no kernel records on the H200 machine.
  std::string why_not;
  std::unique_ptr<CuptiTracer> tracer;
  const char* no_cupti = std::getenv("TEENY_PROFILE_NO_CUPTI");
  if (no_cupti != nullptr && std::string(no_cupti) == "1")
    why_not = "disabled by TEENY_PROFILE_NO_CUPTI=1";
  else
    tracer = CuptiTracer::start(&why_not);
  const cuda::Driver& driver = cuda::Driver::get();
  std::shared_ptr<cuda::Device> device = cuda::Device::open(driver);
  const ClockProbe probe(device);

  std::vector<ProfileReport> reports(bundles.size());
  for (size_t b = 0; b < bundles.size(); ++b) {
    ProfileReport& report = reports[b];
    report.bundle_path = bundle_paths[b];
    report.graph_name = bundles[b].graph_name;
    report.sweep_dim = sweep_dim;
    report.environment = describe_environment(*device, bundles[b]);
    Environment& env = report.environment;
    env.mode = profile_mode_name(options.mode);
    env.cuda_graph = options.cuda_graph;
    env.cupti = tracer != nullptr;
    env.timing_method =
        tracer
            ? "CUPTI activity records (CONCURRENT_KERNEL, joined by external correlation id)"
            : fmt::format("CUDA events around each launch, about 0.5 us resolution (CUPTI unavailable: {})", why_not);
  }

  // Modules per bundle, loaded by its first binding's executor and reused by the rest.
  std::vector<GpuExecutor::Modules> modules(bundles.size());
  for (const std::vector<std::string>& binds : bind_sets) {
    std::vector<std::unique_ptr<Subject>> subjects;
    for (size_t b = 0; b < bundles.size(); ++b)
      subjects.push_back(prepare_subject(bundles[b], bundle_paths[b], binds, device, tracer.get(), options,
                                         reports[b].environment, reports[b].notes, modules[b]));
    std::vector<ProfileRun> runs = time_subjects(subjects, tracer.get(), options, reports.front().environment, probe);
    for (size_t b = 0; b < bundles.size(); ++b) reports[b].runs.push_back(std::move(runs[b]));
  }
  return reports;
}

}  // namespace teeny
