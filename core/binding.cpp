#include "core/binding.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/graph.h"

namespace teeny {

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
  return numel;
}

// Evaluates a bundle's expressions under the dims and, for launches, the device symbols, with
// errors that name the bundle, what was evaluated and the values it was evaluated with.
class Evaluator {
 public:
  Evaluator(const std::string& label, const Bindings& dims, const Bindings& device = {})
      : label_(label), dims_(dims), all_(dims) {
    all_.insert(device.begin(), device.end());
  }

  Error fail(const std::string& message) const { return Error(fmt::format("bundle {}: {}", label_, message)); }

  // `what()` names the expression in an error; it is made only then (a few per tensor and launch).
  template <typename What>
  int64_t operator()(const Expr& expr, const What& what) const {
    try {
      return expr.eval(all_);
    } catch (const Error& error) {
      throw fail(fmt::format("cannot evaluate {} '{}' with {}: {}", what(), expr.str(), with(expr), error.message()));
    }
  }

  // "B=4", or "B=4, SMS=78" for an expression over SMS: the dims, and the device symbols `expr` uses.
  std::string with(const Expr& expr) const {
    Bindings shown = dims_;
    for (const std::string& name : expr.dims()) {
      auto it = all_.find(name);
      if (is_device_symbol(name) && it != all_.end()) shown.insert(*it);
    }
    return bindings_text(shown);
  }

  std::string dims_text() const { return bindings_text(dims_); }

 private:
  const std::string& label_;
  const Bindings& dims_;
  Bindings all_;
};

// ---- tensors, params and memory -------------------------------------------------------------

// tensor_bytes, failing with the bundle, `what()` (a tensor or param), its shape and the dims.
template <typename What>
uint64_t bytes_of(const What& what, DType dtype, const Shape& shape, const std::vector<int64_t>& concrete,
                  int64_t row_stride, const Evaluator& eval) {
  try {
    return static_cast<uint64_t>(tensor_bytes(dtype, concrete, row_stride));
  } catch (const Error& error) {
    const std::string bound = shape_str(shape) == shape_text(concrete) ? "" : " = " + shape_text(concrete);
    throw eval.fail(fmt::format("{} has shape {}{} with {}: {}", what(), shape_str(shape), bound, eval.dims_text(),
                                error.message()));
  }
}

BoundTensor bind_tensor(const BundleTensor& tensor, const Evaluator& eval) {
  BoundTensor t;
  t.name = tensor.name;
  t.dtype = tensor.dtype;
  t.producer = tensor.producer;
  t.alias_of = tensor.alias_of;
  t.id_bound = tensor.id_bound;
  for (size_t d = 0; d < tensor.shape.size(); ++d) {
    t.shape.push_back(eval(tensor.shape[d], [&] { return fmt::format("dim {} of tensor '{}'", d, t.name); }));
  }
  if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t extent) { return extent <= 0; })) {
    throw eval.fail(fmt::format("tensor '{}' has shape {} = {} with {}; sizes must be positive", t.name,
                                shape_str(tensor.shape), shape_text(t.shape), eval.dims_text()));
  }
  const int64_t last = t.shape.empty() ? 1 : t.shape.back();
  t.row_stride =
      t.shape.empty() ? 1 : eval(tensor.row_stride, [&] { return fmt::format("row stride of '{}'", t.name); });
  if (t.row_stride < last) {
    throw eval.fail(fmt::format("tensor '{}' has row stride {} ('{}'), less than its last dim {}", t.name, t.row_stride,
                                tensor.row_stride.str(), last));
  }
  t.bytes =
      bytes_of([&] { return fmt::format("tensor '{}'", t.name); }, t.dtype, tensor.shape, t.shape, t.row_stride, eval);
  t.rows = t.numel() / last;  // fits: the bytes do
  return t;
}

