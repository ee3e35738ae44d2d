// `teeny profile`: per-launch GPU times of a bundle, measured with CUPTI activity records
// (or CUDA events when CUPTI cannot be used), summarised with the op's cost into GB/s,
// GFLOP/s and % of the device's peak.
//
// Protocol per binding: load the bundle, warm up (by count and by time), then timed
// iterations (by count and by time), each iteration synchronised. Every kernel record is
// joined to (iteration, launch) through the external correlation id pushed around its launch
// and validated: none dropped, exactly one record per launch per iteration, the expected
// kernel, end > start. A run that fails validation is reported as untrusted, with reasons.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/cupti.h"
#include "core/expr.h"
#include "core/stats.h"

namespace teeny {

enum class ProfileMode {
  kSequence,  // graph order, back to back: warm L2 as in real use
  kIsolated,  // L2 flushed before each launch (flush excluded from timing)
};
const char* profile_mode_name(ProfileMode mode);  // "sequence", "isolated"

struct ProfileOptions {
  int warmup_iterations = 10;
  double warmup_min_seconds = 0.2;  // and at least this long, so clocks settle
  int iterations = 100;
  double min_seconds = 0.5;     // timed iterations continue until both are met...
  int max_iterations = 100000;  // ...but never beyond this (records are kept in memory)
  ProfileMode mode = ProfileMode::kSequence;
  bool cuda_graph = false;
  bool keep_trace = false;   // keep per-record timings for --trace
  std::string weights_path;  // safetensors; empty: trained params random (see profile_bundle)
  uint64_t seed = 0;         // random inputs and params
};

// What is known about one launch of the bundle once dims are bound.
struct LaunchFacts {
  int index = 0;
  std::string node, kernel, entry;     // node: the launch's label ("fc1", "cat#1": launch_label)
  std::string owner;                   // the node it lowers ("cat" for "cat#1")
  NodeRole role = NodeRole::kForward;  // a training step's pass: forward, backward, update
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int, 3> block{1, 1, 1};
  int64_t dynamic_smem_bytes = 0;
  int static_smem_bytes = 0;     // cuFuncGetAttribute(SHARED_SIZE_BYTES)
  int registers = 0;             // cuFuncGetAttribute(NUM_REGS)
  int active_blocks_per_sm = 0;  // cuOccupancyMaxActiveBlocksPerMultiprocessor
  double occupancy = 0;          // theoretical: active warps / max warps per SM
  int64_t bytes = 0, flops = 0;  // the op's cost expressions, evaluated
  bool tensor_cores = false;     // its PTX issues f16/bf16 MMAs: % of the tensor-core ceiling
  // Which variant ran: the kernel's PTX hash and the op source that generated it (file:line).
  std::string ptx_sha256, kernel_source;
};

// The GPU interval of one launch in one iteration (ns; CUPTI's clock or event offsets).
struct LaunchTiming {
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t device_id = 0, stream_id = 0;
  uint64_t graph_node_id = 0;
};

// Kernel records joined to launches: timings[iteration][launch].
struct MatchedRecords {
  std::vector<std::vector<LaunchTiming>> timings;
  std::vector<std::string> problems;  // empty: trusted
  size_t excluded_records = 0;        // kernels not launched by teeny (e.g. L2 flush), ignored
  // Only when per-launch intervals are unavailable (a CUDA graph replay timed with events):
  // the measured end-to-end time per iteration.
  std::vector<double> end_to_end_us;
};

// Joins CUPTI records to launches and validates them. `launches` gives the expected kernel
// per launch; iterations are numbered [0, iterations). With `cuda_graph`, every launch of an
// iteration shares the replay's correlation id, so records are ordered by start time (the
// captured graph is a chain) and their names and graph node ids checked against the launch
// order and against iteration 0.
MatchedRecords match_records(const ActivityBatch& batch, const std::vector<LaunchFacts>& launches, uint32_t iterations,
                             bool cuda_graph);

// Interleaved profiling (profile_bundles) tags subject `subject`'s iterations with its number in
// bit 30 of the iteration (iterations stay far below 2^30), so one CUPTI batch holds them all.
inline constexpr uint32_t kSubjectBit = 30;
inline uint32_t subject_tag(size_t subject, uint32_t iteration) {
  return static_cast<uint32_t>(subject << kSubjectBit) | iteration;
}
// The records of `subject` among `subjects`, with the subject bit cleared from their tags.
// Records without a teeny tag (an L2 flush, the clock probe) go to subject 0, which reports
// them as excluded.
ActivityBatch records_of_subject(const ActivityBatch& batch, size_t subject, size_t subjects);

// The device's ceilings used for "% of peak".
struct DevicePeaks {
  double bandwidth_gbps = 0;  // 2 * memory clock * bus width / 8
  double fp32_gflops = 0;     // SMs * FP32 lanes per SM * 2 * SM clock
  // Dense f16/bf16 MMA with f32 accumulation: SMs * FLOP per clock per SM * SM clock, for the
  // archs whose rate is known (sm_80: 2048, sm_90: 4096); 0 otherwise.
  double tensor16_gflops = 0;
  std::string source;  // how they were obtained, e.g. "from device attributes"
};

struct Environment {
  std::string gpu_name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  int driver_version = 0;        // cuDriverGetVersion, e.g. 13000
  int cuda_headers_version = 0;  // CUDA_VERSION teeny was built with
  std::string nvrtc_version;     // the NVRTC that compiled the bundle
  std::string cupti_version;
  double sm_clock_mhz = 0, memory_clock_mhz = 0;
  int memory_bus_bits = 0;
  int64_t l2_bytes = 0;
  DevicePeaks peaks;
  std::string timing_method;  // "CUPTI activity records" or "CUDA events (...why...)"
  bool cupti = false;
  std::string mode;
  bool cuda_graph = false;
};

struct LaunchStats {
  LaunchFacts facts;
  Summary duration_us;
  std::vector<double> samples_us;  // the duration in each timed iteration, in order
  double share = 0;                // of the summed mean kernel time of an iteration, in [0, 1]
  double gbps = 0, gflops = 0;     // at the median duration
  // In %, against Environment::peaks: bandwidth, and compute against the ceiling of the
  // kernel's arithmetic (tensor16 for tensor-core kernels, else fp32; 0 when it is unknown).
  double pct_peak_bandwidth = 0, pct_peak_compute = 0;
};

// One kernel slice for --trace.
struct TraceSlice {
  int iteration = 0, launch = 0;
  uint32_t device_id = 0, stream_id = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

struct ProfileRun {
  Bindings bindings;
  int warmup_iterations = 0;
  double warmup_seconds = 0;
  int iterations = 0;
  std::vector<LaunchStats> launches;
  Summary gpu_time_us;                      // per iteration: first kernel start to last kernel end
  std::vector<double> gpu_time_samples_us;  // each timed iteration's, in order
  // The SM clock measured (ClockProbe) just before and just after the timed iterations.
  double sm_clock_before_mhz = 0, sm_clock_after_mhz = 0;
  Summary enqueue_us;                  // per iteration: host time to enqueue all launches
  double kernel_sum_us = 0;            // sum of the per-launch median durations
  std::vector<std::string> untrusted;  // why the numbers are not trusted; empty: trusted
  std::vector<std::string> warnings;   // noise, iteration cap, ...
  size_t excluded_records = 0;
  std::vector<TraceSlice> trace;  // when ProfileOptions::keep_trace
};

struct ProfileReport {
  std::string bundle_path, graph_name;
  Environment environment;
  std::string sweep_dim;  // empty unless --sweep
  std::vector<ProfileRun> runs;
  std::vector<std::string> notes;  // for stderr: how params were filled, ...
};

// Noise thresholds on the relative IQR above which a warning is attached to a run.
inline constexpr double kNoisyEndToEnd = 0.05;
inline constexpr double kNoisyLaunch = 0.10;
// A measured SM clock that moves by more than this across the timed iterations gets a warning.
inline constexpr double kClockDrift = 0.05;

// Attaches the measured clocks to `run`, with a warning when they moved by more than kClockDrift.
void record_clocks(ProfileRun& run, double before_mhz, double after_mhz);

// Statistics, figures and warnings for one run from validated timings (CPU only; used by
// profile_bundle and by tests with synthetic timings). `enqueue_us` has one entry per
// iteration.
ProfileRun summarize_run(const Bindings& bindings, const std::vector<LaunchFacts>& launches,
                         const MatchedRecords& matched, const std::vector<double>& enqueue_us, const DevicePeaks& peaks,
                         bool keep_trace);

// Peak figures from device attributes: memory clock in kHz, bus width in bits, SM clock in
// kHz. FP32 lanes per SM follow the compute capability (64 on sm_80, 128 on sm_86 and later).
DevicePeaks peaks_from_attributes(int cc_major, int cc_minor, int sm_count, double sm_clock_khz,
                                  double memory_clock_khz, int memory_bus_bits);

// Parses "--sweep D=a,b,c" into the dim name and values (each > 0). Throws Error.
std::pair<std::string, std::vector<int64_t>> parse_sweep(const std::string& text);

// Runs the whole protocol on the GPU once per entry of `bind_sets` ("--bind D=N" values), in
// one process with one CUPTI session. `sweep_dim` names the dim that varies (or is empty).
// Inputs are random (options.seed); trained params come from options.weights_path or are
// random, so kernels see realistic data. Setting TEENY_PROFILE_NO_CUPTI=1 forces the
// CUDA-event fallback (to measure CUPTI's overhead). Throws Error (exit code 3) for a missing
// driver/device or a CUDA/CUPTI failure.
ProfileReport profile_bundle(const std::string& bundle_path, const std::vector<std::vector<std::string>>& bind_sets,
                             const std::string& sweep_dim, const ProfileOptions& options);

// The same protocol for several bundles at once (`teeny compare` of two bundles): per binding,
// their warm-up and timed iterations alternate (A B, then B A, ...), so clock and thermal drift
// and the order of execution hit all of them alike. One report per bundle, in order.
std::vector<ProfileReport> profile_bundles(const std::vector<std::string>& bundle_paths,
                                           const std::vector<std::vector<std::string>>& bind_sets,
                                           const std::string& sweep_dim, const ProfileOptions& options);

}  // namespace teeny
