#include "core/host_executor.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include <fmt/format.h>

namespace teeny {

namespace {

TensorType symbolic_type(const BundleTensor& tensor) {
  return TensorType{tensor.dtype, tensor.shape, tensor.row_stride};
}

// The name of the param buffer holding `node`'s slot: another node's (a param ref, training),
// or the one the bundle records for the node.
std::string param_buffer(const Bundle& bundle, const BundleNode& node, const std::string& slot) {
  if (auto ref = node.param_refs.find(slot); ref != node.param_refs.end()) return ref->second;
  for (const BundleParam& param : bundle.params)
    if (param.node == node.name && param.slot == slot) return param.name;
  throw Error(fmt::format("the bundle has no parameter for slot '{}'", slot));
}

// The values of the node's params in the op's own slot order.
std::vector<HostTensor> node_params(const Bundle& bundle, const BundleNode& node, const OpDef& def,
                                    const OpContext& ctx, const std::map<std::string, HostTensor>& params) {
  std::vector<HostTensor> values;
  if (!def.params) return values;
  for (const ParamSpec& spec : def.params(ctx)) {
    const std::string name = param_buffer(bundle, node, spec.slot);
    auto value = params.find(name);
    if (value == params.end()) throw Error(fmt::format("no value for parameter '{}'", name));
    values.push_back(value->second);
  }
  return values;
}

bool is_int_list(const nlohmann::json& value) {
  return value.is_array() &&
         std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_number_integer(); });
}

// Whether `value` is stored as the spec parser stores an attr of `type` (core/attrs.h).
bool has_stored_type(AttrType type, const nlohmann::json& value, const std::vector<std::string>& choices) {
  switch (type) {
    case AttrType::kInt:
      return value.is_number_integer();
    case AttrType::kFloat:
      return value.is_number();
    case AttrType::kBool:
      return value.is_boolean();
    case AttrType::kEnum:
      return value.is_string() && std::find(choices.begin(), choices.end(), value.get<std::string>()) != choices.end();
    case AttrType::kIntPair:
      return is_int_list(value) && value.size() == 2;
    case AttrType::kIntList:
      return is_int_list(value);
    case AttrType::kIntListList:
      return value.is_array() && std::all_of(value.begin(), value.end(), is_int_list);
    case AttrType::kShape:
      return value.is_array() && std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_string(); });
    case AttrType::kFloatList:
      return value.is_array() && std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_number(); });
  }
  return false;
}

// A bundle's attrs are data: checked against the op's schema and domains as the spec parser
// checks a spec's, since a hand-edited manifest can hold anything.
void check_node_attrs(const OpDef& def, const nlohmann::json& attrs) {
  if (!attrs.is_object()) throw Error(fmt::format("attrs {} are not an object", excerpt(attrs.dump())));
  for (const auto& item : attrs.items()) {
    const auto spec =
        std::find_if(def.attrs.begin(), def.attrs.end(), [&](const AttrSpec& s) { return s.name == item.key(); });
    if (spec == def.attrs.end()) throw Error(fmt::format("unknown attr '{}'", excerpt(item.key())));
  }
  for (const AttrSpec& spec : def.attrs) {
    const auto value = attrs.find(spec.name);
    if (value == attrs.end() || value->is_null()) {
      if (spec.optional) continue;
      throw Error(fmt::format("attr '{}' is missing", spec.name));
    }
    if (!has_stored_type(spec.type, *value, spec.choices)) {
      throw Error(
          fmt::format("attr '{}' must be {}, got {}", spec.name, attr_type_name(spec.type), excerpt(value->dump())));
    }
    if (std::string problem = attr_domain_problem(spec, *value); !problem.empty()) {
      throw Error(fmt::format("attr '{}' {}", spec.name, problem));
    }
  }
}

