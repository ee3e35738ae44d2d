// yolo.detect_decode: box distances [B, 4, A] (l, t, r, b) -> [B, 4, A] (cx, cy, w, h) * stride,
// as Ultralytics dist2bbox(xywh=True). The anchor grid (make_anchors: cell centres, offset 0.5,
// y-major then x, level by level) and per-anchor strides are host-computed params uploaded as
// init bytes in the boxes' dtype, as make_anchors makes them in the features' dtype: a centre
// x + 0.5 is exact in bf16 for levels up to 128 cells wide (f16: 1024), and rounds beyond.
#include <fmt/format.h>

#include <tuple>

#include "ops/conformance.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace teeny::ops {
namespace {

constexpr const char* kOp = "yolo.detect_decode";
constexpr int kBlockA = 128;  // anchors per CTA, one per thread
// The largest h, w and stride of a level (the attr's schema says so): sums of h*w stay far from
// overflow.
constexpr double kMaxLevelValue = 1 << 20;

struct Level {
  int64_t h, w, stride;
};

std::vector<Level> levels_of(const Attrs& attrs) {
  std::vector<Level> levels;
  for (const auto& l : attrs.int_lists("levels")) levels.push_back({l.at(0), l.at(1), l.at(2)});
  return levels;
}

// Anchors of Ultralytics make_anchors(offset=0.5) in `dtype`: for each level, rows y-major then x.
struct Anchors {
  std::vector<double> x, y, stride;
};
Anchors make_anchors(const std::vector<Level>& levels, DType dtype) {
  Anchors a;
  for (const Level& l : levels)
    for (int64_t y = 0; y < l.h; ++y)
      for (int64_t x = 0; x < l.w; ++x) {
        a.x.push_back(round_to_dtype(static_cast<double>(x) + 0.5, dtype));
        a.y.push_back(round_to_dtype(static_cast<double>(y) + 0.5, dtype));
        a.stride.push_back(round_to_dtype(static_cast<double>(l.stride), dtype));
      }
  return a;
}

TensorType infer_decode(const OpDef& meta, const OpContext& ctx) {
  const DType dtype = output_float_dtype(meta, ctx, common_float_dtype(meta, ctx));
  const auto lists = ctx.attrs.int_lists("levels");
  if (lists.empty()) throw OpError("attrs.levels", "levels must list at least one [h, w, stride]");
  int64_t anchors = 0;
  std::vector<std::string> terms;
  for (size_t i = 0; i < lists.size(); ++i) {
    const auto& l = lists[i];
    if (l.size() != 3)
      throw OpError("attrs.levels", fmt::format("level {} must be [h, w, stride], got [{}]", i, fmt::join(l, ", ")));
    anchors += l[0] * l[1];
    terms.push_back(fmt::format("{}*{}", l[0], l[1]));
  }
  const TensorType& boxes = ctx.inputs.at(0);
  if (boxes.shape.size() != 3 || boxes.shape[1] != Expr(4))
    throw OpError("inputs", fmt::format("{} expects boxes [B, 4, A], got {}", kOp, shape_str(boxes.shape)));
  if (is_padded(boxes))
    throw OpError("inputs", fmt::format("{} needs contiguous boxes, got row stride {} for A = {}", kOp,
                                        boxes.row_stride.str(), boxes.shape[2].str()));
  if (boxes.shape[2] != Expr(anchors))
    throw OpError("inputs", fmt::format("boxes have A = {} anchors but levels give {} ({})", boxes.shape[2].str(),
                                        anchors, fmt::join(terms, " + ")));
  return contiguous(dtype, boxes.shape);
}

std::vector<ParamSpec> decode_params(const OpContext& ctx) {
  const DType dtype = ctx.output.dtype;
  const Anchors a = make_anchors(levels_of(ctx.attrs), dtype);
  const Shape shape = {Expr(static_cast<int64_t>(a.x.size()))};
  std::vector<ParamSpec> params;
  for (const auto& [slot, values] :
       {std::pair{"anchor_x", &a.x}, std::pair{"anchor_y", &a.y}, std::pair{"strides", &a.stride}}) {
    ParamSpec spec{slot, shape, dtype, ParamInit::kHost, {}};
    for (double v : *values) append_element(spec.host_bytes, dtype, v);
    params.push_back(std::move(spec));
  }
  return params;
}

// A flat grid over batch x anchor tiles; the kernel splits it with a divide and a remainder.
Lowering decode_lower(const OpContext& ctx) {
  const Expr& batch = ctx.output.shape[0];
  const DType dtype = ctx.output.dtype;
  const int64_t anchors = *ctx.output.shape[2].const_value();
  std::vector<KernelArg> args = {input(0, "boxes", dtype), param("anchor_x", "anchor_x", dtype),
                                 param("anchor_y", "anchor_y", dtype), param("strides", "strides", dtype),
                                 output("y", dtype)};
  KernelSource kernel =
      template_kernel(fmt::format("yolo_detect_decode_{}_a{}", dtype_name(dtype), anchors), "vision.cuh",
                      fmt::format("tn_yolo_detect_decode<{}, {}, {}>", dtype_c_type(dtype), kBlockA, anchors), args,
                      kBlockA, TEENY_KERNEL_ORIGIN);
  Launch launch;
  launch.block = {kBlockA, 1, 1};
  launch.grid = {batch * Expr((anchors + kBlockA - 1) / kBlockA), Expr(1), Expr(1)};
  launch.args = std::move(args);
  launch.bytes = Expr(static_cast<int64_t>(dtype_size(dtype))) * (Expr(8) * batch * Expr(anchors) + Expr(3 * anchors));
  launch.flops = Expr(12) * batch * Expr(anchors);
  return Lowering{{std::move(kernel)}, {launch}};
}

// Independent of the param bytes: the anchors are recomputed from the attrs (rounded to the
// dtype as the params are), so `run --check` also catches wrong init bytes.
HostTensor decode_reference(const RefContext& ref) {
  const Anchors a = make_anchors(levels_of(ref.op.attrs), ref.op.output.dtype);
  const HostTensor& boxes = ref.inputs.at(0);
  const int64_t batch = boxes.shape[0], anchors = boxes.shape[2];
  HostTensor y{ref.op.output.dtype, ref.output_shape, std::vector<double>(boxes.data.size())};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < anchors; ++i) {
      const double* d = &boxes.data[b * 4 * anchors + i];
      double* out = &y.data[b * 4 * anchors + i];
      const double x1 = a.x[i] - d[0], y1 = a.y[i] - d[anchors];
      const double x2 = a.x[i] + d[2 * anchors], y2 = a.y[i] + d[3 * anchors];
      out[0] = (x1 + x2) / 2 * a.stride[i];
      out[anchors] = (y1 + y2) / 2 * a.stride[i];
      out[2 * anchors] = (x2 - x1) * a.stride[i];
      out[3 * anchors] = (y2 - y1) * a.stride[i];
    }
  return y;
}

}  // namespace