BoundParam bind_param(const BundleParam& param, const Bundle& bundle, const Evaluator& eval) {
  BoundParam p;
  p.name = param.name;
  p.node = param.node;
  p.slot = param.slot;
  p.dtype = param.dtype;
  p.init = param.init;
  p.host_offset = param.offset;
  p.hints = param.hints;
  for (size_t d = 0; d < param.shape.size(); ++d) {
    p.shape.push_back(eval(param.shape[d], [&] { return fmt::format("dim {} of parameter '{}'", d, p.name); }));
    if (p.shape.back() <= 0) {
      throw eval.fail(fmt::format("parameter '{}' has shape {} = {} with {}; sizes must be positive", p.name,
                                  shape_str(param.shape), shape_text(p.shape), eval.dims_text()));
    }
  }
  p.bytes = bytes_of([&] { return fmt::format("parameter '{}'", p.name); }, p.dtype, param.shape, p.shape,
                     p.shape.empty() ? 1 : p.shape.back(), eval);
  const uint64_t held = bundle.param_bytes.size();
  if (p.init == ParamInit::kHost &&
      (param.size != p.bytes || param.offset > held || param.size > held - param.offset)) {
    throw eval.fail(
        fmt::format("parameter '{}' has {} init bytes at offset {} (params.bin holds {}), but {} {} "
                    "needs {}",
                    p.name, param.size, param.offset, bundle.param_bytes.size(), dtype_name(p.dtype),
                    shape_text(p.shape), p.bytes));
  }
  return p;
}

using NodeIndex = std::unordered_map<std::string, size_t>;  // node name -> index in Bundle::nodes

NodeIndex node_indices(const Bundle& bundle) {
  NodeIndex indices;
  indices.reserve(bundle.nodes.size());
  for (size_t i = 0; i < bundle.nodes.size(); ++i) indices[bundle.nodes[i].name] = i;
  return indices;
}

// Liveness in node steps. Graph inputs and outputs live through the whole run: inputs are read
// again by every iteration, outputs are read back at the end; so does a training bundle's loss,
// which teeny train reads after the backward pass. A scratch buffer lives only while its node runs.
MemoryPlan plan_activations(const BoundBundle& bound, const Evaluator& eval) {
  const Bundle& bundle = *bound.bundle;
  const std::vector<BoundTensor>& tensors = bound.tensors;
  const NodeIndex node_index = node_indices(bundle);
  const int end = static_cast<int>(bundle.nodes.size());
  std::vector<int> last_use(tensors.size(), -1);  // per tensor: the last node reading it
  for (size_t i = 0; i < bundle.nodes.size(); ++i) {
    for (const std::string& input : bundle.nodes[i].inputs) {
      if (auto t = bound.tensor_index.find(input); t != bound.tensor_index.end())
        last_use[t->second] = static_cast<int>(i);
    }
  }
  const std::unordered_set<std::string> graph_inputs(bundle.inputs.begin(), bundle.inputs.end());
  const std::unordered_set<std::string> graph_outputs(bundle.outputs.begin(), bundle.outputs.end());
  std::vector<PlanEntry> entries;
  entries.reserve(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const BoundTensor& t = tensors[k];
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
        throw eval.fail(fmt::format("tensor '{}' is produced by unknown node '{}'", t.name, t.producer));
      }
      entry.first_step = static_cast<int>(producer->second);
      entry.last_step = std::max(entry.first_step, last_use[k]);
      if (graph_outputs.count(t.name) || t.name == bundle.loss) entry.last_step = end;
      if (bundle.tensors[k].scratch) entry.last_step = entry.first_step;
    }
    entries.push_back(std::move(entry));
  }
  try {
    return plan_memory(entries);
  } catch (const Error& error) {
    throw eval.fail(error.message());
  }
}

// The activation arena and every param together within kMaxBindingBytes.
void check_binding_bytes(const BoundBundle& bound, const Evaluator& eval) {
  uint64_t params = 0, total = 0;
  bool overflow = false;
  for (const BoundParam& p : bound.params) overflow |= __builtin_add_overflow(params, p.bytes, &params);
  overflow |= __builtin_add_overflow(params, bound.plan.arena_bytes, &total);
  if (!overflow && total <= static_cast<uint64_t>(kMaxBindingBytes)) return;
  const std::string taken = overflow ? "2^64 bytes or more"
                                     : fmt::format("{} bytes ({} of activations, planned, and {} of parameters)", total,
                                                   bound.plan.arena_bytes, params);
  throw eval.fail(
      fmt::format("with {} the activations and parameters take {}; one binding may take at most 2^42 "
                  "bytes (4 TiB)",
                  eval.dims_text(), taken));
}

