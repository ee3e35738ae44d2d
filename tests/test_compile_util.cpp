#include "tests/test_compile_util.h"

#include <fmt/format.h>

#include "ops/kernel_util.h"

namespace teeny::testing {
namespace {

// The test kernels' headers. t_kernel.cuh: y = alpha*x + z*w[i%4] + table[i%4] + count + kVariant
// over n elements; the others are t_kernel.cuh with one thing wrong.
const char* kKernelHeader = R"CUDA(#ifndef T_KERNEL_CUH
#define T_KERNEL_CUH
template <int kVariant>
__device__ void t_body(const float* x, const float* z, const float* w, const float* table, float* y, int n,
                       long long count, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + z[i] * w[i % 4] + table[i % 4] + (float)count + kVariant;
}
#endif
)CUDA";

// y = x + (a bit of the map, so it is used), over n elements; the map type as tma.cuh has it, or
// without its 64-byte alignment.
std::string map_header(bool aligned) {
  return fmt::format(R"CUDA(struct {}tn_tensor_map {{ unsigned long long opaque[16]; }};
__device__ void t_map_body(const float* x, const tn_tensor_map& x_map, float* y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + (float)(x_map.opaque[i % 16] & 1);
}}
)CUDA",
                     aligned ? "__align__(64) " : "");
}

// t.scratch's kernel: y = 2x + 1 through a scratch buffer, over two launches.
const char* kScratchHeader = R"CUDA(__device__ void t_scratch_body(const float* x, float* partials, float* y, int n,
                                                    int phase) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (phase == 0) {
    partials[2 * i] = x[i];
    partials[2 * i + 1] = 1.0f;
  } else {
    y[i] = 2.0f * partials[2 * i] + partials[2 * i + 1];
  }
}
)CUDA";

std::vector<KernelHeader> test_headers() {
  return {
      {"t_kernel.cuh", kKernelHeader},
      // A macro renames the entry compile generates, so its PTX lacks the expected one.
      {"t_renamed_entry.cuh", "#include \"t_kernel.cuh\"\n#define t_kernel_entry_point t_kernel_renamed\n"},
      // A macro turns the entry's `float alpha` into a double: the PTX parameter is 8 bytes.
      {"t_float_is_double.cuh", "#define float double\n#include \"t_kernel.cuh\"\n"},
      {"t_syntax_error.cuh", "__device__ void t_body_broken() { int i = ; }\n"},
      {"t_map.cuh", map_header(true)},
      {"t_map_underaligned.cuh", map_header(false)},
      {"t_scratch.cuh", kScratchHeader},
  };
}

std::string header_of(Fault fault) {
  switch (fault) {
    case Fault::kEntryRenamed:
      return "t_renamed_entry.cuh";
    case Fault::kParamTypeChanged:
      return "t_float_is_double.cuh";
    case Fault::kSyntaxError:
      return "t_syntax_error.cuh";
    default:
      return "t_kernel.cuh";
  }
}

std::vector<KernelArg> kernel_params(const Expr& n) {
  return {input(0, "x", DType::kF32),
          input(1, "z", DType::kF32),
          param("weight", "w", DType::kF32),
          param("table", "table", DType::kF32),
          output("y", DType::kF32),
          i32("n", n),
          i64("count", n),
          f32("alpha", 0.5)};
}

Lowering lower(const OpContext& ctx, Fault fault) {
  Expr n = product(ctx.output.shape);
  Lowering lowering;
  int64_t variant = ctx.attrs.has("k") ? ctx.attrs.integer("k") : 0;
  std::vector<KernelArg> params = kernel_params(n);
  if (fault == Fault::kTemplateMismatch) params.push_back(i32("extra", 1));
  lowering.kernels.push_back(ops::template_kernel("t_kernel", header_of(fault), fmt::format("t_body<{}>", variant),
                                                  params, 128, TEENY_KERNEL_ORIGIN));
  Launch launch;
  launch.block = {fault == Fault::kBlockOverMaxntid ? 256 : 128, 1, 1};
  launch.grid = {ceil_div(n, 128), 1, 1};
  launch.args = params;
  if (fault == Fault::kWrongDtype) launch.args[0].dtype = DType::kF16;
  if (fault == Fault::kSwappedNames) std::swap(launch.args[0], launch.args[1]);
  if (fault == Fault::kUnknownSlot) launch.args[3].slot = "tables";
  if (fault == Fault::kWrongType) launch.args[6] = i32("count", n);
  if (fault == Fault::kMissingArg) launch.args.pop_back();
  if (fault == Fault::kExtraArg) launch.args.push_back(i32("extra", 1));
  launch.bytes = n * 12 + 32;
  launch.flops = n * 5;
  lowering.launches.push_back(launch);
  return lowering;
}

