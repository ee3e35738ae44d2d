#include "core/inspect.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace teeny {
namespace {

using nlohmann::json;

class Inspector {
 public:
  Inspector(const Bundle& bundle, const Bindings& bindings) : bundle_(bundle), bindings_(bindings) {}

  // {"expr": "ceil_div(B, 64)", "value": 1}, or "error" in place of "value".
  json expr(const Expr& e) const {
    json out = {{"expr", e.str()}};
    try {
      out["value"] = e.eval(bindings_);
    } catch (const Error& error) {
      out["error"] = error.message();
    }
    return out;
  }

  json shape(const Shape& shape) const {
    json out = {{"expr", shape_str(shape)}};
    try {
      out["value"] = eval_shape(shape, bindings_);
    } catch (const Error& error) {
      out["error"] = error.message();
    }
    return out;
  }

  // "f32 [64, 784]" (with the row stride when padded) or the evaluation error.
  std::string tensor_value(const BundleTensor& tensor) const {
    try {
      std::string text = fmt::format("{} [{}]", dtype_name(tensor.dtype), fmt::join(eval_shape(tensor.shape, bindings_), ", "));
      if (!tensor.shape.empty() && tensor.row_stride != tensor.shape.back()) {
        text += fmt::format(" row stride {}", tensor.row_stride.eval(bindings_));
      }
      return text;
    } catch (const Error& error) {
      return error.message();
    }
  }

  json tensor(const BundleTensor& t) const {
    json out = {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", shape(t.shape)},
                {"row_stride", expr(t.row_stride)}};
    if (!t.alias_of.empty()) out["alias_of"] = t.alias_of;
    return out;
  }

  json param(const BundleParam& p) const {
    json out = {{"name", p.name},
                {"slot", p.slot},
                {"dtype", dtype_name(p.dtype)},
                {"shape", shape(p.shape)},
                {"bytes", expr(product(p.shape) * Expr(static_cast<int64_t>(dtype_size(p.dtype))))},
                {"init", param_init_name(p.init)},
                {"init_bytes", p.init == ParamInit::kHost ? p.size : 0}};
    if (p.init == ParamInit::kHost) out["init_offset"] = p.offset;
    return out;
  }

