// The CUDA driver, loaded at run time: dlopen("libcuda.so.1"), then every symbol through
// cuGetProcAddress, so the binary starts (and compile/inspect/check work) without a GPU.
// cuda.h is included for types and constants only; nothing links against libcuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda.h>

#include "core/error.h"
#include "core/expr.h"

namespace teeny::cuda {

// The driver functions teeny uses: X(member, cuda_name). The pointer type is the signature
// cuda.h declares for `cuda_name` (after its _v2 remapping), and the symbol is resolved with
// the same header's CUDA_VERSION. That agrees only while the header's declaration is the newest
// ABI: cuda.h 13.0 declares cuCtxSynchronize(void) but cuGetProcAddress(…, 13000) returns
// cuCtxSynchronize_v2(CUcontext) (cudaTypedefs.h: PFN_cuCtxSynchronize_v13000), so functions
// with a _v13000 typedef there must not be added to this table without their own version.
#define TEENY_CUDA_FUNCTIONS(X)                                                             \
  X(GetErrorName, cuGetErrorName)                                                           \
  X(GetErrorString, cuGetErrorString)                                                       \
  X(Init, cuInit)                                                                           \
  X(DriverGetVersion, cuDriverGetVersion)                                                   \
  X(DeviceGetCount, cuDeviceGetCount)                                                       \
  X(DeviceGet, cuDeviceGet)                                                                 \
  X(DeviceGetName, cuDeviceGetName)                                                         \
  X(DeviceGetAttribute, cuDeviceGetAttribute)                                               \
  X(DeviceTotalMem, cuDeviceTotalMem)                                                       \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                                       \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease)                                     \
  X(CtxSetCurrent, cuCtxSetCurrent)                                                         \
  X(ModuleLoadDataEx, cuModuleLoadDataEx)                                                   \
  X(ModuleUnload, cuModuleUnload)                                                           \
  X(ModuleGetFunction, cuModuleGetFunction)                                                 \
  X(FuncGetAttribute, cuFuncGetAttribute)                                                   \
  X(FuncSetAttribute, cuFuncSetAttribute)                                                   \
  X(OccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(MemGetInfo, cuMemGetInfo)                                                               \
  X(MemAlloc, cuMemAlloc)                                                                   \
  X(MemFree, cuMemFree)                                                                     \
  X(MemcpyHtoD, cuMemcpyHtoD)                                                               \
  X(MemcpyDtoH, cuMemcpyDtoH)                                                               \
  X(MemcpyHtoDAsync, cuMemcpyHtoDAsync)                                                     \
  X(MemcpyDtoHAsync, cuMemcpyDtoHAsync)                                                     \
  X(MemAllocHost, cuMemAllocHost)                                                           \
  X(MemFreeHost, cuMemFreeHost)                                                             \
  X(MemsetD8, cuMemsetD8)                                                                   \
  X(MemsetD8Async, cuMemsetD8Async)                                                         \
  X(StreamCreate, cuStreamCreate)                                                           \
  X(StreamDestroy, cuStreamDestroy)                                                         \
  X(StreamSynchronize, cuStreamSynchronize)                                                 \
  X(StreamWaitEvent, cuStreamWaitEvent)                                                     \
  X(EventCreate, cuEventCreate)                                                             \
  X(EventDestroy, cuEventDestroy)                                                           \
  X(EventRecord, cuEventRecord)                                                             \
  X(EventSynchronize, cuEventSynchronize)                                                   \
  X(EventElapsedTime, cuEventElapsedTime)                                                   \
  X(LaunchKernel, cuLaunchKernel)                                                           \
  X(LaunchKernelEx, cuLaunchKernelEx)                                                       \
  X(StreamBeginCapture, cuStreamBeginCapture)                                               \
  X(StreamEndCapture, cuStreamEndCapture)                                                   \
  X(GraphInstantiateWithFlags, cuGraphInstantiateWithFlags)                                 \
  X(GraphLaunch, cuGraphLaunch)                                                             \
  X(GraphDestroy, cuGraphDestroy)                                                           \
  X(GraphExecDestroy, cuGraphExecDestroy)                                                   \
  X(TensorMapEncodeTiled, cuTensorMapEncodeTiled)

struct DriverApi {
#define TEENY_CUDA_DECLARE(member, cuda_name) decltype(&::cuda_name) member = nullptr;
  TEENY_CUDA_FUNCTIONS(TEENY_CUDA_DECLARE)
#undef TEENY_CUDA_DECLARE
};

inline constexpr const char* kDriverLibrary = "libcuda.so.1";

class Driver {
 public:
  // The process-wide driver: loaded and cuInit'ed on first use. Throws Error (exit code 3):
  //   "no CUDA driver found (libcuda.so.1): <dlerror>", or a CUDA error from cuInit.
  static const Driver& get();
  // The same driver, or null where get() would throw (no library, no device): for commands that
  // work without a GPU and only use one when there is one.
  static const Driver* find();
  // Loads `library` into a new Driver (tests use a missing name for the absent-driver path).
  static std::unique_ptr<Driver> load(const std::string& library);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const DriverApi& api() const { return api_; }
  int version() const { return version_; }  // cuDriverGetVersion, e.g. 13000

  // Throws unless `result` is CUDA_SUCCESS:
  //   "<call> failed with CUDA_ERROR_X (<description>) while <what>"   (exit code 3)
  void check(CUresult result, const char* call, const std::string& what) const;
  std::string error_name(CUresult result) const;  // "CUDA_ERROR_OUT_OF_MEMORY"

 private:
  Driver() = default;
  void* library_ = nullptr;
  DriverApi api_;
  int version_ = 0;
};

// Calls api().member(args...) and checks it, naming the CUDA function and what was being done.
#define TEENY_CU(driver, member, what, ...) (driver).check((driver).api().member(__VA_ARGS__), "cu" #member, (what))

// ---- RAII handles --------------------------------------------------------------------------
// Each owns one driver object and releases it in its destructor (errors there are ignored:
// a destructor cannot report, and the context is being torn down anyway).

// Device 0 with its primary context retained and made current on this thread.
class Device {
 public:
  // Throws "no CUDA device" (exit code 3) when the driver sees none.
  static std::shared_ptr<Device> open(const Driver& driver, int ordinal = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Driver& driver() const { return driver_; }
  CUdevice handle() const { return device_; }
  CUcontext context() const { return context_; }
  const std::string& name() const { return name_; }
  int ordinal() const { return ordinal_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  int sm_count() const { return static_cast<int>(facts_.sms); }
  // What the device symbols (SMS, SMEM_PER_BLOCK, L2_BYTES) are bound to when launches run here.
  const DeviceFacts& facts() const { return facts_; }
  uint64_t total_memory() const { return total_memory_; }
  int attribute(CUdevice_attribute attribute, const char* what) const;
  // Makes the primary context current on the calling thread.
  void make_current() const;

 private:
  Device(const Driver& driver, int ordinal) : driver_(driver), ordinal_(ordinal) {}
  const Driver& driver_;
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0;
  DeviceFacts facts_;
  uint64_t total_memory_ = 0;
};

class Stream;
class Event;

// Page-locked host memory: copies between it and the device are asynchronous on a stream.
class PinnedBuffer {
 public:
  PinnedBuffer(std::shared_ptr<Device> device, size_t bytes, const std::string& what);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::shared_ptr<Device> device_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `what` names the buffer for the out-of-memory error ("activations arena").
  DeviceBuffer(std::shared_ptr<Device> device, size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }
  void upload(const void* data, size_t bytes, size_t offset, const std::string& what) const;
  void download(void* data, size_t bytes, size_t offset, const std::string& what) const;
  // Enqueued on `stream`: the host buffer must stay untouched until the stream passes the copy.
  void upload_async(const PinnedBuffer& from, size_t bytes, const Stream& stream, const std::string& what) const;
  void download_async(const PinnedBuffer& to, size_t bytes, size_t offset, const Stream& stream,
                      const std::string& what) const;
  void zero(const std::string& what) const;

 private:
  void release();
  std::shared_ptr<Device> device_;
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

// A PTX module JIT-compiled by the driver; the JIT log is part of any load error.
class Module {
 public:
  // `what` says which kernel of which bundle ("loading kernel 'fc1' from bundle mlp.teeny").
  Module(std::shared_ptr<Device> device, const std::string& ptx, const std::string& what);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const std::string& entry, const std::string& what) const;
  const std::string& info_log() const { return info_log_; }

 private:
  std::shared_ptr<Device> device_;
  CUmodule module_ = nullptr;
  std::string info_log_;
};

class Stream {
 public:
  explicit Stream(std::shared_ptr<Device> device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream handle() const { return stream_; }
  void synchronize(const std::string& what) const;
  // Work enqueued after this waits for what `event` recorded (on any stream); also while capturing.
  void wait(const Event& event) const;

 private:
  std::shared_ptr<Device> device_;
  CUstream stream_ = nullptr;
};

class Event {
 public:
  explicit Event(std::shared_ptr<Device> device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent handle() const { return event_; }
  void record(const Stream& stream) const;
  void synchronize(const std::string& what) const;  // `what` names the work waited for in errors
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;

 private:
  std::shared_ptr<Device> device_;
  CUevent event_ = nullptr;
};

// A captured and instantiated CUDA graph: everything enqueued on `stream` by `enqueue`
// between begin and end capture, replayed with one cuGraphLaunch.
class CudaGraph {
 public:
  template <typename Enqueue>
  static std::unique_ptr<CudaGraph> capture(std::shared_ptr<Device> device, const Stream& stream, Enqueue&& enqueue) {
    std::unique_ptr<CudaGraph> graph(new CudaGraph(std::move(device)));
    graph->begin(stream);
    try {
      enqueue();
    } catch (...) {
      graph->abandon(stream);
      throw;
    }
    graph->end(stream);
    return graph;
  }
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch(const Stream& stream) const;

 private:
  explicit CudaGraph(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  void begin(const Stream& stream);
  void end(const Stream& stream);
  void abandon(const Stream& stream);
  std::shared_ptr<Device> device_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

// "1.50 MiB", "256 B": byte counts for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace teeny::cuda