// The bundle's tensor `name` by the bound bundle's index (its tensors are in the bundle's order):
// Bundle::tensor scans, which made a long chain quadratic.
const BundleTensor& bundle_tensor(const BoundBundle& bound, const std::string& name) {
  return bound.bundle->tensors[static_cast<size_t>(&bound.tensor(name) - bound.tensors.data())];
}

}  // namespace

namespace {

// The op's reference of node `node_index` for `inputs`, computed at `output_shape` (at the output
// rows `rows` alone where given: RefContext::rows) and rounded to the output's dtype.
HostTensor reference_at(const BoundBundle& bound, const Registry& registry, size_t node_index,
                        const std::vector<HostTensor>& inputs, const std::map<std::string, HostTensor>& params,
                        const std::vector<int64_t>& output_shape, const std::vector<int64_t>& rows = {}) {
  const Bundle& bundle = *bound.bundle;
  const BundleNode& node = bundle.nodes.at(node_index);
  const OpDef* def = registry.find(node.op);
  if (!def) {
    throw Error(fmt::format("bundle {}: node '{}' uses op '{}', which this teeny does not know", bound.label, node.name,
                            excerpt(node.op)));
  }
  const std::string where = fmt::format("host reference of node '{}' ({})", node.name, node.op);
  if (inputs.size() != node.inputs.size()) {
    throw Error(fmt::format("{}: {} inputs given, the node has {}", where, inputs.size(), node.inputs.size()));
  }

  OpContext ctx;
  ctx.node = node.name;
  ctx.attrs = Attrs(node.attrs);
  for (const std::string& input : node.inputs) ctx.inputs.push_back(symbolic_type(bundle_tensor(bound, input)));
  ctx.requested_dtype = node.requested_dtype;
  ctx.output = symbolic_type(bundle_tensor(bound, node.name));

  RefContext ref{ctx, inputs, {}, output_shape, rows};
  HostTensor result;
  try {
    check_node_attrs(*def, node.attrs);
    ref.params = node_params(bundle, node, *def, ctx, params);
    result = def->reference(ref);
  } catch (Error& error) {
    error.context(where);
    throw;
  }
  const int64_t numel = std::accumulate(output_shape.begin(), output_shape.end(), int64_t{1}, std::multiplies<>());
  if (result.shape != output_shape || static_cast<int64_t>(result.data.size()) != numel) {
    throw Error(fmt::format("{}: returned shape [{}] with {} values; expected [{}]", where,
                            fmt::join(result.shape, ", "), result.data.size(), fmt::join(output_shape, ", ")));
  }
  const DType dtype = bound.tensor(node.name).dtype;
  result.dtype = dtype;
  for (double& value : result.data) value = round_to_dtype(value, dtype);
  return result;
}

int64_t rows_of(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : std::accumulate(shape.begin(), shape.end() - 1, int64_t{1}, std::multiplies<>());
}

}  // namespace

std::map<std::string, HostTensor> reference_update(const BoundBundle& bound, const Registry& registry,
                                                   size_t node_index, const std::vector<HostTensor>& inputs,
                                                   const std::map<std::string, HostTensor>& params) {
  const Bundle& bundle = *bound.bundle;
  const BundleNode& node = bundle.nodes.at(node_index);
  const OpDef* def = registry.find(node.op);
  const std::string where = fmt::format("host reference of update node '{}' ({})", node.name, node.op);
  if (!def || !def->update) throw Error(fmt::format("{}: this teeny has no update op '{}'", where, excerpt(node.op)));
  OpContext ctx;
  ctx.node = node.name;
  ctx.attrs = Attrs(node.attrs);
  for (const std::string& input : node.inputs) ctx.inputs.push_back(symbolic_type(bundle_tensor(bound, input)));
  std::map<std::string, HostTensor> updated;
  try {
    check_node_attrs(*def, node.attrs);
    ctx.output = def->infer(ctx);
    RefContext ref{ctx, inputs, node_params(bundle, node, *def, ctx, params), {}};
    for (auto& [slot, value] : def->update_reference(ref)) {
      const std::string name = param_buffer(bundle, node, slot);
      const BoundParam& param = bound.param(name);
      if (value.shape != param.shape)
        throw Error(fmt::format("slot '{}' came back as [{}]; '{}' is [{}]", slot, fmt::join(value.shape, ", "), name,
                                fmt::join(param.shape, ", ")));
      value.dtype = param.dtype;
      for (double& v : value.data) v = round_to_dtype(v, param.dtype);
      updated[name] = std::move(value);
    }
  } catch (Error& error) {
    error.context(where);
    throw;
  }
  return updated;
}