  json arg(const BundleLaunch& l, size_t position) const {
    const BundleArg& a = l.args[position];
    json out = {{"position", position}, {"name", a.name},       {"kind", arg_kind_name(a.kind)},
                {"c_type", a.c_type},   {"ptx_type", a.ptx_type}, {"size", a.size},
                {"offset", a.offset}};
    switch (a.kind) {
      case ArgKind::kInput:
      case ArgKind::kOutput: {
        const BundleTensor& t = bundle_.tensor(a.tensor);
        out["bound_to"] = t.alias_of.empty() ? a.tensor : fmt::format("{} (buffer of {})", a.tensor, t.alias_of);
        out["value"] = tensor_value(t);
        break;
      }
      case ArgKind::kParam: {
        out["bound_to"] = a.tensor;
        for (const BundleParam& p : bundle_.params) {
          if (p.name != a.tensor) continue;
          try {
            out["value"] = fmt::format("{} [{}]", dtype_name(p.dtype), fmt::join(eval_shape(p.shape, bindings_), ", "));
          } catch (const Error& error) {
            out["value"] = error.message();
          }
        }
        break;
      }
      case ArgKind::kI32:
      case ArgKind::kI64: {
        out["bound_to"] = a.value.str();
        json value = expr(a.value);
        out["value"] = value.contains("value") ? value["value"] : value["error"];
        break;
      }
      case ArgKind::kF32:
        out["bound_to"] = "constant";
        out["value"] = a.fvalue;
        break;
      case ArgKind::kTensorMap: {
        const TensorMapSpec& m = a.map;
        out["bound_to"] = "map of " + m.of;
        out["map"] = {{"of", m.of},
                      {"cols", expr(m.cols)},
                      {"rows", expr(m.rows)},
                      {"row_stride", expr(m.row_stride)},
                      {"box", {m.box_cols, m.box_rows}},
                      {"swizzle", m.swizzle}};
        out["value"] = tensor_map_value(l, m);
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

  json launch(const BundleLaunch& l) const {
    const BundleKernel& kernel = bundle_.kernels.at(l.kernel);
    json args = json::array();
    for (size_t i = 0; i < l.args.size(); ++i) args.push_back(arg(l, i));
    json out = {{"index", l.index},
                {"kernel", kernel.name},
                {"entry", kernel.entry},
                {"target", kernel.target},
                {"source", fmt::format("{}:{}", kernel.source_file, kernel.source_line)},
                {"block", l.block},
                {"grid", {expr(l.grid[0]), expr(l.grid[1]), expr(l.grid[2])}},
                {"dynamic_smem", expr(l.dynamic_smem)},
                {"args", args},
                {"cost", {{"bytes", expr(l.bytes)}, {"flops", expr(l.flops)}}}};
    if (kernel.reqntid) out["reqntid"] = *kernel.reqntid;
    if (kernel.maxntid) out["maxntid"] = *kernel.maxntid;
    return out;
  }

  json node(const BundleNode& n) const {
    json params = json::array();
    for (const BundleParam& p : bundle_.params) {
      if (p.node == n.name) params.push_back(param(p));
    }
    json launches = json::array();
    for (const BundleLaunch& l : bundle_.launches) {
      if (l.node == n.name) launches.push_back(launch(l));
    }
    json out = {{"name", n.name},       {"op", n.op},         {"attrs", n.attrs},
                {"inputs", n.inputs},   {"output", tensor(bundle_.tensor(n.name))},
                {"params", params},     {"launches", launches}};
    if (!n.fused_from.empty()) out["fused_from"] = n.fused_from;
    return out;
  }

  json summary() const {
    Expr param_bytes = 0, bytes = 0, flops = 0;
    for (const BundleParam& p : bundle_.params) {
      param_bytes = param_bytes + product(p.shape) * Expr(static_cast<int64_t>(dtype_size(p.dtype)));
    }
    for (const BundleLaunch& l : bundle_.launches) {
      bytes = bytes + l.bytes;
      flops = flops + l.flops;
    }
    return {{"nodes", bundle_.nodes.size()},
            {"kernels", bundle_.kernels.size()},
            {"launches", bundle_.launches.size()},
            {"params", bundle_.params.size()},
            {"param_bytes", expr(param_bytes)},
            {"params_bin_bytes", bundle_.param_bytes.size()},
            {"cost", {{"bytes", expr(bytes)}, {"flops", expr(flops)}}}};
  }

 private:
  const Bundle& bundle_;
  const Bindings& bindings_;
};

}  // namespace

json inspect_bundle(const Bundle& bundle, const Bindings& bindings, const std::optional<std::string>& node) {
  if (node && bundle.find_node(*node) == nullptr) {
    std::vector<std::string> names;
    for (const BundleNode& n : bundle.nodes) names.push_back(n.name);
    throw Error(fmt::format("--node {}: the bundle has no node '{}'{}", *node, *node, did_you_mean(*node, names)));
  }
  Inspector inspector(bundle, bindings);
  json dims = json::array();
  for (const BundleDim& d : bundle.dims) {
    json dim = {{"name", d.name}, {"min", d.min}, {"max", d.max}, {"default", d.default_value}};
    if (auto it = bindings.find(d.name); it != bindings.end()) dim["bound"] = it->second;
    if (auto it = bundle.fixed.find(d.name); it != bundle.fixed.end()) dim["fixed"] = it->second;
    dims.push_back(std::move(dim));
  }
  json nodes = json::array();
  for (const BundleNode& n : bundle.nodes) {
    if (!node || n.name == *node) nodes.push_back(inspector.node(n));
  }
  return {{"graph", bundle.graph_name},
          {"spec", bundle.spec_path},
          {"format_version", bundle.format_version},
          {"teeny_version", bundle.teeny_version},
          {"nvrtc_version", bundle.nvrtc_version},
          {"arch", bundle.arch},
          {"nvrtc_options", bundle.nvrtc_options},
          {"dims", dims},
          {"inputs", bundle.inputs},
          {"outputs", bundle.outputs},
          {"summary", inspector.summary()},
          {"nodes", nodes}};
}

std::string bundle_ptx(const Bundle& bundle, const std::string& name) {
  for (const BundleKernel& kernel : bundle.kernels) {
    if (kernel.name == name) return kernel.ptx;
  }
  if (bundle.find_node(name) == nullptr) {
    std::vector<std::string> names;
    for (const BundleNode& n : bundle.nodes) names.push_back(n.name);
    for (const BundleKernel& k : bundle.kernels) names.push_back(k.name);
    throw Error(fmt::format("--ptx {}: the bundle has no node or kernel '{}'{}", name, name, did_you_mean(name, names)));
  }
  std::vector<int> kernels;
  for (const BundleLaunch& l : bundle.launches) {
    if (l.node == name && std::find(kernels.begin(), kernels.end(), l.kernel) == kernels.end()) kernels.push_back(l.kernel);
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
