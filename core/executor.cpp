#include "core/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/graph.h"
#include "core/npy.h"

namespace teeny {

namespace {

std::string bindings_text(const Bindings& bindings) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : bindings) parts.push_back(fmt::format("{}={}", name, value));
  return parts.empty() ? std::string("no dims") : fmt::format("{}", fmt::join(parts, ", "));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// SplitMix64: a tiny generator with a fully specified output, so random data is the same on
// every platform and standard library (std:: distributions are not).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t stream_seed(uint64_t seed, const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a of the tensor's name
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ull;
  uint64_t state = seed ^ hash;
  return splitmix64(state);
}

double uniform01(uint64_t& state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }

int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
  return numel;
}

CUtensorMapDataType tensor_map_data_type(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::kF32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kF16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kBF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kI32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
  }
  throw gpu_error(fmt::format("{}: tensor maps of {} elements are not supported", what, dtype_name(dtype)));
}

CUtensorMapSwizzle tensor_map_swizzle(int bytes, const std::string& what) {
  switch (bytes) {
    case 0: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  throw gpu_error(fmt::format("{}: swizzle {} is not 0, 32, 64 or 128 bytes", what, bytes));
}

}  // namespace

// ---- BoundBundle ---------------------------------------------------------------------------

int64_t BoundTensor::numel() const { return checked_numel(shape); }

std::string BoundLaunch::label() const {
  return index == 0 ? node : fmt::format("{}#{}", node, index);
}

