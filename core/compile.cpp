#include "core/compile.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "core/autodiff.h"
#include "core/identifier.h"
#include "core/lowering_choice.h"
#include "core/nvrtc.h"
#include "core/sha256.h"

namespace teeny {
namespace {

std::string join_params(const std::vector<std::string>& items) { return fmt::format("({})", fmt::join(items, ", ")); }

std::string describe(const std::string& c_type, const std::string& name) { return c_type + " " + name; }
std::string describe(const KernelArg& arg) { return describe(arg_c_type(arg), arg.name); }

// ---- helpers -------------------------------------------------------------------------------

std::string block_str(const std::array<int, 3>& block) {
  return fmt::format("[{}, {}, {}]", block[0], block[1], block[2]);
}

// A launch waiting for its kernel to be compiled and verified: launch `index` of the lowering
// its node shares.
struct PendingLaunch {
  const Node* node;
  int index;        // within the node
  int kernel;       // bundle kernel index
  size_t lowering;  // the SharedLowering it comes from
  size_t params;    // the node's param names (slot -> full name), in GraphCompiler::param_names_
};

// What an op's lowering sees of a node (its context, but for the node's name) decides the
// lowering: nodes alike in it share one, made for the first of them. A 10^5-node chain of one op
// is lowered once, not 10^5 times.
struct SharedLowering {
  const Node* first;                    // the node it was made for
  std::vector<BundleVariant> variants;  // a tunable op's: what runs where, and why
  std::vector<int> kernel;              // per launch: its bundle kernel
  std::vector<Launch> launches;         // fixed dims substituted, checked
  std::vector<ScratchSpec> scratch;     // elements fixed and checked
  // Per launch, once verified: its arguments as the bundle holds them, but for their tensors.
  std::vector<std::optional<std::vector<BundleArg>>> verified;
};

size_t combine(size_t seed, size_t value) { return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2)); }

size_t expr_hash(const Expr& e) {
  switch (e.kind()) {
    case Expr::Kind::kConst:
      return std::hash<int64_t>{}(*e.const_value());
    case Expr::Kind::kDim:
      return std::hash<std::string>{}(e.dim_name());
    default:
      return combine(combine(static_cast<size_t>(e.kind()), expr_hash(e.lhs())), expr_hash(e.rhs()));
  }
}

size_t type_hash(const TensorType& type) {
  size_t hash = combine(static_cast<size_t>(type.dtype), expr_hash(type.row_stride));
  for (const Expr& e : type.shape) hash = combine(hash, expr_hash(e));
  return hash;
}

bool same_type(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.row_stride == b.row_stride;
}

// Of the op and what it sees of the context; the attrs are left to same_lowering.
size_t lowering_hash(const Node& node) {
  size_t hash = combine(std::hash<const OpDef*>{}(node.op), type_hash(node.ctx.output));
  for (const TensorType& input : node.ctx.inputs) hash = combine(hash, type_hash(input));
  return hash;
}

bool same_lowering(const Node& a, const Node& b) {
  const OpContext& x = a.ctx;
  const OpContext& y = b.ctx;
  return a.op == b.op && x.target_sm == y.target_sm && x.requested_dtype == y.requested_dtype &&
         same_type(x.output, y.output) &&
         std::equal(x.inputs.begin(), x.inputs.end(), y.inputs.begin(), y.inputs.end(), same_type) &&
         x.attrs.json() == y.attrs.json();
}

class GraphCompiler {
 public:
  GraphCompiler(Graph graph, const Registry& registry, const CompileOptions& options, CompileStats& stats)
      : graph_(std::move(graph)), registry_(registry), options_(options), stats_(stats) {}

  Bundle run() {
    prepare();
    describe_graph();
    pending_.reserve(graph_.nodes.size());
    param_names_.reserve(graph_.nodes.size());
    target_sm();  // an invalid --arch is an error of the flag, before any node
    for (Node& node : graph_.nodes) lower_node_located(node);
    compile_sources();
    bundle_.launches.reserve(pending_.size());
    for (const PendingLaunch& pending : pending_) verify_launch(pending);
    stats_.kernels = static_cast<int>(bundle_.kernels.size());
    move_nodes_to_bundle();
    return std::move(bundle_);
  }

  // The graph as it is lowered: fusion passes applied, the fixed dims substituted.
  Graph prepared() && {
    prepare();
    for (Node& node : graph_.nodes) node.ctx.target_sm = target_sm();
    return std::move(graph_);
  }

 private:
  // ---- graph-level -------------------------------------------------------------------------

  // The passes that form ops with a backward of their own first, then training; the other passes
  // then see the backward nodes' reads of forward tensors, and leave alone what they read.
  void prepare() {
    apply_passes(true);
    add_training(graph_, registry_);
    apply_passes(false);
    fix_dims();
  }

  void apply_passes(bool before_training) {
    if (!options_.fuse) return;
    for (const GraphPass& pass : registry_.passes())
      if (pass.before_training == before_training) stats_.passes_applied += pass.apply(graph_, registry_);
  }

