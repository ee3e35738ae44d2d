// linear: y = x Wᵀ + b over all leading dims (PyTorch nn.Linear layout: weight [out, in]).
// Lowers to the shared tiled GEMM (ops/dense_gemm.h); the output rows are padded to a
// 16-byte multiple so the padded-row-stride path is exercised end to end.
#include <fmt/format.h>

#include "core/autodiff.h"
#include "ops/activation.h"
#include "ops/conformance.h"
#include "ops/dense_gemm.h"
#include "ops/kernel_util.h"
#include "ops/linear.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

// Elements per 16 bytes: f32 rows pad to a multiple of 4, 16-bit rows to a multiple of 8.
int64_t row_align(DType dtype) { return 16 / static_cast<int64_t>(dtype_size(dtype)); }

// f32 split-K: K is split until the blocks make at least 1.5 waves of the resident blocks (CUDA
// cores: two 128x128 blocks per SM; the persistent 3xTF32 kernel: one work unit of a tile and a
// K range per SM at a time), each split over at least kMinSplitK of K.
// Below one wave SMs idle (batch 1); from one to 1.5 waves the last wave is at most half full
// (GPT-2's N = 768 layers at M = 8192: 384 tiles, 73% busy; two splits make 97%). Above that
// the zeroing and atomics of a split cost more than the emptier last wave (tiny_lm's 512-tile
// layers ran slower split). Splits atomically add into an output zeroed by a first launch; with
// two the sum is still order-independent. The split count is an expression of the dims and the
// bound device's SM count (SMS), which the kernels take as an argument (`splits`), so one bundle
// serves every batch size and every GPU of the arch. An activation applies to the whole sum, so
// a fused one turns splitting off.
constexpr int kCudaCoreBlocksPerSm = 2;
constexpr int kMinSplitK = 128;
constexpr int kZeroThreads = 256;

}  // namespace

std::vector<AttrSpec> linear_attr_specs() {
  return {
      {"out_features", AttrType::kInt, "output features (rows of weight)", std::nullopt, {}, false, 1.0},
      {"bias", AttrType::kBool, "add a bias [out]", nlohmann::json(true), {}, false, std::nullopt},
      {"in_features", AttrType::kInt, "optional check: must equal x's last dim", std::nullopt, {}, true, 1.0},
  };
}

TensorType infer_linear(const OpDef& meta, const OpContext& ctx) {
  const TensorType& x = ctx.inputs.at(0);
  if (x.shape.empty()) {
    throw OpError("inputs", "linear needs an input with at least one dim [..., in], got a scalar");
  }
  const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
  const Expr& in = x.shape.back();
  if (ctx.attrs.has("in_features")) {
    const int64_t expected = ctx.attrs.integer("in_features");
    if (in != Expr(expected)) {
      throw OpError("inputs", fmt::format("in_features is {} but the input has {} features (shape {})", expected,
                                          in.str(), shape_str(x.shape)));
    }
  }
  Shape out_shape = x.shape;
  out_shape.back() = Expr(ctx.attrs.integer("out_features"));
  TensorType out = contiguous(dtype, out_shape);
  out.row_stride = round_up(out_shape.back(), Expr(row_align(dtype)));
  return out;
}

std::vector<ParamSpec> linear_params(const OpContext& ctx) {
  const DType dtype = ctx.output.dtype;
  const Expr out = ctx.output.shape.back();
  const Expr in = ctx.inputs.at(0).shape.back();
  std::vector<ParamSpec> params;
  params.push_back({"weight", {out, in}, dtype, ParamInit::kTrained, {}});
  if (ctx.attrs.boolean("bias")) params.push_back({"bias", {out}, dtype, ParamInit::kTrained, {}});
  return params;
}

