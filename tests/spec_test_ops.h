// A small registry of test-only ops for the spec tests, so they exercise every attr type,
// input-count rule and dtype rule without depending on the real ops' timing or details.
#pragma once

#include <fmt/format.h>

#include "core/graph.h"
#include "core/registry.h"

namespace teeny::testing {

inline HostTensor no_reference(const RefContext&) { return {}; }

inline OpDef test_op(const std::string& name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs,
                     std::function<TensorType(const OpContext&)> infer) {
  OpDef def;
  def.name = name;
  def.doc = "test op " + name;
  def.inputs = std::move(inputs);
  def.attrs = std::move(attrs);
  def.dtypes = {DType::kF32, DType::kBF16};
  def.infer = std::move(infer);
  def.reference = no_reference;
  return def;
}

inline TensorType same_as_input(const OpContext& ctx) {
  return contiguous(ctx.requested_dtype.value_or(ctx.inputs.at(0).dtype), ctx.inputs.at(0).shape);
}

inline Registry spec_test_registry() {
  Registry registry;
  // dense: [..., in] -> [..., out_features], weight [out, in], bias [out].
  OpDef dense = test_op("dense", {{"x", "[..., in]"}},
                        {{"out_features", AttrType::kInt, "outputs", std::nullopt, {}, false, 1.0},
                         {"in_features", AttrType::kInt, "optional check", std::nullopt, {}, true, 1.0},
                         {"bias", AttrType::kBool, "add a bias", nlohmann::json(true), {}, false, std::nullopt}},
                        [](const OpContext& ctx) {
                          Shape shape = ctx.inputs.at(0).shape;
                          if (ctx.attrs.has("in_features") && shape.back() != Expr(ctx.attrs.integer("in_features")))
                            throw OpError("inputs", fmt::format("in_features is {} but the input has {} features",
                                                                ctx.attrs.integer("in_features"), shape.back().str()));
                          shape.back() = Expr(ctx.attrs.integer("out_features"));
                          return contiguous(ctx.inputs.at(0).dtype, shape);
                        });
  dense.params = [](const OpContext& ctx) {
    Expr out = ctx.output.shape.back(), in = ctx.inputs.at(0).shape.back();
    std::vector<ParamSpec> params{{"weight", {out, in}, ctx.output.dtype, ParamInit::kTrained, {}}};
    if (ctx.attrs.boolean("bias")) params.push_back({"bias", {out}, ctx.output.dtype, ParamInit::kTrained, {}});
    return params;
  };
  dense.param_slots = {"weight", "bias"};
  registry.add(dense);
  registry.add(test_op("relu", {{"x", ""}}, {}, same_as_input));
  registry.add(test_op("softmax", {{"x", ""}},
                       {{"axis", AttrType::kInt, "axis", nlohmann::json(-1), {}, false, std::nullopt}},
                       [](const OpContext& ctx) {
                         normalize_axis(ctx.attrs.integer("axis"), ctx.inputs.at(0).shape.size(), "attrs.axis");
                         return same_as_input(ctx);
                       }));
  registry.add(
      test_op("gelu", {{"x", ""}},
              {{"approximate", AttrType::kEnum, "form", nlohmann::json("none"), {"none", "tanh"}, false, std::nullopt}},
              same_as_input));
  registry.add(test_op("scale", {{"x", ""}},
                       {{"value", AttrType::kFloat, "factor", std::nullopt, {}, false, std::nullopt}}, same_as_input));
  registry.add(test_op("add", {{"a", ""}, {"b", ""}}, {}, [](const OpContext& ctx) {
    return contiguous(ctx.inputs.at(0).dtype, broadcast_shapes(ctx.inputs.at(0).shape, ctx.inputs.at(1).shape));
  }));
  OpDef concat =
      test_op("concat", {{"x", ""}}, {{"axis", AttrType::kInt, "axis", nlohmann::json(1), {}, false, std::nullopt}},
              [](const OpContext& ctx) {
                Shape shape = ctx.inputs.at(0).shape;
                int axis = normalize_axis(ctx.attrs.integer("axis"), shape.size(), "attrs.axis");
                for (size_t i = 1; i < ctx.inputs.size(); ++i) shape[axis] = shape[axis] + ctx.inputs[i].shape[axis];
                return contiguous(ctx.inputs.at(0).dtype, shape);
              });
  concat.variadic = true;
  concat.min_inputs = 2;
  registry.add(concat);
  registry.add(test_op("pool", {{"x", ""}},
                       {{"kernel_size", AttrType::kIntPair, "window", std::nullopt, {}, false, 1.0},
                        {"stride", AttrType::kIntPair, "step", nlohmann::json(1), {}, false, 1.0},
                        {"levels", AttrType::kIntListList, "levels", nlohmann::json::array(), {}, false, std::nullopt},
                        {"perm", AttrType::kIntList, "perm", nlohmann::json::array(), {}, false, std::nullopt}},
                       same_as_input));
  registry.add(
      test_op("reshape", {{"x", ""}}, {{"shape", AttrType::kShape, "new shape", std::nullopt, {}, false, std::nullopt}},
              [](const OpContext& ctx) { return contiguous(ctx.inputs.at(0).dtype, ctx.attrs.shape("shape")); }));
  return registry;
}

}  // namespace teeny::testing