// ---- launches -------------------------------------------------------------------------------

constexpr const char* kAxes[] = {"x", "y", "z"};

// The node, kernel and block of a launch, checked against the bundle.
BoundLaunch launch_frame(const BundleLaunch& launch, const Bundle& bundle, const NodeIndex& node_index,
                         const Evaluator& eval) {
  BoundLaunch l;
  l.node = launch.node;
  l.index = launch.index;
  l.kernel = launch.kernel;
  l.block = launch.block;
  const std::string where = l.label();
  auto it = node_index.find(launch.node);
  if (it == node_index.end()) throw eval.fail(fmt::format("launch '{}' names an unknown node", where));
  l.node_index = it->second;
  if (launch.kernel < 0 || launch.kernel >= static_cast<int>(bundle.kernels.size())) {
    throw eval.fail(
        fmt::format("launch '{}' names kernel {}, but the bundle has {}", where, launch.kernel, bundle.kernels.size()));
  }
  for (int d = 0; d < 3; ++d) {
    if (l.block[d] <= 0) throw eval.fail(fmt::format("launch '{}' has block.{} = {}", where, kAxes[d], l.block[d]));
  }
  if (static_cast<int64_t>(l.block[0]) * l.block[1] * l.block[2] > 1024) {
    throw eval.fail(fmt::format("launch '{}' has a block of {}x{}x{} threads (at most 1024)", where, l.block[0],
                                l.block[1], l.block[2]));
  }
  return l;
}

std::array<int64_t, 3> bind_grid(const BundleLaunch& launch, const std::string& where, const Evaluator& eval) {
  std::array<int64_t, 3> grid{};
  for (int d = 0; d < 3; ++d) {
    grid[d] = eval(launch.grid[d], [&] { return fmt::format("grid.{} of launch '{}'", kAxes[d], where); });
    const int64_t limit = d == 0 ? std::numeric_limits<int32_t>::max() : 65535;
    if (grid[d] <= 0 || grid[d] > limit) {
      throw eval.fail(fmt::format("launch '{}' has grid.{} = {} ('{}') with {}; it must be in [1, {}]", where, kAxes[d],
                                  grid[d], launch.grid[d].str(), eval.with(launch.grid[d]), limit));
    }
  }
  return grid;
}

int64_t bind_shared_memory(const BundleLaunch& launch, const std::string& where, const DeviceFacts& device,
                           const Evaluator& eval) {
  const int64_t bytes =
      eval(launch.dynamic_smem, [&] { return fmt::format("dynamic shared memory of launch '{}'", where); });
  if (bytes < 0) throw eval.fail(fmt::format("launch '{}' has negative shared memory", where));
  if (bytes > device.smem_per_block) {
    throw eval.fail(
        fmt::format("launch '{}' needs {} bytes of dynamic shared memory; the device allows a block "
                    "at most {} ({})",
                    where, bytes, device.smem_per_block, kSmemPerBlockSymbol));
  }
  return bytes;
}

