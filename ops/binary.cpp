// add, sub, mul, div with NumPy broadcasting over symbolic dims (ops.md, "Elementwise").
//
// Lowering collapses the broadcast output shape into the fewest dims whose elements are
// evenly strided in both operands (size-1 dims dropped, neighbours merged when both operands
// are contiguous across them or both broadcast), then generates a kernel for that pattern:
// a broadcast operand has no stride argument and reads one value per 16-byte output pack.
// Index arithmetic is 32-bit when the output has fewer than 2^31 elements (headroom for
// operand offsets past n in padded rows).
#include <fmt/format.h>

#include <algorithm>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kBlock = 256;

struct CollapsedDim {
  Expr size;
  std::optional<Expr> stride_a, stride_b;  // absent: the operand broadcasts along this dim
};

// The operand's element strides aligned to the output's rank; absent where it broadcasts.
std::vector<std::optional<Expr>> aligned_strides(const TensorType& type, const Shape& out) {
  const size_t lead = out.size() - type.shape.size();
  const std::vector<Expr> strides = element_strides(type);
  std::vector<std::optional<Expr>> result(out.size());
  for (size_t k = lead; k < out.size(); ++k) {
    const Expr& dim = type.shape[k - lead];
    if (!(dim.const_value() == 1 && out[k].const_value() != 1)) result[k] = strides[k - lead];
  }
  return result;
}

std::vector<CollapsedDim> collapse(const TensorType& a, const TensorType& b, const Shape& out) {
  const auto sa = aligned_strides(a, out), sb = aligned_strides(b, out);
  std::vector<CollapsedDim> dims;  // outermost first
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].const_value() == 1) continue;
    dims.push_back({out[k], sa[k], sb[k]});
  }
  // Merge from the inside out: dim j folds into its inner neighbour when each operand's
  // stride across j equals its stride across the neighbour times the neighbour's size.
  auto mergeable = [](const std::optional<Expr>& outer, const std::optional<Expr>& inner,
                      const Expr& inner_size) {
    if (!outer || !inner) return !outer && !inner;
    return *outer == *inner * inner_size;
  };
  std::vector<CollapsedDim> merged;
  for (size_t k = dims.size(); k-- > 0;) {
    if (!merged.empty() &&
        mergeable(dims[k].stride_a, merged.back().stride_a, merged.back().size) &&
        mergeable(dims[k].stride_b, merged.back().stride_b, merged.back().size)) {
      merged.back().size = merged.back().size * dims[k].size;
    } else {
      merged.push_back(dims[k]);
    }
  }
  std::reverse(merged.begin(), merged.end());
  if (merged.empty()) merged.push_back({Expr(1), Expr(1), Expr(1)});  // a scalar
  return merged;
}

// The kernel body after the generated arrays d[], sa[], sb[] (sizes and strides, 0 where an
// operand broadcasts) and the constants kDims, kBcastA, kBcastB (innermost dim broadcast).
const char* kBinaryBody = R"CUDA(
template <typename I>
__device__ __forceinline__ void tn_offsets(I e, const long long (&d)[kDims],
                                           const long long (&sa)[kDims],
                                           const long long (&sb)[kDims], I& oa, I& ob) {
  oa = 0; ob = 0;
#pragma unroll
  for (int j = kDims - 1; j >= 0; --j) {
    I idx = e;
    if (j > 0) { const I q = e / (I)d[j]; idx = e - q * (I)d[j]; e = q; }
    oa += idx * (I)sa[j];
    ob += idx * (I)sb[j];
  }
}

