#include "tests/test_run_support.h"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace teeny::testing_run {

namespace {

BundleArg pointer_arg(ArgKind kind, const std::string& name, const std::string& tensor, int offset) {
  BundleArg arg;
  arg.kind = kind;
  arg.name = name;
  arg.c_type = kind == ArgKind::kOutput ? "float*" : "const float*";
  arg.ptx_type = ".u64";
  arg.size = 8;
  arg.offset = offset;
  arg.tensor = tensor;
  return arg;
}

BundleArg int_arg(const std::string& name, Expr value, int offset) {
  BundleArg arg;
  arg.kind = ArgKind::kI32;
  arg.name = name;
  arg.c_type = "int";
  arg.ptx_type = ".u32";
  arg.size = 4;
  arg.offset = offset;
  arg.value = std::move(value);
  return arg;
}

// A kernel for `launch` whose PTX entry does nothing but takes the launch's arguments, as
// read_bundle checks.
BundleKernel placeholder_kernel(const BundleLaunch& launch) {
  BundleKernel kernel;
  kernel.name = launch.node == "h" ? "affine" : "add";
  kernel.entry = kernel.name + "_entry_point";
  std::vector<std::string> params;
  for (size_t i = 0; i < launch.args.size(); ++i) {
    kernel.ptx_params.push_back(launch.args[i].ptx_type);
    params.push_back(fmt::format(".param {} {}_param_{}", launch.args[i].ptx_type, kernel.entry, i));
  }
  kernel.ptx = fmt::format(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry {}(\n{}\n)\n{{\nret;\n}}\n",
                           kernel.entry, fmt::join(params, ",\n"));
  return kernel;
}

}  // namespace

Registry test_registry() {
  Registry registry;

  OpDef affine;
  affine.name = "test.affine";
  affine.inputs = {{"x", ""}};
  affine.infer = [](const OpContext& ctx) {
    TensorType out = contiguous(DType::kF32, ctx.inputs.at(0).shape);
    out.row_stride = round_up(out.shape.back(), Expr(4));
    return out;
  };
  affine.params = [](const OpContext& ctx) {
    const Expr d = ctx.inputs.at(0).shape.back();
    return std::vector<ParamSpec>{{"weight", {d}, DType::kF32, ParamInit::kTrained, {}},
                                  {"bias", {d}, DType::kF32, ParamInit::kHost, {}}};
  };
  affine.reference = [](const RefContext& ref) {
    const HostTensor& x = ref.inputs.at(0);
    const HostTensor& weight = ref.params.at(0);
    const HostTensor& bias = ref.params.at(1);
    const int64_t d = x.shape.back();
    HostTensor y{DType::kF32, ref.output_shape, std::vector<double>(x.data.size())};
    for (size_t i = 0; i < x.data.size(); ++i) y.data[i] = x.data[i] * weight.data[i % d] + bias.data[i % d];
    return y;
  };
  registry.add(affine);

  OpDef add;
  add.name = "test.add";
  add.inputs = {{"a", ""}, {"b", ""}};
  add.infer = [](const OpContext& ctx) { return contiguous(ctx.inputs.at(0).dtype, ctx.inputs.at(0).shape); };
  add.reference = [](const RefContext& ref) {
    HostTensor y{ref.op.output.dtype, ref.output_shape, ref.inputs.at(0).data};
    for (size_t i = 0; i < y.data.size(); ++i) y.data[i] += ref.inputs.at(1).data[i];
    return y;
  };
  registry.add(add);

  OpDef flat;
  flat.name = "test.flat";
  flat.inputs = {{"x", ""}};
  flat.infer = [](const OpContext& ctx) {
    return contiguous(ctx.inputs.at(0).dtype, {product(ctx.inputs.at(0).shape)});
  };
  flat.reference = [](const RefContext& ref) {
    return HostTensor{ref.op.output.dtype, ref.output_shape, ref.inputs.at(0).data};
  };
  registry.add(flat);
  return registry;
}

Bundle tiny_bundle() {
  const Expr b = Expr::dim("B");
  Bundle bundle;
  bundle.teeny_version = "test";
  bundle.nvrtc_version = "test";
  bundle.arch = "sm_90";
  bundle.graph_name = "tiny";
  bundle.spec_path = "tiny.yaml";
  bundle.dims = {BundleDim{"B", 1, 64, 4}};
  bundle.inputs = {"x"};
  bundle.outputs = {"out"};
  bundle.tensors = {
      BundleTensor{"x", DType::kF32, {b, 3}, Expr(3), "", ""},
      BundleTensor{"h", DType::kF32, {b, 3}, Expr(4), "h", ""},
      BundleTensor{"s", DType::kF32, {b, 3}, Expr(3), "s", ""},
      BundleTensor{"out", DType::kF32, {b * 3}, b * 3, "out", "s"},
  };
  const auto node = [](std::string name, std::string op, std::vector<std::string> inputs) {
    BundleNode n;
    n.name = std::move(name);
    n.op = std::move(op);
    n.attrs = nlohmann::json::object();
    n.inputs = std::move(inputs);
    return n;
  };
  bundle.nodes = {node("h", "test.affine", {"x"}), node("s", "test.add", {"h", "x"}), node("out", "test.flat", {"s"})};
  BundleLaunch affine;
  affine.node = "h";
  affine.kernel = 0;
  affine.block = {128, 1, 1};
  affine.grid = {ceil_div(b * 3, Expr(128)), Expr(1), Expr(1)};
  affine.args = {pointer_arg(ArgKind::kInput, "x", "x", 0), pointer_arg(ArgKind::kParam, "weight", "h.weight", 8),
                 pointer_arg(ArgKind::kParam, "bias", "h.bias", 16), pointer_arg(ArgKind::kOutput, "y", "h", 24),
                 int_arg("n", b * 3, 32)};
  affine.bytes = b * 3 * 4 * 2;
  affine.flops = b * 6;
  BundleLaunch add;
  add.node = "s";
  add.kernel = 1;
  add.block = {128, 1, 1};
  add.grid = {ceil_div(b * 3, Expr(128)), Expr(1), Expr(1)};
  add.args = {pointer_arg(ArgKind::kInput, "a", "h", 0), pointer_arg(ArgKind::kInput, "b", "x", 8),
              pointer_arg(ArgKind::kOutput, "y", "s", 16), int_arg("n", b * 3, 24)};
  add.bytes = b * 3 * 4 * 3;
  add.flops = b * 3;
  bundle.launches = {affine, add};
  for (const BundleLaunch& launch : bundle.launches) bundle.kernels.push_back(placeholder_kernel(launch));

  BundleParam weight;
  weight.name = "h.weight";
  weight.node = "h";
  weight.slot = "weight";
  weight.shape = {Expr(3)};
  BundleParam bias = weight;
  bias.name = "h.bias";
  bias.slot = "bias";
  bias.init = ParamInit::kHost;
  for (double value : {0.5, 1.0, 1.5}) append_element(bundle.param_bytes, DType::kF32, value);
  bias.offset = 0;
  bias.size = bundle.param_bytes.size();
  bundle.params = {weight, bias};
  return bundle;
}

}  // namespace teeny::testing_run