  void fix_dims() {
    for (const auto& [name, value] : options_.fixed) {
      const DimDecl* dim = graph_.find_dim(name);
      if (dim == nullptr) {
        std::vector<std::string> names;
        for (const DimDecl& d : graph_.dims) names.push_back(d.name);
        throw Error(fmt::format("--bind {}={}: unknown dim '{}'{}", name, value, name, did_you_mean(name, names)));
      }
      if (value < dim->min || value > dim->max) {
        throw Error(fmt::format("--bind {}={}: {} must be in [{}, {}]", name, value, name, dim->min, dim->max));
      }
    }
    if (options_.fixed.empty()) return;
    auto fix = [&](TensorType& type, const std::string& what) {
      try {
        type.shape = fixed(type.shape);
        type.row_stride = fixed(type.row_stride);
      } catch (Error& error) {  // an overflow: name the tensor too
        throw error.context(fmt::format("{} {}", what, shape_str(type.shape)));
      }
    };
    for (GraphInput& input : graph_.inputs) fix(input.type, fmt::format("input '{}'", input.name));
    for (Node& node : graph_.nodes) {
      for (TensorType& type : node.ctx.inputs) fix(type, fmt::format("node '{}' input", node.name));
      fix(node.ctx.output, fmt::format("node '{}'", node.name));
    }
  }

  Shape fixed(const Shape& shape) const {
    Shape out;
    for (const Expr& e : shape) out.push_back(fixed(e));
    return out;
  }
  // `e` with the dims of compile --bind substituted; an overflow names the binding.
  Expr fixed(const Expr& e) const {
    try {
      return e.substitute(options_.fixed);
    } catch (Error& error) {
      throw error.context(fmt::format("with --bind {}", bindings_text(options_.fixed)));
    }
  }

  void describe_graph() {
    bundle_.teeny_version = TEENY_VERSION;
    bundle_.nvrtc_version = nvrtc_version();
    bundle_.arch = options_.arch;
    bundle_.graph_name = graph_.name;
    bundle_.spec_path = graph_.source ? graph_.source->path : "";
    if (options_.tuning) bundle_.tuning = options_.tuning->source;
    bundle_.fixed = options_.fixed;
    for (const DimDecl& dim : graph_.dims) {
      bundle_.dims.push_back({dim.name, dim.min, dim.max, dim.default_value});
    }
    bundle_.tensors.reserve(graph_.inputs.size() + graph_.nodes.size());
    for (const GraphInput& input : graph_.inputs) {
      bundle_.inputs.push_back(input.name);
      bundle_.tensors.push_back({input.name, input.type.dtype, input.type.shape, input.type.row_stride, "", ""});
    }
    bundle_.outputs = graph_.outputs;
    record_id_bounds();
  }

  // Last: the graph is not read after this, so its nodes' names and lists are moved, not copied.
  void move_nodes_to_bundle() {
    if (graph_.train) bundle_.loss = graph_.train->loss;
    bundle_.gradients = std::move(graph_.gradients);
    bundle_.nodes.reserve(graph_.nodes.size());
    for (Node& node : graph_.nodes) {
      BundleNode out;
      out.name = std::move(node.name);
      out.op = node.op->name;
      out.attrs = node.ctx.attrs.json();
      out.inputs = std::move(node.inputs);
      out.requested_dtype = node.ctx.requested_dtype;
      out.fused_from = std::move(node.fused_from);
      out.role = node.role;
      out.grad_of = std::move(node.grad_of);
      out.param_refs = std::move(node.param_refs);
      auto variants = node_variants_.find(&node);
      if (variants != node_variants_.end()) out.variants = lowerings_[variants->second].variants;
      bundle_.nodes.push_back(std::move(out));
    }
  }

  // A graph input that a node reads as ids keeps the smallest bound its consumers declare
  // (InputSpec::id_bound_attr, id_bound_input): random inputs stay below it.
  void record_id_bounds() {
    std::unordered_map<std::string, size_t> input_tensor;  // graph input -> its index in bundle_.tensors
    for (size_t t = 0; t < bundle_.tensors.size(); ++t) input_tensor.emplace(bundle_.tensors[t].name, t);
    for (const Node& node : graph_.nodes) {
      const std::vector<InputSpec>& specs = node.op->inputs;
      for (size_t i = 0; i < node.inputs.size() && !specs.empty(); ++i) {
        const InputSpec& spec = specs[std::min(i, specs.size() - 1)];  // variadic: the last repeats
        const int64_t bound = id_bound(node, spec);
        auto input = input_tensor.find(node.inputs[i]);
        if (input == input_tensor.end() || bound <= 0) continue;
        BundleTensor& tensor = bundle_.tensors[input->second];
        tensor.id_bound = tensor.id_bound == 0 ? bound : std::min(tensor.id_bound, bound);
      }
    }
  }

  // The bound `spec` declares on the ids it reads at `node`, or 0.
  static int64_t id_bound(const Node& node, const InputSpec& spec) {
    if (!spec.id_bound_attr.empty() && node.ctx.attrs.has(spec.id_bound_attr))
      return node.ctx.attrs.integer(spec.id_bound_attr);
    const int indexed = spec.id_bound_input;
    if (indexed < 0 || indexed >= static_cast<int>(node.ctx.inputs.size())) return 0;
    const Shape& shape = node.ctx.inputs[indexed].shape;
    return shape.empty() ? 0 : shape.back().const_value().value_or(0);
  }

  Error node_error(const Node& node, const std::string& message) const {
    return graph_.error_at(node, "op", fmt::format("op '{}', {}", node.op->name, message));
  }

