#include "core/driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

namespace teeny::cuda {

namespace {

using GetProcAddressFn = decltype(&::cuGetProcAddress);

}  // namespace

std::unique_ptr<Driver> Driver::load(const std::string& library) {
  std::unique_ptr<Driver> driver(new Driver());
  driver->library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!driver->library_) {
    const char* reason = dlerror();
    throw gpu_error(fmt::format("no CUDA driver found ({}): {}", library, reason ? reason : "dlopen failed"));
  }
  // cuGetProcAddress itself is the one symbol taken with dlsym; in CUDA 12+ its ABI is _v2.
  auto get_proc = reinterpret_cast<GetProcAddressFn>(dlsym(driver->library_, "cuGetProcAddress_v2"));
  if (!get_proc) {
    throw gpu_error(
        fmt::format("the CUDA driver in {} is too old: it has no cuGetProcAddress_v2 (CUDA 12.0 or newer is "
                    "needed)",
                    library));
  }
  auto resolve = [&](const char* symbol, void** slot) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult result = get_proc(symbol, slot, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
      const char* why = status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            ? "the driver's version of it is older than CUDA "
                            : "not found for CUDA ";
      throw gpu_error(fmt::format("cuGetProcAddress could not resolve {} in {} ({}{}.{})", symbol, library, why,
                                  CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10));
    }
  };
#define TEENY_CUDA_RESOLVE(member, cuda_name) resolve(#cuda_name, reinterpret_cast<void**>(&driver->api_.member));
  TEENY_CUDA_FUNCTIONS(TEENY_CUDA_RESOLVE)
#undef TEENY_CUDA_RESOLVE

  CUresult init = driver->api_.Init(0);
  if (init == CUDA_ERROR_NO_DEVICE) throw gpu_error("no CUDA device");
  driver->check(init, "cuInit", "initialising the CUDA driver");
  TEENY_CU(*driver, DriverGetVersion, "querying the driver version", &driver->version_);
  return driver;
}

namespace {

// The process-wide driver, loaded once; a failure is remembered so every caller sees the same
// error.
struct ProcessDriver {
  std::unique_ptr<Driver> driver;
  std::unique_ptr<Error> failure;
};

const ProcessDriver& process_driver() {
  static std::once_flag once;
  static ProcessDriver loaded;
  std::call_once(once, [] {
    try {
      loaded.driver = Driver::load(kDriverLibrary);
    } catch (const Error& error) {
      loaded.failure = std::make_unique<Error>(error);
    }
  });
  return loaded;
}

}  // namespace

const Driver& Driver::get() {
  const ProcessDriver& loaded = process_driver();
  if (loaded.failure) throw *loaded.failure;
  return *loaded.driver;
}

const Driver* Driver::find() { return process_driver().driver.get(); }

Driver::~Driver() {
  if (library_) dlclose(library_);
}

std::string Driver::error_name(CUresult result) const {
  const char* name = nullptr;
  if (api_.GetErrorName && api_.GetErrorName(result, &name) == CUDA_SUCCESS && name) return name;
  return fmt::format("CUDA error {}", static_cast<int>(result));
}

void Driver::check(CUresult result, const char* call, const std::string& what) const {
  if (result == CUDA_SUCCESS) return;
  const char* description = nullptr;
  std::string text = error_name(result);
  if (api_.GetErrorString && api_.GetErrorString(result, &description) == CUDA_SUCCESS && description) {
    text += fmt::format(" ({})", description);
  }
  throw gpu_error(fmt::format("{} failed with {} while {}", call, text, what));
}

// ---- Device --------------------------------------------------------------------------------

std::shared_ptr<Device> Device::open(const Driver& driver, int ordinal) {
  int count = 0;
  TEENY_CU(driver, DeviceGetCount, "counting CUDA devices", &count);
  if (count == 0) throw gpu_error("no CUDA device");
  if (ordinal < 0 || ordinal >= count) {
    throw gpu_error(fmt::format("no CUDA device {} (this machine has {})", ordinal, count));
  }
  std::shared_ptr<Device> device(new Device(driver, ordinal));
  const std::string what = fmt::format("opening CUDA device {}", ordinal);
  TEENY_CU(driver, DeviceGet, what, &device->device_, ordinal);
  char name[256] = {};
  TEENY_CU(driver, DeviceGetName, what, name, static_cast<int>(sizeof(name) - 1), device->device_);
  device->name_ = name;
  size_t total = 0;
  TEENY_CU(driver, DeviceTotalMem, what, &total, device->device_);
  device->total_memory_ = total;
  device->cc_major_ = device->attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major");
  device->cc_minor_ = device->attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor");
  device->facts_.sms = device->attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
  device->facts_.smem_per_block =
      device->attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "opt-in shared memory per block");
  device->facts_.l2_bytes = device->attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size");
  TEENY_CU(driver, DevicePrimaryCtxRetain, what, &device->context_, device->device_);
  device->make_current();
  return device;
}