namespace {

// One linear's operands, shared by its small-M and tiled launches.
struct LinearProblem {
  DType dtype;
  bool has_bias;
  Expr m, n, k, ldx, ldy, ldr;
  Expr elem() const { return Expr(static_cast<int64_t>(dtype_size(dtype))); }
};

LinearProblem linear_problem(const OpContext& ctx, const GemmEpilogue& epilogue) {
  const TensorType& x = ctx.inputs.at(0);
  return {ctx.output.dtype,
          ctx.attrs.boolean("bias"),
          product(Shape(x.shape.begin(), x.shape.end() - 1)),
          ctx.output.shape.back(),
          x.shape.back(),
          x.row_stride,
          ctx.output.row_stride,
          epilogue.residual ? ctx.inputs.at(1).row_stride : Expr(0)};
}

// x, weight, [bias], [residual], y, M, N, K, ldx, ldy, [ldr]: what every linear entry of
// ops/kernels/gemm.cuh takes first.
std::vector<KernelArg> linear_args(const LinearProblem& p, const GemmEpilogue& epilogue) {
  std::vector<KernelArg> args{input(0, "x", p.dtype), param("weight", "weight", p.dtype)};
  if (p.has_bias) args.push_back(param("bias", "bias", p.dtype));
  if (epilogue.residual) args.push_back(input(1, "residual", p.dtype));
  args.push_back(output("y", p.dtype));
  args.push_back(i32("M", p.m));
  args.push_back(i32("N", p.n));
  args.push_back(i32("K", p.k));
  args.push_back(i32("ldx", p.ldx));
  args.push_back(i32("ldy", p.ldy));
  if (epilogue.residual) args.push_back(i32("ldr", p.ldr));
  return args;
}

// The cost of the product and the epilogue: x and the weight read once, y written (and the
// residual read).
void set_linear_cost(Launch& launch, const LinearProblem& p, const GemmEpilogue& epilogue) {
  const Expr outputs = p.m * p.n;
  launch.bytes =
      (p.m * p.k + p.n * p.k + (epilogue.residual ? Expr(2) : Expr(1)) * outputs + (p.has_bias ? p.n : Expr(0))) *
      p.elem();
  const int epilogue_flops = (p.has_bias ? 1 : 0) + (epilogue.residual ? 1 : 0) +
                             (epilogue.activation.empty() ? 0 : activation(epilogue.activation).flops);
  launch.flops = Expr(2) * outputs * p.k + Expr(epilogue_flops) * outputs;
}

// The linear entry of ops/kernels/gemm.cuh for the argument list: tn_linear_residual takes the
// residual (and ldr), and both take the bias, the split count and the tensor maps where passed.
std::string linear_entry(const GemmEpilogue& epilogue, const std::string& gemm_class) {
  return fmt::format("{}<{}>", epilogue.residual ? "tn_linear_residual" : "tn_linear", gemm_class);
}

// The weight-streaming kernel `v` (ops/kernels/gemv.cuh) for the rows where `when` holds.
void add_gemv(Lowering& lowering, const LinearProblem& p, const GemmEpilogue& epilogue, const GemvVariant& v,
              const Expr& when) {
  Launch launch;
  launch.kernel = static_cast<int>(lowering.kernels.size());
  launch.args = linear_args(p, epilogue);
  launch.block = {v.threads, 1, 1};
  launch.grid = {ceil_div(p.n, Expr(v.rows_per_block)), Expr(1), Expr(1)};
  launch.dynamic_smem = Expr(0);
  launch.when = when;
  set_linear_cost(launch, p, epilogue);
  const std::string name = fmt::format("linear_{}_{}{}{}", dtype_name(p.dtype), gemv_variant_name(v),
                                       p.has_bias ? "_bias" : "", epilogue.suffix());
  lowering.kernels.push_back(template_kernel(name, "gemm.cuh", linear_entry(epilogue, v.kernel_class), launch.args,
                                             v.threads, TEENY_KERNEL_ORIGIN));
  lowering.launches.push_back(launch);
}

// Few rows (decode): the weight-streaming kernels, one block per few rows of W; M picks the
// variant, where it can be at most gemv_max_rows.
void add_small_m(Lowering& lowering, const LinearProblem& p, const GemmEpilogue& epilogue) {
  int above = 0;  // the previous variant's bound
  for (const GemvVariant& v : gemv_variants(p.dtype, p.has_bias, epilogue)) {
    const Expr when = above == 0 ? le(p.m, Expr(v.max_rows)) : le(Expr(above + 1), p.m) * le(p.m, Expr(v.max_rows));
    above = v.max_rows;
    if (when != Expr(0)) add_gemv(lowering, p, epilogue, v, when);
  }
}

// TMA needs 16-byte multiples for the row strides of x, of W (whose rows are K long), of y and of
// the residual.
bool linear_tma_ok(const LinearProblem& p, const GemmEpilogue& epilogue) {
  const auto rows_ok = [&](const Expr& elements) { return is_16_byte_multiple(elements, p.dtype); };
  return p.dtype != DType::kF32 && rows_ok(p.k) && rows_ok(p.ldx) && rows_ok(p.ldy) &&
         (!epilogue.residual || rows_ok(p.ldr));
}

// More rows: the tiled GEMM (ops/dense_gemm.h), f32 split over K where that fills the GPU.
void add_tiled(Lowering& lowering, const LinearProblem& p, const GemmEpilogue& epilogue, const GemmTile& chosen,
               const Expr& when) {
  const GemmTile tile = fit_gemm_epilogue(chosen, epilogue);
  const bool split_k = p.dtype == DType::kF32 && epilogue.activation.empty();
  const Expr resident = tile.wgmma() ? device_sms() : device_sms() * Expr(kCudaCoreBlocksPerSm);
  const Expr tiles = gemm_tiles(tile, p.m, p.n);
  const Expr splits =
      split_k ? max(Expr(1), min(ceil_div(resident * Expr(3) / Expr(2), tiles), ceil_div(p.k, Expr(kMinSplitK))))
              : Expr(1);

  if (split_k) {
    // Zeroes y only when K is split (else one element, which the GEMM then overwrites).
    Launch zero;
    const Expr count = min(splits - Expr(1), Expr(1)) * (p.m * p.ldy - Expr(1)) + Expr(1);
    zero.kernel = static_cast<int>(lowering.kernels.size());
    zero.args = {output("y", p.dtype), i64("count", count)};
    zero.block = {kZeroThreads, 1, 1};
    zero.grid = {grid_stride_blocks(ceil_div(count, Expr(kZeroThreads)), kZeroThreads), Expr(1), Expr(1)};
    zero.bytes = count * p.elem();
    zero.flops = Expr(0);
    zero.when = when;
    lowering.kernels.push_back(
        template_kernel("linear_zero_f32", "gemm.cuh", "tn_linear_zero", zero.args, kZeroThreads, TEENY_KERNEL_ORIGIN));
    lowering.launches.push_back(zero);
  }

  Launch launch;
  launch.kernel = static_cast<int>(lowering.kernels.size());
  launch.args = linear_args(p, epilogue);
  if (split_k) launch.args.push_back(i32("splits", splits));
  if (tile.tma) {
    GemmOperands operands{"x", "weight", "y",  epilogue.residual ? "residual" : "", p.m, p.n, p.k, p.ldx,
                          p.k, p.ldy,    p.ldr};
    for (KernelArg& map : gemm_tensor_maps(tile, operands)) launch.args.push_back(std::move(map));
  }
  launch.block = {tile.threads, 1, 1};
  launch.grid = {gemm_grid(tile, split_k ? tiles * splits : tiles), Expr(1), Expr(1)};
  launch.dynamic_smem = Expr(gemm_dynamic_smem(tile, epilogue));
  launch.when = when;
  set_linear_cost(launch, p, epilogue);
  KernelSource kernel = template_kernel(
      gemm_kernel_name("linear", p.dtype, GemmBLayout::kNK, p.has_bias, tile) + epilogue.suffix(), "gemm.cuh",
      linear_entry(epilogue, gemm_kernel_class(p.dtype, GemmBLayout::kNK, p.has_bias, tile, epilogue)), launch.args,
      tile.threads, TEENY_KERNEL_ORIGIN, tile.min_blocks);
  kernel.arch_specific = tile.wgmma();
  lowering.kernels.push_back(kernel);
  lowering.launches.push_back(launch);
}

// The variants `teeny tune` measures: each small-M kernel (up to its rows) and each GEMM tile.
struct LinearVariants {
  std::vector<GemvVariant> gemv;
  std::vector<GemmTile> tiles;
};

LinearVariants linear_variants(const OpContext& ctx, const LinearProblem& p, const GemmEpilogue& epilogue) {
  return {gemv_variants(p.dtype, p.has_bias, epilogue),
          gemm_tile_candidates(p.dtype, GemmBLayout::kNK, ctx.target_sm, linear_tma_ok(p, epilogue))};
}

// The variant named by the context, for every binding.
Lowering lower_variant(const OpContext& ctx, const LinearProblem& p, const GemmEpilogue& epilogue) {
  const LinearVariants variants = linear_variants(ctx, p, epilogue);
  Lowering lowering;
  for (const GemvVariant& v : variants.gemv) {
    if (gemv_variant_name(v) == ctx.variant) add_gemv(lowering, p, epilogue, v, Expr(1));
  }
  for (const GemmTile& tile : variants.tiles) {
    if (gemm_tile_name(tile) == ctx.variant) add_tiled(lowering, p, epilogue, tile, Expr(1));
  }
  if (lowering.launches.empty()) throw OpError("op", fmt::format("linear has no variant '{}' here", ctx.variant));
  return lowering;
}

}  // namespace

