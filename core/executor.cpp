#include "core/executor.h"

#include <cstring>

#include <fmt/format.h>

#include "core/launch_graph.h"

namespace teeny {

namespace {

// At most this many streams side by side: a training step's backward pass seldom has more
// independent chains, and its update pass's per-param launches are small.
constexpr int kConcurrentStreams = 8;

CUtensorMapDataType tensor_map_data_type(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::kF32:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kF16:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kBF16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kI32:
      return CU_TENSOR_MAP_DATA_TYPE_INT32;
  }
  throw gpu_error(fmt::format("{}: tensor maps of {} elements are not supported", what, dtype_name(dtype)));
}

CUtensorMapSwizzle tensor_map_swizzle(int bytes, const std::string& what) {
  switch (bytes) {
    case 0:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  throw gpu_error(fmt::format("{}: swizzle {} is not 0, 32, 64 or 128 bytes", what, bytes));
}

}  // namespace

// ---- GpuExecutor ---------------------------------------------------------------------------

GpuExecutor::GpuExecutor(std::shared_ptr<cuda::Device> device, const BoundBundle& bound, Modules modules)
    : device_(std::move(device)), bound_(bound), modules_(std::move(modules)) {
  // Grids, split counts and shared-memory checks were evaluated for one device's facts.
  if (!bound_.device || !(*bound_.device == device_->facts())) {
    const DeviceFacts& facts = device_->facts();
    throw Error(fmt::format("bundle {}: its launches are bound for {}, but {} has {}", bound_.label,
                            bound_.device ? bindings_text(device_bindings(*bound_.device)) : "no device",
                            device_->name(), bindings_text(device_bindings(facts))));
  }
  device_->make_current();
  load_modules();
  resolve_functions();
  allocate_buffers();
  for (const BoundLaunch& launch : bound_.launches) param_buffers_.push_back(pack_arguments(launch));
  // Launches pass kernelParams (a pointer per argument), not the packed buffer: with
  // CU_LAUNCH_PARAM_BUFFER_POINTER the H200 (driver 580) faults on the first TMA copy through
  // a __grid_constant__ tensor map (illegal instruction), while the same bytes passed per
  // argument work. Pointers into the buffers stay valid: each is built, then never resized.
  for (size_t i = 0; i < bound_.launches.size(); ++i) {
    std::vector<void*> pointers;
    for (const BoundArg& arg : bound_.launches[i].args) pointers.push_back(param_buffers_[i].data() + arg.offset);
    arg_pointers_.push_back(std::move(pointers));
  }
  stream_ = std::make_unique<cuda::Stream>(device_);
  overlap_launches(true);
}

void GpuExecutor::overlap_launches(bool on) { overlap_ = on && device_->cc_major() >= 9; }

void GpuExecutor::load_modules() {
  const Bundle& bundle = *bound_.bundle;
  if (modules_.empty()) {
    for (const BundleKernel& kernel : bundle.kernels) {
      modules_.push_back(std::make_shared<cuda::Module>(device_, kernel.ptx,
                                                        loading(fmt::format("loading kernel '{}'", kernel.name))));
    }
  } else if (modules_.size() != bundle.kernels.size()) {
    throw gpu_error(
        loading(fmt::format("reusing {} loaded modules for {} kernels", modules_.size(), bundle.kernels.size())));
  }
}

// bind_launches checked every launch's shared memory against this device's opt-in limit.
void GpuExecutor::resolve_functions() {
  const Bundle& bundle = *bound_.bundle;
  for (const BoundLaunch& launch : bound_.launches) {
    const BundleKernel& kernel = bundle.kernels[launch.kernel];
    CUfunction function = modules_[launch.kernel]->function(
        kernel.entry, loading(fmt::format("finding entry '{}' of kernel '{}'", kernel.entry, kernel.name)));
    // Above the default 48 KiB a kernel must opt in to more dynamic shared memory.
    if (launch.dynamic_smem > 48 * 1024) {
      TEENY_CU(
          device_->driver(), FuncSetAttribute,
          loading(fmt::format("allowing {} bytes of shared memory for kernel '{}'", launch.dynamic_smem, kernel.name)),
          function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(launch.dynamic_smem));
    }
    functions_.push_back(function);
    waits_.push_back(kernel.ptx.find("griddepcontrol.wait") != std::string::npos);
  }
}

void GpuExecutor::allocate_buffers() {
  arena_ = cuda::DeviceBuffer(device_, bound_.plan.arena_bytes, "activations");
  arena_.zero(loading("clearing the activation arena"));  // padding reads as zero
  uint64_t params_size = 0;
  for (const BoundParam& param : bound_.params) {
    param_offsets_[param.name] = params_size;
    params_size += (param.bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  params_ = cuda::DeviceBuffer(device_, params_size, "parameters");
  params_.zero(loading("clearing the parameters"));
}

// The driver copies the buffer at launch, so only offsets (64-aligned for tensor maps, as the
// PTX declares) matter, not where the host vector itself is aligned.
std::vector<uint8_t> GpuExecutor::pack_arguments(const BoundLaunch& launch) const {
  std::vector<uint8_t> buffer(launch.param_buffer_bytes, 0);
  for (const BoundArg& arg : launch.args) {
    uint8_t* slot = buffer.data() + arg.offset;
    switch (arg.kind) {
      case ArgKind::kInput:
      case ArgKind::kOutput:
      case ArgKind::kScratch:
      case ArgKind::kParam:
      case ArgKind::kParamOut: {
        CUdeviceptr ptr = arg_ptr(arg);
        std::memcpy(slot, &ptr, sizeof(ptr));
        break;
      }
      case ArgKind::kTensorMap: {
        CUtensorMap map = encode_tensor_map(launch, arg);
        static_assert(sizeof(map) == 128);
        std::memcpy(slot, &map, sizeof(map));
        break;
      }
      case ArgKind::kI32: {
        int32_t value = static_cast<int32_t>(arg.ivalue);
        std::memcpy(slot, &value, sizeof(value));
        break;
      }
      case ArgKind::kI64: {
        int64_t value = arg.ivalue;
        std::memcpy(slot, &value, sizeof(value));
        break;
      }
      case ArgKind::kF32: {
        float value = static_cast<float>(arg.fvalue);
        std::memcpy(slot, &value, sizeof(value));
        break;
      }
    }
  }
  return buffer;
}

std::string GpuExecutor::loading(const std::string& what) const {
  return fmt::format("{} from bundle {}", what, bound_.label);
}

CUdeviceptr GpuExecutor::tensor_ptr(const std::string& name) const {
  return arena_.ptr() + bound_.plan.offsets.at(name);
}

CUdeviceptr GpuExecutor::arg_ptr(const BoundArg& arg) const {
  return arg.kind == ArgKind::kParam || arg.kind == ArgKind::kParamOut ? params_.ptr() + param_offsets_.at(arg.target)
                                                                       : tensor_ptr(arg.target);
}

CUtensorMap GpuExecutor::encode_tensor_map(const BoundLaunch& launch, const BoundArg& arg) const {
  const BoundTensorMap& m = arg.map;
  const BoundArg& of = launch.args.at(m.of);
  const std::string what = loading(fmt::format("encoding tensor map '{}' (of '{}') for launch {} of node '{}'",
                                               arg.name, of.name, launch.index, launch.node));
  // bind_bundle checked extents, stride and box against the driver's rules; the address is
  // known only now.
  const CUdeviceptr address = arg_ptr(of);
  if (address % 16 != 0) {
    throw gpu_error(
        fmt::format("{}: the global address 0x{:x} of '{}' is not 16-byte aligned", what, address, of.target));
  }
  const CUtensorMapDataType type = tensor_map_data_type(m.dtype, what);
  const CUtensorMapSwizzle swizzle = tensor_map_swizzle(m.swizzle, what);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(m.cols), static_cast<cuuint64_t>(m.rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(m.row_stride) * dtype_size(m.dtype)};  // bytes; rank - 1
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(m.box_cols), static_cast<cuuint32_t>(m.box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap map;
  TEENY_CU(device_->driver(), TensorMapEncodeTiled, what, &map, type, 2, reinterpret_cast<void*>(address), dims,
           strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return map;
}

void GpuExecutor::upload(const RunData& data) {
  for (const std::string& name : bound_.bundle->inputs) set_input(name, data.inputs.at(name));
  for (const BoundParam& param : bound_.params) set_param(param.name, data.params.at(param.name));
}

void GpuExecutor::set_input(const std::string& name, const HostTensor& values) {
  const BoundTensor& tensor = bound_.tensor(name);
  std::vector<uint8_t> bytes = pack_tensor(tensor, values);
  arena_.upload(bytes.data(), bytes.size(), bound_.plan.offsets.at(name),
                loading(fmt::format("uploading input '{}'", name)));
}

void GpuExecutor::set_param(const std::string& name, const HostTensor& values) {
  const BoundParam& param = bound_.param(name);
  const int64_t numel = static_cast<int64_t>(param.bytes / dtype_size(param.dtype));
  if (static_cast<int64_t>(values.data.size()) != numel) {
    throw Error(fmt::format("parameter '{}' needs {} values, got {}", name, numel, values.data.size()));
  }
  std::vector<uint8_t> bytes;
  bytes.reserve(param.bytes);
  for (double value : values.data) append_element(bytes, param.dtype, value);
  params_.upload(bytes.data(), bytes.size(), param_offsets_.at(name),
                 loading(fmt::format("uploading parameter '{}'", name)));
}

void GpuExecutor::enqueue(size_t launch_index) const { enqueue_on(launch_index, *stream_); }

void GpuExecutor::enqueue_on(size_t launch_index, const cuda::Stream& stream) const {
  const BoundLaunch& launch = bound_.launches[launch_index];
  // The driver reads the arguments during the call and never writes them.
  void** args = const_cast<void**>(arg_pointers_[launch_index].data());
  const cuda::Driver& driver = device_->driver();
  CUlaunchAttribute overlap{};
  overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  overlap.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(launch.grid[0]);
  config.gridDimY = static_cast<unsigned>(launch.grid[1]);
  config.gridDimZ = static_cast<unsigned>(launch.grid[2]);
  config.blockDimX = static_cast<unsigned>(launch.block[0]);
  config.blockDimY = static_cast<unsigned>(launch.block[1]);
  config.blockDimZ = static_cast<unsigned>(launch.block[2]);
  config.sharedMemBytes = static_cast<unsigned>(launch.dynamic_smem);
  config.hStream = stream.handle();
  if (overlap_ && waits_[launch_index]) {
    config.attrs = &overlap;
    config.numAttrs = 1;
  }
  CUresult result = driver.api().LaunchKernelEx(&config, functions_[launch_index], args, nullptr);
  if (result != CUDA_SUCCESS) {
    // Formatted only on failure: enqueueing is on the profiled path.
    driver.check(result, "cuLaunchKernelEx",
                 loading(fmt::format("launching kernel '{}' for node '{}'", bound_.bundle->kernels[launch.kernel].name,
                                     launch.label())));
  }
}

void GpuExecutor::enqueue_all() const {
  for (size_t i = 0; i < bound_.launches.size(); ++i) enqueue(i);
}

void GpuExecutor::enqueue_concurrent(size_t begin, size_t end) {
  std::vector<std::vector<LaunchAccess>> accesses;
  for (size_t i = begin; i < end; ++i) accesses.push_back(launch_accesses(bound_, bound_.launches[i]));
  const StreamPlan plan = plan_streams(launch_dependencies(accesses), kConcurrentStreams);
  const size_t n = end - begin;
  // Events: one after each launch another waits for, one to fork and one per side stream to join.
  while (side_streams_.size() + 1 < static_cast<size_t>(plan.streams_used))
    side_streams_.push_back(std::make_unique<cuda::Stream>(device_));
  while (events_.size() < n + kConcurrentStreams) events_.push_back(std::make_unique<cuda::Event>(device_));
  auto stream_of = [&](int s) -> const cuda::Stream& { return s == 0 ? *stream_ : *side_streams_[s - 1]; };
  const cuda::Event& fork = *events_[n];
  if (plan.streams_used > 1) fork.record(*stream_);
  for (int s = 1; s < plan.streams_used; ++s) stream_of(s).wait(fork);
  for (size_t j = 0; j < n; ++j) {
    const cuda::Stream& stream = stream_of(plan.stream[j]);
    for (size_t w : plan.waits[j]) stream.wait(*events_[w]);
    enqueue_on(begin + j, stream);
    if (plan.recorded[j]) events_[j]->record(stream);
  }
  for (int s = 1; s < plan.streams_used; ++s) {
    const cuda::Event& join = *events_[n + static_cast<size_t>(s)];
    join.record(stream_of(s));
    stream_->wait(join);
  }
}

void GpuExecutor::synchronize(const std::string& what) const { stream_->synchronize(what); }

RunTiming GpuExecutor::run(int iterations, bool cuda_graph) {
  if (iterations < 1) throw Error(fmt::format("--iterations must be at least 1, got {}", iterations));
  RunTiming timing;
  timing.iterations = iterations;
  timing.cuda_graph = cuda_graph;
  std::unique_ptr<cuda::CudaGraph> graph;
  if (cuda_graph)
    graph = cuda::CudaGraph::capture(device_, *stream_, [this] { enqueue_concurrent(0, bound_.launches.size()); });
  cuda::Event start(device_), end(device_);
  start.record(*stream_);
  for (int i = 0; i < iterations; ++i) {
    if (graph) {
      graph->launch(*stream_);
    } else {
      enqueue_all();
    }
  }
  end.record(*stream_);
  synchronize(
      loading(fmt::format("running {} iteration(s) (an asynchronous kernel failure shows "
                          "here; --check runs node by node and names the node)",
                          iterations)));
  timing.total_ms = end.elapsed_ms_since(start);
  return timing;
}

HostTensor GpuExecutor::read(const std::string& name) const {
  const BoundTensor& tensor = bound_.tensor(name);
  std::vector<uint8_t> bytes(tensor.bytes);
  arena_.download(bytes.data(), bytes.size(), bound_.plan.offsets.at(name),
                  loading(fmt::format("reading tensor '{}'", name)));
  return unpack_tensor(tensor, bytes.data());
}

void GpuExecutor::enqueue_read(const std::string& name, const cuda::PinnedBuffer& to) const {
  arena_.download_async(to, bound_.tensor(name).bytes, bound_.plan.offsets.at(name), *stream_,
                        loading(fmt::format("reading tensor '{}'", name)));
}

HostTensor GpuExecutor::staged(const std::string& name, const cuda::PinnedBuffer& from) const {
  return unpack_tensor(bound_.tensor(name), static_cast<const uint8_t*>(from.data()));
}

HostTensor GpuExecutor::read_param(const std::string& name) const {
  const BoundParam& param = bound_.param(name);
  std::vector<uint8_t> bytes(param.bytes);
  params_.download(bytes.data(), bytes.size(), param_offsets_.at(name),
                   loading(fmt::format("reading parameter '{}'", name)));
  HostTensor values{param.dtype, param.shape, std::vector<double>(bytes.size() / dtype_size(param.dtype))};
  for (size_t i = 0; i < values.data.size(); ++i) values.data[i] = read_element(bytes.data(), param.dtype, i);
  return values;
}

CUfunction GpuExecutor::function(size_t launch_index) const { return functions_.at(launch_index); }

}  // namespace teeny