  // Every expression stored in the bundle may only use the graph's dims, and a launch's also the
  // device symbols (bound where it runs); a param's shape may not: its data cannot depend on the GPU.
  // `what()` names the expression in the error; it is made only then (a few per launch, 10^5 launches).
  template <typename What>
  void check_dims_known(const Node& node, const Expr& e, const What& what, bool device_symbols_allowed = true) const {
    if (dims_known(e, device_symbols_allowed)) return;
    for (const std::string& dim : e.dims()) {
      if (graph_.find_dim(dim) == nullptr && !(device_symbols_allowed && is_device_symbol(dim))) {
        throw node_error(node, fmt::format("{} '{}' uses '{}', which is not a dim of the graph", what(), e.str(), dim));
      }
    }
  }

  // The check above without the sorted list of names Expr::dims() makes, wanted only for the error.
  bool dims_known(const Expr& e, bool device_symbols_allowed) const {
    if (e.kind() == Expr::Kind::kDim) {
      return graph_.find_dim(e.dim_name()) != nullptr || (device_symbols_allowed && is_device_symbol(e.dim_name()));
    }
    return e.is_const() || (dims_known(e.lhs(), device_symbols_allowed) && dims_known(e.rhs(), device_symbols_allowed));
  }

  // ---- per node ------------------------------------------------------------------------------

  // lower_node, where an error that names no place (an overflow in the op's launch expressions,
  // say) is put at the node.
  void lower_node_located(Node& node) {
    try {
      lower_node(node);
    } catch (const Error& e) {
      if (e.location()) throw;
      Error located = node_error(node, e.message());
      located.with_code(e.code());
      for (const std::string& note : e.notes()) located.note(note);
      throw located;
    }
  }

  // The graph is this compiler's copy: its node's context is given the target for the lowering,
  // rather than a copy of the context made per node.
  void lower_node(Node& node) {
    const OpContext& ctx = node.ctx;
    std::vector<ParamSpec> specs = node.op->params ? node.op->params(ctx) : std::vector<ParamSpec>{};
    param_names_.push_back(add_params(node, specs));

    BundleTensor tensor{node.name, ctx.output.dtype, ctx.output.shape, ctx.output.row_stride, node.name, ""};
    if (!node.op->lower) {
      add_view(node, tensor);
      return;
    }
    if (!node.op->update) bundle_.tensors.push_back(std::move(tensor));  // an update writes params only

    node.ctx.target_sm = target_sm();
    const size_t shared = shared_lowering(node, specs);
    const SharedLowering& lowering = lowerings_[shared];
    if (!lowering.variants.empty()) node_variants_.emplace(&node, shared);
    for (const ScratchSpec& scratch : lowering.scratch) add_scratch(node, scratch);
    for (size_t i = 0; i < lowering.launches.size(); ++i)
      pending_.push_back({&node, static_cast<int>(i), lowering.kernel[i], shared, param_names_.size() - 1});
  }

  // The index in lowerings_ of the lowering `node` shares, made now if it is the first node so.
  size_t shared_lowering(const Node& node, const std::vector<ParamSpec>& specs) {
    const size_t hash = lowering_hash(node);
    auto [first, last] = lowering_by_hash_.equal_range(hash);
    for (auto it = first; it != last; ++it) {
      const Node& first = *lowerings_[it->second].first;
      if (same_lowering(first, node) && forced_variant(first) == forced_variant(node)) return it->second;
    }
    lowerings_.push_back(lower(node, specs));
    lowering_by_hash_.emplace(hash, lowerings_.size() - 1);
    return lowerings_.size() - 1;
  }

  // The op's lowering of `node`: its kernels added to the bundle, its launches' expressions
  // fixed (compile --bind) and checked.
  SharedLowering lower(const Node& node, const std::vector<ParamSpec>& specs) {
    ChosenLowering chosen = choose_lowering(node);
    Lowering& lowering = chosen.lowering;
    std::vector<int> kernel_ids;
    for (const KernelSource& kernel : lowering.kernels) kernel_ids.push_back(add_kernel(node, kernel));
    SharedLowering out{&node, std::move(chosen.variants), {}, {}, {}, {}};
    out.scratch = checked_scratch(node, std::move(lowering.scratch));
    for (size_t i = 0; i < lowering.launches.size(); ++i) {
      Launch& launch = lowering.launches[i];
      auto where = [i](const char* what) { return fmt::format("launch {}{}", i, what); };
      if (launch.kernel < 0 || launch.kernel >= static_cast<int>(kernel_ids.size())) {
        throw node_error(node, fmt::format("{}: kernel index {} is out of range (the lowering has {} kernels)",
                                           where(""), launch.kernel, kernel_ids.size()));
      }
      for (Expr& g : launch.grid) g = fixed(g);
      launch.dynamic_smem = fixed(launch.dynamic_smem);
      launch.bytes = fixed(launch.bytes);
      launch.flops = fixed(launch.flops);
      launch.when = fixed(launch.when);
      for (int d = 0; d < 3; ++d) check_dims_known(node, launch.grid[d], [&] { return where(" grid"); });
      check_dims_known(node, launch.dynamic_smem, [&] { return where(" dynamic shared memory"); });
      check_dims_known(node, launch.bytes, [&] { return where(" cost (bytes)"); });
      check_dims_known(node, launch.flops, [&] { return where(" cost (FLOPs)"); });
      check_dims_known(node, launch.when, [&] { return where(" condition (when)"); });
      for (size_t a = 0; a < launch.args.size(); ++a) {
        KernelArg& arg = launch.args[a];
        auto arg_where = [&] { return fmt::format("{}, argument {} '{}'", where(""), a, arg.name); };
        if (arg.kind == ArgKind::kI32 || arg.kind == ArgKind::kI64) {
          arg.value = fixed(arg.value);
          check_dims_known(node, arg.value, arg_where);
        }
        if (arg.kind == ArgKind::kTensorMap) {
          for (auto [what, e] : {std::pair{"cols", &arg.map.cols}, std::pair{"rows", &arg.map.rows},
                                 std::pair{"row stride", &arg.map.row_stride}}) {
            *e = fixed(*e);
            check_dims_known(node, *e, [&, what = what] { return fmt::format("{} {}", arg_where(), what); });
          }
        }
        check_arg_binding(node, specs, out.scratch, i, launch.args, a);
      }
      out.kernel.push_back(kernel_ids[launch.kernel]);
      out.launches.push_back(std::move(launch));
    }
    out.verified.resize(out.launches.size());
    return out;
  }