Lowering lower_linear(const OpContext& ctx, const GemmEpilogue& epilogue) {
  const LinearProblem p = linear_problem(ctx, epilogue);
  if (!ctx.variant.empty()) return lower_variant(ctx, p, epilogue);
  // Which variant runs is decided by M at run time (le folds to a constant where M is one).
  const Expr small = le(p.m, Expr(gemv_max_rows(p.dtype)));
  Lowering lowering;
  if (small != Expr(0)) add_small_m(lowering, p, epilogue);
  if (small != Expr(1)) {
    const GemmTile tile =
        choose_gemm_tile(p.dtype, GemmBLayout::kNK, p.n, p.k, ctx.target_sm, linear_tma_ok(p, epilogue));
    const Expr rows = le(Expr(gemv_max_rows(p.dtype) + 1), p.m);
    if (!tile.split_tf32) {
      add_tiled(lowering, p, epilogue, tile, rows);
      return lowering;
    }
    // A small batch on CUDA cores (kTf32MinTilesLinear); a constant M folds to one of the two.
    const Expr tiles = gemm_tiles(tile, p.m, p.n);
    const Expr few = rows * le(tiles, Expr(kTf32MinTilesLinear - 1));
    const Expr many = rows * le(Expr(kTf32MinTilesLinear), tiles);
    if (few != Expr(0)) add_tiled(lowering, p, epilogue, gemm_f32_small_batch_tile(), few);
    if (many != Expr(0)) add_tiled(lowering, p, epilogue, tile, many);
  }
  return lowering;
}