const BoundTensor& BoundBundle::tensor(const std::string& name) const {
  for (const BoundTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw Error(fmt::format("bundle {} has no tensor '{}'", label, name));
}

const BoundParam& BoundBundle::param(const std::string& name) const {
  for (const BoundParam& p : params) {
    if (p.name == name) return p;
  }
  throw Error(fmt::format("bundle {} has no parameter '{}'", label, name));
}

std::vector<size_t> BoundBundle::node_launches(size_t node_index) const {
  std::vector<size_t> indices;
  for (size_t i = 0; i < launches.size(); ++i) {
    if (launches[i].node_index == node_index) indices.push_back(i);
  }
  return indices;
}

std::vector<ParamShape> BoundBundle::param_shapes() const {
  std::vector<ParamShape> shapes;
  for (const BoundParam& p : params) shapes.push_back({p.name, p.dtype, p.shape, p.init});
  return shapes;
}

Bindings bundle_bindings(const Bundle& bundle, const std::vector<std::string>& binds) {
  std::vector<DimDecl> dims;
  for (const BundleDim& dim : bundle.dims) {
    if (bundle.fixed.count(dim.name)) continue;
    DimDecl decl;
    decl.name = dim.name;
    decl.min = dim.min;
    decl.max = dim.max;
    decl.default_value = dim.default_value;
    dims.push_back(decl);
  }
  // A dim fixed at compile time may be restated with its own value, nothing else.
  std::vector<std::string> free_binds;
  for (const std::string& bind : binds) {
    const std::string name = bind.substr(0, bind.find('='));
    auto fixed = bundle.fixed.find(name);
    if (fixed == bundle.fixed.end()) {
      free_binds.push_back(bind);
      continue;
    }
    if (bind != fmt::format("{}={}", name, fixed->second)) {
      throw Error(fmt::format("--bind {}: {} was fixed to {} when the bundle was compiled", bind,
                              name, fixed->second));
    }
  }
  Bindings bindings = bind_dims(dims, free_binds);
  for (const auto& [name, value] : bundle.fixed) bindings[name] = value;
  return bindings;
}

BoundBundle bind_bundle(const Bundle& bundle, const Bindings& bindings, const std::string& label) {
  BoundBundle bound;
  bound.bundle = &bundle;
  bound.label = label;
  bound.bindings = bindings;
  auto fail = [&](const std::string& message) {
    return Error(fmt::format("bundle {}: {}", label, message));
  };
  auto eval = [&](const Expr& expr, const std::string& what) -> int64_t {
    try {
      return expr.eval(bindings);
    } catch (const Error& error) {
      throw fail(fmt::format("cannot evaluate {} '{}' with {}: {}", what, expr.str(),
                             bindings_text(bindings), error.message()));
    }
  };

  std::set<std::string> tensor_names, param_names;
  for (const BundleTensor& tensor : bundle.tensors) {
    BoundTensor t;
    t.name = tensor.name;
    t.dtype = tensor.dtype;
    t.producer = tensor.producer;
    t.alias_of = tensor.alias_of;
    for (size_t d = 0; d < tensor.shape.size(); ++d) {
      t.shape.push_back(eval(tensor.shape[d], fmt::format("dim {} of tensor '{}'", d, t.name)));
    }
    for (int64_t extent : t.shape) {
      if (extent <= 0) {
        throw fail(fmt::format("tensor '{}' has shape {} = {} with {}; sizes must be positive",
                               t.name, shape_str(tensor.shape), shape_text(t.shape),
                               bindings_text(bindings)));
      }
    }
    const int64_t last = t.shape.empty() ? 1 : t.shape.back();
    t.row_stride = t.shape.empty() ? 1 : eval(tensor.row_stride, fmt::format("row stride of '{}'", t.name));
    if (t.row_stride < last) {
      throw fail(fmt::format("tensor '{}' has row stride {} ('{}'), less than its last dim {}",
                             t.name, t.row_stride, tensor.row_stride.str(), last));
    }
    t.rows = t.numel() / last;
    t.bytes = static_cast<uint64_t>(t.rows) * t.row_stride * dtype_size(t.dtype);
    tensor_names.insert(t.name);
    bound.tensors.push_back(std::move(t));
  }

  for (const BundleParam& param : bundle.params) {
    BoundParam p;
    p.name = param.name;
    p.node = param.node;
    p.slot = param.slot;
    p.dtype = param.dtype;
    p.init = param.init;
    p.host_offset = param.offset;
    for (size_t d = 0; d < param.shape.size(); ++d) {
      p.shape.push_back(eval(param.shape[d], fmt::format("dim {} of parameter '{}'", d, p.name)));
      if (p.shape.back() <= 0) {
        throw fail(fmt::format("parameter '{}' has shape {} = {} with {}; sizes must be positive",
                               p.name, shape_str(param.shape), shape_text(p.shape),
                               bindings_text(bindings)));
      }
    }
    p.bytes = static_cast<uint64_t>(checked_numel(p.shape)) * dtype_size(p.dtype);
    if (p.init == ParamInit::kHost) {
      if (param.size != p.bytes || param.offset + param.size > bundle.param_bytes.size()) {
        throw fail(fmt::format("parameter '{}' has {} init bytes at offset {} (params.bin holds {}), "
                               "but {} {} needs {}",
                               p.name, param.size, param.offset, bundle.param_bytes.size(),
                               dtype_name(p.dtype), shape_text(p.shape), p.bytes));
      }
    }
    param_names.insert(p.name);
    bound.params.push_back(std::move(p));
  }

  std::map<std::string, size_t> node_index;
  for (size_t i = 0; i < bundle.nodes.size(); ++i) node_index[bundle.nodes[i].name] = i;

  for (const BundleLaunch& launch : bundle.launches) {
    BoundLaunch l;
    l.node = launch.node;
    l.index = launch.index;
    l.kernel = launch.kernel;
    l.block = launch.block;
    const std::string where = l.label();
    auto it = node_index.find(launch.node);
    if (it == node_index.end()) throw fail(fmt::format("launch '{}' names an unknown node", where));
    l.node_index = it->second;
    if (launch.kernel < 0 || launch.kernel >= static_cast<int>(bundle.kernels.size())) {
      throw fail(fmt::format("launch '{}' names kernel {}, but the bundle has {}", where,
                             launch.kernel, bundle.kernels.size()));
    }
    const char* axes[] = {"x", "y", "z"};
    for (int d = 0; d < 3; ++d) {
      l.grid[d] = eval(launch.grid[d], fmt::format("grid.{} of launch '{}'", axes[d], where));
      const int64_t limit = d == 0 ? std::numeric_limits<int32_t>::max() : 65535;
      if (l.grid[d] <= 0 || l.grid[d] > limit) {
        throw fail(fmt::format("launch '{}' has grid.{} = {} ('{}') with {}; it must be in [1, {}]",
                               where, axes[d], l.grid[d], launch.grid[d].str(),
                               bindings_text(bindings), limit));
      }
      if (l.block[d] <= 0) throw fail(fmt::format("launch '{}' has block.{} = {}", where, axes[d], l.block[d]));
    }
    if (static_cast<int64_t>(l.block[0]) * l.block[1] * l.block[2] > 1024) {
      throw fail(fmt::format("launch '{}' has a block of {}x{}x{} threads (at most 1024)", where,
                             l.block[0], l.block[1], l.block[2]));
    }
    l.dynamic_smem = eval(launch.dynamic_smem, fmt::format("dynamic shared memory of launch '{}'", where));
    if (l.dynamic_smem < 0) throw fail(fmt::format("launch '{}' has negative shared memory", where));
    l.bytes = eval(launch.bytes, fmt::format("bytes moved by launch '{}'", where));
    l.flops = eval(launch.flops, fmt::format("FLOPs of launch '{}'", where));

    for (size_t a = 0; a < launch.args.size(); ++a) {
      const BundleArg& arg = launch.args[a];
      BoundArg b;
      b.kind = arg.kind;
      b.name = arg.name;
      b.offset = arg.offset;
      b.size = arg.size;
      b.target = arg.tensor;
      const std::string arg_where = fmt::format("argument {} '{}' of launch '{}'", a, arg.name, where);
      const ArgLayout layout = arg_layout(arg.kind);
      if (arg.size != layout.size || arg.offset < 0 || arg.offset % layout.align != 0) {
        throw fail(fmt::format("{} ({}) has size {} at offset {}; expected size {} at a multiple of {}",
                               arg_where, arg_kind_name(arg.kind), arg.size, arg.offset, layout.size,
                               layout.align));
      }
      switch (arg.kind) {
        case ArgKind::kInput:
        case ArgKind::kOutput:
          if (!tensor_names.count(arg.tensor)) {
            throw fail(fmt::format("{} names tensor '{}', which the bundle does not have", arg_where,
                                   arg.tensor));
          }
          break;
        case ArgKind::kParam:
          if (!param_names.count(arg.tensor)) {
            throw fail(fmt::format("{} names parameter '{}', which the bundle does not have",
                                   arg_where, arg.tensor));
          }
          break;
        case ArgKind::kI32:
          b.ivalue = eval(arg.value, arg_where);
          if (b.ivalue < std::numeric_limits<int32_t>::min() ||
              b.ivalue > std::numeric_limits<int32_t>::max()) {
            throw fail(fmt::format("{} = {} ('{}') does not fit in a 32-bit int with {}", arg_where,
                                   b.ivalue, arg.value.str(), bindings_text(bindings)));
          }
          break;
        case ArgKind::kI64: b.ivalue = eval(arg.value, arg_where); break;
        case ArgKind::kF32: b.fvalue = arg.fvalue; break;
        case ArgKind::kTensorMap:
          b.map.cols = eval(arg.map.cols, "cols of " + arg_where);
          b.map.rows = eval(arg.map.rows, "rows of " + arg_where);
          b.map.row_stride = eval(arg.map.row_stride, "row stride of " + arg_where);
          b.map.box_cols = arg.map.box_cols;
          b.map.box_rows = arg.map.box_rows;
          b.map.swizzle = arg.map.swizzle;
          break;
      }
      // The end of the last argument: the bytes that hold every argument at its offset.
      l.param_buffer_bytes = std::max(l.param_buffer_bytes, static_cast<size_t>(arg.offset + arg.size));
      l.args.push_back(std::move(b));
    }
    // Tensor maps once every pointer of the launch is bound: any argument may be the one viewed.
    for (size_t a = 0; a < launch.args.size(); ++a) {
      const BundleArg& arg = launch.args[a];
      if (arg.kind != ArgKind::kTensorMap) continue;
      const std::string arg_where =
          fmt::format("argument {} '{}' of launch '{}' (tensor map of '{}')", a, arg.name, where, arg.map.of);
      auto target = std::find_if(launch.args.begin(), launch.args.end(),
                                 [&](const BundleArg& t) { return t.name == arg.map.of; });
      if (target == launch.args.end() || !is_pointer(target->kind)) {
        throw fail(fmt::format("{}: the launch has no input, param or output argument '{}'", arg_where,
                               arg.map.of));
      }
      BoundTensorMap& map = l.args[a].map;
      map.of = static_cast<size_t>(target - launch.args.begin());
      map.dtype = target->dtype;
      const TensorMapSpec concrete{arg.map.of, Expr(map.cols),          Expr(map.rows),
                                   Expr(map.row_stride), map.box_cols, map.box_rows, map.swizzle};
      if (std::string problem = tensor_map_problem(concrete, map.dtype); !problem.empty()) {
        throw fail(fmt::format("{}: {} with {}", arg_where, problem, bindings_text(bindings)));
      }
      // The map may only reach bytes of the buffer it views: TMA checks the map's bounds, not
      // the allocation's.
      const uint64_t reach = static_cast<uint64_t>((map.rows - 1) * map.row_stride + map.cols) * dtype_size(map.dtype);
      const bool param = target->kind == ArgKind::kParam;
      const uint64_t holds = param ? bound.param(target->tensor).bytes : bound.tensor(target->tensor).bytes;
      if (reach > holds) {
        throw fail(fmt::format("{}: [{}, {}] with row stride {} of {} reaches {} bytes, but {} '{}' has {} "
                               "with {}", arg_where, map.rows, map.cols, map.row_stride, dtype_name(map.dtype),
                               reach, param ? "parameter" : "tensor", target->tensor, holds,
                               bindings_text(bindings)));
      }
    }
    bound.launches.push_back(std::move(l));
  }

  // Liveness in node steps. Graph inputs and outputs live through the whole run: inputs are
  // read again by every iteration, outputs are read back at the end.
  const int end = static_cast<int>(bundle.nodes.size());
  std::map<std::string, int> last_use;
  for (size_t i = 0; i < bundle.nodes.size(); ++i) {
    for (const std::string& input : bundle.nodes[i].inputs) last_use[input] = static_cast<int>(i);
  }
  std::set<std::string> graph_inputs(bundle.inputs.begin(), bundle.inputs.end());
  std::set<std::string> graph_outputs(bundle.outputs.begin(), bundle.outputs.end());
  std::vector<PlanEntry> entries;
  for (const BoundTensor& t : bound.tensors) {
    PlanEntry entry;
    entry.name = t.name;
    entry.bytes = t.bytes;
    entry.alias_of = t.alias_of;
    if (graph_inputs.count(t.name)) {
      entry.first_step = -1;
      entry.last_step = end;
    } else {
      auto producer = node_index.find(t.producer);
      if (producer == node_index.end()) {
        throw fail(fmt::format("tensor '{}' is produced by unknown node '{}'", t.name, t.producer));
      }
      entry.first_step = static_cast<int>(producer->second);
      auto used = last_use.find(t.name);
      entry.last_step = used == last_use.end() ? entry.first_step : std::max(entry.first_step, used->second);
      if (graph_outputs.count(t.name)) entry.last_step = end;
    }
    entries.push_back(std::move(entry));
  }
  try {
    bound.plan = plan_memory(entries);
  } catch (const Error& error) {
    throw fail(error.message());
  }
  return bound;
}

// ---- host data -----------------------------------------------------------------------------

std::vector<uint8_t> pack_tensor(const BoundTensor& tensor, const HostTensor& values) {
  if (static_cast<int64_t>(values.data.size()) != tensor.numel()) {
    throw Error(fmt::format("tensor '{}' needs {} values, got {}", tensor.name, tensor.numel(),
                            values.data.size()));
  }
  const int64_t last = tensor.shape.empty() ? 1 : tensor.shape.back();
  const size_t element = dtype_size(tensor.dtype);
  std::vector<uint8_t> bytes;
  bytes.reserve(tensor.bytes);
  for (int64_t row = 0; row < tensor.rows; ++row) {
    for (int64_t col = 0; col < last; ++col) {
      append_element(bytes, tensor.dtype, values.data[row * last + col]);
    }
    bytes.resize(bytes.size() + (tensor.row_stride - last) * element, 0);  // padding
  }
  return bytes;
}

HostTensor unpack_tensor(const BoundTensor& tensor, const uint8_t* device_bytes) {
  HostTensor values;
  values.dtype = tensor.dtype;
  values.shape = tensor.shape;
  const int64_t last = tensor.shape.empty() ? 1 : tensor.shape.back();
  values.data.resize(tensor.numel());
  for (int64_t row = 0; row < tensor.rows; ++row) {
    for (int64_t col = 0; col < last; ++col) {
      values.data[row * last + col] = read_element(device_bytes, tensor.dtype, row * tensor.row_stride + col);
    }
  }
  return values;
}

HostTensor random_input(const BoundBundle& bound, const BoundTensor& tensor, uint64_t seed) {
  HostTensor values;
  values.dtype = tensor.dtype;
  values.shape = tensor.shape;
  values.data.resize(tensor.numel());
  uint64_t state = stream_seed(seed, tensor.name);
  if (is_float(tensor.dtype)) {
    for (double& value : values.data) value = round_to_dtype(uniform01(state) * 2.0 - 1.0, tensor.dtype);
    return values;
  }
  // Integer inputs are ids: keep them valid for the embeddings that read them.
  int64_t upper = 0;
  for (const BundleNode& node : bound.bundle->nodes) {
    if (std::find(node.inputs.begin(), node.inputs.end(), tensor.name) == node.inputs.end()) continue;
    auto it = node.attrs.find("num_embeddings");
    if (it != node.attrs.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
      upper = upper == 0 ? it->get<int64_t>() : std::min(upper, it->get<int64_t>());
    }
  }
  if (upper == 0) upper = 8;
  for (double& value : values.data) value = std::floor(uniform01(state) * static_cast<double>(upper));
  return values;
}

namespace {

HostTensor random_param(const BoundParam& param, uint64_t seed) {
  HostTensor values;
  values.dtype = param.dtype;
  values.shape = param.shape;
  values.data.resize(checked_numel(param.shape));
  uint64_t state = stream_seed(seed, param.name);
  double low = 0.5, high = 1.5;
  if (param.shape.size() >= 2) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(values.data.size() / param.shape[0]));
    low = -bound;
    high = bound;
  }
  for (double& value : values.data) {
    const double raw = low + (high - low) * uniform01(state);
    value = is_float(param.dtype) ? round_to_dtype(raw, param.dtype) : std::floor(raw);
  }
  return values;
}