  // A tunable op's lowering by the tuning file (or the variant named for the node); any other op's
  // own.
  ChosenLowering choose_lowering(const Node& node) const {
    if (!node.op->tuning.variants) return {node.op->lower(node.ctx), {}};
    const TuningFile* tuning = options_.tuning ? &*options_.tuning : nullptr;
    return lower_tunable(*node.op, node.ctx, tuning, forced_variant(node));
  }

  const std::string& forced_variant(const Node& node) const {
    static const std::string none;
    auto it = options_.variants.find(node.name);
    return it == options_.variants.end() ? none : it->second;
  }

  // --arch as an SM number, parsed once.
  int target_sm() {
    if (!target_sm_) target_sm_ = arch_sm(options_.arch);
    return *target_sm_;
  }

  // The lowering's scratch buffers, their sizes fixed (compile --bind): named by identifiers, each
  // once, sized by the graph's dims alone (the arena is planned before the device is known).
  std::vector<ScratchSpec> checked_scratch(const Node& node, std::vector<ScratchSpec> buffers) const {
    std::set<std::string> names;
    for (ScratchSpec& buffer : buffers) {
      auto what = [&] { return fmt::format("scratch buffer '{}'", buffer.name); };
      if (!is_identifier(buffer.name)) throw node_error(node, fmt::format("{} is not named by a C identifier", what()));
      if (!names.insert(buffer.name).second) throw node_error(node, fmt::format("{} is declared twice", what()));
      buffer.elements = fixed(buffer.elements);
      check_dims_known(
          node, buffer.elements, [&] { return what() + " elements"; }, false);
      if (std::optional<int64_t> elements = buffer.elements.const_value(); elements && *elements < 1) {
        throw node_error(node, fmt::format("{} has {} elements; it needs at least 1", what(), *elements));
      }
      if (std::string problem = tensor_size_problem(contiguous(buffer.dtype, {buffer.elements})); !problem.empty()) {
        throw node_error(node, fmt::format("{}: {}", what(), problem));
      }
    }
    return buffers;
  }

  // A scratch buffer is a tensor of the node's, "<node>#<buffer>": a flat array, produced by the
  // node and read by nothing else, so the memory plan keeps it only while the node runs.
  void add_scratch(const Node& node, const ScratchSpec& buffer) {
    BundleTensor tensor{scratch_tensor_name(node.name, buffer.name),
                        buffer.dtype,
                        {buffer.elements},
                        buffer.elements,
                        node.name,
                        "",
                        0,
                        true};
    bundle_.tensors.push_back(std::move(tensor));
  }

  // Views share their input's buffer; a view may only reinterpret contiguous rows.
  void add_view(const Node& node, BundleTensor tensor) {
    const TensorType& in = node.ctx.inputs.at(0);
    const TensorType& out = node.ctx.output;
    if (out.dtype != in.dtype) {
      throw node_error(node, fmt::format("view output dtype {} differs from input dtype {}", dtype_name(out.dtype),
                                         dtype_name(in.dtype)));
    }
    bool same_rows = !in.shape.empty() && !out.shape.empty() && in.shape.back() == out.shape.back() &&
                     in.row_stride == out.row_stride;
    if (is_padded(in) && !same_rows) {
      throw node_error(node,
                       fmt::format("cannot view '{}' as {}: its rows are padded (row stride {}, "
                                   "last dim {}), so a view must keep the last dim and stride",
                                   node.inputs[0], shape_str(out.shape), in.row_stride.str(), in.shape.back().str()));
    }
    auto viewed = view_buffer_.find(node.inputs[0]);
    tensor.alias_of = viewed == view_buffer_.end() ? node.inputs[0] : viewed->second;
    view_buffer_.emplace(node.name, tensor.alias_of);
    bundle_.tensors.push_back(std::move(tensor));
  }

