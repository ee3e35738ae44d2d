// transpose (ops.md, "Shape and data movement"): permutes dims with a real copy.
//
// Swapping the last two dims (leading dims fixed): 32x32 tiles staged through shared memory, so
// both the read and the write are coalesced. Any other permutation: a gather over the output.
// Kernels: ops/kernels/transpose.cuh.
#include <fmt/format.h>

#include <algorithm>

#include "core/autodiff.h"
#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // block = kTile x kTileRows threads; each copies kTile/kTileRows
constexpr int kGatherBlock = 256;
constexpr int kMaxGridYZ = 65535;

std::vector<int> read_perm(const OpContext& ctx) {
  const size_t rank = ctx.inputs[0].shape.size();
  const std::vector<int64_t> raw = ctx.attrs.ints("perm");
  if (raw.size() != rank)
    throw OpError("attrs.perm",
                  fmt::format("transpose: perm has {} entries but the input has rank {}", raw.size(), rank));
  std::vector<int> perm;
  std::vector<bool> seen(rank, false);
  for (int64_t p : raw) {
    const int axis = normalize_axis(p, rank, "attrs.perm");
    if (seen[axis]) throw OpError("attrs.perm", fmt::format("transpose: perm repeats axis {}", axis));
    seen[axis] = true;
    perm.push_back(axis);
  }
  return perm;
}

bool swaps_last_two(const std::vector<int>& perm) {
  const int rank = static_cast<int>(perm.size());
  if (rank < 2) return false;
  for (int k = 0; k + 2 < rank; ++k)
    if (perm[k] != k) return false;
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

}  // namespace