Lowering lower_tensor_map(const OpContext& ctx, Fault fault) {
  const TensorType& x = ctx.inputs[0];
  TensorMapSpec spec{"x", x.shape.back(), x.shape[0], x.row_stride, 4, 8, 32};
  if (fault == Fault::kMapOfUnknown) spec.of = "xx";
  if (fault == Fault::kMapOfScalar) spec.of = "n";
  if (fault == Fault::kMapUnalignedStride) spec.row_stride = Expr(5);
  Expr n = product(ctx.output.shape);
  Lowering lowering;
  Launch launch;
  launch.block = {128, 1, 1};
  launch.grid = {ceil_div(n, 128), 1, 1};
  launch.args = {input(0, "x", DType::kF32), tensor_map("x_map", spec), output("y", DType::kF32), i32("n", n)};
  launch.bytes = n * 8;
  launch.flops = n;
  lowering.kernels.push_back(
      ops::template_kernel("t_map_kernel", fault == Fault::kMapUnderaligned ? "t_map_underaligned.cuh" : "t_map.cuh",
                           "t_map_body", launch.args, 128, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(launch);
  return lowering;
}

Lowering lower_scratch(const OpContext& ctx, Fault fault) {
  const Expr n = product(ctx.output.shape);
  const DType dtype = fault == Fault::kScratchWrongDtype ? DType::kBF16 : DType::kF32;
  Lowering lowering;
  lowering.scratch = {{fault == Fault::kScratchBadName ? "2partials" : "partials", dtype, n * 2}};
  if (fault == Fault::kScratchTwice) lowering.scratch.push_back(lowering.scratch[0]);
  if (fault == Fault::kScratchDeviceSized) lowering.scratch[0].elements = Expr::dim(kSmsSymbol) * 4;
  if (fault == Fault::kScratchEmpty) lowering.scratch[0].elements = Expr(0);
  const std::string buffer = fault == Fault::kScratchUnknown ? "partial" : "partials";
  for (int phase : {0, 1}) {
    Launch launch;
    launch.block = {128, 1, 1};
    launch.grid = {ceil_div(n, 128), 1, 1};
    launch.args = {input(0, "x", DType::kF32), scratch(buffer, "partials", DType::kF32), output("y", DType::kF32),
                   i32("n", n), i32("phase", phase)};
    launch.bytes = n * 12;
    launch.flops = n * 2 * phase;
    lowering.launches.push_back(launch);
  }
  lowering.kernels.push_back(ops::template_kernel("t_scratch_kernel", "t_scratch.cuh", "t_scratch_body",
                                                  lowering.launches[0].args, 128, TEENY_KERNEL_ORIGIN));
  return lowering;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out;
  for (float v : values) append_element(out, DType::kF32, v);
  return out;
}

std::vector<ParamSpec> params(const OpContext& ctx, Fault fault) {
  ParamSpec weight{"weight", {Expr(4)}, DType::kF32, ParamInit::kTrained, {}};
  ParamSpec table{"table", {Expr(4)}, DType::kF32, ParamInit::kHost, float_bytes({1, 2, 3, 4})};
  if (fault == Fault::kWrongInitBytes) table.host_bytes.resize(12);
  if (fault == Fault::kSymbolicHostParam) table.shape = {ctx.inputs[0].shape[0]};
  return {weight, table};
}

HostTensor reference(const RefContext& ref) {
  HostTensor out{DType::kF32, ref.output_shape, {}};
  const int64_t n = out.numel();
  const int64_t variant = ref.op.attrs.has("k") ? ref.op.attrs.integer("k") : 0;
  for (int64_t i = 0; i < n; ++i) {
    out.data.push_back(0.5 * ref.inputs[0].data[i] + ref.inputs[1].data[i] * ref.params[0].data[i % 4] +
                       ref.params[1].data[i % 4] + static_cast<double>(n) + static_cast<double>(variant));
  }
  return out;
}

OpDef test_op(const std::string& name, Fault fault) {
  OpDef def;
  def.name = name;
  def.doc = "test-only op";
  def.inputs = {{"x", ""}, {"z", ""}};
  def.infer = [](const OpContext& ctx) { return contiguous(ctx.inputs[0].dtype, ctx.inputs[0].shape); };
  def.params = [fault](const OpContext& ctx) { return params(ctx, fault); };
  def.lower = [fault](const OpContext& ctx) { return lower(ctx, fault); };
  def.reference = reference;
  def.source_file = TEENY_OP_FILE;
  return def;
}

const std::vector<std::pair<const char*, Fault>> kFaults = {
    {"t.swapped_names", Fault::kSwappedNames},
    {"t.wrong_type", Fault::kWrongType},
    {"t.missing_arg", Fault::kMissingArg},
    {"t.extra_arg", Fault::kExtraArg},
    {"t.block_over_maxntid", Fault::kBlockOverMaxntid},
    {"t.wrong_init_bytes", Fault::kWrongInitBytes},
    {"t.symbolic_host_param", Fault::kSymbolicHostParam},
    {"t.entry_renamed", Fault::kEntryRenamed},
    {"t.param_type_changed", Fault::kParamTypeChanged},
    {"t.template_mismatch", Fault::kTemplateMismatch},
    {"t.syntax_error", Fault::kSyntaxError},
    {"t.wrong_dtype", Fault::kWrongDtype},
    {"t.unknown_slot", Fault::kUnknownSlot},
};

}  // namespace

Registry test_registry() {
  Registry registry;
  for (KernelHeader& header : test_headers()) registry.add_kernel_header(std::move(header));
  registry.add(test_op("t.good", Fault::kNone));
  for (const auto& [name, fault] : kFaults) registry.add(test_op(name, fault));

  OpDef variant = test_op("t.variant", Fault::kNone);
  AttrSpec k;
  k.name = "k";
  k.type = AttrType::kInt;
  k.doc = "changes the source, not the kernel name";
  k.default_value = 0;
  variant.attrs = {k};
  registry.add(variant);

  OpDef padded = test_op("t.padded", Fault::kNone);
  padded.infer = [](const OpContext& ctx) { return TensorType{ctx.inputs[0].dtype, ctx.inputs[0].shape, Expr(8)}; };
  registry.add(padded);

  OpDef view;
  view.name = "t.view";
  view.doc = "test-only view: flattens to one dim";
  view.inputs = {{"x", ""}};
  view.infer = [](const OpContext& ctx) { return contiguous(ctx.inputs[0].dtype, {product(ctx.inputs[0].shape)}); };
  view.reference = [](const RefContext& ref) {
    return HostTensor{ref.inputs[0].dtype, ref.output_shape, ref.inputs[0].data};
  };
  view.source_file = TEENY_OP_FILE;
  registry.add(view);

  for (const auto& [name, fault] :
       std::vector<std::pair<const char*, Fault>>{{"t.tensor_map", Fault::kNone},
                                                  {"t.map_of_unknown", Fault::kMapOfUnknown},
                                                  {"t.map_of_scalar", Fault::kMapOfScalar},
                                                  {"t.map_unaligned_stride", Fault::kMapUnalignedStride},
                                                  {"t.map_underaligned", Fault::kMapUnderaligned}}) {
    OpDef map = test_op(name, Fault::kNone);
    map.params = nullptr;
    map.lower = [fault = fault](const OpContext& ctx) { return lower_tensor_map(ctx, fault); };
    registry.add(map);
  }

  for (const auto& [name, fault] :
       std::vector<std::pair<const char*, Fault>>{{"t.scratch", Fault::kNone},
                                                  {"t.scratch_unknown", Fault::kScratchUnknown},
                                                  {"t.scratch_wrong_dtype", Fault::kScratchWrongDtype},
                                                  {"t.scratch_twice", Fault::kScratchTwice},
                                                  {"t.scratch_bad_name", Fault::kScratchBadName},
                                                  {"t.scratch_device_sized", Fault::kScratchDeviceSized},
                                                  {"t.scratch_empty", Fault::kScratchEmpty}}) {
    OpDef op = test_op(name, Fault::kNone);
    op.inputs = {{"x", ""}};
    op.params = nullptr;
    op.lower = [fault = fault](const OpContext& ctx) { return lower_scratch(ctx, fault); };
    op.reference = [](const RefContext& ref) {
      HostTensor out{DType::kF32, ref.output_shape, {}};
      for (double x : ref.inputs[0].data) out.data.push_back(2 * x + 1);
      return out;
    };
    registry.add(op);
  }
  return registry;
}

Graph test_graph(const Registry& registry, const std::string& nodes, const std::string& output) {
  std::string text = fmt::format(
      "name: tgraph\n"
      "dims:\n"
      "  B: {{min: 1, max: 1024, default: 8}}\n"
      "inputs:\n"
      "  x: {{dtype: f32, shape: [B, 4]}}\n"
      "  z: {{dtype: f32, shape: [B, 4]}}\n"
      "nodes:\n"
      "{}"
      "outputs: [{}]\n",
      nodes, output);
  return parse_graph(text, "tgraph.yaml", registry);
}

CompileOptions test_options(const std::string& cache_dir) {
  CompileOptions options;
  options.cache_dir = cache_dir;
  options.jobs = 2;
  return options;
}

}  // namespace teeny::testing
