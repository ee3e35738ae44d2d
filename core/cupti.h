// CUPTI activity tracing of kernel launches (CONCURRENT_KERNEL + EXTERNAL_CORRELATION).
//
// Each launch is enqueued between push_external_id / pop_external_id, so CUPTI emits an
// EXTERNAL_CORRELATION record joining its correlation id (of the launching API call) to our
// id, which encodes (iteration, launch index). The profiler joins kernel records to launches
// through that, never by order or name alone. CUPTI is linked normally (it does not pull in
// libcuda); the tracer is only created after the driver has been found.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace teeny {

// One CONCURRENT_KERNEL activity record, copied out of CUPTI's buffer.
struct KernelRecord {
  uint64_t start_ns = 0, end_ns = 0;  // GPU timestamps
  uint32_t correlation_id = 0;        // CUPTI's id of the launching API call
  uint32_t device_id = 0, context_id = 0, stream_id = 0;
  std::string name;
  std::array<int, 3> grid{}, block{};
  int registers = 0;
  int static_smem = 0, dynamic_smem = 0;
  uint64_t graph_node_id = 0;  // 0 unless launched from a CUDA graph
  uint32_t graph_id = 0;
};

// Joins a CUPTI correlation id to the external id that was pushed around that API call.
struct ExternalCorrelation {
  uint32_t correlation_id = 0;
  uint64_t external_id = 0;
};

struct ActivityBatch {
  std::vector<KernelRecord> kernels;
  std::vector<ExternalCorrelation> correlations;
  uint64_t dropped = 0;  // records CUPTI reported as dropped (buffers too small / too slow)
};

// External ids: the high 32 bits are the iteration, the low 32 bits the launch index.
// A whole-graph replay (--cuda-graph) is tagged with launch index kWholeGraph.
inline constexpr uint32_t kWholeGraph = 0xFFFFFFFFu;
inline uint64_t encode_external_id(uint32_t iteration, uint32_t launch) {
  return (static_cast<uint64_t>(iteration) << 32) | launch;
}
inline std::pair<uint32_t, uint32_t> decode_external_id(uint64_t id) {
  return {static_cast<uint32_t>(id >> 32), static_cast<uint32_t>(id & 0xFFFFFFFFu)};
}

class CuptiTracer {
 public:
  // Registers buffer callbacks and enables kernel and external-correlation activity. Call
  // before modules are loaded. Returns nullptr with the reason in `why_not` when CUPTI
  // cannot be used here (no permission, another profiler attached, init failure): the
  // caller then falls back to CUDA events. Only one tracer may exist at a time.
  static std::unique_ptr<CuptiTracer> start(std::string* why_not);
  ~CuptiTracer();  // disables the activity kinds (best effort: destructors cannot throw)
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  // Around each launch (or graph replay). Throws on CUPTI errors, naming `what`.
  void push_external_id(uint64_t id, const char* what);
  void pop_external_id(uint64_t expected_id, const char* what);

  // Forces CUPTI to hand over all buffered records (call after the stream is synchronised)
  // and returns everything collected since the previous take().
  ActivityBatch take();

  static std::string version();  // "CUPTI API 130001"; "unknown (...)" if the query fails

 private:
  CuptiTracer() = default;
};

}  // namespace teeny