OpDef transpose_op() {
  OpDef def;
  def.name = "transpose";
  def.doc = "permutes dims (output dim k is input dim perm[k]); a real copy";
  def.inputs = {{"x", "input tensor"}};
  def.attrs = {attr_spec("perm", AttrType::kIntList, "a permutation of the input's dims")};
  def.dtypes = float_dtypes();
  def.source_file = TEENY_OP_FILE;
  const OpDef meta = def;

  def.infer = [meta](const OpContext& ctx) {
    const DType dtype = common_float_dtype(meta, ctx);
    const std::vector<int> perm = read_perm(ctx);
    Shape shape;
    for (int p : perm) shape.push_back(ctx.inputs[0].shape[p]);
    return contiguous(output_float_dtype(meta, ctx, dtype), shape);
  };

  def.lower = [](const OpContext& ctx) {
    const TensorType& x = ctx.inputs[0];
    const DType dtype = x.dtype;
    const std::vector<int> perm = read_perm(ctx);
    const size_t rank = perm.size();
    const Expr n = product(x.shape);
    Lowering lowering;
    Launch launch;
    if (swaps_last_two(perm)) {
      const Expr rows = x.shape[rank - 2], cols = x.shape[rank - 1];
      const Expr batch = product(Shape(x.shape.begin(), x.shape.end() - 2));
      launch.args = {input(0, "x", dtype), output("y", dtype), i64("batch", batch),
                     i32("rows", rows),    i32("cols", cols),  i32("x_stride", x.row_stride)};
      lowering.kernels.push_back(
          template_kernel(fmt::format("transpose_tiled_{}", dtype_name(dtype)), "transpose.cuh",
                          fmt::format("tn_transpose_tiled<{}, {}, {}>", dtype_c_type(dtype), kTile, kTileRows),
                          launch.args, kTile * kTileRows, TEENY_KERNEL_ORIGIN));
      launch.block = {kTile, kTileRows, 1};
      launch.grid = {ceil_div(cols, Expr(kTile)), min(ceil_div(rows, Expr(kTile)), Expr(kMaxGridYZ)),
                     min(batch, Expr(kMaxGridYZ))};
    } else {
      const std::vector<Expr> in_strides = element_strides(x);
      launch.args = {input(0, "x", dtype), output("y", dtype), i64("n", n)};
      for (size_t k = 0; k < rank; ++k) {
        launch.args.push_back(i64(fmt::format("d{}", k), x.shape[perm[k]]));
        launch.args.push_back(i64(fmt::format("s{}", k), in_strides[perm[k]]));
      }
      const bool last_kept = rank > 0 && perm.back() == static_cast<int>(rank) - 1;
      std::string perm_name;
      for (int p : perm) perm_name += std::to_string(p);
      lowering.kernels.push_back(
          template_kernel(fmt::format("transpose_{}_{}", perm_name, dtype_name(dtype)), "transpose.cuh",
                          fmt::format("tn_transpose_gather<{}, {}, {}>", dtype_c_type(dtype), kGatherBlock, last_kept),
                          launch.args, kGatherBlock, TEENY_KERNEL_ORIGIN));
      launch.block = {kGatherBlock, 1, 1};
      launch.grid[0] = grid_stride_blocks(ceil_div(n, Expr(kGatherBlock * vector_width(dtype))), kGatherBlock);
    }
    launch.bytes = Expr(2) * n * Expr(static_cast<int64_t>(dtype_size(dtype)));
    launch.flops = Expr(0);
    lowering.launches.push_back(std::move(launch));
    return lowering;
  };

  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      auto add = [&](const std::string& shape, std::vector<int> perm) {
        cases.push_back({fmt::format("{} perm {} {}", shape, fmt::join(perm, ","), dt),
                         case_graph({"B", "W"}, {{"x", dtype, shape}}, {{"y", "transpose", {"x"}, {{"perm", perm}}}}),
                         awkward_rows()});
      };
      add("[B, W]", {1, 0});              // tiled
      add("[3, B, W]", {0, 2, 1});        // tiled, batched
      add("[B, 3, W]", {2, 0, 1});        // gather
      add("[B, W, 2, 8]", {0, 2, 1, 3});  // gather with the last dim kept (16-byte packs)
    }
    cases.push_back(
        {"tiled from padded rows (linear, 17 of 20)",
         case_graph({"B"}, {{"x", DType::kF32, "[B, 8]"}},
                    {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", "transpose", {"p"}, {{"perm", {1, 0}}}}}),
         {{{"B", 1}}, {{"B", 999}}}});
    cases.push_back(
        {"gather from padded rows (linear, 17 of 20)",
         case_graph({"B"}, {{"x", DType::kF32, "[2, B, 8]"}},
                    {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", "transpose", {"p"}, {{"perm", {2, 0, 1}}}}}),
         {{{"B", 1}}, {{"B", 999}}}});
    return cases;
  };

  // The gradient goes back through the inverse permutation.
  def.backward = [](GradBuilder& g) {
    const std::vector<int> perm = read_perm(g.ctx());
    std::vector<int> inverse(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = static_cast<int>(k);
    g.input_grad(0, g.add("transpose", {g.grad_output()}, {{"perm", inverse}}));
  };
  def.reference = [](const RefContext& ref) {
    const std::vector<int> perm = read_perm(ref.op);
    const std::vector<int64_t>& in_shape = ref.inputs[0].shape;
    const std::vector<int64_t> in_strides = host_strides(in_shape);
    const std::vector<int64_t>& out_shape = ref.output_shape;
    HostTensor out;
    out.dtype = ref.op.output.dtype;
    out.shape = out_shape;
    out.data.resize(ref.inputs[0].data.size());
    for (size_t e = 0; e < out.data.size(); ++e) {
      int64_t rest = static_cast<int64_t>(e), offset = 0;
      for (size_t k = out_shape.size(); k-- > 0;) {
        offset += (rest % out_shape[k]) * in_strides[perm[k]];
        rest /= out_shape[k];
      }
      out.data[e] = ref.inputs[0].data[offset];
    }
    return out;
  };
  return def;
}

}  // namespace teeny::ops