Device::~Device() {
  if (context_) driver_.api().DevicePrimaryCtxRelease(device_);
}

int Device::attribute(CUdevice_attribute attribute, const char* what) const {
  int value = 0;
  TEENY_CU(driver_, DeviceGetAttribute, fmt::format("querying the device's {}", what), &value, attribute, device_);
  return value;
}

void Device::make_current() const {
  TEENY_CU(driver_, CtxSetCurrent, fmt::format("making device {}'s context current", ordinal_), context_);
}

// ---- DeviceBuffer --------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::shared_ptr<Device> device, size_t bytes, const std::string& what)
    : device_(std::move(device)), size_(bytes) {
  // cuMemAlloc refuses 0 bytes; a 0-byte buffer is legal (a graph with no activations).
  if (bytes == 0) return;
  TEENY_CU(device_->driver(), MemAlloc, fmt::format("allocating {} for {}", format_bytes(bytes), what), &ptr_, bytes);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::move(other.device_)), ptr_(other.ptr_), size_(other.size_) {
  other.ptr_ = 0;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::move(other.device_);
    ptr_ = other.ptr_;
    size_ = other.size_;
    other.ptr_ = 0;
    other.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::release() {
  if (ptr_) device_->driver().api().MemFree(ptr_);
  ptr_ = 0;
}

void DeviceBuffer::upload(const void* data, size_t bytes, size_t offset, const std::string& what) const {
  if (offset + bytes > size_) {
    throw gpu_error(
        fmt::format("upload of {} at offset {} overruns a {}-byte buffer while {}", bytes, offset, size_, what));
  }
  if (bytes == 0) return;
  TEENY_CU(device_->driver(), MemcpyHtoD, what, ptr_ + offset, data, bytes);
}

PinnedBuffer::PinnedBuffer(std::shared_ptr<Device> device, size_t bytes, const std::string& what)
    : device_(std::move(device)), size_(bytes) {
  if (bytes == 0) return;
  TEENY_CU(device_->driver(), MemAllocHost,
           fmt::format("allocating {} of page-locked host memory for {}", format_bytes(bytes), what), &data_, bytes);
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) device_->driver().api().MemFreeHost(data_);
}

void DeviceBuffer::upload_async(const PinnedBuffer& from, size_t bytes, const Stream& stream,
                                const std::string& what) const {
  if (bytes > size_ || bytes > from.size())
    throw gpu_error(
        fmt::format("upload of {} overruns a {}-byte buffer while {}", bytes, std::min(size_, from.size()), what));
  if (bytes == 0) return;
  TEENY_CU(device_->driver(), MemcpyHtoDAsync, what, ptr_, from.data(), bytes, stream.handle());
}

void DeviceBuffer::download_async(const PinnedBuffer& to, size_t bytes, size_t offset, const Stream& stream,
                                  const std::string& what) const {
  if (offset + bytes > size_ || bytes > to.size())
    throw gpu_error(fmt::format("download of {} at offset {} overruns a {}-byte buffer while {}", bytes, offset,
                                std::min(size_, to.size()), what));
  if (bytes == 0) return;
  TEENY_CU(device_->driver(), MemcpyDtoHAsync, what, to.data(), ptr_ + offset, bytes, stream.handle());
}

void DeviceBuffer::download(void* data, size_t bytes, size_t offset, const std::string& what) const {
  if (offset + bytes > size_) {
    throw gpu_error(
        fmt::format("download of {} at offset {} overruns a {}-byte buffer while {}", bytes, offset, size_, what));
  }
  if (bytes == 0) return;
  TEENY_CU(device_->driver(), MemcpyDtoH, what, data, ptr_ + offset, bytes);
}

void DeviceBuffer::zero(const std::string& what) const {
  if (size_ == 0) return;
  TEENY_CU(device_->driver(), MemsetD8, what, ptr_, 0, size_);
}