  std::map<std::string, std::string> add_params(const Node& node, const std::vector<ParamSpec>& specs) {
    std::map<std::string, std::string> names;
    for (const ParamSpec& spec : specs) {
      if (auto ref = node.param_refs.find(spec.slot); ref != node.param_refs.end()) {
        check_param_ref(node, spec, ref->second);
        names.emplace(spec.slot, ref->second);
        continue;
      }
      auto renamed = node.param_names.find(spec.slot);
      std::string name = renamed != node.param_names.end() ? renamed->second : node.name + "." + spec.slot;
      if (!names.emplace(spec.slot, name).second) {
        throw node_error(node, fmt::format("param slot '{}' is declared twice", spec.slot));
      }
      if (auto existing = param_owner_.find(name); existing != param_owner_.end()) {
        throw node_error(node, fmt::format("param '{}' is also a param of node '{}'", name, existing->second));
      }
      param_owner_.emplace(name, node.name);
      BundleParam param;
      param.name = name;
      param.node = node.name;
      param.slot = spec.slot;
      param.dtype = spec.dtype;
      param.shape = fixed(spec.shape);
      param.init = spec.init;
      param.hints = spec.hints;
      for (const Expr& e : param.shape) {
        check_dims_known(
            node, e, [&] { return fmt::format("param '{}' shape", name); }, false);
      }
      if (spec.init == ParamInit::kHost) add_host_bytes(node, spec, param);
      bundle_.params.push_back(std::move(param));
    }
    return names;
  }

  // A slot bound to another node's param (training) must find it, declared alike.
  void check_param_ref(const Node& node, const ParamSpec& spec, const std::string& name) const {
    auto owned = std::find_if(bundle_.params.begin(), bundle_.params.end(),
                              [&](const BundleParam& param) { return param.name == name; });
    if (owned == bundle_.params.end())
      throw node_error(node,
                       fmt::format("param slot '{}' refers to '{}', which no earlier node owns", spec.slot, name));
    if (owned->dtype != spec.dtype || owned->shape != fixed(spec.shape))
      throw node_error(
          node, fmt::format("param slot '{}' is {} {}, but '{}' is {} {}", spec.slot, dtype_name(spec.dtype),
                            shape_str(fixed(spec.shape)), name, dtype_name(owned->dtype), shape_str(owned->shape)));
  }

  // Check (d): host init bytes are exactly numel × dtype size of a concrete shape.
  void add_host_bytes(const Node& node, const ParamSpec& spec, BundleParam& param) {
    Expr numel = product(param.shape);
    if (!numel.is_const()) {
      throw node_error(node, fmt::format("param '{}' has host-computed init bytes but a symbolic shape {}; "
                                         "host init needs a concrete shape",
                                         param.name, shape_str(param.shape)));
    }
    uint64_t expected = static_cast<uint64_t>(*numel.const_value()) * dtype_size(spec.dtype);
    if (spec.host_bytes.size() != expected) {
      throw node_error(
          node, fmt::format("param '{}' init bytes: expected {} ({} = {} elements x {} bytes of {}), found {}",
                            param.name, expected, shape_str(param.shape), *numel.const_value(), dtype_size(spec.dtype),
                            dtype_name(spec.dtype), spec.host_bytes.size()));
    }
    // 16-byte aligned ranges, so every param can be uploaded or mapped with vector loads.
    while (bundle_.param_bytes.size() % 16 != 0) bundle_.param_bytes.push_back(0);
    param.offset = bundle_.param_bytes.size();
    param.size = expected;
    bundle_.param_bytes.insert(bundle_.param_bytes.end(), spec.host_bytes.begin(), spec.host_bytes.end());
  }

