// merge_heads: x [B*H, S, Dh] -> [B, S, H*Dh] (out[b, s, h*Dh + d] = x[b*H + h, s, d]), the
// inverse of split_heads. A copy kernel over 16-byte output units when head rows and the
// input row stride allow, else per element; reads honour a padded input row stride.
#include <fmt/format.h>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kThreads = 256;

TensorType infer_merge_heads(const OpDef& meta, const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  if (x.shape.size() != 3) {
    throw OpError("inputs", fmt::format("merge_heads needs x of shape [B*H, S, Dh]; got {}", shape_str(x.shape)));
  }
  if (output_float_dtype(meta, ctx, x.dtype) != x.dtype) {
    throw OpError("dtype", "merge_heads copies its input; it cannot change the dtype");
  }
  const int64_t heads = ctx.attrs.i("heads");
  const auto rows = x.shape[0].const_value();
  if (rows && *rows % heads != 0) {
    throw OpError("attrs.heads", fmt::format("merge_heads: the first dim {} is not divisible by heads = {}",
                                             *rows, heads));
  }
  return contiguous(x.dtype, {x.shape[0] / Expr(heads), x.shape[1], x.shape[2] * Expr(heads)});
}

Lowering lower_merge_heads(const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  const DType dtype = x.dtype;
  const Expr heads(ctx.attrs.i("heads"));
  const Expr head_dim = x.shape[2];
  const int vec = vector_width(dtype);
  const bool vectorised = head_dim.is_const() && *head_dim.const_value() % vec == 0 &&
                          x.row_stride.is_const() && *x.row_stride.const_value() % vec == 0;
  const int unit = vectorised ? vec : 1;
  const Expr units = product(ctx.output.shape) / Expr(unit);

  Launch launch;
  launch.args = {input(0, "x", dtype),          output("y", dtype),   i64("units", units),
                 i32("S", x.shape[1]),           i32("heads", heads), i32("head_dim", head_dim),
                 i32("ldx", x.row_stride)};
  launch.block = {kThreads, 1, 1};
  launch.grid = {ceil_div(units, Expr(kThreads)), Expr(1), Expr(1)};
  launch.bytes = Expr(2) * product(ctx.output.shape) * Expr(static_cast<int64_t>(dtype_size(dtype)));
  launch.flops = Expr(0);

  KernelSource kernel;
  kernel.name = fmt::format("merge_heads_{}_u{}", dtype_name(dtype), unit);
  kernel.source = kernel_prelude() + kernel_typedef("T", dtype) + kernel_constant("kUnit", unit) +
                  kernel_entry(launch.args, kThreads) + R"CUDA( {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= units) return;
  const int per_row = heads * head_dim / kUnit;
  const int c = (int)(i % per_row) * kUnit;
  const long long t = i / per_row;  // b * S + s
  const int s = (int)(t % S);
  const long long b = t / S;
  const int h = c / head_dim, d = c % head_dim;
  const T* src = x + ((b * heads + h) * S + s) * ldx + d;
  T* dst = y + i * kUnit;
  if (kUnit > 1 && tn_aligned16(src) && tn_aligned16(dst)) {
    *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
  } else {
#pragma unroll
    for (int e = 0; e < kUnit; ++e) dst[e] = src[e];
  }
}
)CUDA";
  kernel.file = __FILE__;
  kernel.line = __LINE__;
  return Lowering{{kernel}, {launch}};
}

HostTensor merge_heads_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const int64_t heads = ref.op.attrs.i("heads");
  const int64_t batch = x.shape[0] / heads, seq = x.shape[1], head_dim = x.shape[2];
  const int64_t width = heads * head_dim;
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(x.data.size())};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d)
          y.data[(b * seq + s) * width + h * head_dim + d] = x.data[((b * heads + h) * seq + s) * head_dim + d];
  return y;
}

}  // namespace

OpDef merge_heads_op() {
  OpDef def;
  def.name = "merge_heads";
  def.doc = "x [B*H, S, Dh] -> [B, S, H*Dh] (inverse of split_heads)";
  def.inputs = {{"x", "[B*H, S, Dh]"}};
  def.attrs = {{"heads", AttrType::kInt, "number of heads H", std::nullopt, {}, false, 1.0}};
  def.dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_merge_heads(meta, ctx); };
  def.lower = lower_merge_heads;
  def.reference = merge_heads_reference;
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    const std::vector<Bindings> sizes = {{{"B", 1}, {"S", 1}}, {{"B", 3}, {"S", 17}}, {{"B", 2}, {"S", 129}}};
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      for (const char* shape : {"[B*12, S, 64]", "[B*12, S, 3]"}) {
        cases.push_back({fmt::format("{} heads 12 {}", shape, dt),
                         case_graph({"B", "S"}, {{"x", dtype, shape}}, {{"y", "merge_heads", {"x"}, {{"heads", 12}}}}),
                         sizes});
      }
      cases.push_back({"padded input (linear 18 of 20/24), heads 2 " + dt,
                       case_graph({"B", "S"}, {{"x", dtype, "[B*2, S, 8]"}},
                                  {{"p", "linear", {"x"}, {{"out_features", 18}}},
                                   {"y", "merge_heads", {"p"}, {{"heads", 2}}}}),
                       sizes});
    }
    return cases;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