OpTuning linear_tuning(std::function<GemmEpilogue(const OpContext&)> epilogue_of) {
  OpTuning tuning;
  tuning.dims = [epilogue_of](const OpContext& ctx) {
    const LinearProblem p = linear_problem(ctx, epilogue_of(ctx));
    return std::vector<std::pair<std::string, Expr>>{{"M", p.m}, {"N", p.n}, {"K", p.k}};
  };
  tuning.variants = [epilogue_of](const OpContext& ctx) {
    const GemmEpilogue epilogue = epilogue_of(ctx);
    const LinearVariants variants = linear_variants(ctx, linear_problem(ctx, epilogue), epilogue);
    std::vector<OpVariant> out;
    for (const GemvVariant& v : variants.gemv) out.push_back({gemv_variant_name(v), {{"M", {1, v.max_rows}}}});
    for (const GemmTile& tile : variants.tiles) out.push_back({gemm_tile_name(tile)});
    return out;
  };
  // The residual's rows are the output's.
  tuning.row_inputs = {0, 1};
  return tuning;
}

HostTensor linear_reference(const RefContext& ref) {
  const HostTensor& x = ref.inputs.at(0);
  const HostTensor& weight = ref.params.at(0);
  const bool has_bias = ref.op.attrs.boolean("bias");
  const int64_t in = x.shape.back();
  const int64_t out = weight.shape.at(0);
  const int64_t rows = in == 0 ? 0 : x.numel() / in;
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(rows * out)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = has_bias ? ref.params.at(1).data[o] : 0.0;
      for (int64_t k = 0; k < in; ++k) acc += x.data[r * in + k] * weight.data[o * in + k];
      y.data[r * out + o] = acc;
    }
  }
  return y;
}

void linear_backward(GradBuilder& g, const std::string& dz) {
  if (g.needs_input_grad(0)) {
    const Expr& in = g.type(g.input(0)).shape.back();
    if (!in.is_const()) {
      throw Error(fmt::format("node '{}': training needs a constant in_features; the input's last dim is {}", g.node(),
                              in.str()));
    }
    g.input_grad(0,
                 g.add("grad.linear_dx", {dz}, {{"in_features", *in.const_value()}}, {{"weight", g.param("weight")}}));
  }
  if (g.needs_param_grad("weight")) g.param_grad("weight", g.add("grad.linear_dweight", {dz, g.input(0)}));
  if (g.needs_param_grad("bias")) g.param_grad("bias", g.add("grad.sum_rows", {dz}));
}