// One argument: its layout in the parameter buffer, what it points at, or its value. Tensor
// maps get their extents here and their view in bind_tensor_maps.
template <typename Where>
BoundArg bind_arg(const BundleArg& arg, const Where& arg_where, const BoundBundle& bound, const Evaluator& eval) {
  BoundArg b;
  b.kind = arg.kind;
  b.name = arg.name;
  b.offset = arg.offset;
  b.size = arg.size;
  b.target = arg.tensor;
  const ArgLayout layout = arg_layout(arg.kind);
  if (arg.size != layout.size || arg.offset < 0 || arg.offset % layout.align != 0) {
    throw eval.fail(fmt::format("{} ({}) has size {} at offset {}; expected size {} at a multiple of {}", arg_where(),
                                arg_kind_name(arg.kind), arg.size, arg.offset, layout.size, layout.align));
  }
  switch (arg.kind) {
    case ArgKind::kInput:
    case ArgKind::kOutput:
    case ArgKind::kScratch:
      if (!bound.tensor_index.count(arg.tensor)) {
        throw eval.fail(fmt::format("{} names tensor '{}', which the bundle does not have", arg_where(), arg.tensor));
      }
      break;
    case ArgKind::kParam:
    case ArgKind::kParamOut:
      if (!bound.param_index.count(arg.tensor)) {
        throw eval.fail(
            fmt::format("{} names parameter '{}', which the bundle does not have", arg_where(), arg.tensor));
      }
      break;
    case ArgKind::kI32:
      b.ivalue = eval(arg.value, arg_where);
      if (b.ivalue < std::numeric_limits<int32_t>::min() || b.ivalue > std::numeric_limits<int32_t>::max()) {
        throw eval.fail(fmt::format("{} = {} ('{}') does not fit in a 32-bit int with {}", arg_where(), b.ivalue,
                                    arg.value.str(), eval.with(arg.value)));
      }
      break;
    case ArgKind::kI64:
      b.ivalue = eval(arg.value, arg_where);
      break;
    case ArgKind::kF32:
      b.fvalue = arg.fvalue;
      break;
    case ArgKind::kTensorMap:
      b.map.cols = eval(arg.map.cols, [&] { return "cols of " + arg_where(); });
      b.map.rows = eval(arg.map.rows, [&] { return "rows of " + arg_where(); });
      b.map.row_stride = eval(arg.map.row_stride, [&] { return "row stride of " + arg_where(); });
      b.map.box_cols = arg.map.box_cols;
      b.map.box_rows = arg.map.box_rows;
      b.map.swizzle = arg.map.swizzle;
      break;
  }
  return b;
}

// Resolves each tensor map to the pointer argument it views, once every argument of the launch is
// bound (any of them may be the one viewed), and checks it against the driver's rules and the
// size of that buffer.
void bind_tensor_maps(const BundleLaunch& launch, BoundLaunch& l, const BoundBundle& bound, const Evaluator& eval) {
  for (size_t a = 0; a < launch.args.size(); ++a) {
    const BundleArg& arg = launch.args[a];
    if (arg.kind != ArgKind::kTensorMap) continue;
    const std::string arg_where =
        fmt::format("argument {} '{}' of launch '{}' (tensor map of '{}')", a, arg.name, l.label(), arg.map.of);
    auto target =
        std::find_if(launch.args.begin(), launch.args.end(), [&](const BundleArg& t) { return t.name == arg.map.of; });
    if (target == launch.args.end() || !is_pointer(target->kind)) {
      throw eval.fail(fmt::format("{}: the launch has no input, param or output argument '{}'", arg_where, arg.map.of));
    }
    BoundTensorMap& map = l.args[a].map;
    map.of = static_cast<size_t>(target - launch.args.begin());
    map.dtype = target->dtype;
    const TensorMapSpec concrete{arg.map.of,   Expr(map.cols), Expr(map.rows), Expr(map.row_stride),
                                 map.box_cols, map.box_rows,   map.swizzle};
    if (std::string problem = tensor_map_problem(concrete, map.dtype); !problem.empty()) {
      throw eval.fail(fmt::format("{}: {} with {}", arg_where, problem, eval.dims_text()));
    }
    // The map may only reach bytes of the buffer it views: TMA checks the map's bounds, not the
    // allocation's.
    const uint64_t reach = static_cast<uint64_t>((map.rows - 1) * map.row_stride + map.cols) * dtype_size(map.dtype);
    const bool param = target->kind == ArgKind::kParam || target->kind == ArgKind::kParamOut;
    const uint64_t holds = param ? bound.param(target->tensor).bytes : bound.tensor(target->tensor).bytes;
    if (reach > holds) {
      throw eval.fail(fmt::format("{}: [{}, {}] with row stride {} of {} reaches {} bytes, but {} '{}' has {} with {}",
                                  arg_where, map.rows, map.cols, map.row_stride, dtype_name(map.dtype), reach,
                                  param ? "parameter" : "tensor", target->tensor, holds, eval.dims_text()));
    }
  }
}