HostTensor load_input(const BoundBundle& bound, const BoundTensor& tensor, const std::string& path) {
  HostTensor values = read_npy(path);
  const std::string flag = fmt::format("--input {}={}", tensor.name, path);
  if (values.shape != tensor.shape) {
    throw Error(fmt::format("{}: the file's shape {} does not match input '{}' {} (with {})", flag,
                            shape_text(values.shape), tensor.name, shape_text(tensor.shape),
                            bindings_text(bound.bindings)));
  }
  if (is_float(values.dtype) != is_float(tensor.dtype)) {
    throw Error(fmt::format("{}: the file holds {} values, but input '{}' is {}", flag,
                            dtype_name(values.dtype), tensor.name, dtype_name(tensor.dtype)));
  }
  for (double& value : values.data) value = round_to_dtype(value, tensor.dtype);
  values.dtype = tensor.dtype;
  return values;
}

}  // namespace

RunData prepare_data(const BoundBundle& bound, const DataOptions& options) {
  const Bundle& bundle = *bound.bundle;
  RunData data;
  for (const auto& [name, path] : options.input_files) {
    if (std::find(bundle.inputs.begin(), bundle.inputs.end(), name) == bundle.inputs.end()) {
      std::vector<std::string> inputs;
      for (const std::string& input : bundle.inputs) {
        const BoundTensor& t = bound.tensor(input);
        inputs.push_back(fmt::format("{} {} {}", input, shape_text(t.shape), dtype_name(t.dtype)));
      }
      throw Error(fmt::format("--input {}={}: the bundle has no input '{}'{}", name, path, name,
                              did_you_mean(name, bundle.inputs)))
          .note(fmt::format("the bundle's inputs: {}", fmt::join(inputs, ", ")));
    }
  }
  for (const std::string& name : bundle.inputs) {
    const BoundTensor& tensor = bound.tensor(name);
    auto file = options.input_files.find(name);
    data.inputs[name] = file != options.input_files.end() ? load_input(bound, tensor, file->second)
                                                          : random_input(bound, tensor, options.seed);
  }

  LoadedWeights weights;
  if (!options.weights_path.empty()) weights = load_weights(options.weights_path, bound.param_shapes());
  data.notes = weights.notes;
  std::vector<std::string> filled;
  for (const BoundParam& param : bound.params) {
    HostTensor values;
    values.dtype = param.dtype;
    values.shape = param.shape;
    switch (param.init) {
      case ParamInit::kHost:
        values.data.resize(checked_numel(param.shape));
        for (size_t i = 0; i < values.data.size(); ++i) {
          values.data[i] = read_element(bundle.param_bytes.data() + param.host_offset, param.dtype, i);
        }
        break;
      case ParamInit::kZero:
        values.data.assign(checked_numel(param.shape), 0.0);
        break;
      case ParamInit::kTrained:
        if (auto it = weights.tensors.find(param.name); it != weights.tensors.end()) {
          values = std::move(it->second);
        } else {
          filled.push_back(param.name);
          values = options.fill == ParamFill::kRandom
                       ? random_param(param, options.seed)
                       : HostTensor{param.dtype, param.shape,
                                    std::vector<double>(checked_numel(param.shape), 0.0)};
        }
        break;
    }
    data.params[param.name] = std::move(values);
  }
  if (!filled.empty()) {
    data.notes.push_back(fmt::format(
        "{} trained parameter(s) not loaded from weights are {}: {}", filled.size(),
        options.fill == ParamFill::kRandom
            ? fmt::format("random (--init random, seed {})", options.seed)
            : std::string("zero (use --weights FILE.safetensors, or --init random)"),
        fmt::join(filled, ", ")));
  }
  return data;
}

