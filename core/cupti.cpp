#include "core/cupti.h"

#include <cstdlib>
#include <mutex>

#include <cupti.h>
#include <fmt/format.h>

#include "core/error.h"

namespace teeny {
namespace {

// CUPTI 13 emits CUpti_ActivityKernel10; 12.x headers end at 9. The fields read here sit at
// the same offsets in both.
#if CUPTI_API_VERSION >= 130000
using KernelActivity = CUpti_ActivityKernel10;
#else
using KernelActivity = CUpti_ActivityKernel9;
#endif

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI requires ACTIVITY_RECORD_ALIGNMENT (8)

std::string result_name(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
    return fmt::format("CUPTI error {}", static_cast<int>(result));
  return text;
}

std::string describe(CUptiResult result, const char* call, const std::string& what) {
  return fmt::format("{} from {} while {}", result_name(result), call, what);
}

void check(CUptiResult result, const char* call, const std::string& what) {
  if (result != CUPTI_SUCCESS) throw gpu_error(describe(result, call, what));
}

// State shared with CUPTI's callbacks, which run on CUPTI's worker thread or inside
// cuptiActivityFlushAll. C callbacks cannot carry a pointer, hence one process-wide instance.
struct CallbackState {
  std::mutex mutex;
  bool registered = false;  // callbacks are registered once per process; later tracers reuse them
  bool active = false;
  ActivityBatch batch;
  std::string callback_error;  // the first failure seen inside a callback; thrown by take()
};
CallbackState& state() {
  static CallbackState instance;
  return instance;
}

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;  // size 0: CUPTI drops records and counts them
  *max_records = 0;                               // as many as fit
}

KernelRecord copy_kernel(const KernelActivity& k) {
  KernelRecord r;
  r.start_ns = k.start;
  r.end_ns = k.end;
  r.correlation_id = k.correlationId;
  r.device_id = k.deviceId;
  r.context_id = k.contextId;
  r.stream_id = k.streamId;
  r.name = k.name != nullptr ? k.name : "";
  r.grid = {k.gridX, k.gridY, k.gridZ};
  r.block = {k.blockX, k.blockY, k.blockZ};
  r.registers = k.registersPerThread;
  r.static_smem = k.staticSharedMemory;
  r.dynamic_smem = k.dynamicSharedMemory;
  r.graph_node_id = k.graphNodeId;
  r.graph_id = k.graphId;
  return r;
}

void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                                  size_t valid_size) {
  ActivityBatch local;
  std::string error;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult result = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the buffer
    if (result != CUPTI_SUCCESS) {
      error = describe(result, "cuptiActivityGetNextRecord", "reading an activity buffer");
      break;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      local.kernels.push_back(copy_kernel(*reinterpret_cast<const KernelActivity*>(record)));
    } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (c->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
        local.correlations.push_back({c->correlationId, c->externalId});
    }
  }
  size_t dropped = 0;
  const CUptiResult dropped_result = cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped);
  if (dropped_result != CUPTI_SUCCESS && error.empty())
    error = describe(dropped_result, "cuptiActivityGetNumDroppedRecords", "checking for dropped activity records");
  std::free(buffer);

  CallbackState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& k : local.kernels) s.batch.kernels.push_back(std::move(k));
  s.batch.correlations.insert(s.batch.correlations.end(), local.correlations.begin(), local.correlations.end());
  s.batch.dropped += dropped;
  if (s.callback_error.empty()) s.callback_error = error;
}

// External-correlation records accompany driver API records, so driver API activity is enabled
// too (its records are skipped), as in CUPTI's own external-correlation sample.
const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                     CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

std::unique_ptr<CuptiTracer> CuptiTracer::start(std::string* why_not) {
  CallbackState& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.active) throw Error("internal: a second CUPTI tracer was started in one process");
    s.batch = ActivityBatch{};
    s.callback_error.clear();
  }
  CUptiResult result = CUPTI_SUCCESS;
  if (!s.registered) {
    result = cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
    if (result != CUPTI_SUCCESS) {
      *why_not = describe(result, "cuptiActivityRegisterCallbacks", "setting up kernel tracing");
      return nullptr;
    }
    s.registered = true;
  }
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    result = cuptiActivityEnable(kKinds[i]);
    if (result != CUPTI_SUCCESS) {
      static const char* const kWhat[] = {"enabling kernel activity records", "enabling external correlation records",
                                          "enabling driver API activity records"};
      *why_not = describe(result, "cuptiActivityEnable", kWhat[i]);
      for (size_t j = 0; j < i; ++j) cuptiActivityDisable(kKinds[j]);  // undo; result moot
      return nullptr;
    }
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.active = true;
  return std::unique_ptr<CuptiTracer>(new CuptiTracer());
}

CuptiTracer::~CuptiTracer() {
  // Hand over what is still buffered so CUPTI frees nothing we own later; errors here
  // cannot be reported (a destructor) and no result depends on them any more.
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  CallbackState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.active = false;
  s.batch = ActivityBatch{};
}

void CuptiTracer::push_external_id(uint64_t id, const char* what) {
  check(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
        "cuptiActivityPushExternalCorrelationId", fmt::format("tagging {}", what));
}

void CuptiTracer::pop_external_id(uint64_t expected_id, const char* what) {
  uint64_t popped = 0;
  check(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped),
        "cuptiActivityPopExternalCorrelationId", fmt::format("untagging {}", what));
  if (popped != expected_id)
    throw gpu_error(fmt::format("CUPTI external correlation stack out of step after {}: popped id {:#x}, pushed {:#x}",
                                what, popped, expected_id));
}

ActivityBatch CuptiTracer::take() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll",
        "collecting kernel activity records");
  CallbackState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.callback_error.empty()) throw gpu_error(s.callback_error);
  ActivityBatch out = std::move(s.batch);
  s.batch = ActivityBatch{};
  return out;
}

std::string CuptiTracer::version() {
  uint32_t version = 0;
  const CUptiResult result = cuptiGetVersion(&version);
  if (result != CUPTI_SUCCESS) return fmt::format("unknown ({})", result_name(result));
  return fmt::format("CUPTI API {}", version);
}

}  // namespace teeny
