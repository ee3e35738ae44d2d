#include "core/inspect.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace teeny {
namespace {

class Inspector {
 public:
  Inspector(const Bundle& bundle, const Bindings& dims, const InspectDevice& device)
      : bundle_(bundle), bindings_(dims) {
    bindings_.insert(device.symbols.begin(), device.symbols.end());
    for (const BundleTensor& t : bundle.tensors) {
      tensors_.emplace(t.name, &t);
      if (t.scratch) scratch_of_node_[t.producer].push_back(&t);
    }
    for (const BundleParam& p : bundle.params) {
      params_.emplace(p.name, &p);
      params_of_node_[p.node].push_back(&p);
    }
    for (const BundleLaunch& l : bundle.launches) launches_of_node_[l.node].push_back(&l);
    for (const BundleNode& n : bundle.nodes)
      if (n.role == NodeRole::kBackward) backward_of_node_[n.grad_of].push_back(n.name);
  }

  InspectedExpr expr(const Expr& e) {
    InspectedExpr out;
    out.expr = e.str();
    for (const std::string& name : e.dims()) {
      if (is_device_symbol(name) && !bindings_.count(name)) out.needs.push_back(name);
    }
    unbound_.insert(out.needs.begin(), out.needs.end());
    if (!out.needs.empty()) return out;
    try {
      out.value = e.eval(bindings_);
    } catch (const Error& error) {
      out.error = error.message();
    }
    return out;
  }

  InspectedShape shape(const Shape& shape) const {
    InspectedShape out;
    out.expr = shape_str(shape);
    try {
      out.value = eval_shape(shape, bindings_);
    } catch (const Error& error) {
      out.error = error.message();
    }
    return out;
  }

  // "f32 [64, 784]" (with the row stride when padded) or the evaluation error.
  std::string tensor_value(const BundleTensor& tensor) const {
    try {
      std::string text =
          fmt::format("{} {}", dtype_name(tensor.dtype), shape_text(eval_shape(tensor.shape, bindings_)));
      if (!tensor.shape.empty() && tensor.row_stride != tensor.shape.back()) {
        text += fmt::format(" row stride {}", tensor.row_stride.eval(bindings_));
      }
      return text;
    } catch (const Error& error) {
      return error.message();
    }
  }

  InspectedTensor tensor(const BundleTensor& t) {
    return {t.name, dtype_name(t.dtype), shape(t.shape), expr(t.row_stride), t.alias_of};
  }

  InspectedParam param(const BundleParam& p) {
    InspectedParam out;
    out.name = p.name;
    out.slot = p.slot;
    out.dtype = dtype_name(p.dtype);
    out.shape = shape(p.shape);
    out.bytes = expr(product(p.shape) * Expr(static_cast<int64_t>(dtype_size(p.dtype))));
    out.init = param_init_name(p.init);
    if (p.init == ParamInit::kHost) {
      out.init_bytes = p.size;
      out.init_offset = p.offset;
    }
    return out;
  }

  InspectedScratch scratch(const BundleTensor& t) {
    const Expr& elements = t.shape.at(0);
    return {t.name, dtype_name(t.dtype), expr(elements),
            expr(elements * Expr(static_cast<int64_t>(dtype_size(t.dtype))))};
  }

  InspectedArg arg(const BundleLaunch& l, size_t position) {
    const BundleArg& a = l.args[position];
    InspectedArg out;
    out.position = position;
    out.name = a.name;
    out.kind = arg_kind_name(a.kind);
    out.c_type = a.c_type;
    out.ptx_type = a.ptx_type;
    out.size = a.size;
    out.offset = a.offset;
    switch (a.kind) {
      case ArgKind::kInput:
      case ArgKind::kOutput:
      case ArgKind::kScratch: {
        const BundleTensor& t = tensor_named(a.tensor);
        out.bound_to = t.alias_of.empty() ? a.tensor : fmt::format("{} (buffer of {})", a.tensor, t.alias_of);
        out.value = tensor_value(t);
        break;
      }
      case ArgKind::kParam:
      case ArgKind::kParamOut:
        out.bound_to = a.tensor;
        if (auto it = params_.find(a.tensor); it != params_.end()) {
          const BundleParam& p = *it->second;
          try {
            out.value = fmt::format("{} {}", dtype_name(p.dtype), shape_text(eval_shape(p.shape, bindings_)));
          } catch (const Error& error) {
            out.value = error.message();
          }
        }
        break;
      case ArgKind::kI32:
      case ArgKind::kI64:
        out.bound_to = a.value.str();
        out.scalar = expr(a.value);
        out.value = out.scalar->value ? std::to_string(*out.scalar->value) : out.scalar->error;
        break;
      case ArgKind::kF32:
        out.bound_to = "constant";
        out.constant = a.fvalue;
        out.value = fmt::format("{}", a.fvalue);
        break;
      case ArgKind::kTensorMap: {
        const TensorMapSpec& m = a.map;
        out.bound_to = "map of " + m.of;
        out.map =
            InspectedTensorMap{m.of, expr(m.cols), expr(m.rows), expr(m.row_stride), m.box_cols, m.box_rows, m.swizzle};
        out.value = tensor_map_value(l, m);
        break;
      }
    }
    return out;
  }