template <typename I>
__device__ __forceinline__ void tn_binary(const T* a, const T* b, T* y, long long n,
                                          const long long (&d)[kDims],
                                          const long long (&sa)[kDims],
                                          const long long (&sb)[kDims]) {
  constexpr int kVec = tn_pack<T>::kN;
  const I threads = (I)gridDim.x * kBlock;
  const I tid = (I)blockIdx.x * kBlock + threadIdx.x;
  bool vec = d[kDims - 1] % kVec == 0 && tn_aligned16(a) && tn_aligned16(b) && tn_aligned16(y);
  vec = vec && (kBcastA || sa[kDims - 1] == 1) && (kBcastB || sb[kDims - 1] == 1);
#pragma unroll
  for (int j = 0; j < kDims - 1; ++j) vec = vec && sa[j] % kVec == 0 && sb[j] % kVec == 0;
  if (vec) {
    const I nv = (I)(n / kVec);
    for (I i = tid; i < nv; i += threads) {
      I oa, ob;
      tn_offsets<I>(i * kVec, d, sa, sb, oa, ob);
      float va[kVec], vb[kVec];
      if (kBcastA) {
        const float s = tn_f32(a[oa]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) va[k] = s;
      } else {
        tn_load16(a + oa, va);
      }
      if (kBcastB) {
        const float s = tn_f32(b[ob]);
#pragma unroll
        for (int k = 0; k < kVec; ++k) vb[k] = s;
      } else {
        tn_load16(b + ob, vb);
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) va[k] = TN_OP(va[k], vb[k]);
      tn_store16(y + i * kVec, va);
    }
  } else {
    for (I i = tid; i < (I)n; i += threads) {
      I oa, ob;
      tn_offsets<I>(i, d, sa, sb, oa, ob);
      y[i] = tn_cast<T>(TN_OP(tn_f32(a[oa]), tn_f32(b[ob])));
    }
  }
}
)CUDA";

struct BinaryFn {
  const char* cuda;  // expression of floats p, q
  double (*host)(double, double);
};