BoundLaunch bind_launch(const BundleLaunch& launch, const BoundBundle& bound, const NodeIndex& node_index,
                        const DeviceFacts& device, const Evaluator& eval) {
  BoundLaunch l = launch_frame(launch, *bound.bundle, node_index, eval);
  const std::string where = l.label();
  l.grid = bind_grid(launch, where, eval);
  l.dynamic_smem = bind_shared_memory(launch, where, device, eval);
  l.bytes = eval(launch.bytes, [&] { return fmt::format("bytes moved by launch '{}'", where); });
  l.flops = eval(launch.flops, [&] { return fmt::format("FLOPs of launch '{}'", where); });
  for (size_t a = 0; a < launch.args.size(); ++a) {
    const BundleArg& arg = launch.args[a];
    auto arg_where = [&] { return fmt::format("argument {} '{}' of launch '{}'", a, arg.name, where); };
    l.args.push_back(bind_arg(arg, arg_where, bound, eval));
    // The end of the last argument: the bytes that hold every argument at its offset.
    l.param_buffer_bytes = std::max(l.param_buffer_bytes, static_cast<size_t>(arg.offset + arg.size));
  }
  bind_tensor_maps(launch, l, bound, eval);
  return l;
}

}  // namespace

// ---- BoundBundle ---------------------------------------------------------------------------

int64_t BoundTensor::numel() const { return numel_of(shape); }

std::string launch_label(const std::string& node, int index) {
  return index == 0 ? node : fmt::format("{}#{}", node, index);
}

std::string BoundLaunch::label() const { return launch_label(node, index); }

const BoundTensor& BoundBundle::tensor(const std::string& name) const {
  auto it = tensor_index.find(name);
  if (it == tensor_index.end()) throw Error(fmt::format("bundle {} has no tensor '{}'", label, name));
  return tensors[it->second];
}

const BoundParam& BoundBundle::param(const std::string& name) const {
  auto it = param_index.find(name);
  if (it == param_index.end()) throw Error(fmt::format("bundle {} has no parameter '{}'", label, name));
  return params[it->second];
}

std::vector<size_t> BoundBundle::node_launches(size_t node_index) const {
  return node_index < launches_of_node.size() ? launches_of_node[node_index] : std::vector<size_t>{};
}

std::vector<ParamShape> BoundBundle::param_shapes() const {
  std::vector<ParamShape> shapes;
  for (const BoundParam& p : params)
    shapes.push_back({p.name, p.dtype, p.shape, p.init, unused_state_names(p.name, p.hints)});
  return shapes;
}

// ---- binding --------------------------------------------------------------------------------

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
      throw Error(fmt::format("--bind {}: {} was fixed to {} when the bundle was compiled", bind, name, fixed->second));
    }
  }
  Bindings bindings = bind_dims(dims, free_binds);
  for (const auto& [name, value] : bundle.fixed) bindings[name] = value;
  return bindings;
}

BoundBundle bind_bundle(const Bundle& bundle, const Bindings& dims, const std::string& label) {
  BoundBundle bound;
  bound.bundle = &bundle;
  bound.label = label;
  bound.bindings = dims;
  const Evaluator eval(label, dims);
  bound.tensors.reserve(bundle.tensors.size());
  bound.tensor_index.reserve(bundle.tensors.size());
  for (const BundleTensor& tensor : bundle.tensors) {
    bound.tensor_index.emplace(tensor.name, bound.tensors.size());
    bound.tensors.push_back(bind_tensor(tensor, eval));
  }
  for (const BundleParam& param : bundle.params) {
    bound.param_index.emplace(param.name, bound.params.size());
    bound.params.push_back(bind_param(param, bundle, eval));
  }
  bound.plan = plan_activations(bound, eval);
  check_binding_bytes(bound, eval);
  return bound;
}

void bind_launches(BoundBundle& bound, const DeviceFacts& device) {
  const Evaluator eval(bound.label, bound.bindings, device_bindings(device));
  const NodeIndex node_index = node_indices(*bound.bundle);
  std::vector<BoundLaunch> launches;
  for (const BundleLaunch& launch : bound.bundle->launches) {
    const std::string where = launch_label(launch.node, launch.index);
    if (eval(launch.when, [&] { return fmt::format("condition (when) of launch '{}'", where); }) == 0) continue;
    launches.push_back(bind_launch(launch, bound, node_index, device, eval));
  }
  bound.launches = std::move(launches);
  bound.launches_of_node.assign(bound.bundle->nodes.size(), {});
  for (size_t i = 0; i < bound.launches.size(); ++i) bound.launches_of_node[bound.launches[i].node_index].push_back(i);
  bound.device = device;
}

}  // namespace teeny