HostTensor reference_node(const BoundBundle& bound, const Registry& registry, size_t node_index,
                          const std::vector<HostTensor>& inputs, const std::map<std::string, HostTensor>& params) {
  return reference_at(bound, registry, node_index, inputs, params,
                      bound.tensor(bound.bundle->nodes.at(node_index).name).shape);
}

HostTensor select_rows(const HostTensor& tensor, const std::vector<int64_t>& rows) {
  const int64_t width = tensor.shape.empty() ? 1 : tensor.shape.back();
  HostTensor out{tensor.dtype, {static_cast<int64_t>(rows.size()), width}, {}};
  out.data.reserve(rows.size() * width);
  for (int64_t row : rows) {
    const auto first = tensor.data.begin() + row * width;
    out.data.insert(out.data.end(), first, first + width);
  }
  return out;
}

HostTensor reference_rows(const BoundBundle& bound, const Registry& registry, size_t node_index,
                          const std::vector<HostTensor>& inputs, const std::map<std::string, HostTensor>& params,
                          const std::vector<int64_t>& rows) {
  const BundleNode& node = bound.bundle->nodes.at(node_index);
  const std::vector<int64_t>& shape = bound.tensor(node.name).shape;
  const OpDef* def = registry.find(node.op);
  const std::vector<int64_t> output_shape{static_cast<int64_t>(rows.size()), shape.empty() ? 1 : shape.back()};
  if (def && def->tuning.reference_rows)
    return reference_at(bound, registry, node_index, inputs, params, output_shape, rows);
  std::vector<HostTensor> selected = inputs;
  for (int i : def ? def->tuning.row_inputs : std::vector<int>{}) {
    if (i < static_cast<int>(inputs.size()) && rows_of(inputs[i].shape) == rows_of(shape))
      selected[i] = select_rows(inputs[i], rows);
  }
  return reference_at(bound, registry, node_index, selected, params, output_shape);
}

HostStep host_step_start(const BoundBundle& bound, const RunData& data) {
  HostStep step{{}, data.params};
  for (const std::string& input : bound.bundle->inputs) step.tensors[input] = data.inputs.at(input);
  return step;
}

void run_host_nodes(const BoundBundle& bound, const Registry& registry, HostStep& step, size_t begin, size_t end) {
  const Bundle& bundle = *bound.bundle;
  for (size_t i = begin; i < end; ++i) {
    const BundleNode& node = bundle.nodes.at(i);
    std::vector<HostTensor> inputs;
    for (const std::string& input : node.inputs) inputs.push_back(step.tensors.at(input));
    if (node.role == NodeRole::kUpdate && !bound.tensor_index.count(node.name)) {
      for (auto& [name, value] : reference_update(bound, registry, i, inputs, step.params))
        step.params[name] = std::move(value);
    } else {
      step.tensors[node.name] = reference_node(bound, registry, i, inputs, step.params);
    }
  }
}

HostStep run_host_step(const BoundBundle& bound, const Registry& registry, const RunData& data) {
  HostStep step = host_step_start(bound, data);
  run_host_nodes(bound, registry, step, 0, bound.bundle->nodes.size());
  return step;
}

std::map<std::string, HostTensor> run_host(const BoundBundle& bound, const Registry& registry, const RunData& data) {
  return run_host_step(bound, registry, data).tensors;
}

}  // namespace teeny
