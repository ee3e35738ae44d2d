// train.clip_grad_norm (ops.md, "Optimizer steps"): torch.nn.utils.clip_grad_norm_'s coefficient
// over every gradient of a training graph: output [min(1, max_norm / (total_norm + 1e-6)),
// total_norm] (f32 [2]), total_norm the 2-norm of all the gradients' elements together. A graph
// with `clip_grad_norm: X` gets one node of it, which every update reads (docs/training.md).
//
// Launches (ops/kernels/optim.cuh): one sum of squares over every gradient (their pointers and
// sizes are the launch's arguments: one launch, however many params), a block per chunk of 8192
// elements of one gradient, leaving one f32 partial a chunk in the scratch buffer "partials";
// then one block adds the partials in f64 in a fixed order and writes the coefficient and the
// norm. The chunks follow from the sizes alone, not the device, so the partials and so the bits
// of the result are the same on every GPU, and the buffer is sized from the dims alone. No
// atomics.
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/optim.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 8192;  // elements a block: eight packs of four a thread, loaded together
constexpr int kCoefThreads = 256;

TensorType infer(const OpDef& def, const OpContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorType& grad = ctx.inputs[i];
    if (!is_float(grad.dtype))
      throw OpError("inputs",
                    fmt::format("input {} is {}; {} takes float gradients", i, dtype_name(grad.dtype), def.name));
    if (is_padded(grad))
      throw OpError("inputs", fmt::format("input {}'s rows are padded (row stride {}, last dim {}); {} reads each "
                                          "gradient as one contiguous array",
                                          i, grad.row_stride.str(), grad.shape.back().str(), def.name));
  }
  if (ctx.requested_dtype && *ctx.requested_dtype != DType::kF32)
    throw OpError("dtype", fmt::format("op '{}' produces f32 [coefficient, norm]; it cannot produce {}", def.name,
                                       dtype_name(*ctx.requested_dtype)));
  return contiguous(DType::kF32, {Expr(2)});
}

// The sum of squares' kernel name: its gradients' dtypes in order, runs counted
// ("grad_sq_sum_f32x30_bf16x6"), since its signature takes one pointer per gradient.
std::string sq_sum_name(const std::vector<TensorType>& grads) {
  std::string name = "grad_sq_sum";
  for (size_t i = 0; i < grads.size();) {
    size_t run = i + 1;
    while (run < grads.size() && grads[run].dtype == grads[i].dtype) ++run;
    name += fmt::format("_{}{}", dtype_name(grads[i].dtype), run - i > 1 ? fmt::format("x{}", run - i) : "");
    i = run;
  }
  return name;
}

Lowering lower(const OpContext& ctx) {
  Lowering lowering;
  Launch sq_sum;
  sq_sum.args = {scratch("partials", "partials", DType::kF32)};
  Expr elements(0), bytes(0), chunks(0);
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const TensorType& grad = ctx.inputs[i];
    const Expr n = product(grad.shape);
    sq_sum.args.push_back(input(static_cast<int>(i), fmt::format("grad{}", i), grad.dtype));
    sq_sum.args.push_back(i64(fmt::format("n{}", i), n));
    elements = elements + n;
    chunks = chunks + ceil_div(n, Expr(kChunk));
    bytes = bytes + n * Expr(static_cast<int64_t>(dtype_size(grad.dtype)));
  }
  sq_sum.kernel = 0;
  lowering.kernels.push_back(template_kernel(sq_sum_name(ctx.inputs), "optim.cuh",
                                             fmt::format("tn_grad_sq_sum<{}, {}>", kThreads, kChunk), sq_sum.args,
                                             kThreads, TEENY_KERNEL_ORIGIN));
  sq_sum.block = {kThreads, 1, 1};
  sq_sum.grid[0] = max(chunks, Expr(1));
  sq_sum.bytes = bytes + sq_sum.grid[0] * Expr(4);
  sq_sum.flops = elements * Expr(2);
  lowering.launches.push_back(std::move(sq_sum));
  const Expr offset = lowering.launches[0].grid[0];
  lowering.scratch.push_back({"partials", DType::kF32, offset});

  Launch coef;
  coef.kernel = static_cast<int>(lowering.kernels.size());
  coef.args = {scratch("partials", "partials", DType::kF32), i32("count", offset),
               f32("max_norm", ctx.attrs.real("max_norm")), output("clip", DType::kF32)};
  lowering.kernels.push_back(template_kernel("clip_coef", "optim.cuh", fmt::format("tn_clip_coef<{}>", kCoefThreads),
                                             coef.args, kCoefThreads, TEENY_KERNEL_ORIGIN));
  coef.block = {kCoefThreads, 1, 1};
  coef.bytes = offset * Expr(4) + Expr(8);
  coef.flops = offset;
  lowering.launches.push_back(std::move(coef));
  return lowering;
}

HostTensor reference(const RefContext& ref) {
  double sum = 0;
  for (const HostTensor& grad : ref.inputs)
    for (double g : grad.data) sum += g * g;
  const double norm = std::sqrt(sum);
  return HostTensor{DType::kF32, {2}, {clip_coefficient(norm, ref.op.attrs.real("max_norm")), norm}};
}

std::vector<ConformanceCase> conformance_cases() {
  std::vector<ConformanceCase> cases;
  for (DType dtype : float_dtypes()) {
    cases.push_back({fmt::format("one gradient [B, W] {}", dtype_name(dtype)),
                     case_graph({"B", "W"}, {{"g", dtype, "[B, W]"}},
                                {{"clip", "train.clip_grad_norm", {"g"}, {{"max_norm", 1.0}}}}),
                     awkward_rows()});
  }
  // Gradients of every dtype together (W 1025: one partial chunk each; 10^6: a's 3 * 10^6 elements
  // in 367 chunks, b's in 123 with its last one partial), max_norm above the norm (coefficient 1) and below it.
  for (const auto& [label, max_norm] : {std::pair{"above", 1e6}, std::pair{"below", 0.5}}) {
    cases.push_back(
        {fmt::format("f32, bf16, f16 gradients, max_norm {} the norm", label),
         case_graph({"W"}, {{"a", DType::kF32, "[3, W]"}, {"b", DType::kBF16, "[W]"}, {"c", DType::kF16, "[7]"}},
                    {{"clip", "train.clip_grad_norm", {"a", "b", "c"}, {{"max_norm", max_norm}}}}),
         {{{"W", 1}}, {{"W", 1025}}, {{"W", 1000000}}}});
  }
  return cases;
}

}  // namespace

OpDef train_clip_grad_norm_op() {
  OpDef def;
  def.name = "train.clip_grad_norm";
  def.doc =
      "torch.nn.utils.clip_grad_norm_'s coefficient over all gradients together: f32 [min(1, max_norm / (norm + "
      "1e-6)), norm], norm the 2-norm of every element; deterministic";
  def.inputs = {{"grads", "every trained param's gradient, of any float dtype and shape"}};
  def.variadic = true;
  def.min_inputs = 1;
  def.attrs = {attr_spec("max_norm", AttrType::kFloat, "the largest total norm left unscaled")};
  def.attrs[0].min_value = 0;
  def.attrs[0].min_exclusive = true;
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer(meta, ctx); };
  def.lower = lower;
  def.reference = reference;
  def.conformance_cases = conformance_cases;
  return def;
}

}  // namespace teeny::ops