OpDef linear_op() {
  OpDef def;
  def.name = "linear";
  def.doc =
      "y = x Wᵀ + b over all leading dims; weight [out, in], bias [out]; output rows padded "
      "to 16 bytes";
  def.inputs = {{"x", "[..., in]"}};
  def.attrs = linear_attr_specs();
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_linear(meta, ctx); };
  def.params = linear_params;
  def.param_slots = {"weight", "bias"};
  def.lower = [](const OpContext& ctx) { return lower_linear(ctx, {}); };
  def.tuning = linear_tuning([](const OpContext&) { return GemmEpilogue{}; });
  def.reference = linear_reference;
  def.backward = [](GradBuilder& g) { linear_backward(g, g.grad_output()); };
  def.conformance_cases = [] {
    std::vector<ConformanceCase> cases;
    const std::vector<Bindings> few = {{{"B", 2}, {"W", 3}}, {{"B", 33}, {"W", 64}}};
    for (DType dtype : float_dtypes()) {
      const std::string dt = dtype_name(dtype);
      // 17 outputs use the 64-wide tile, 600 the 128-wide one; K = W sweeps awkward widths.
      for (int out : {17, 600}) {
        cases.push_back(
            {fmt::format("[B, W] -> {} {}", out, dt),
             case_graph({"B", "W"}, {{"x", dtype, "[B, W]"}}, {{"y", "linear", {"x"}, {{"out_features", out}}}}),
             awkward_rows()});
      }
      // Aligned rows over many K tiles (deeper than the wgmma pipeline), ragged M and N tiles;
      // 16-bit: the pingpong wgmma kernel (K <= 1024).
      for (int out : {1000, 4100}) {
        cases.push_back(
            {fmt::format("[B, 768] -> {} {}", out, dt),
             case_graph({"B"}, {{"x", dtype, "[B, 768]"}}, {{"y", "linear", {"x"}, {{"out_features", out}}}}),
             {{{"B", 1}}, {{"B", 260}}}});
      }
      // Over 2 x 132 output tiles (297 of 128x128, 153 of 128x256), so persistent wgmma blocks
      // compute several and the ring wraps from tile to tile (pingpong: consumer to consumer);
      // K = 200 is four k-steps, fewer than the stages, the last one ragged.
      cases.push_back(
          {"[B, 200] -> 4100 " + dt,
           case_graph({"B"}, {{"x", dtype, "[B, 200]"}}, {{"y", "linear", {"x"}, {{"out_features", 4100}}}}),
           {{{"B", 1100}}}});
      // Cooperative wgmma (K > 1024): 153 tiles of 128x256, ragged in M, N and K (1100 = 17
      // k-steps + 12); the [B, W] cases above take its 128x192 tile with unaligned rows.
      cases.push_back(
          {"[B, 1100] -> 4100 " + dt,
           case_graph({"B"}, {{"x", dtype, "[B, 1100]"}}, {{"y", "linear", {"x"}, {{"out_features", 4100}}}}),
           {{{"B", 1100}}}});
      // Few rows stream the weight (the small-M kernels, a variant up to 1, 4, 8 and 16 rows in
      // f32 and up to 8 and 16 in 16-bit), more take the tiled GEMM: both sides of each bound, N not a multiple of a
      // block's rows, K over many chunks.
      cases.push_back(
          {"[B, 4096] -> 1000, small M " + dt,
           case_graph({"B"}, {{"x", dtype, "[B, 4096]"}}, {{"y", "linear", {"x"}, {{"out_features", 1000}}}}),
           {{{"B", 1}}, {{"B", 2}}, {{"B", 4}}, {{"B", 5}}, {{"B", 8}}, {{"B", 9}}, {{"B", 16}}, {{"B", 17}}}});
      cases.push_back({"[B, 5, W] -> 130, no bias " + dt,
                       case_graph({"B", "W"}, {{"x", dtype, "[B, 5, W]"}},
                                  {{"y", "linear", {"x"}, {{"out_features", 130}, {"bias", false}}}}),
                       few});
      // The first linear's rows are padded (17 of 20 or 24): the second reads a padded stride.
      cases.push_back(
          {"padded input (linear 17 -> linear 40) " + dt,
           case_graph({"B"}, {{"x", dtype, "[B, 8]"}},
                      {{"p", "linear", {"x"}, {{"out_features", 17}}}, {"y", "linear", {"p"}, {{"out_features", 40}}}}),
           {{{"B", 1}}, {{"B", 999}}}});
    }
    return cases;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