  // "bf16 [256, 512] row stride 512, box [128, 64], swizzle 128B": shape and box as [rows, cols],
  // like tensors' shapes; the element type is the viewed pointer's.
  std::string tensor_map_value(const BundleLaunch& l, const TensorMapSpec& m) const {
    auto target = std::find_if(l.args.begin(), l.args.end(), [&](const BundleArg& a) { return a.name == m.of; });
    std::string dtype = target != l.args.end() && is_pointer(target->kind) ? dtype_name(target->dtype) : "?";
    std::string swizzle = m.swizzle == 0 ? std::string("no swizzle") : fmt::format("swizzle {}B", m.swizzle);
    try {
      return fmt::format("{} [{}, {}] row stride {}, box [{}, {}], {}", dtype, m.rows.eval(bindings_),
                         m.cols.eval(bindings_), m.row_stride.eval(bindings_), m.box_rows, m.box_cols, swizzle);
    } catch (const Error& error) {
      return error.message();
    }
  }

  InspectedLaunch launch(const BundleLaunch& l) {
    const BundleKernel& kernel = bundle_.kernels.at(l.kernel);
    InspectedLaunch out;
    out.index = l.index;
    out.kernel = kernel.name;
    out.entry = kernel.entry;
    out.target = kernel.target;
    out.source = fmt::format("{}:{}", kernel.source_file, kernel.source_line);
    out.block = l.block;
    out.reqntid = kernel.reqntid;
    out.maxntid = kernel.maxntid;
    for (int d = 0; d < 3; ++d) out.grid[d] = expr(l.grid[d]);
    out.dynamic_smem = expr(l.dynamic_smem);
    for (size_t i = 0; i < l.args.size(); ++i) out.args.push_back(arg(l, i));
    out.bytes = expr(l.bytes);
    out.flops = expr(l.flops);
    out.when = expr(l.when);
    return out;
  }

  InspectedNode node(const BundleNode& n) {
    InspectedNode out;
    out.name = n.name;
    out.op = n.op;
    out.attrs = n.attrs;
    out.inputs = n.inputs;
    // An update writes params in place and has no output.
    if (tensors_.count(n.name)) out.output = tensor(tensor_named(n.name));
    if (auto it = params_of_node_.find(n.name); it != params_of_node_.end()) {
      for (const BundleParam* p : it->second) out.params.push_back(param(*p));
    }
    if (auto it = scratch_of_node_.find(n.name); it != scratch_of_node_.end()) {
      for (const BundleTensor* t : it->second) out.scratch.push_back(scratch(*t));
    }
    if (auto it = launches_of_node_.find(n.name); it != launches_of_node_.end()) {
      for (const BundleLaunch* l : it->second) out.launches.push_back(launch(*l));
    }
    out.fused_from = n.fused_from;
    out.role = node_role_name(n.role);
    out.grad_of = n.grad_of;
    out.param_refs = n.param_refs;
    if (auto it = backward_of_node_.find(n.name); it != backward_of_node_.end()) out.backward = it->second;
    for (const BundleVariant& v : n.variants) out.variants.push_back({v.variant, v.why, expr(v.when)});
    return out;
  }

  void totals(Inspection& out) {
    std::vector<Expr> param_bytes, bytes, flops;
    for (const BundleParam& p : bundle_.params) {
      param_bytes.push_back(product(p.shape) * Expr(static_cast<int64_t>(dtype_size(p.dtype))));
    }
    for (const BundleLaunch& l : bundle_.launches) {
      bytes.push_back(l.when * l.bytes);
      flops.push_back(l.when * l.flops);
    }
    out.node_count = bundle_.nodes.size();
    out.kernel_count = bundle_.kernels.size();
    out.launch_count = bundle_.launches.size();
    out.param_count = bundle_.params.size();
    out.param_bytes = total(param_bytes);
    out.bytes = total(bytes);
    out.flops = total(flops);
    out.params_bin_bytes = bundle_.param_bytes.size();
  }

  // The sum of `terms` with like terms gathered, so that a bundle of 10^5 identical launches
  // totals one term times 10^5, not a sum 10^5 terms long.
  InspectedExpr total(const std::vector<Expr>& terms) {
    std::vector<std::pair<Expr, int64_t>> distinct;  // in first-seen order, with their counts
    std::unordered_map<std::string, size_t> position;
    for (const Expr& term : terms) {
      auto [it, inserted] = position.emplace(term.str(), distinct.size());
      if (inserted) distinct.emplace_back(term, 0);
      ++distinct[it->second].second;
    }
    try {
      std::vector<Expr> gathered;
      for (const auto& [term, count] : distinct) gathered.push_back(term * Expr(count));
      return expr(sum(gathered));
    } catch (const Error& error) {  // an overflow, or a sum too large to hold
      InspectedExpr out;
      out.error = error.message();
      return out;
    }
  }