// ---- GpuExecutor ---------------------------------------------------------------------------

GpuExecutor::GpuExecutor(std::shared_ptr<cuda::Device> device, const BoundBundle& bound, Modules modules)
    : device_(std::move(device)), bound_(bound), modules_(std::move(modules)) {
  const Bundle& bundle = *bound_.bundle;
  const cuda::Driver& driver = device_->driver();
  device_->make_current();

  if (modules_.empty()) {
    for (const BundleKernel& kernel : bundle.kernels) {
      modules_.push_back(std::make_shared<cuda::Module>(
          device_, kernel.ptx, loading(fmt::format("loading kernel '{}'", kernel.name))));
    }
  } else if (modules_.size() != bundle.kernels.size()) {
    throw gpu_error(loading(fmt::format("reusing {} loaded modules for {} kernels", modules_.size(),
                                        bundle.kernels.size())));
  }
  const int smem_optin =
      device_->attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory limit");
  for (const BoundLaunch& launch : bound_.launches) {
    const BundleKernel& kernel = bundle.kernels[launch.kernel];
    CUfunction function = modules_[launch.kernel]->function(
        kernel.entry, loading(fmt::format("finding entry '{}' of kernel '{}'", kernel.entry, kernel.name)));
    if (launch.dynamic_smem > smem_optin) {
      throw gpu_error(fmt::format(
          "launch '{}' needs {} bytes of dynamic shared memory; {} allows at most {}", launch.label(),
          launch.dynamic_smem, device_->name(), smem_optin));
    }
    // Above the default 48 KiB a kernel must opt in to more dynamic shared memory.
    if (launch.dynamic_smem > 48 * 1024) {
      TEENY_CU(driver, FuncSetAttribute,
               loading(fmt::format("allowing {} bytes of shared memory for kernel '{}'",
                                   launch.dynamic_smem, kernel.name)),
               function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
               static_cast<int>(launch.dynamic_smem));
    }
    functions_.push_back(function);
  }

  arena_ = cuda::DeviceBuffer(device_, bound_.plan.arena_bytes, "activations");
  arena_.zero(loading("clearing the activation arena"));  // padding reads as zero
  uint64_t params_size = 0;
  for (const BoundParam& param : bound_.params) {
    param_offsets_[param.name] = params_size;
    params_size += (param.bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  params_ = cuda::DeviceBuffer(device_, params_size, "parameters");
  params_.zero(loading("clearing the parameters"));

  // The driver copies the buffer at launch, so only offsets (64-aligned for tensor maps, as
  // the PTX declares) matter, not where the host vector itself is aligned.
  for (const BoundLaunch& launch : bound_.launches) {
    std::vector<uint8_t> buffer(launch.param_buffer_bytes, 0);
    for (const BoundArg& arg : launch.args) {
      uint8_t* slot = buffer.data() + arg.offset;
      switch (arg.kind) {
        case ArgKind::kInput:
        case ArgKind::kOutput:
        case ArgKind::kParam: {
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
    param_buffers_.push_back(std::move(buffer));
  }
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
}

std::string GpuExecutor::loading(const std::string& what) const {
  return fmt::format("{} from bundle {}", what, bound_.label);
}

CUdeviceptr GpuExecutor::tensor_ptr(const std::string& name) const {
  return arena_.ptr() + bound_.plan.offsets.at(name);
}

CUdeviceptr GpuExecutor::arg_ptr(const BoundArg& arg) const {
  return arg.kind == ArgKind::kParam ? params_.ptr() + param_offsets_.at(arg.target) : tensor_ptr(arg.target);
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
    throw gpu_error(fmt::format("{}: the global address 0x{:x} of '{}' is not 16-byte aligned", what, address,
                                of.target));
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
  if (static_cast<int64_t>(values.data.size()) != checked_numel(param.shape)) {
    throw Error(fmt::format("parameter '{}' needs {} values, got {}", name, checked_numel(param.shape),
                            values.data.size()));
  }
  std::vector<uint8_t> bytes;
  bytes.reserve(param.bytes);
  for (double value : values.data) append_element(bytes, param.dtype, value);
  params_.upload(bytes.data(), bytes.size(), param_offsets_.at(name),
                 loading(fmt::format("uploading parameter '{}'", name)));
}

void GpuExecutor::enqueue(size_t launch_index) const {
  const BoundLaunch& launch = bound_.launches[launch_index];
  // The driver reads the arguments during the call and never writes them.
  void** args = const_cast<void**>(arg_pointers_[launch_index].data());
  const cuda::Driver& driver = device_->driver();
  CUresult result = driver.api().LaunchKernel(
      functions_[launch_index], static_cast<unsigned>(launch.grid[0]),
      static_cast<unsigned>(launch.grid[1]), static_cast<unsigned>(launch.grid[2]),
      static_cast<unsigned>(launch.block[0]), static_cast<unsigned>(launch.block[1]),
      static_cast<unsigned>(launch.block[2]), static_cast<unsigned>(launch.dynamic_smem),
      stream_->handle(), args, nullptr);
  if (result != CUDA_SUCCESS) {
    // Formatted only on failure: enqueueing is on the profiled path.
    driver.check(result, "cuLaunchKernel",
                 loading(fmt::format("launching kernel '{}' for node '{}'",
                                     bound_.bundle->kernels[launch.kernel].name, launch.label())));
  }
}

void GpuExecutor::enqueue_all() const {
  for (size_t i = 0; i < bound_.launches.size(); ++i) enqueue(i);
}

void GpuExecutor::synchronize(const std::string& what) const { stream_->synchronize(what); }

RunTiming GpuExecutor::run(int iterations, bool cuda_graph) {
  if (iterations < 1) throw Error(fmt::format("--iterations must be at least 1, got {}", iterations));
  RunTiming timing;
  timing.iterations = iterations;
  timing.cuda_graph = cuda_graph;
  std::unique_ptr<cuda::CudaGraph> graph;
  if (cuda_graph) graph = cuda::CudaGraph::capture(device_, *stream_, [this] { enqueue_all(); });
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
  synchronize(loading(fmt::format("running {} iteration(s) (an asynchronous kernel failure shows "
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

CUfunction GpuExecutor::function(size_t launch_index) const { return functions_.at(launch_index); }

}  // namespace teeny