// ---- Module --------------------------------------------------------------------------------

Module::Module(std::shared_ptr<Device> device, const std::string& ptx, const std::string& what)
    : device_(std::move(device)) {
  // The JIT writes its diagnostics into these buffers; the sizes come back as the used length.
  std::vector<char> error_log(16384, '\0'), info_log(16384, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size() - 1), info_log.data(),
                    reinterpret_cast<void*>(info_log.size() - 1)};
  const Driver& driver = device_->driver();
  CUresult result = driver.api().ModuleLoadDataEx(&module_, ptx.c_str(), 4, options, values);
  info_log_ = info_log.data();
  if (result != CUDA_SUCCESS) {
    module_ = nullptr;
    try {
      driver.check(result, "cuModuleLoadDataEx", what);
    } catch (Error& error) {
      std::string log = error_log.data();
      if (!log.empty()) error.note("PTX JIT log:\n" + log);
      throw;
    }
  }
}

Module::~Module() {
  if (module_) device_->driver().api().ModuleUnload(module_);
}

CUfunction Module::function(const std::string& entry, const std::string& what) const {
  CUfunction function = nullptr;
  TEENY_CU(device_->driver(), ModuleGetFunction, what, &function, module_, entry.c_str());
  return function;
}

// ---- Stream, Event -------------------------------------------------------------------------

Stream::Stream(std::shared_ptr<Device> device) : device_(std::move(device)) {
  // A blocking stream: it is ordered after the synchronous cuMemcpy/cuMemset calls (which run
  // on the legacy default stream, and for pageable uploads may still be in flight when they
  // return), and they after it.
  TEENY_CU(device_->driver(), StreamCreate, "creating a stream", &stream_, CU_STREAM_DEFAULT);
}

Stream::~Stream() {
  if (stream_) device_->driver().api().StreamDestroy(stream_);
}

void Stream::synchronize(const std::string& what) const {
  TEENY_CU(device_->driver(), StreamSynchronize, what, stream_);
}

void Stream::wait(const Event& event) const {
  TEENY_CU(device_->driver(), StreamWaitEvent, "making a stream wait for an event", stream_, event.handle(), 0u);
}

Event::Event(std::shared_ptr<Device> device) : device_(std::move(device)) {
  TEENY_CU(device_->driver(), EventCreate, "creating an event", &event_, CU_EVENT_DEFAULT);
}

Event::~Event() {
  if (event_) device_->driver().api().EventDestroy(event_);
}

void Event::record(const Stream& stream) const {
  TEENY_CU(device_->driver(), EventRecord, "recording an event", event_, stream.handle());
}

void Event::synchronize(const std::string& what) const { TEENY_CU(device_->driver(), EventSynchronize, what, event_); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  TEENY_CU(device_->driver(), EventElapsedTime, "reading the time between two events", &ms, start.handle(), event_);
  return ms;
}

// ---- CudaGraph -----------------------------------------------------------------------------

void CudaGraph::begin(const Stream& stream) {
  TEENY_CU(device_->driver(), StreamBeginCapture, "starting CUDA graph capture", stream.handle(),
           CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

void CudaGraph::end(const Stream& stream) {
  const Driver& driver = device_->driver();
  TEENY_CU(driver, StreamEndCapture, "ending CUDA graph capture", stream.handle(), &graph_);
  TEENY_CU(driver, GraphInstantiateWithFlags, "instantiating the captured CUDA graph", &exec_, graph_, 0ULL);
}

void CudaGraph::abandon(const Stream& stream) {
  // Capture must be ended even on failure, or the stream stays unusable.
  CUgraph partial = nullptr;
  device_->driver().api().StreamEndCapture(stream.handle(), &partial);
  if (partial) device_->driver().api().GraphDestroy(partial);
}

CudaGraph::~CudaGraph() {
  const DriverApi& api = device_->driver().api();
  if (exec_) api.GraphExecDestroy(exec_);
  if (graph_) api.GraphDestroy(graph_);
}

void CudaGraph::launch(const Stream& stream) const {
  TEENY_CU(device_->driver(), GraphLaunch, "launching the CUDA graph", exec_, stream.handle());
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024ull * 1024) return fmt::format("{:.2f} KiB", bytes / 1024.0);
  if (bytes < 1024ull * 1024 * 1024) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
}

}  // namespace teeny::cuda