  // The argument refers to something that exists, with the dtype the kernel will read.
  void check_arg_binding(const Node& node, const std::vector<ParamSpec>& specs, const std::vector<ScratchSpec>& scratch,
                         size_t launch, const std::vector<KernelArg>& args, size_t position) const {
    const KernelArg& arg = args[position];
    // Made only for an error: this runs for every argument of every launch.
    auto where = [&] { return fmt::format("launch {}, argument {} '{}'", launch, position, arg.name); };
    auto check_dtype = [&](DType actual, const auto& what) {
      if (arg.dtype != actual) {
        throw node_error(node, fmt::format("{}: dtype mismatch: expected {} ({}), found {}", where(),
                                           dtype_name(actual), what(), dtype_name(arg.dtype)));
      }
    };
    switch (arg.kind) {
      case ArgKind::kInput:
        if (arg.input_index < 0 || arg.input_index >= static_cast<int>(node.ctx.inputs.size())) {
          throw node_error(node, fmt::format("{}: input index {} is out of range (the node has {} inputs)", where(),
                                             arg.input_index, node.ctx.inputs.size()));
        }
        check_dtype(node.ctx.inputs[arg.input_index].dtype,
                    [&] { return fmt::format("input {} '{}'", arg.input_index, node.inputs[arg.input_index]); });
        break;
      case ArgKind::kParam:
      case ArgKind::kParamOut: {
        if (arg.kind == ArgKind::kParamOut && !node.op->update)
          throw node_error(node, fmt::format("{}: only an update op writes params", where()));
        auto spec = std::find_if(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.slot == arg.slot; });
        if (spec == specs.end()) {
          std::vector<std::string> slots;
          for (const ParamSpec& s : specs) slots.push_back(s.slot);
          throw node_error(node,
                           fmt::format("{}: no param slot '{}'{}", where(), arg.slot, did_you_mean(arg.slot, slots)));
        }
        check_dtype(spec->dtype, [&] { return fmt::format("param slot '{}'", arg.slot); });
        break;
      }
      case ArgKind::kOutput:
        if (node.op->update) throw node_error(node, fmt::format("{}: an update op has no output", where()));
        check_dtype(node.ctx.output.dtype, [] { return "the node's output"; });
        break;
      case ArgKind::kScratch: {
        auto buffer =
            std::find_if(scratch.begin(), scratch.end(), [&](const ScratchSpec& s) { return s.name == arg.slot; });
        if (buffer == scratch.end()) {
          std::vector<std::string> names;
          for (const ScratchSpec& s : scratch) names.push_back(s.name);
          throw node_error(node, fmt::format("{}: the lowering has no scratch buffer '{}'{}", where(), arg.slot,
                                             did_you_mean(arg.slot, names)));
        }
        check_dtype(buffer->dtype, [&] { return fmt::format("scratch buffer '{}'", arg.slot); });
        break;
      }
      case ArgKind::kI32:
      case ArgKind::kI64:
      case ArgKind::kF32:
        break;
      case ArgKind::kTensorMap: {
        auto target = std::find_if(args.begin(), args.end(), [&](const KernelArg& a) { return a.name == arg.map.of; });
        if (target == args.end()) {
          std::vector<std::string> pointers;
          for (const KernelArg& a : args) {
            if (is_pointer(a.kind)) pointers.push_back(a.name);
          }
          throw node_error(node, fmt::format("{}: tensor map of '{}', which is not an argument of the launch{}",
                                             where(), arg.map.of, did_you_mean(arg.map.of, pointers)));
        }
        if (!is_pointer(target->kind)) {
          throw node_error(node, fmt::format("{}: tensor map of '{}', an argument of kind {}; a tensor map views "
                                             "an input, param or output",
                                             where(), arg.map.of, arg_kind_name(target->kind)));
        }
        std::string problem = tensor_map_problem(arg.map, target->dtype);
        if (!problem.empty()) {
          throw node_error(node, fmt::format("{}: tensor map of '{}': {}", where(), arg.map.of, problem));
        }
        break;
      }
    }
  }

  // ---- kernels -------------------------------------------------------------------------------

  // Identical translation units share one kernel; distinct ones with the same name are told
  // apart by a short hash of their text.
  int add_kernel(const Node& node, const KernelSource& kernel) {
    if (!is_identifier(kernel.name)) {
      throw node_error(node, fmt::format("kernel name '{}' (generated at {}:{}) is not a C identifier", kernel.name,
                                         kernel.file, kernel.line));
    }
    const std::string text = kernel_translation_unit(kernel, kernel.name + "_entry_point");
    if (auto it = kernel_by_source_.find(text); it != kernel_by_source_.end()) return it->second;
    std::string name = kernel.name;
    if (used_names_.count(name)) name = fmt::format("{}_{}", kernel.name, sha256_hex(text).substr(0, 8));
    used_names_.insert(name);

    KernelSource unique = kernel;
    unique.name = name;
    std::string entry = name + "_entry_point";
    unique.source = kernel_translation_unit(kernel, entry);
    int id = static_cast<int>(bundle_.kernels.size());
    BundleKernel out;
    out.name = name;
    out.entry = entry;
    out.source_file = kernel.file;
    out.source_line = kernel.line;
    bundle_.kernels.push_back(std::move(out));
    std::vector<std::string> param_text;
    for (const KernelArg& param : unique.params) param_text.push_back(describe(param));
    param_text_.push_back(std::move(param_text));
    sources_.push_back(std::move(unique));
    kernel_by_source_[text] = id;
    return id;
  }

  // Every distinct kernel source through NVRTC (parallel, cached) into the bundle.
  void compile_sources() {
    NvrtcConfig config;
    config.arch = options_.arch;
    config.extra_options = options_.extra_nvrtc_options;
    config.use_cache = options_.use_cache;
    config.cache_dir = options_.cache_dir;
    config.jobs = options_.jobs;
    config.headers = registry_.kernel_headers();
    bundle_.nvrtc_options = nvrtc_options(config);
    NvrtcStats nvrtc_stats;
    std::vector<CompiledKernel> compiled = compile_kernels(sources_, config, &nvrtc_stats);
    stats_.compiled = nvrtc_stats.compiled;
    stats_.cached = nvrtc_stats.cached;
    stats_.warnings.insert(stats_.warnings.end(), nvrtc_stats.cache_warnings.begin(), nvrtc_stats.cache_warnings.end());
    for (size_t k = 0; k < compiled.size(); ++k) {
      BundleKernel& kernel = bundle_.kernels[k];
      kernel.ptx = std::move(compiled[k].ptx);
      kernel.target = sources_[k].arch_specific ? arch_specific(options_.arch) : options_.arch;
      kernel.sha256 = sha256_hex(kernel.ptx);
      entries_.push_back(parse_ptx_entries(kernel.ptx, fmt::format("kernels/{}.ptx", kernel.name)));
      if (const PtxEntry* entry = find_visible_entry(entries_.back(), kernel.entry)) {
        kernel.reqntid = entry->reqntid;
        kernel.maxntid = entry->maxntid;
        for (const PtxParam& param : entry->params) kernel.ptx_params.push_back(param.type);
      }
    }
  }

  // ---- verification ----------------------------------------------------------------------------

  void check_launch_matches_params(const Node& node, int launch, const BundleKernel& kernel,
                                   const std::vector<std::string>& param_text,
                                   const std::vector<std::string>& launch_text) {
    for (size_t p = 0; p < std::max(launch_text.size(), param_text.size()); ++p) {
      std::string expected, found;
      if (p >= launch_text.size()) {
        expected = fmt::format("'{}'", param_text[p]);
        found = fmt::format("nothing (the launch passes {} arguments)", launch_text.size());
      } else if (p >= param_text.size()) {
        expected = fmt::format("nothing (the kernel takes {} parameters)", param_text.size());
        found = fmt::format("'{}'", launch_text[p]);
      } else if (launch_text[p] != param_text[p]) {
        expected = fmt::format("'{}'", param_text[p]);
        found = fmt::format("'{}'", launch_text[p]);
      } else {
        continue;
      }
      throw node_error(node, fmt::format("launch {}, argument {}: does not match kernel '{}': expected {}, found {}",
                                         launch, p, kernel.name, expected, found))
          .note("launch arguments: " + join_params(launch_text))
          .note(fmt::format("kernel parameters ({}:{}): {}", kernel.source_file, kernel.source_line,
                            join_params(param_text)));
    }
  }

  // Adds the pending launch to the bundle, verified once for all that share its lowering.
  void verify_launch(const PendingLaunch& pending) {
    SharedLowering& lowering = lowerings_[pending.lowering];
    std::optional<std::vector<BundleArg>>& verified = lowering.verified[pending.index];
    if (!verified) verified = verified_args(pending);
    const Launch& launch = lowering.launches[pending.index];
    std::vector<BundleArg> args = *verified;
    for (size_t p = 0; p < args.size(); ++p) args[p].tensor = tensor_of(pending, launch.args[p]);

    BundleLaunch out;
    out.node = pending.node->name;
    out.index = pending.index;
    out.kernel = pending.kernel;
    out.block = launch.block;
    out.grid = launch.grid;
    out.dynamic_smem = launch.dynamic_smem;
    out.when = launch.when;
    out.args = std::move(args);
    out.bytes = launch.bytes;
    out.flops = launch.flops;
    bundle_.launches.push_back(std::move(out));
  }

  // The launch's arguments as the bundle holds them, but for their tensors, once it is verified.
  std::vector<BundleArg> verified_args(const PendingLaunch& pending) {
    const Node& node = *pending.node;
    const BundleKernel& kernel = bundle_.kernels[pending.kernel];
    const Launch& launch = lowerings_[pending.lowering].launches[pending.index];
    auto where = [&] { return fmt::format("launch {}", pending.index); };

    // (a) the launch passes the kernel's parameters: count, kinds, dtypes, names.
    std::vector<std::string> c_types, launch_text;
    for (const KernelArg& arg : launch.args) {
      c_types.push_back(arg_c_type(arg));
      launch_text.push_back(describe(c_types.back(), arg.name));
    }
    check_launch_matches_params(node, pending.index, kernel, param_text_[pending.kernel], launch_text);

    // (b) the PTX entry exists, and its parameters have the arguments' sizes and alignments.
    const PtxEntry* entry = find_visible_entry(entries_[pending.kernel], kernel.entry);
    if (entry == nullptr) {
      std::vector<std::string> names;
      for (const PtxEntry& e : entries_[pending.kernel])
        names.push_back((e.visible ? ".visible .entry " : ".entry ") + e.name);
      throw node_error(node, fmt::format("{}: kernel '{}' has no '.visible .entry {}' in its PTX", where(), kernel.name,
                                         kernel.entry))
          .note(names.empty() ? std::string("the PTX declares no entries")
                              : fmt::format("the PTX declares: {}", fmt::join(names, ", ")));
    }
    std::vector<BundleArg> args;
    args.reserve(launch.args.size());
    int offset = 0;
    for (size_t p = 0; p < std::max(launch.args.size(), entry->params.size()); ++p) {
      if (p >= entry->params.size() || p >= launch.args.size()) {
        std::string expected = p < launch.args.size()
                                   ? fmt::format("a parameter for '{}'", launch_text[p])
                                   : fmt::format("nothing (the launch passes {} arguments)", launch.args.size());
        std::string found = p < entry->params.size()
                                ? fmt::format("{} {}", entry->params[p].type, entry->params[p].name)
                                : fmt::format("nothing (the entry has {} parameters)", entry->params.size());
        throw node_error(
            node, fmt::format("{}, argument {}: PTX parameter mismatch in '.visible .entry {}': expected {}, found {}",
                              where(), p, kernel.entry, expected, found));
      }
      const KernelArg& arg = launch.args[p];
      const PtxParam& ptx = entry->params[p];
      ArgLayout layout = arg_layout(arg);
      if (ptx.size != layout.size || ptx.align != layout.align) {
        throw node_error(node, fmt::format("{}, argument {}: PTX parameter mismatch in '.visible .entry {}': expected "
                                           "size {} align {} for '{}', found {} size {} align {}",
                                           where(), p, kernel.entry, layout.size, layout.align, launch_text[p],
                                           ptx.type, ptx.size, ptx.align));
      }
      // CUDA's parameter buffer: each argument at the next multiple of its alignment.
      offset = (offset + ptx.align - 1) / ptx.align * ptx.align;
      args.push_back(bundle_arg(arg, std::move(c_types[p]), ptx, offset));
      offset += ptx.size;
    }

    // (c) the block against the PTX's launch-shape directives.
    if (std::string problem = block_problem(launch.block, *entry); !problem.empty()) {
      throw node_error(node, fmt::format("{}: {}", where(), problem));
    }
    return args;
  }

  // Built in one piece: a BundleArg assigned field by field first default-constructs the
  // expressions it then replaces.
  static BundleArg bundle_arg(const KernelArg& arg, std::string c_type, const PtxParam& ptx, int offset) {
    return BundleArg{arg.kind, arg.name,  std::move(c_type), ptx.type,  ptx.size, offset,
                     "",       arg.value, arg.fvalue,        arg.dtype, arg.map};
  }

  // What a pointer argument points at: the node's input or output tensor, or its param.
  std::string tensor_of(const PendingLaunch& pending, const KernelArg& arg) const {
    switch (arg.kind) {
      case ArgKind::kInput:
        return pending.node->inputs[arg.input_index];
      case ArgKind::kOutput:
        return pending.node->name;
      case ArgKind::kParam:
      case ArgKind::kParamOut:
        return param_names_[pending.params].at(arg.slot);
      case ArgKind::kScratch:
        return scratch_tensor_name(pending.node->name, arg.slot);
      default:
        return "";
    }
  }

  Graph graph_;  // its own (a copy, or moved in): passes and compile --bind rewrite it
  const Registry& registry_;
  const CompileOptions& options_;
  CompileStats& stats_;
  Bundle bundle_;
  std::unordered_map<std::string, std::string> view_buffer_;  // view -> tensor owning its buffer (others: their own)
  std::unordered_map<std::string, std::string> param_owner_;  // param name -> node
  std::map<std::string, int> kernel_by_source_;               // original source -> bundle kernel
  std::set<std::string> used_names_;
  std::vector<KernelSource> sources_;                 // per bundle kernel, entry substituted
  std::vector<std::vector<std::string>> param_text_;  // per bundle kernel: its parameters, described
  std::vector<std::vector<PtxEntry>> entries_;        // per bundle kernel
  std::vector<PendingLaunch> pending_;
  std::vector<std::map<std::string, std::string>> param_names_;  // per lowered node: slot -> full name
  std::vector<SharedLowering> lowerings_;
  std::unordered_multimap<size_t, size_t> lowering_by_hash_;  // lowering_hash -> lowerings_ index
  std::unordered_map<const Node*, size_t> node_variants_;     // a tunable node -> its lowering's index
  std::optional<int> target_sm_;
};

}  // namespace