OpDef yolo_detect_decode_op() {
  OpDef def;
  def.name = kOp;
  def.doc =
      "YOLO box decode: distances [B, 4, A] (l, t, r, b) -> (cx, cy, w, h) * stride, anchors as "
      "Ultralytics make_anchors over `levels`; anchor_x/anchor_y/strides are host-computed params";
  def.inputs = {{"boxes", "[B, 4, A] distances l, t, r, b"}};
  def.attrs = {{"levels",
                AttrType::kIntListList,
                "[[h, w, stride], ...]; A = sum of h*w",
                std::nullopt,
                {},
                false,
                1.0,
                false,
                kMaxLevelValue}};
  def.dtypes = float_dtypes();
  const OpDef meta = def;
  def.infer = [meta](const OpContext& ctx) { return infer_decode(meta, ctx); };
  def.params = decode_params;
  def.param_slots = {"anchor_x", "anchor_y", "strides"};
  def.lower = decode_lower;
  def.reference = decode_reference;
  def.conformance_cases = [] {
    // 84 and 1344 anchors: a partial last tile, and the yolo_head levels; in 16-bit also a level
    // 200 cells wide, whose centres past 128 round in bf16.
    using Case = std::tuple<DType, std::string, nlohmann::json, int>;
    std::vector<Case> specs = {
        {DType::kF32, "3 levels, A = 84", nlohmann::json{{8, 8, 8}, {4, 4, 16}, {2, 2, 32}}, 84},
        {DType::kF32, "yolo_head levels, A = 1344", nlohmann::json{{32, 32, 8}, {16, 16, 16}, {8, 8, 32}}, 1344}};
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const std::string dt = dtype_name(dtype);
      specs.push_back({dtype, "3 levels, A = 84 " + dt, nlohmann::json{{8, 8, 8}, {4, 4, 16}, {2, 2, 32}}, 84});
      specs.push_back(
          {dtype, "yolo_head levels, A = 1344 " + dt, nlohmann::json{{32, 32, 8}, {16, 16, 16}, {8, 8, 32}}, 1344});
      specs.push_back({dtype, "a 2x200 level, A = 400 " + dt, nlohmann::json{{2, 200, 4}}, 400});
    }
    std::vector<ConformanceCase> cases;
    for (const auto& [dtype, label, levels, anchors] : specs)
      cases.push_back({label,
                       case_graph({"B"}, {{"boxes", dtype, fmt::format("[B, 4, {}]", anchors)}},
                                  {{"y", kOp, {"boxes"}, {{"levels", levels}}, ""}}),
                       {{{"B", 1}}, {{"B", 32}}}});
    return cases;
  };
  def.source_file = TEENY_OP_FILE;
  return def;
}

}  // namespace teeny::ops