  const BundleTensor& tensor_named(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error(fmt::format("bundle has no tensor '{}'", name));
    return *it->second;
  }

  std::vector<std::string> unbound_device_symbols() const {
    std::vector<std::string> names;
    for (const std::string& name : device_symbols()) {
      if (unbound_.count(name)) names.push_back(name);
    }
    return names;
  }

 private:
  const Bundle& bundle_;
  Bindings bindings_;
  std::set<std::string> unbound_;
  // Lookups by name: scanning the bundle for each node made inspect quadratic in its size.
  std::unordered_map<std::string, const BundleTensor*> tensors_;
  std::unordered_map<std::string, const BundleParam*> params_;
  std::unordered_map<std::string, std::vector<const BundleParam*>> params_of_node_;
  std::unordered_map<std::string, std::vector<const BundleTensor*>> scratch_of_node_;
  std::unordered_map<std::string, std::vector<const BundleLaunch*>> launches_of_node_;
  std::unordered_map<std::string, std::vector<std::string>> backward_of_node_;  // forward node -> its rule's nodes
};

std::vector<InspectedDim> inspected_dims(const Bundle& bundle, const Bindings& dims) {
  std::vector<InspectedDim> out;
  for (const BundleDim& d : bundle.dims) {
    InspectedDim dim{d.name, d.min, d.max, d.default_value, std::nullopt, std::nullopt};
    if (auto it = dims.find(d.name); it != dims.end()) dim.bound = it->second;
    if (auto it = bundle.fixed.find(d.name); it != bundle.fixed.end()) dim.fixed = it->second;
    out.push_back(dim);
  }
  return out;
}

}  // namespace

Inspection inspect_bundle(const Bundle& bundle, const Bindings& dims, const InspectDevice& device,
                          const std::optional<std::string>& node) {
  if (node && bundle.find_node(*node) == nullptr) {
    std::vector<std::string> names;
    for (const BundleNode& n : bundle.nodes) names.push_back(n.name);
    throw Error(fmt::format("--node {}: the bundle has no node '{}'{}", *node, *node, did_you_mean(*node, names)));
  }
  Inspector inspector(bundle, dims, device);
  Inspection out;
  out.graph = bundle.graph_name;
  out.spec = bundle.spec_path;
  out.tuning = bundle.tuning;
  out.format_version = bundle.format_version;
  out.teeny_version = bundle.teeny_version;
  out.nvrtc_version = bundle.nvrtc_version;
  out.arch = bundle.arch;
  out.nvrtc_options = bundle.nvrtc_options;
  out.inputs = bundle.inputs;
  out.outputs = bundle.outputs;
  out.dims = inspected_dims(bundle, dims);
  out.device = device;
  inspector.totals(out);
  for (const BundleNode& n : bundle.nodes) {
    if (!node || n.name == *node) out.nodes.push_back(inspector.node(n));
  }
  out.unbound_device_symbols = inspector.unbound_device_symbols();
  return out;
}

std::string bundle_ptx(const Bundle& bundle, const std::string& name) {
  for (const BundleKernel& kernel : bundle.kernels) {
    if (kernel.name == name) return kernel.ptx;
  }
  if (bundle.find_node(name) == nullptr) {
    std::vector<std::string> names;
    for (const BundleNode& n : bundle.nodes) names.push_back(n.name);
    for (const BundleKernel& k : bundle.kernels) names.push_back(k.name);
    throw Error(
        fmt::format("--ptx {}: the bundle has no node or kernel '{}'{}", name, name, did_you_mean(name, names)));
  }
  std::vector<int> kernels;
  for (const BundleLaunch& l : bundle.launches) {
    if (l.node == name && std::find(kernels.begin(), kernels.end(), l.kernel) == kernels.end())
      kernels.push_back(l.kernel);
  }
  if (kernels.empty()) {
    const BundleTensor& t = bundle.tensor(name);
    throw Error(fmt::format("--ptx {}: node '{}' is a view of '{}' and has no kernel", name, name, t.alias_of));
  }
  if (kernels.size() == 1) return bundle.kernels[kernels[0]].ptx;
  std::string out;
  for (int k : kernels) {
    const BundleKernel& kernel = bundle.kernels[k];
    out += fmt::format("// kernel {} (entry {})\n{}", kernel.name, kernel.entry, kernel.ptx);
    if (!out.empty() && out.back() != '\n') out += '\n';
  }
  return out;
}

}  // namespace teeny