OpDef binary_op(const std::string& name, std::string doc, BinaryFn fn) {
  OpDef def;
  def.name = name;
  def.doc = std::move(doc);
  def.inputs = {{"a", "first operand"}, {"b", "second operand (broadcast against a)"}};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    return contiguous(output_float_dtype(meta, ctx, dtype),
                      broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape));
  };

  def.lower = [name, fn](const OpContext& ctx) {
    const TensorType& a = ctx.inputs[0];
    const TensorType& b = ctx.inputs[1];
    const DType dtype = a.dtype;
    const std::vector<CollapsedDim> dims = collapse(a, b, ctx.output.shape);
    const int rank = static_cast<int>(dims.size());
    const Expr n = product(ctx.output.shape);

    std::vector<KernelArg> args = {input(0, "a", dtype), input(1, "b", dtype),
                                   output("y", dtype), i64("n", n)};
    std::string sizes, strides_a, strides_b, pattern;
    for (int j = 0; j < rank; ++j) {
      const std::string sep = j == 0 ? "" : ", ";
      args.push_back(i64(fmt::format("d{}", j), dims[j].size));
      sizes += sep + fmt::format("d{}", j);
      if (dims[j].stride_a) args.push_back(i64(fmt::format("sa{}", j), *dims[j].stride_a));
      if (dims[j].stride_b) args.push_back(i64(fmt::format("sb{}", j), *dims[j].stride_b));
      strides_a += sep + (dims[j].stride_a ? fmt::format("sa{}", j) : "0");
      strides_b += sep + (dims[j].stride_b ? fmt::format("sb{}", j) : "0");
      pattern += !dims[j].stride_a ? 'a' : !dims[j].stride_b ? 'b' : 'f';  // who broadcasts
    }
    std::string source =
        kernel_prelude() + kernel_typedef("T", dtype) + kernel_constant("kBlock", kBlock) +
        kernel_constant("kDims", rank) +
        kernel_constant("kBcastA", dims.back().stride_a ? 0 : 1) +
        kernel_constant("kBcastB", dims.back().stride_b ? 0 : 1) +
        fmt::format("#define TN_OP(p, q) ({})\n", fn.cuda) + kBinaryBody +
        kernel_entry(args, kBlock) + " {\n" +
        fmt::format("  const long long d[kDims] = {{{}}};\n", sizes) +
        fmt::format("  const long long sa[kDims] = {{{}}};\n", strides_a) +
        fmt::format("  const long long sb[kDims] = {{{}}};\n", strides_b) +
        "  if (n < (1ll << 31)) tn_binary<unsigned>(a, b, y, n, d, sa, sb);\n"
        "  else tn_binary<long long>(a, b, y, n, d, sa, sb);\n}\n";

    Lowering lowering;
    lowering.kernels.push_back({fmt::format("{}_{}_{}", name, dtype_name(dtype), pattern),
                                std::move(source), TEENY_KERNEL_ORIGIN});
    Launch launch;
    launch.block = {kBlock, 1, 1};
    launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kBlock * vector_width(dtype))), kBlock);
    launch.args = std::move(args);
    const Expr elem = Expr(static_cast<int64_t>(dtype_size(dtype)));
    launch.bytes = (product(a.shape) + product(b.shape) + n) * elem;
    launch.flops = n;
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };

  def.conformance_cases = [name] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      cases.push_back({"same shape " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, W]"}, {"b", dtype, "[B, W]"}},
                                  {{"y", name, {"a", "b"}}}),
                       awkward_rows()});
      cases.push_back({"row vector b " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, W]"}, {"b", dtype, "[W]"}},
                                  {{"y", name, {"a", "b"}}}),
                       awkward_rows()});
      cases.push_back({"column a, outer broadcast " + dt,
                       case_graph({"B", "W"}, {{"a", dtype, "[B, 1]"}, {"b", dtype, "[3, 1, W]"}},
                                  {{"y", name, {"a", "b"}}}),
                       awkward_rows()});
    }
    cases.push_back({"padded a rows (linear, 17 of 20)",
                     case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}, {"b", DType::kF32, "[B, 17]"}},
                                {{"p", "linear", {"x"}, {{"out_features", 17}}},
                                 {"y", name, {"p", "b"}}}),
                     {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  def.reference = [fn](const RefContext& ref) {
    const std::vector<int64_t>& out_shape = ref.output_shape;
    const size_t rank = out_shape.size();
    // Strides of each operand over the output's index space: 0 where it broadcasts.
    auto strides_for = [&](const HostTensor& t) {
      std::vector<int64_t> natural = host_strides(t.shape), result(rank, 0);
      const size_t lead = rank - t.shape.size();
      for (size_t k = lead; k < rank; ++k)
        result[k] = t.shape[k - lead] == 1 ? 0 : natural[k - lead];
      return result;
    };
    const std::vector<int64_t> sa = strides_for(ref.inputs[0]), sb = strides_for(ref.inputs[1]);
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = out_shape;
    int64_t n = 1;
    for (int64_t d : out_shape) n *= d;
    out.data.resize(n);
    for (int64_t e = 0; e < n; ++e) {
      int64_t rest = e, oa = 0, ob = 0;
      for (size_t k = rank; k-- > 0;) {
        const int64_t idx = rest % out_shape[k];
        rest /= out_shape[k];
        oa += idx * sa[k];
        ob += idx * sb[k];
      }
      out.data[e] = fn.host(ref.inputs[0].data[oa], ref.inputs[1].data[ob]);
    }
    return out;
  };
  return def;
}

}  // namespace

OpDef add_op() {
  return binary_op("add", "a + b", {"p + q", [](double p, double q) { return p + q; }});
}
OpDef sub_op() {
  return binary_op("sub", "a - b", {"p - q", [](double p, double q) { return p - q; }});
}
OpDef mul_op() {
  return binary_op("mul", "a * b", {"p * q", [](double p, double q) { return p * q; }});
}
OpDef div_op() {
  return binary_op("div", "a / b (IEEE: x/0 is inf or nan)",
                   {"p / q", [](double p, double q) { return p / q; }});
}

}  // namespace teeny::ops