std::string block_problem(const std::array<int, 3>& block, const PtxEntry& entry) {
  const int64_t threads = int64_t{block[0]} * block[1] * block[2];
  if (block[0] < 1 || block[1] < 1 || block[2] < 1 || threads > 1024 || block[2] > 64) {
    return fmt::format("block {} is not a valid CUDA block (each dim >= 1, z <= 64, at most 1024 threads)",
                       block_str(block));
  }
  if (entry.reqntid && *entry.reqntid != block) {
    return fmt::format("block does not match '.reqntid {}' of '{}': expected {}, found {}", ntid_str(*entry.reqntid),
                       entry.name, block_str(*entry.reqntid), block_str(block));
  }
  if (entry.maxntid) {
    const int64_t limit = int64_t{(*entry.maxntid)[0]} * (*entry.maxntid)[1] * (*entry.maxntid)[2];
    if (threads > limit) {
      return fmt::format("block {} exceeds '.maxntid {}' of '{}': expected at most {} threads, found {}",
                         block_str(block), ntid_str(*entry.maxntid), entry.name, limit, threads);
    }
  }
  return "";
}

// Every entry starts by waiting for the kernels before it, then lets the next kernel's blocks be
// scheduled: the executor launches on sm_90+ with programmatic stream serialization, so a kernel's
// launch and block set-up overlap the previous kernel's last wave instead of following its exit.
// griddepcontrol.wait returns once the previous grids have finished and their writes are visible
// (at once when launched without the attribute); the trigger lets at most the next grid be
// scheduled early, and its blocks wait in their own prologue.
constexpr const char* kProgrammaticLaunchPrologue =
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
    "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
    "#endif\n";

// Appended rather than formatted: compile makes one for every node, to find the kernels nodes share.
std::string kernel_translation_unit(const KernelSource& kernel, const std::string& entry) {
  std::string bounds;
  if (kernel.max_threads > 0 && kernel.min_blocks > 0) {
    bounds = fmt::format("__launch_bounds__({}, {}) ", kernel.max_threads, kernel.min_blocks);
  } else if (kernel.max_threads > 0) {
    bounds = fmt::format("__launch_bounds__({}) ", kernel.max_threads);
  }
  std::string out = "#include \"" + kernel.header + "\"\n\nextern \"C\" __global__ void " + bounds + entry + "(";
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    if (i > 0) out += ", ";
    out += describe(kernel.params[i]);
  }
  out += ") {\n" + std::string(kProgrammaticLaunchPrologue) + "  " + kernel.function + "(";
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    if (i > 0) out += ", ";
    out += kernel.params[i].name;
  }
  return out + ");\n}\n";
}

Graph prepare_graph(Graph graph, const Registry& registry, const CompileOptions& options) {
  CompileStats stats;
  return GraphCompiler(std::move(graph), registry, options, stats).prepared();
}

Bundle compile_graph(const Graph& graph, const Registry& registry, const CompileOptions& options, CompileStats* stats) {
  return compile_graph(Graph(graph), registry, options, stats);
}

Bundle compile_graph(Graph&& graph, const Registry& registry, const CompileOptions& options, CompileStats* stats) {
  CompileStats local;
  CompileStats& out = stats != nullptr ? *stats : local;
  out = CompileStats{};
  return GraphCompiler(std::move(graph), registry, options, out).run();
}

}  // namespace teeny
